"""A shard read under column aliases (``FROM t AS x(a, c)``) names its columns by
position, all of them: a list, struct, map or time64 column counts too, though no type
of it is known here (review k34). Matched against its scalar columns only, the aliases
typed the wrong columns: ``x.c = 5`` of an integer ``c`` was refused as ``text =
integer`` (42883), a join ``USING`` two integers as 42804, and as many aliases as
columns as 42P10. A column of no known type is never typed as another one: what it is
compared with is left to Spark.

The shards' columns are what serve reads of them, :func:`arrow_columns` of their Arrow
schemas. No Spark: :func:`~timeshard.server.query_rewrites._numeric_casts` is run on
the tree.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
import sqlglot
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from timeshard.server.dialect import DIALECT
from timeshard.server.parameter_types import ColumnsOf, arrow_columns, parameter_types
from timeshard.server.query_rewrites import TYPING, _numeric_casts
from timeshard.server.statements import SqlError

#: A column of each Arrow type no sqlglot scalar type is known here for.
UNTYPED = {
    "list": pa.list_(pa.int64()),
    "struct": pa.struct([("f", pa.int64())]),
    "map": pa.map_(pa.string(), pa.int64()),
    "time64": pa.time64("us"),
}


def shards(untyped: pa.DataType) -> dict[str, dict[str, str | None]]:
    """``t`` of a column of type ``untyped`` (``z``) before an int8 (``n``) and a text
    (``s``); ``u`` and ``w`` of an int8 ``c``, ``v`` of a text ``z``."""
    schemas = {
        "t": pa.schema([("z", untyped), ("n", pa.int64()), ("s", pa.string())]),
        "u": pa.schema([("c", pa.int64())]),
        "v": pa.schema([("z", pa.string())]),
        "w": pa.schema([("z", untyped), ("c", pa.int64())]),
    }
    return {name: arrow_columns(schema) for name, schema in schemas.items()}


def typed(sql: str, untyped: pa.DataType, version: int = TYPING) -> str:
    tree = normalize_identifiers(sqlglot.parse_one(sql, read=DIALECT), dialect=DIALECT)
    _numeric_casts(tree, shards(untyped).get, version)
    return tree.sql("spark")


def refusal(sql: str, untyped: pa.DataType, version: int = TYPING) -> tuple[str, str]:
    with pytest.raises(SqlError) as caught:
        typed(sql, untyped, version)
    return caught.value.sqlstate, str(caught.value)


#: Queries PostgreSQL 15 answers: each alias names the column at its position.
ANSWERED = [
    # x.c is n, an int8: compared with an integer.
    "SELECT 1 FROM t AS x(a, c) WHERE x.c = 5",
    "SELECT 1 FROM t AS x(a, c) WHERE c IN (1, 2)",
    "SELECT 1 FROM t AS x(a, c, d) WHERE x.c = 5 AND x.d = 'p'::text",
    # x.c is an int8 as u's c is.
    "SELECT 1 FROM t AS x(a, c) JOIN u USING (c)",
    "SELECT 1 FROM u JOIN t AS x(a, c, d) USING (c)",
    "SELECT 1 FROM w AS y(c, d) JOIN t AS x(a, d) USING (d)",
]


#: Per query, PostgreSQL 15's refusal: a real mismatch past a column of no known type.
REFUSED = {
    "SELECT 1 FROM t AS x(a, b, c) WHERE x.c = 5": (
        "42883",
        "operator does not exist: text = integer",
    ),
    "SELECT 1 FROM t AS x(a, b, c) WHERE upper(c) < 5": (
        "42883",
        "operator does not exist: text < integer",
    ),
    "SELECT 1 FROM t AS x(a, b, c) JOIN u USING (c)": (
        "42804",
        "JOIN/USING types text and bigint cannot be matched",
    ),
    "SELECT 1 FROM u JOIN t AS x(a, b, c) USING (c)": (
        "42804",
        "JOIN/USING types bigint and text cannot be matched",
    ),
    "SELECT 1 FROM t AS x(a, b, c, d)": (
        "42P10",
        'table "x" has 3 columns available but 4 columns specified',
    ),
}


@pytest.mark.parametrize("kind", sorted(UNTYPED))
@pytest.mark.parametrize("sql", sorted(REFUSED))
def test_a_mismatch_past_a_column_of_no_known_type_is_refused(sql: str, kind: str) -> None:
    assert refusal(sql, UNTYPED[kind]) == REFUSED[sql]


#: A column of no known type compared with a number or a text, or joined ``USING``: not
#: typed as another column (``n``, ``s``, or an outer query's ``z``), left to Spark.
LEFT_TO_SPARK = [
    "SELECT 1 FROM t AS x(a, b) WHERE x.a = 5 OR x.a = 'p'::text",
    "SELECT 1 FROM t AS x(c) JOIN u USING (c)",
    "SELECT 1 FROM t AS x(s) WHERE s = 5",
    "SELECT 1 FROM v WHERE EXISTS (SELECT 1 FROM t WHERE z = 5)",
    "SELECT 1 FROM t JOIN v USING (z)",
]


@pytest.mark.parametrize("kind", sorted(UNTYPED))
@pytest.mark.parametrize("sql", [*ANSWERED, *LEFT_TO_SPARK])
def test_no_alias_types_another_column(sql: str, kind: str) -> None:
    """Each alias names the column at its position among all (:data:`ANSWERED`), and a
    column of no known type is not typed (:data:`LEFT_TO_SPARK`)."""
    typed(sql, UNTYPED[kind])  # no SqlError


@pytest.mark.parametrize("kind", sorted(UNTYPED))
def test_an_aliased_column_has_its_own_type(kind: str) -> None:
    """``x.c`` is the int8 ``n``: PostgreSQL divides it as an integer, and completes the
    aliases with the names of the rest (``s``)."""
    assert typed("SELECT x.c / 2 AS q FROM t AS x(a, c)", UNTYPED[kind]) == (
        "SELECT CAST(x.c DIV 2 AS BIGINT) AS q FROM t AS x(a, c, s)"
    )


@pytest.mark.parametrize("kind", sorted(UNTYPED))
def test_a_shards_columns_are_all_of_them_in_order(kind: str) -> None:
    """One list of a shard's columns: a type serve does not know is None, in its place."""
    schema = pa.schema([("z", UNTYPED[kind]), ("n", pa.int64()), ("s", pa.string())])
    assert list(arrow_columns(schema).items()) == [("z", None), ("n", "BIGINT"), ("s", "TEXT")]


@pytest.mark.parametrize("kind", sorted(UNTYPED))
def test_a_parameter_beside_a_column_of_no_known_type_stays_unknown(kind: str) -> None:
    """Not the type of an outer query's column of the name (``v``'s text ``z``)."""
    columns = shards(UNTYPED[kind])
    assert parameter_types("SELECT 1 FROM t WHERE n = $1 AND z = $2", columns.get) == {1: 20}
    sql = "SELECT 1 FROM v WHERE EXISTS (SELECT 1 FROM t WHERE z = $1)"
    assert parameter_types(sql, columns.get) == {}


def outcome(sql: str, columns_of: ColumnsOf, version: int) -> str:
    """``sql`` rewritten at ``version``, or its SqlError's SQLSTATE and message."""
    tree = normalize_identifiers(sqlglot.parse_one(sql, read=DIALECT), dialect=DIALECT)
    try:
        _numeric_casts(tree, columns_of, version)
    except SqlError as e:
        return f"{e.sqlstate}: {e}"
    return tree.sql("spark")


@pytest.mark.parametrize("version", range(1, TYPING))
@pytest.mark.parametrize("sql", [*ANSWERED, *REFUSED, *LEFT_TO_SPARK])
def test_an_older_version_reads_the_columns_of_known_types_only(sql: str, version: int) -> None:
    """A query resolves at versions 1 to 3 as it did: over the shards' columns of known
    types (at 3, ``t AS x(a, c, d)`` stays 42P10, "2 columns available")."""
    columns = shards(UNTYPED["list"])
    known = {n: {c: k for c, k in cs.items() if k is not None} for n, cs in columns.items()}
    assert outcome(sql, columns.get, version) == outcome(sql, known.get, version)
