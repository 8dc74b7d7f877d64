"""``Engine.resolve``: which names of a query are shards, and what Spark reads for them.

A CTE shadows a relation of its name only in its own query, and a shard's
alias is a name no CTE of the query has: Spark resolves a CTE's name before
a temp view's, and sqlglot's Spark SQL hoists nested CTEs to the top. No
Spark: resolution is sqlglot's.
"""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pytest
import sqlglot
from sqlglot import exp

from timeshard.errors import Determinate
from timeshard.location import Location
from timeshard.location.memory import MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient
from timeshard.server.engine import Engine
from timeshard.server.statements import SqlError, parse


@pytest.fixture
def engine() -> Engine:
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    for shard in ("auction.bids", "kv"):
        client.open_writer(shard, pa.schema([("k", pa.string())])).expire()
    return Engine(SimpleNamespace(), client, follow_s=3600)  # no follower pass in a test


def read_names(spark_sql: str) -> set[str]:
    """The relation names Spark resolves in ``spark_sql`` that are not its CTEs."""
    tree = sqlglot.parse_one(spark_sql, read="spark")
    ctes = {c.alias for c in tree.find_all(exp.CTE)}
    return {t.name for t in tree.find_all(exp.Table)} - ctes


@pytest.mark.parametrize(
    ("query", "inputs"),
    [
        # a CTE named like the alias a shard would get
        (
            "WITH auction_bids AS (SELECT 'cte' AS k) "
            "SELECT b.k FROM auction.bids AS b, auction_bids",
            {"auction.bids"},
        ),
        # a CTE in a subquery shadows the shard only there
        ("SELECT * FROM kv WHERE k IN (WITH kv AS (SELECT 'x' AS k) SELECT k FROM kv)", {"kv"}),
        (
            "SELECT * FROM (WITH kv AS (SELECT 'x' AS k) SELECT * FROM kv) s "
            "UNION ALL SELECT * FROM kv",
            {"kv"},
        ),
        # a CTE of the whole query shadows the shard everywhere in it
        ("WITH kv AS (SELECT 'x' AS k) SELECT * FROM kv WHERE k IN (SELECT k FROM kv)", set()),
        ("WITH a AS (SELECT k FROM kv), b AS (SELECT * FROM a) SELECT * FROM b", {"kv"}),
    ],
)
def test_a_shard_is_read_where_no_cte_shadows_it(
    engine: Engine, query: str, inputs: set[str]
) -> None:
    spark_sql, aliases = engine.resolve(query)
    assert set(aliases.values()) == inputs
    assert not set(aliases) & {c.alias for c in sqlglot.parse_one(query).find_all(exp.CTE)}
    assert set(aliases) == read_names(spark_sql) - {"timeshard_objects"}


def test_aliases_differ_ignoring_case() -> None:
    """Spark SQL folds the case of temp views: shards ``KV`` and ``kv`` get two aliases
    that differ in more than case, and a CTE ``KV`` shadows no alias of ``kv``."""
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    for shard in ("KV", "kv"):
        client.open_writer(shard, pa.schema([("k", pa.string())])).expire()
    engine = Engine(SimpleNamespace(), client, follow_s=3600)
    _, aliases = engine.resolve('SELECT * FROM "KV" JOIN kv USING (k)')
    assert sorted(aliases.values()) == ["KV", "kv"]
    assert len({a.lower() for a in aliases}) == 2, aliases
    _, aliases = engine.resolve('WITH "KV" AS (SELECT k FROM kv) SELECT * FROM "KV"')
    assert list(aliases.values()) == ["kv"] and "kv" not in {a.lower() for a in aliases}, aliases


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT reflect('java.lang.System', 'exit', 7) AS v",
        "SELECT REFLECT('java.lang.System', 'exit', 7) AS v",
        """SELECT "reflect"('java.lang.System', 'exit', 7) AS v""",
        "SELECT builtin.reflect('java.lang.System', 'exit', 7) AS v",
        "SELECT java_method('java.lang.System', 'setProperty', 'a', 'b') AS v",
        "SELECT Try_Reflect('java.lang.System', 'exit', 7) AS v",
        "SELECT * FROM kv WHERE k IN (SELECT reflect('java.lang.System', 'exit', 7))",
        "WITH a AS (SELECT java_method('java.lang.System', 'exit', 7) AS k) SELECT * FROM a",
        "SELECT aggregate(array(1), 0, (a, x) -> reflect('java.lang.System', 'exit', 7)) AS v",
        "SELECT * FROM reflect('java.lang.System', 'exit', 7)",
        "VALUES (reflect('java.lang.System', 'exit', 7))",
        "CREATE MATERIALIZED VIEW m AS SELECT k, reflect('java.lang.System', 'exit', 7) FROM kv",
    ],
)
def test_a_function_calling_java_is_refused_before_anything_runs(engine: Engine, sql: str) -> None:
    """``reflect``, ``java_method`` and ``try_reflect`` call any static Java method in
    the server's JVM: ``System.exit`` stopped the server for every session. Spark is a
    stand-in here: a statement that reached it fails otherwise."""
    with pytest.raises(SqlError, match=r"not allowed: it calls Java methods") as refused:
        engine.execute(parse(sql))
    assert refused.value.sqlstate == "42501"
    assert engine.objects == {} and "m" not in engine.client.list_shards()


def test_a_query_whose_second_reader_fails_to_open_expires_the_first(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The readers were opened in one expression: the first stayed leased (holding the
    shard's since back until its lease ran out) when the second failed to open."""
    client = engine.client
    opened: list[str] = []
    open_reader = client.open_leased_reader

    def open_one(shard: str) -> object:
        if opened:
            raise Determinate("consensus unreachable")
        opened.append(shard)
        return open_reader(shard)

    monkeypatch.setattr(client, "open_leased_reader", open_one)
    with pytest.raises(SqlError, match="consensus unreachable"):
        engine.execute(parse('SELECT * FROM "auction.bids" JOIN kv USING (k)'))
    assert len(opened) == 1 and client.state(opened[0]).leased_readers == {}


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT k INTO kv FROM kv",
        "WITH a AS (SELECT k FROM kv) INSERT INTO kv SELECT * FROM a",
        "WITH a AS (DELETE FROM kv RETURNING *) SELECT * FROM a",
        "CREATE MATERIALIZED VIEW m AS SELECT k INTO kv FROM kv",
    ],
)
def test_a_query_that_writes_is_refused_before_anything_runs(engine: Engine, sql: str) -> None:
    """sqlglot passes a write on to Spark: ``SELECT ... INTO t`` is ``CREATE TABLE t AS``,
    which wrote a table into the server's warehouse."""
    with pytest.raises(SqlError, match="only a query that writes nothing") as refused:
        engine.execute(parse(sql))
    assert refused.value.sqlstate == "0A000"
    assert engine.objects == {} and "m" not in engine.client.list_shards()


@pytest.mark.parametrize(
    ("query", "spark_sql"),
    [
        ("""SELECT '{"a": 1}'::json""", """SELECT '{"a": 1}'"""),
        ("""SELECT 1 AS n, CAST('[1]' AS jsonb) AS j""", "SELECT 1 AS n, '[1]' AS j"),
        ("""SELECT ('{}'::json) FROM kv""", "SELECT ('{}') FROM kv"),
    ],
)
def test_a_json_literal_that_is_a_result_column_is_its_string(
    engine: Engine, query: str, spark_sql: str
) -> None:
    resolved, _ = engine.resolve(query)
    assert resolved.startswith(spark_sql), resolved


@pytest.mark.parametrize(
    "query",
    [
        """SELECT '{"a":1}'::jsonb = '{"a": 1}'::jsonb""",
        "SELECT '1'::json + 1",
        """SELECT '{"a": 1}'::jsonb @> '{}'::jsonb""",
        "SELECT k FROM kv WHERE k = '{}'::json",
        "SELECT j FROM (SELECT '{}'::json AS j) s",
        "SELECT '[]'::json UNION ALL SELECT '[]'::json",
    ],
)
def test_a_json_literal_elsewhere_is_refused(engine: Engine, query: str) -> None:
    """As a string it compared, added and matched as text (``'{"a":1}'::jsonb =
    '{"a": 1}'::jsonb`` false, ``'1'::json + 1`` 2), where PostgreSQL compares JSON
    or refuses (42883)."""
    with pytest.raises(SqlError, match="json") as refused:
        engine.resolve(query)
    assert refused.value.sqlstate == "0A000"


def test_json_nested_past_the_recursion_limit_is_22p02(engine: Engine) -> None:
    """Python's decoder raised RecursionError: an internal error (XX000)."""
    deep = "[" * 5000 + "]" * 5000
    with pytest.raises(SqlError, match="invalid input syntax for type json") as refused:
        engine.resolve(f"SELECT '{deep}'::json")
    assert refused.value.sqlstate == "22P02"


@pytest.mark.parametrize(
    ("query", "spark_sql"),
    [
        ("SELECT map(k, k) FROM kv", "SELECT MAP(k, k) FROM"),
        ("SELECT MAP('a', 1, 'b', 2)", "SELECT MAP('a', 1, 'b', 2)"),
        ("SELECT map()", "SELECT MAP()"),
        ("SELECT map(1, 2, 3)", "SELECT MAP(1, 2, 3)"),
        ("SELECT map(k, k)['x'] FROM kv", "SELECT MAP(k, k)['x'] FROM"),
    ],
)
def test_a_map_call_is_spark_map(engine: Engine, query: str, spark_sql: str) -> None:
    """PostgreSQL has no ``map``: the client means Spark's ``map(k1, v1, ...)``. sqlglot's
    PostgreSQL reader made ``map(k, v)`` Spark's ``map_from_arrays(k, v)`` (42K09 for keys
    that are no array) and refused more pairs; an odd number of arguments is Spark's to
    refuse (42605), not the parser's IndexError."""
    resolved, _ = engine.resolve(query)
    assert resolved.startswith(spark_sql), resolved


def test_a_date_moved_by_an_interval_is_a_timestamp_in_a_query_only(engine: Engine) -> None:
    """A query's ``date + interval`` is PostgreSQL's timestamp (the date cast to
    TIMESTAMP_NTZ); a view's query keeps Spark's types, which its shard holds."""
    query = "SELECT DATE '2026-01-01' + INTERVAL '1 day' AS d FROM kv"
    assert engine.resolve(query)[0].startswith(
        "SELECT CAST(CAST('2026-01-01' AS DATE) AS TIMESTAMP_NTZ) + INTERVAL '1' DAY AS d"
    )
    assert engine.resolve(query, stored=True)[0].startswith(
        "SELECT CAST('2026-01-01' AS DATE) + INTERVAL '1' DAY AS d"
    )


@pytest.mark.parametrize(
    ("query", "recorded"),
    [
        ("SELECT interval '+1 day' AS x", "SELECT INTERVAL '1' DAY AS x"),
        ("SELECT interval 'P1D' AS x", "SELECT INTERVAL '1' DAY AS x"),
        ("SELECT interval '1 day 03:04:05' AS x", "SELECT INTERVAL '1' DAY AS x"),
        ("SELECT interval '1 day' AS x", "SELECT INTERVAL '1' DAY AS x"),
    ],
)
def test_an_untyped_view_s_interval_text_resolves_as_it_ran(
    engine: Engine, query: str, recorded: str
) -> None:
    """A view recorded before serve typed views' queries (``stored``) resolves to the
    Spark SQL it ran as: the dialect that keeps an interval's text whole for queries
    would make another query of it (a redefinition, or text Spark refuses: 'P1D')."""
    assert engine.resolve(query, stored=True)[0] == recorded
