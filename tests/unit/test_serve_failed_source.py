"""A CREATE SOURCE that fails part way undoes what it made, as a failed view's does.

An ingestion records its source and outputs in the catalog when it is built,
and a POSTGRES source creates its replication slot; a CREATE SOURCE whose
first read then failed left both: the catalog entries refused a retry that
declared the source otherwise (a redeclaration), and the slot kept the
server's WAL until a retry or a DROP. Only what the CREATE made goes: a slot
it did not create (declared, and there already) stays. The shards stay,
holding nothing but what the first tick may have appended: persist has no
way to delete a shard, and the retry takes them. No Spark: the first tick is
made to fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest

from timeshard.catalog import read_catalog
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.server.engine import Engine
from timeshard.server.statements import SqlError, parse
from timeshard.storage.ingest import Ingestion
from timeshard.storage.postgres_source import default_slot


def session() -> Any:
    """A stand-in SparkSession that loaded no package."""
    return SimpleNamespace(sparkContext=SimpleNamespace(getConf=lambda: {}))


@pytest.fixture
def client(tmp_path: Path) -> PersistClient:
    return PersistClient(Location.embedded(tmp_path / "loc"))


@pytest.fixture
def failing(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """While it holds True, an ingestion's tick fails (as a Spark job that fails); then
    it reads nothing (there is no Spark here)."""
    fail = [True]

    def failing_step(self: Ingestion) -> None:
        if fail[0]:
            raise RuntimeError("the first read failed")

    monkeypatch.setattr(Ingestion, "step", failing_step)
    return fail


def create(engine: Engine, sql: str) -> Any:
    statement = parse(sql)
    return engine.execute(statement)  # type: ignore[arg-type]


def test_a_failed_create_source_leaves_no_catalog_entry(
    client: PersistClient, failing: list[bool]
) -> None:
    engine = Engine(session(), client, follow_s=3600)
    try:
        with pytest.raises(SqlError, match="first read failed"):
            create(engine, "CREATE SOURCE a FROM LOAD GENERATOR AUCTION")
        assert engine.objects == {}
        assert [(e.name, e.kind) for e in read_catalog(client)] == []
        failing[0] = False  # the retry declares it otherwise: a new source, not a redeclaration
        create(engine, "CREATE SOURCE a FROM LOAD GENERATOR AUCTION (USERS 7)")
        assert set(engine.objects) == {"a"}
        kinds = {e.kind for e in read_catalog(client) if e.name.startswith("a")}
        assert kinds == {"statement", "source", "export"}
    finally:
        engine.close()


def test_a_failed_create_source_keeps_a_source_recorded_before(
    client: PersistClient, failing: list[bool]
) -> None:
    """A source a run file recorded (taken over by the CREATE) keeps its entries."""
    from timeshard.storage.sources import AuctionGenerator

    Ingestion(None, client, AuctionGenerator(name="a")).close()
    recorded = sorted((e.name, e.kind) for e in read_catalog(client))
    engine = Engine(session(), client, follow_s=3600)
    try:
        with pytest.raises(SqlError, match="first read failed"):
            create(engine, "CREATE SOURCE a FROM LOAD GENERATOR AUCTION")
        assert sorted((e.name, e.kind) for e in read_catalog(client)) == recorded
    finally:
        engine.close()


@pytest.fixture
def upstream(postgres_server: Any) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS failed_create (id int PRIMARY KEY)")
        conn.execute("ALTER TABLE failed_create REPLICA IDENTITY FULL")
        conn.execute("DROP PUBLICATION IF EXISTS failed_create_pub")
        conn.execute("CREATE PUBLICATION failed_create_pub FOR TABLE failed_create")
        yield conn
        conn.execute("DROP PUBLICATION IF EXISTS failed_create_pub")
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name LIKE 'timeshard_%' OR slot_name = 'kept_slot'"
        )


def slots(conn: psycopg.Connection[Any]) -> list[str]:
    rows = conn.execute("SELECT slot_name FROM pg_replication_slots ORDER BY 1").fetchall()
    return [r[0] for r in rows]


@pytest.mark.postgres
def test_a_failed_create_source_drops_the_slot_it_created(
    client: PersistClient,
    failing: list[bool],
    upstream: psycopg.Connection[Any],
    postgres_server: Any,
) -> None:
    engine = Engine(session(), client, follow_s=3600)
    before = slots(upstream)
    sql = (
        f"CREATE SOURCE p FROM POSTGRES (DSN '{postgres_server.dsn}', "
        "PUBLICATION 'failed_create_pub') FOR ALL TABLES"
    )
    try:
        with pytest.raises(SqlError, match="first read failed"):
            create(engine, sql)
        assert default_slot("p") not in slots(upstream), "the failed CREATE left its slot"
        assert slots(upstream) == before
        assert [(e.name, e.kind) for e in read_catalog(client)] == []
    finally:
        engine.close()


@pytest.mark.postgres
def test_a_failed_create_source_keeps_a_slot_it_did_not_create(
    client: PersistClient,
    failing: list[bool],
    upstream: psycopg.Connection[Any],
    postgres_server: Any,
) -> None:
    upstream.execute("SELECT pg_create_logical_replication_slot('kept_slot', 'pgoutput')")
    engine = Engine(session(), client, follow_s=3600)
    sql = (
        f"CREATE SOURCE q FROM POSTGRES (DSN '{postgres_server.dsn}', "
        "PUBLICATION 'failed_create_pub', SLOT 'kept_slot') FOR ALL TABLES"
    )
    try:
        with pytest.raises(SqlError, match="first read failed"):
            create(engine, sql)
        assert "kept_slot" in slots(upstream)
    finally:
        engine.close()


@pytest.mark.postgres
def test_a_declaration_refused_by_its_check_creates_no_slot(
    upstream: psycopg.Connection[Any], postgres_server: Any
) -> None:
    """``check_spec`` builds each source to check its options; for a POSTGRES source that
    build created the replication slot, so a run file refused further on (a view reading a
    shard that does not exist) left a slot holding the server's WAL."""
    from timeshard.errors import InvalidUsage
    from timeshard.spec import RunSpec, SourceSpec, ViewSpec, check_spec

    before = slots(upstream)
    spec = RunSpec(
        source=[
            SourceSpec(
                name="checked",
                kind="postgres",
                options={"dsn": postgres_server.dsn, "publication": "failed_create_pub"},
            )
        ],
        view=[ViewSpec(name="v", inputs={"t": "missing"}, sql="SELECT * FROM t")],
    )
    with pytest.raises(InvalidUsage, match="missing"):
        check_spec(spec, existing=[])
    assert slots(upstream) == before


@pytest.mark.postgres
def test_a_failed_create_source_that_appended_keeps_its_slot(
    client: PersistClient,
    upstream: psycopg.Connection[Any],
    postgres_server: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A first tick that appended before it failed bound offsets that only its slot still
    holds: dropped, a retry made a new slot past them and stalled for ever."""

    def appends_then_fails(self: Ingestion) -> None:
        for export in self.exports.values():
            export.advance(0, 1)  # an empty batch: the output's upper moves
        raise RuntimeError("the first read failed")

    monkeypatch.setattr(Ingestion, "step", appends_then_fails)
    engine = Engine(session(), client, follow_s=3600)
    sql = (
        f"CREATE SOURCE pa FROM POSTGRES (DSN '{postgres_server.dsn}', "
        "PUBLICATION 'failed_create_pub') FOR ALL TABLES"
    )
    try:
        with pytest.raises(SqlError, match="first read failed"):
            create(engine, sql)
        assert default_slot("pa") in slots(upstream)
    finally:
        engine.close()
