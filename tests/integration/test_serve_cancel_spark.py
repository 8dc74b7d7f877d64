"""A CancelRequest cancels the running SELECT of its connection, on a real engine.

The query is a four-way cross join of a 1000-row shard (10^12 rows to count):
it never ends by itself on this machine, so the test waits for conditions, not
for time -- its Spark job seen running by the status tracker, then the cancel,
then the client's 57014. A cancel reached only a SUBSCRIBE and a waiting
FETCH: a SELECT ran on, and its client waited for it. Another connection's
query, running at the same time, runs on: its jobs carry a job tag of their own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg import errors
from pyspark.sql import SparkSession

from timeshard.location import Location
from timeshard.persist import PersistClient, PersistConfig
from timeshard.server.engine import Engine
from timeshard.server.pgwire import PgServer

pytestmark = pytest.mark.spark

SLOW = "SELECT count(*) FROM kv a, kv b, kv c, kv d"


@pytest.fixture
def served(spark: SparkSession, tmp_path: Path) -> Iterator[PgServer]:
    client = PersistClient(
        Location.embedded(tmp_path / "loc"), PersistConfig(heartbeat_interval_ms=0)
    )
    writer = client.open_writer("kv", pa.schema([("k", pa.int64()), ("v", pa.string())]))
    writer.append([((k, "a"), 0, 1) for k in range(1000)], 0, 1)
    server = PgServer(Engine(spark, client, read_wait_s=5.0), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def connect(server: PgServer) -> psycopg.Connection[Any]:
    return psycopg.connect(
        host="127.0.0.1", port=server.port, user="me", dbname="x", autocommit=True
    )


def until(condition: Any, what: str) -> None:
    """Wait for ``condition``: a stuck server never meets it, a slow one within 5 min."""
    deadline = time.monotonic() + 300
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


class Running:
    """``SLOW`` run on ``conn`` on a thread; ``error`` once it ends."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.conn.execute(SLOW)
        except BaseException as e:
            self.error = e
        finally:
            self.done.set()


def test_a_cancel_stops_the_running_select_of_its_connection_only(
    spark: SparkSession, served: PgServer
) -> None:
    tracker = spark.sparkContext.statusTracker()
    assert tracker.getActiveJobsIds() == []
    with connect(served) as first, connect(served) as second:
        one = Running(first)
        until(lambda: tracker.getActiveJobsIds(), "the first query started no Spark job")
        two = Running(second)
        until(lambda: len(tracker.getActiveJobsIds()) >= 2, "the second query started no job")
        first.cancel_safe()
        until(one.done.is_set, "the canceled query ran on")
        assert isinstance(one.error, errors.QueryCanceled), one.error
        assert "canceling statement due to user request" in str(one.error)
        until(lambda: len(tracker.getActiveJobsIds()) <= 1, "the canceled query's job ran on")
        assert len(tracker.getActiveJobsIds()) == 1  # the other connection's query runs on
        assert not two.done.is_set(), two.error
        second.cancel_safe()
        until(two.done.is_set, "the second canceled query ran on")
        assert isinstance(two.error, errors.QueryCanceled), two.error
        until(lambda: tracker.getActiveJobsIds() == [], "a canceled query's job ran on")
        assert first.execute("SELECT count(*) FROM kv").fetchall() == [(1000,)]
        assert second.execute("SELECT count(*) FROM kv WHERE k < 10").fetchall() == [(10,)]
