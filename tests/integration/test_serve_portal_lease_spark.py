"""A query whose readers lost their lease says its snapshot expired, not that a part is missing.

A portal (or a query cursor) holds its query's leased readers, and the
client's background heartbeats renew them for as long as it is open. If the lease
runs out anyway (heartbeats failing through a consensus outage longer than the lease),
GC expires the readers and deletes the parts the query planned: taking the rest of
its rows then failed with the blob store's "not found", which reads like corruption.
The engine now answers SqlError 72000 (snapshot_too_old) saying the snapshot expired
and to run the query again.

The clock is the test's: the lease runs out when the test says (with the heartbeats
off), or is renewed past it (with them on).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from tests.unit.test_pgwire_cursor import until

from timeshard.location import Location
from timeshard.persist import PersistClient, PersistConfig
from timeshard.server.engine import Engine, QueryRows
from timeshard.server.statements import SqlError

pytestmark = pytest.mark.spark

LEASE_MS = 60_000


def planned_query(
    spark: SparkSession, tmp_path: Path, now: list[int], heartbeat_ms: int
) -> tuple[PersistClient, Any, QueryRows]:
    """A shard ``v`` of four parts, and a query of it planned, no row taken yet: a portal
    described and not executed, or a cursor declared and not fetched from (a row taken
    first runs the job that reads every part, into the shuffle that consolidates them)."""
    config = PersistConfig(
        heartbeat_interval_ms=heartbeat_ms, reader_lease_ms=LEASE_MS, clock=lambda: now[0]
    )
    client = PersistClient(Location.embedded(tmp_path / "loc"), config)
    writer = client.open_writer("v", pa.schema([("k", pa.int64())]))
    for t in range(4):  # a part each
        writer.append([((t,), t, 1)], t, t + 1)
    rows = Engine(spark, client, read_wait_s=5.0).query_rows("SELECT k FROM v", None)
    return client, writer, rows


def collect_after_appends(client: PersistClient, writer: Any) -> Any:
    """Append, compact and collect garbage: the parts no live reader holds go."""
    writer.heartbeat()  # the writer is alive
    for t in range(4, 8):
        writer.append([((t,), t, 1)], t, t + 1)
    client.compact("v")
    return client.gc("v")


def test_an_open_query_keeps_its_readers_alive(spark: SparkSession, tmp_path: Path) -> None:
    """The client's heartbeats renew the readers of a query not yet read (a portal left
    open): past the lease, its parts are still there, and its rows all come."""
    now = [1_000_000]
    client, writer, rows = planned_query(spark, tmp_path, now, heartbeat_ms=50)
    try:
        renewals = client.heartbeats.renewals
        now[0] += 2 * LEASE_MS
        until(lambda: client.heartbeats.renewals > renewals, "no heartbeat renewed the reader")
        report = collect_after_appends(client, writer)
        assert not report.expired, report
        assert sorted(rows) == [(0,), (1,), (2,), (3,)]
    finally:
        rows.close()


def test_a_query_whose_lease_ran_out_says_its_snapshot_expired(
    spark: SparkSession, tmp_path: Path
) -> None:
    now = [1_000_000]
    client, writer, rows = planned_query(spark, tmp_path, now, heartbeat_ms=0)
    try:
        now[0] += 2 * LEASE_MS  # the reader's lease runs out: nobody renewed it
        report = collect_after_appends(client, writer)
        assert report.expired and report.deleted_blobs, report  # the parts it planned are gone
        with pytest.raises(SqlError, match="expired") as raised:
            list(rows)
        assert raised.value.sqlstate == "72000", raised.value
    finally:
        rows.close()
