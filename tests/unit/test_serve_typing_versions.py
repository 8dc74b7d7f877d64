"""A view recorded with the typing rewrites' version 1 and no resolution is installed again
with version 1's rewrites, not the running server's (no Spark: the install is stubbed).

Version 2 types ranks as int8, string constants beside integer operators, and columns
under column aliases or joined ``USING``; version 3 a shard's columns under column aliases
and a column joined ``USING`` of sides of two types; version 4 (``query_rewrites.TYPING``)
what ``CHANGED_IN_4`` lists: each would change such a view's schema, which its shard's
refuses, or its query.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
import sqlglot
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
from tests.unit.test_postgres_arithmetic_rewrites import COLUMNS

from timeshard.errors import CorruptState
from timeshard.location import Location
from timeshard.location.memory import MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient
from timeshard.server import engine as engine_module
from timeshard.server.dialect import DIALECT
from timeshard.server.engine import TYPED_VIEWS, Engine, _typed
from timeshard.server.query_rewrites import TYPING, _numeric_casts
from timeshard.server.sql_tokens import SqlError
from timeshard.server.statements import parse

#: Per query, what version 2 makes of it and version 1 leaves as it was.
CHANGED = {
    "SELECT row_number() OVER (ORDER BY i) AS n FROM t": "CAST(ROW_NUMBER()",
    "SELECT '7' + i AS n FROM t": "CAST('7' AS INT)",
    "SELECT k / 2 AS n FROM (SELECT i FROM t) AS z(k)": "DIV",
    "SELECT i / 2 AS n FROM t JOIN t AS u USING (i)": "DIV",
}


def int_engine(monkeypatch: pytest.MonkeyPatch) -> Engine:
    """A server's engine (no Spark) over shard ``t`` of one INT column ``i``."""
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    client.open_writer("t", pa.schema([("i", pa.int32())])).expire()
    engine = Engine(SimpleNamespace(), client, follow_s=3600)
    monkeypatch.setattr(engine, "_shard_columns", lambda known, name: {"i": "INT"})
    return engine


def rewritten(sql: str, version: int) -> str:
    tree = normalize_identifiers(sqlglot.parse_one(sql, read=DIALECT), dialect=DIALECT)
    _numeric_casts(tree, COLUMNS.get, version)
    return tree.sql("spark")


@pytest.mark.parametrize("sql", sorted(CHANGED))
def test_version_1_of_the_rewrites_leaves_what_version_2_types(sql: str) -> None:
    assert TYPING == TYPED_VIEWS == 4
    assert CHANGED[sql] in rewritten(sql, 2)
    assert CHANGED[sql] not in rewritten(sql, 1)


#: Per query, what version 3 makes of it and version 2 leaves as it was.
CHANGED_IN_3 = {
    "SELECT a / 2 AS n FROM t AS x(a)": "DIV",
    "SELECT i FROM t JOIN (SELECT CAST(7 AS BIGINT) AS i) AS v USING (i)": "CAST(i AS BIGINT)",
    "SELECT * FROM t JOIN (SELECT CAST(7 AS BIGINT) AS i) AS v USING (i)": "EXCEPT",
    "SELECT row_number() OVER () AS n FROM t": "ORDER BY NULL",
    "SELECT * FROM t AS x(a)": "x(a, s",
}


#: Per query, what version 4 makes of it and version 3 leaves as it was.
CHANGED_IN_4 = {
    "SELECT row_number() OVER w AS n FROM t WINDOW w AS (PARTITION BY s)": "ORDER BY NULL",
    "WITH z AS (SELECT 1 AS k, 2 AS m) SELECT * FROM z AS w(a)": "w(a, m)",
    "SELECT i FROM t NATURAL JOIN (SELECT CAST(7 AS BIGINT) AS i) AS v": "CAST(i AS BIGINT)",
    "SELECT * FROM t NATURAL LEFT JOIN (SELECT CAST(7 AS BIGINT) AS i) AS v": "USING (`i`)",
}


@pytest.mark.parametrize(
    ("version", "sql"),
    [(3, sql) for sql in sorted(CHANGED_IN_3)] + [(4, sql) for sql in sorted(CHANGED_IN_4)],
)
def test_the_version_before_leaves_what_a_version_types(version: int, sql: str) -> None:
    changed = (CHANGED_IN_3 if version == 3 else CHANGED_IN_4)[sql]
    assert changed in rewritten(sql, version)
    assert changed not in rewritten(sql, version - 1)


def test_what_version_3_refuses_as_postgresql_does_version_2_leaves_to_spark() -> None:
    """A server of version 2 resolved these otherwise (Spark answered the first wrongly,
    and refused the second with its own error): a view of version 2 resolves as it did."""
    for sql in (
        "SELECT * FROM (SELECT 1 AS k, 2 AS k) AS a JOIN (SELECT 1 AS k) AS b USING (k)",
        "SELECT * FROM t AS x(a, b, c, d, e, f, g)",
    ):
        with pytest.raises(SqlError):
            rewritten(sql, 3)
        rewritten(sql, 2)  # no SqlError


def test_what_version_4_refuses_as_postgresql_does_version_3_leaves_to_spark() -> None:
    """Spark answered rows of ``WHERE s = 5`` where every text was a number, and a join
    on one of two ``k`` columns: a view of version 3 resolves as it did."""
    for sql in (
        "SELECT * FROM t WHERE CAST(i AS TEXT) = 5",
        "SELECT * FROM (SELECT 1 AS k, 2 AS k) AS a CROSS JOIN LATERAL (SELECT 1 AS m) AS l "
        "JOIN (SELECT 1 AS k) AS b USING (k)",
        "SELECT * FROM (SELECT 1 AS k, 2 AS k) AS a NATURAL JOIN (SELECT 1 AS k) AS b",
        # Spark answered the call without its fourth argument, and upper(s).
        "SELECT lpad(CAST(i AS TEXT), 3, 'x', 'y') AS p FROM t",
        'SELECT "UPPER"(CAST(i AS TEXT)) AS p FROM t',
    ):
        with pytest.raises(SqlError):
            rewritten(sql, 4)
        rewritten(sql, 3)  # no SqlError


def test_version_1_does_not_check_a_string_constants_integer_input() -> None:
    assert "CAST('7.5' AS" in rewritten("SELECT CAST('7.5' AS INT) AS n", 1)
    with pytest.raises(Exception, match="invalid input syntax"):
        rewritten("SELECT CAST('7.5' AS INT) AS n", 2)


def test_an_entry_says_its_version_and_a_newer_one_is_refused() -> None:
    assert _typed({}) == 0
    assert _typed({"typed": 1}) == 1
    assert _typed({"typed": 2}) == 2
    assert _typed({"typed": 3}) == 3
    assert _typed({"typed": 4}) == 4
    for unknown in (5, True, "2"):
        with pytest.raises(CorruptState):
            _typed({"typed": unknown})


@pytest.mark.parametrize(
    ("query", "recorded"),
    [
        ("SELECT i / 2 AS h FROM t", 1),  # no rewrite of version 2 changes it
        ("SELECT row_number() OVER (ORDER BY i) AS n FROM t", 2),
    ],
)
def test_a_created_views_entry_records_the_lowest_version_that_resolves_it_alike(
    monkeypatch: pytest.MonkeyPatch, query: str, recorded: int
) -> None:
    """Before: every new entry recorded the newest version, so a server of version 1
    (which resolves an entry again when it reads no resolution) installed a view the
    new rewrites typed otherwise; and one that no new rewrite changes was refused."""
    engine = int_engine(monkeypatch)
    resolved = engine.resolve(query)
    assert engine._lowest_version(query, resolved, TYPING) == recorded
    assert engine._lowest_version(query, None, TYPING) == TYPING


@pytest.mark.parametrize(("version", "cast"), [(1, False), (2, True)])
def test_a_restored_view_without_a_resolution_is_resolved_with_its_entrys_version(
    monkeypatch: pytest.MonkeyPatch, version: int, cast: bool
) -> None:
    """Before: a version-1 entry with no resolution was resolved again with the running
    rewrites, and its view then refused for its shard's schema (an INT rank now BIGINT)."""
    engine = int_engine(monkeypatch)
    installed: dict[str, Any] = {}

    def create_view(statement: Any, seq: int, *, typed: int, recorded: Any) -> Any:
        installed.update(typed=typed, sql=recorded[0])
        raise engine_module.SqlError("stubbed: no Spark here", "XX000")

    monkeypatch.setattr(engine, "_create_view", create_view)
    statement = parse(
        "CREATE MATERIALIZED VIEW v AS SELECT row_number() OVER (ORDER BY i) AS n FROM t"
    )
    with pytest.raises(engine_module.SqlError, match="stubbed"):
        engine._create(statement, record=False, seq=1, typed=version, resolved=None)
    assert installed["typed"] == version
    assert ("AS BIGINT" in installed["sql"]) is cast, installed["sql"]


@pytest.mark.parametrize("version", [1, 2])
def test_a_view_taken_over_keeps_the_version_that_made_its_sql(
    monkeypatch: pytest.MonkeyPatch, version: int
) -> None:
    """Before: a client's CREATE of a name whose view a version-1 server had recorded
    compared that view's SQL with version 2's only, and took the view as untyped."""
    engine = int_engine(monkeypatch)
    query = "SELECT row_number() OVER (ORDER BY i) AS n FROM t"
    made = engine._typed_sql(query, version)
    assert made is not None
    # The newest version that resolves it alike: 3 and 4 type this query as 2 does.
    assert engine._version_of(query, made) == {1: 1, 2: TYPING}[version]
    assert engine._version_of(query, "SELECT 1") == 0
