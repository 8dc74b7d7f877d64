"""A POSTGRES source's slot is dropped only while no other process uses it (no Spark).

A slot is named after its source, so every source of that name shares it -- another
deployment's among them. The run that ends with a build of a source that never ran
(``_drop_new_slots``) drops the slot that build created, and must leave it when
another process uses it by then: in use now (``active``), or moved on since the build
created it (another instance of the source committed on it).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from timeshard.controller import _drop_new_slots
from timeshard.storage.postgres_source import PARTITION, PostgresSource, parse_lsn

pytestmark = pytest.mark.postgres


@pytest.fixture
def upstream(postgres_dsn: str) -> Iterator[tuple[str, str]]:
    """A published table of the session's server: (the DSN, the publication)."""
    schema, pub = f"s_{uuid.uuid4().hex[:10]}", f"p_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        table = sql.SQL("{}.t").format(sql.Identifier(schema))
        conn.execute(sql.SQL("CREATE TABLE {} (k int)").format(table))
        conn.execute(sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(table))
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(sql.Identifier(pub), table)
        )
    yield postgres_dsn, pub


def build(upstream: tuple[str, str], name: str) -> PostgresSource:
    dsn, pub = upstream
    return PostgresSource(name, dsn, pub)


def slot_row(dsn: str, slot: str) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT active, confirmed_flush_lsn::text FROM pg_replication_slots "
            "WHERE slot_name = %s",
            (slot,),
        ).fetchone()


def wal_lsn(dsn: str) -> int:
    """The server's flushed WAL position, after writing some WAL."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_logical_emit_message(false, 'test', 'x')")
        conn.execute("SELECT pg_switch_wal()")
        row = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
    assert row is not None
    return parse_lsn(row[0])


def name() -> str:
    return f"pg_{uuid.uuid4().hex[:8]}"


def test_a_slot_another_deployment_committed_on_is_left(
    upstream: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Before: the run's end dropped the slot by name, under the other deployment's
    running source (whose next read finds its slot gone)."""
    dsn = upstream[0]
    source = name()
    stalled = build(upstream, source)  # its build made the slot; it never ran
    assert stalled.slot_created
    running = build(upstream, source)  # another deployment's: it shares the slot
    assert not running.slot_created
    running.commit({PARTITION: wal_lsn(dsn)})
    moved = slot_row(dsn, running.slot)

    with caplog.at_level(logging.WARNING):
        _drop_new_slots([stalled])
    assert slot_row(dsn, running.slot) == moved, "the running source's slot was dropped"
    assert "moved on" in caplog.text and running.slot in caplog.text
    assert running.confirmed_flush() is not None
    assert running.drop()  # the source is dropped: its slot goes


def test_a_slot_in_use_is_left(upstream: tuple[str, str], caplog: pytest.LogCaptureFixture) -> None:
    import psycopg2
    import psycopg2.extras

    dsn = upstream[0]
    stalled = build(upstream, name())
    repl = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
    try:
        cursor = repl.cursor()
        cursor.start_replication(
            slot_name=stalled.slot, options={"proto_version": "1", "publication_names": upstream[1]}
        )
        deadline = time.monotonic() + 60
        while not slot_row(dsn, stalled.slot)[0]:  # the walsender takes the slot
            assert time.monotonic() < deadline, "the slot never became active"
            time.sleep(0.05)
        with caplog.at_level(logging.WARNING):
            _drop_new_slots([stalled])
        assert slot_row(dsn, stalled.slot) is not None, "the slot in use was dropped"
        assert "in use (active)" in caplog.text
    finally:
        repl.close()
    deadline = time.monotonic() + 60
    while slot_row(dsn, stalled.slot)[0]:  # the walsender lets it go
        assert time.monotonic() < deadline, "the slot stayed active"
        time.sleep(0.05)
    _drop_new_slots([stalled])
    assert slot_row(dsn, stalled.slot) is None


def test_a_slot_no_one_used_is_dropped_and_so_is_one_the_source_advanced(
    upstream: tuple[str, str],
) -> None:
    dsn = upstream[0]
    unused = build(upstream, name())
    _drop_new_slots([unused])
    assert slot_row(dsn, unused.slot) is None
    assert not unused.drop()  # no slot: no error

    ran = build(upstream, name())
    ran.commit({PARTITION: wal_lsn(dsn)})  # it moved its slot on itself
    assert ran.drop()
    assert slot_row(dsn, ran.slot) is None
