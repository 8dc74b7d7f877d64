"""A read-only ``timeshard serve`` engine, without Spark: it follows the catalog and writes nothing.

A read-only engine builds no object: it lists those the catalog records
(as standbys, no runner), follows the CREATEs and DROPs a writing server
records, and refuses CREATE, DROP and EXPLAIN with 25006. What promotion
restores (every object, ticking) needs Spark: tests/integration/test_serve_replica.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from timeshard.catalog import Catalog, CatalogEntry
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.server.engine import Engine, _refuse_dsn_password
from timeshard.server.statements import Show, SqlError, parse

SCHEMA = pa.schema([("n", pa.int64())])


def no_spark() -> Any:
    """A stand-in SparkSession: a read-only engine never touches one until promoted."""
    return SimpleNamespace()


@pytest.fixture
def client(tmp_path: Path) -> PersistClient:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    for shard in ("counter", "counter.remap", "evens"):  # as a writing server left them
        client.open_writer(shard, SCHEMA).expire()
    return client


def record(client: PersistClient, name: str, sql: str, seq: int) -> None:
    catalog = Catalog(client, lambda: int(time.time() * 1000))
    kind = parse(sql).__class__.__name__
    catalog.record_statement(name, {"sql": sql, "seq": seq, "object": kind})
    if name == "counter":
        export = {"source": "counter", "subsource": "", "envelope": "none", "key_columns": []}
        catalog.record([CatalogEntry("counter", "export", export)])


def eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60  # the follower reads every 0.05 s: generous for a loaded CI
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def shown(engine: Engine, what: str) -> list[tuple[Any, ...]]:
    result = engine.execute(Show(what))
    assert not isinstance(result, type(None))
    return list(result.rows)  # type: ignore[union-attr]


def test_a_read_only_engine_lists_and_follows_what_the_catalog_records(
    client: PersistClient,
) -> None:
    record(client, "counter", "CREATE SOURCE counter FROM LOAD GENERATOR COUNTER", 1)
    record(client, "evens", "CREATE MATERIALIZED VIEW evens AS SELECT n FROM counter", 2)
    engine = Engine(no_spark(), client, read_only=True, follow_s=0.05)
    assert engine.start() == []
    try:
        assert shown(engine, "sources") == [("counter", "counter", "counter")]
        assert shown(engine, "views") == [("evens", "standby", "counter")]
        assert all(o.standby and o.runner is None for o in engine.objects.values())
        objects = {r["name"]: r for r in engine.object_rows()}
        assert objects["evens"]["object"] == "evens"
        # a writing server creates and drops; the read-only one follows
        record(client, "odds", "CREATE MATERIALIZED VIEW odds AS SELECT n FROM counter", 3)
        eventually(lambda: "odds" in engine.objects, "the new view is listed")
        Catalog(client, lambda: int(time.time() * 1000)).forget_statement("evens")
        eventually(lambda: "evens" not in engine.objects, "the dropped view is gone")
    finally:
        engine.close()


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE SOURCE c2 FROM LOAD GENERATOR COUNTER",
        "CREATE MATERIALIZED VIEW v AS SELECT n FROM counter",
        "CREATE SINK s FROM counter INTO DELTA (URI '/tmp/x')",
        "DROP SOURCE counter",
        "DROP MATERIALIZED VIEW IF EXISTS nothing",
        "EXPLAIN evens",
    ],
)
def test_a_read_only_engine_refuses_what_would_write(client: PersistClient, sql: str) -> None:
    record(client, "counter", "CREATE SOURCE counter FROM LOAD GENERATOR COUNTER", 1)
    record(client, "evens", "CREATE MATERIALIZED VIEW evens AS SELECT n FROM counter", 2)
    engine = Engine(no_spark(), client, read_only=True, follow_s=60)
    engine.start()
    try:
        with pytest.raises(SqlError) as info:
            engine.execute(parse(sql))
        assert info.value.sqlstate == "25006", str(info.value)
        assert "read-only" in str(info.value)
        assert sorted(engine.objects) == ["counter", "evens"]
    finally:
        engine.close()


@pytest.mark.parametrize(
    ("dsn", "refused"),
    [
        ("postgresql://shop@db/shop", False),  # a URL without one is not refused (it was)
        ("host=db user=shop dbname=shop", False),
        ("postgresql://shop:secret@db/shop", True),
        ("host=db password=secret", True),
        ("postgresql://db/shop?password=secret", True),
    ],
)
def test_a_dsn_is_refused_only_for_a_password(dsn: str, refused: bool) -> None:
    if refused:
        with pytest.raises(SqlError, match="PGPASSWORD") as info:
            _refuse_dsn_password("a sink", dsn)
        assert info.value.sqlstate == "28P01"
    else:
        _refuse_dsn_password("a sink", dsn)


def test_a_writers_follower_does_not_run_again_what_a_drop_is_dropping(
    client: PersistClient,
) -> None:
    # A DROP takes the object out, halts it (its tick under way ends: here, slowly), then
    # forgets its entry. A follower pass in between saw the entry and no object, and ran
    # the object again: the DROP was undone (CI caught it with a sink).
    import threading

    from timeshard.server.engine import _Object

    sql = "CREATE MATERIALIZED VIEW evens AS SELECT n FROM counter"
    record(client, "evens", sql, 2)
    engine = Engine(no_spark(), client, follow_s=0.01)
    created: list[str] = []
    engine._create = lambda statement, **_: created.append(statement.name)  # type: ignore[assignment,method-assign,misc,return-value]
    runner = SimpleNamespace(drop=lambda: None, close=lambda: None)
    view = _Object("evens", "view", sql, 2, runner, ["evens"])
    view.halt = lambda: time.sleep(0.5)  # type: ignore[method-assign]
    engine.objects["evens"] = view
    engine._follower = threading.Thread(target=engine._follow, daemon=True)
    engine._follower.start()
    try:
        engine.execute(parse("DROP MATERIALIZED VIEW evens"))
        time.sleep(0.2)  # more passes, after the entry is gone
    finally:
        engine.close()
    assert created == [] and engine.objects == {}
