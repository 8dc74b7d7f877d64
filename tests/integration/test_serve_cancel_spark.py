"""A CancelRequest cancels the running SELECT of its connection, on a real engine.

The query is a cross join of 2000 literal rows with three reads of a 1000-row
shard (2 * 10^11 rows to count): it does not end by itself within the test,
so the test waits for conditions, not for time -- its Spark job seen running
by the status tracker, then the cancel, then the client's 57014, then the
other query's job getting the cores. A cancel reached only a SUBSCRIBE and a
waiting FETCH: a SELECT ran on, and its client waited for it. Another
connection's query, running at the same time, runs on: its jobs carry a job
tag of their own.

The literal rows are the streamed side of the join, and Spark checks a task's
kill flag as it takes each of them (10^8 rows to count apiece): a canceled
task stops within a fraction of a second. A four-way cross join of the shard
itself streams the rows of the snapshot's consolidating aggregate, where
Spark never checks the flag: the canceled query's tasks ran on for minutes,
holding both cores of ``local[2]``, and every statement after waited for them
(348 s in all). Spark offers nothing that stops such a task in local mode:
its task reaper only logs there.
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

SLOW = (
    "SELECT count(*) FROM (VALUES "
    + ", ".join(f"({i})" for i in range(2000))
    + ") AS t(x), kv b, kv c, kv d WHERE d.k < 100"
)
#: The Spark jobs of ``SLOW``: a broadcast of ``kv``, one of ``kv`` filtered, then the count.
JOBS = 3


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


def tagged(spark: SparkSession, tag: str) -> list[int]:
    """The jobs that ran or run with the job tag ``tag``, oldest first."""
    return sorted(spark.sparkContext._jsc.sc().statusTracker().getJobIdsForTag(tag))  # type: ignore[union-attr]


def new_tag(server: PgServer, old: set[str]) -> str:
    """The job tag of the one connection of ``server`` whose tag is not in ``old``."""
    with server.cancels_lock:
        (tag,) = {handler.jobs for handler in server.cancels.values()} - old
    return tag


def running_tasks(spark: SparkSession) -> int:
    """The tasks running now: a canceled job leaves the tracker's active jobs at once,
    its tasks only when they have stopped."""
    tracker = spark.sparkContext._jsc.sc().statusTracker()  # type: ignore[union-attr]
    return sum(e.numRunningTasks() for e in tracker.getExecutorInfos())


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
    with connect(served) as first:
        tag1 = new_tag(served, set())
        with connect(served) as second:
            tag2 = new_tag(served, {tag1})
            one = Running(first)
            until(lambda: len(tagged(spark, tag1)) == JOBS, "the first query started no count")
            until(lambda: running_tasks(spark) == 2, "the first query's count holds no core")
            two = Running(second)
            until(lambda: tagged(spark, tag2), "the second query started no job")
            first.cancel_safe()
            until(one.done.is_set, "the canceled query ran on")
            assert isinstance(one.error, errors.QueryCanceled), one.error
            assert "canceling statement due to user request" in str(one.error)
            # Its tasks stopped: the other query's jobs got the cores they held.
            until(lambda: len(tagged(spark, tag2)) == JOBS, "the canceled query's tasks ran on")
            until(lambda: len(tracker.getActiveJobsIds()) <= 1, "the canceled query's job ran on")
            assert tracker.getActiveJobsIds() == tagged(spark, tag2)[-1:]  # the other runs on
            assert not two.done.is_set(), two.error
            second.cancel_safe()
            until(two.done.is_set, "the second canceled query ran on")
            assert isinstance(two.error, errors.QueryCanceled), two.error
            until(lambda: tracker.getActiveJobsIds() == [], "a canceled query's job ran on")
            until(lambda: running_tasks(spark) == 0, "a canceled query's tasks ran on")
            assert first.execute("SELECT count(*) FROM kv").fetchall() == [(1000,)]
            assert second.execute("SELECT count(*) FROM kv WHERE k < 10").fetchall() == [(10,)]
