"""What a query costs serve to check grows with the query, not faster: the type of each
value of a ``+`` chain is read once in each pass over it (it was read again for every
``+`` around it: quadratic), and a nested ``ARRAY[`` is parsed once (sqlglot read its
elements as a type's values, then again as the array's: 18 deep took 26 s). Counted,
not timed. Nesting past Python's recursion is 54001 (this server's limit: PostgreSQL
answers such queries), not an internal error.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
import sqlglot
from tests.unit.test_serve_42883 import typed

from timeshard.location import Location
from timeshard.location.memory import MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient
from timeshard.server import query_comparisons, query_rewrites, query_types
from timeshard.server.dialect import DIALECT, ServePostgres
from timeshard.server.engine import Engine
from timeshard.server.statements import SqlError


def counting(monkeypatch: pytest.MonkeyPatch, owners: list[Any], name: str) -> list[int]:
    """A counter of the calls of ``name`` of each of ``owners`` (modules or classes)."""
    calls = [0]
    for owner in owners:
        helper = getattr(owner, name)

        def counted(*args: object, helper: Any = helper, **kwargs: object) -> Any:
            calls[0] += 1
            return helper(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)
    return calls


@pytest.mark.parametrize("first", ["'1'", "t.i", "1", "t.s"])
def test_a_chain_of_sums_is_typed_in_linear_reads(
    monkeypatch: pytest.MonkeyPatch, first: str
) -> None:
    calls = counting(
        monkeypatch, [query_types, query_comparisons, query_rewrites], "_postgres_type"
    )

    def reads(terms: int) -> int:
        calls[0] = 0
        with contextlib.suppress(SqlError):  # t.s + '1': refused, read all the same
            typed("SELECT " + " + ".join([first] + ["'1'"] * terms) + " AS x FROM t")
        return calls[0]

    small, large = reads(25), reads(100)  # 4 times as long: 4 times the reads, not 16
    assert 0 < large <= 5 * small, (small, large)


@pytest.mark.parametrize("divisor", ["2.5", "'2.5'", "NULL"])
def test_a_chain_of_quotients_is_typed_in_linear_reads(
    monkeypatch: pytest.MonkeyPatch, divisor: str
) -> None:
    """A quotient of a numeric is not cast to an integer (as one of integers is, which
    the ``/`` around it then reads at once): each ``/`` read its whole chain again."""
    calls = counting(
        monkeypatch, [query_types, query_comparisons, query_rewrites], "_postgres_type"
    )

    def reads(terms: int) -> int:
        calls[0] = 0
        typed("SELECT " + " / ".join(["1.5"] + [divisor] * terms) + " AS x FROM t")
        return calls[0]

    small, large = reads(25), reads(100)
    assert 0 < large <= 5 * small, (small, large)


def test_a_nested_array_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = counting(monkeypatch, [ServePostgres.Parser], "_parse_disjunction")

    def parses(depth: int) -> int:
        calls[0] = 0
        sqlglot.parse_one("SELECT " + "ARRAY[" * depth + "1" + "]" * depth, read=DIALECT)
        return calls[0]

    small, large = parses(5), parses(10)  # twice as deep: twice the parses, not 3 ** 5
    assert 0 < large <= 3 * small, (small, large)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT ARRAY[]::int[] AS a",
        "SELECT ARRAY[ARRAY[1, 2], ARRAY[3, 4]] AS a",
        "SELECT (ARRAY[1, 2])[1] AS a",
        "SELECT CAST(ARRAY[1] AS int[]) AS a",
        "SELECT ARRAY[1] || ARRAY[2] AS a",
    ],
)
def test_an_array_reads_as_sqlglot_reads_it(sql: str) -> None:
    """The tree, and its Spark SQL, are PostgreSQL's reader's (a view recorded before
    reads alike)."""
    served = sqlglot.parse_one(sql, read=DIALECT)
    stock = sqlglot.parse_one(sql, read="postgres")
    assert served == stock
    assert served.sql("spark") == stock.sql("spark")


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT " + "(" * 400 + "1" + ")" * 400 + " AS x FROM t",
        "SELECT " + "ARRAY[" * 400 + "1" + "]" * 400 + " AS x FROM t",
        # integers' quotients, each cast to an integer: sqlglot's SQL of the casts nests
        # past the stack, and its tokenizer makes the RecursionError a TokenError
        "SELECT " + " / ".join(["i"] * 600) + " AS x FROM t",
    ],
)
def test_nesting_past_the_stack_is_54001(sql: str) -> None:
    """54001 ("stack depth limit exceeded") is this server's limit, not PostgreSQL's:
    PostgreSQL 15 answers 1 for 400 and for 5000 nested parentheses, and for 600 integer
    quotients. serve's RecursionError (sqlglot's, its reader's or its SQL's) was an
    internal error (XX000); PostgreSQL's own SQLSTATE for a stack past its limit is the
    least wrong answer for what serve cannot read."""
    with pytest.raises(SqlError) as caught:
        engine_of_t().resolve(sql)
    assert (caught.value.sqlstate, str(caught.value)) == ("54001", "stack depth limit exceeded")


def engine_of_t() -> Engine:
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    schema = pa.schema([("i", pa.int32()), ("f", pa.float64()), ("n", pa.decimal128(10, 2))])
    client.open_writer("t", schema).expire()
    return Engine(SimpleNamespace(), client, follow_s=3600)


@pytest.mark.parametrize("version", [1, 2, 3, 4])
@pytest.mark.parametrize("terms", [600, 2000])
@pytest.mark.parametrize(
    "chain",
    [
        lambda n: "SELECT (" + " * ".join(["f"] + ["1"] * (n - 1)) + ")::int AS x FROM t",
        lambda n: "SELECT " + " + ".join(["i", "'1'"] * (n // 2)) + " AS x FROM t",
        lambda n: "SELECT (" + " - ".join(["n"] * n) + ")::int AS x FROM t",
        lambda n: "SELECT coalesce(" + " + ".join(["i"] * n) + ", 1) AS x FROM t",
        lambda n: "SELECT " + " / ".join(["1.5"] + ["f"] * (n - 1)) + " AS x FROM t",
    ],
    ids=["mul-cast", "plus-text", "minus-cast", "coalesce", "quotient"],
)
def test_a_long_chain_of_operators_is_typed_within_the_stack(
    chain: Any, terms: int, version: int
) -> None:
    """PostgreSQL 15 answers each (``(f * 1 * ... * 1)::int`` of 600 terms: 2). The
    typing of a chain of operators takes a few frames of Python's stack, not some for
    each operator: 600 terms were 54001 (main's limit was some 990)."""
    resolved, _ = engine_of_t().resolve(chain(terms), version=version)
    assert resolved.startswith("SELECT ")


def test_what_reads_a_query_before_it_runs_takes_nesting_past_the_stack_as_no_query() -> None:
    """The readers of a statement's parameters (``$1``) and interval casts parse it
    before the engine does: its RecursionError was an internal error there."""
    from timeshard.server.parameter_types import parameter_types
    from timeshard.server.pgtypes import parameter_columns
    from timeshard.server.statements import interval_parameters

    deep = "SELECT " + "(" * 400 + "1" + ")" * 400
    assert parameter_types(f"{deep} + $1") == {}
    assert interval_parameters(f"{deep} + $1::interval") == frozenset()
    assert parameter_columns(f"{deep}, $1::json", [114]) == ()
