"""A date, timestamp or timestamptz parameter has its declared type, NULL or not.

A parameter sent as text with the OID of date (1082), timestamp (1114) or
timestamptz (1184) was bound as a string literal (its NULL a text NULL): the
column it made was text (25), where PostgreSQL answers the declared type
(checked against PostgreSQL 15), and a client read a string, not a date. Now it
is a cast of its text to Spark's DATE, TIMESTAMP_NTZ or TIMESTAMP.
"""

from __future__ import annotations

import contextlib
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.location import Location
from timeshard.persist import PersistClient, PersistConfig
from timeshard.server.engine import Engine
from timeshard.server.pgwire import PgServer

pytestmark = pytest.mark.spark


@contextlib.contextmanager
def served_pgconn(
    spark: SparkSession, path: Path, schema: pa.Schema, row: tuple[Any, ...]
) -> Iterator[Any]:
    """A libpq connection (autocommit) to a server over shard ``t`` of one ``row``."""
    client = PersistClient(Location.embedded(path / "loc"), PersistConfig(heartbeat_interval_ms=0))
    writer = client.open_writer("t", schema)
    writer.append([(row, 0, 1)], 0, 1)
    writer.expire()
    engine = Engine(spark, client, read_wait_s=30.0)
    server = PgServer(engine, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with psycopg.connect(
            host="127.0.0.1", port=server.port, user="me", dbname="x", autocommit=True
        ) as conn:
            yield conn.pgconn
    finally:
        server.shutdown()
        server.server_close()
        engine.close()


@pytest.fixture
def pgconn(spark: SparkSession, tmp_path: Path) -> Iterator[Any]:
    with served_pgconn(spark, tmp_path, pa.schema([("one", pa.int64())]), (1,)) as conn:
        yield conn


@pytest.mark.parametrize(
    ("oid", "value"),
    [
        (1082, b"2020-01-02"),
        (1082, None),
        (1114, b"2020-01-02 03:04:05"),
        (1114, None),
        (1184, b"2020-01-02 03:04:05+00"),
        (1184, None),
    ],
)
def test_a_time_parameter_has_its_declared_type(pgconn: Any, oid: int, value: bytes | None) -> None:
    result = pgconn.exec_params(b"SELECT $1 AS x FROM t", [value], [oid])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert (result.ftype(0), result.get_value(0, 0)) == (oid, value)


@pytest.mark.parametrize(
    ("oid", "binary", "text"),
    [
        (1082, struct.pack("!i", 7306), b"2020-01-02"),
        (1114, struct.pack("!q", 631249445000000), b"2020-01-02 03:04:05"),
        (1184, struct.pack("!q", 631249445000000), b"2020-01-02 03:04:05+00"),
    ],
)
def test_a_binary_time_parameter_is_the_time_it_encodes(
    pgconn: Any, oid: int, binary: bytes, text: bytes
) -> None:
    """psycopg sends dates and datetimes in binary by default; they were refused (0A000)."""
    result = pgconn.exec_params(b"SELECT $1 AS x FROM t", [binary], [oid], [1])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert (result.ftype(0), result.get_value(0, 0)) == (oid, text)
