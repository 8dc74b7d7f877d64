"""``SET statement_timeout`` cancels a SELECT that runs past it, on a real engine.

The query is a four-way cross join of a 1000-row shard (10^12 rows to count):
it never ends by itself on this machine, so it can end only by the timeout.
The server accepted the SET and ignored it: the query ran on for ever. Now it
ends with 57014 ``canceling statement due to statement timeout``, its Spark
jobs canceled, and the connection goes on.
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

NEVER_ENDS = "SELECT count(*) FROM kv a, kv b, kv c, kv d"


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


def until(condition: Any, what: str) -> None:
    """Wait for ``condition``: a stuck server never meets it, a slow one within 5 min."""
    deadline = time.monotonic() + 300
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_select_past_its_statement_timeout_ends_with_57014(
    spark: SparkSession, served: PgServer
) -> None:
    tracker = spark.sparkContext.statusTracker()
    with psycopg.connect(
        host="127.0.0.1", port=served.port, user="me", dbname="x", autocommit=True
    ) as conn:
        conn.execute("SET statement_timeout = '1s'")
        assert conn.execute("SHOW statement_timeout").fetchall() == [("1s",)]
        with pytest.raises(
            errors.QueryCanceled, match="canceling statement due to statement timeout"
        ):
            conn.execute(NEVER_ENDS)
        until(lambda: tracker.getActiveJobsIds() == [], "the timed-out query's jobs ran on")
        conn.execute("RESET statement_timeout")  # a loaded machine may take 1 s for any query
        assert conn.execute("SELECT count(*) FROM kv").fetchall() == [(1000,)]
