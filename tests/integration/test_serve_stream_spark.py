"""A SELECT's rows stream from Spark to the client, on a real engine.

The shard holds 2.4 MB of incompressible text (2,400 rows of 1,000 hex
digits); its query answers them in 4 partitions (the session's shuffle
partitions). The test sets the driver's collect limit
(``spark.driver.maxResultSize``) to 1 MiB: a server that collects a result whole
before it sends it fails past it ("Total size of serialized results ... is
bigger than spark.driver.maxResultSize"), one that streams holds a partition
at a time. An Execute with a row limit runs only the jobs of the rows it
sends; the Close of its suspended portal runs no other and lets go of the
shard's reader.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from tests.unit.test_pgwire_lifetimes import SYNC, Client, close, message, parse

from timeshard.location import Location
from timeshard.persist import PersistClient, PersistConfig
from timeshard.server.engine import Engine
from timeshard.server.pgwire import PgServer

pytestmark = pytest.mark.spark

ROWS = 2400
TEXT = [os.urandom(500).hex() for _ in range(ROWS)]


@pytest.fixture
def client(tmp_path: Path) -> PersistClient:
    client = PersistClient(
        Location.embedded(tmp_path / "loc"), PersistConfig(heartbeat_interval_ms=0)
    )
    writer = client.open_writer("big", pa.schema([("k", pa.int64()), ("s", pa.string())]))
    writer.append([((k, TEXT[k]), 0, 1) for k in range(ROWS)], 0, 1)
    return client


@pytest.fixture
def served(spark: SparkSession, client: PersistClient) -> Iterator[PgServer]:
    server = PgServer(Engine(spark, client, read_wait_s=5.0), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    conf = spark.sparkContext._jsc.sc().conf()  # type: ignore[union-attr]
    limit = conf.get("spark.driver.maxResultSize", "1g")
    conf.set("spark.driver.maxResultSize", "1m")  # the TaskSetManager of each job reads it
    yield server
    conf.set("spark.driver.maxResultSize", limit)
    server.shutdown()
    server.server_close()


def connect(server: PgServer) -> psycopg.Connection[Any]:
    return psycopg.connect(
        host="127.0.0.1", port=server.port, user="me", dbname="x", autocommit=True
    )


def jobs(spark: SparkSession) -> int:
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup())


def test_a_result_past_the_collect_limit_streams_to_the_client(served: PgServer) -> None:
    with connect(served) as conn:
        rows = conn.execute("SELECT k, s FROM big").fetchall()
        assert sorted(rows) == list(enumerate(TEXT))


def execute(portal: bytes, max_rows: int) -> bytes:
    return message(b"E", portal + b"\0" + struct.pack("!i", max_rows))


def bind(portal: bytes) -> bytes:
    return message(b"B", portal + b"\0\0" + struct.pack("!hhh", 0, 0, 0))


def test_an_execute_with_a_row_limit_runs_the_jobs_of_its_rows_only(
    spark: SparkSession, client: PersistClient, served: PgServer
) -> None:
    before = jobs(spark)
    pg = Client(served)
    pg.sock.sendall(parse("SELECT k, s FROM big") + bind(b"p") + execute(b"p", 10) + message(b"H"))
    got = pg.until(b"s")  # PortalSuspended
    assert [kind for kind, _ in got].count(b"D") == 10, got
    assert jobs(spark) - before == 1  # the first partition's: the 10 rows and the one after
    assert len(client.state("big").leased_readers) == 1
    pg.sock.sendall(execute(b"p", 5) + message(b"H"))
    assert [kind for kind, _ in pg.until(b"s")].count(b"D") == 5
    pg.sock.sendall(close(b"p") + SYNC)
    pg.until(b"Z")
    assert jobs(spark) - before == 1  # the other partitions never ran
    assert client.state("big").leased_readers == {}  # the closed portal let go of its reader
    pg.sock.sendall(parse("SELECT count(*) FROM big") + bind(b"") + execute(b"", 0) + SYNC)
    got = pg.until(b"Z")
    assert [body for kind, body in got if kind == b"D"] == [struct.pack("!hi", 1, 4) + b"2400"]
