"""Describe of a prepared statement on a real engine: the columns, without a Spark job.

psycopg's ``Cursor.execute(..., prepare=True)`` describes the portal it binds;
JDBC describes the statement once and reads every later execution's rows
with that description. The statement's Describe answered NoData for a
SELECT, so such a client read rows of no columns.
"""

from __future__ import annotations

import struct
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from tests.unit.test_pgwire_describe import describe_statement, field_names, parse
from tests.unit.test_pgwire_lifetimes import SYNC, Client

from timeshard.location import Location
from timeshard.persist import PersistClient, PersistConfig
from timeshard.server.engine import Engine
from timeshard.server.pgwire import PgServer
from timeshard.server.statements import parse as parse_sql

pytestmark = pytest.mark.spark


def test_describe_of_a_select_answers_its_columns_and_types(
    spark: SparkSession, tmp_path: Path
) -> None:
    client = PersistClient(
        Location.embedded(tmp_path / "loc"), PersistConfig(heartbeat_interval_ms=0)
    )
    writer = client.open_writer("kv", pa.schema([("k", pa.int64()), ("v", pa.string())]))
    writer.append([((1, "a"), 0, 1)], 0, 1)
    engine = Engine(spark, client, read_wait_s=5.0)
    server = PgServer(engine, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        jobs = spark.sparkContext.statusTracker().getJobIdsForGroup()
        sql = "SELECT k, upper(v) AS big, k * 1.5 AS f FROM kv WHERE k > $1 LIMIT 10"
        described = engine.describe(parse_sql(sql.replace("$1", "NULL")))
        assert described == [("k", "long"), ("big", "string"), ("f", "decimal")]
        assert spark.sparkContext.statusTracker().getJobIdsForGroup() == jobs  # no job ran
        assert engine.describe(parse_sql("SHOW SOURCES")) == [
            ("name", "string"),
            ("type", "string"),
            ("shards", "string"),
        ]
        assert engine.describe(parse_sql("SUBSCRIBE kv")) is None
        pg = Client(server)
        pg.sock.sendall(parse(b"s", sql) + describe_statement(b"s") + SYNC)
        got = pg.until(b"Z")
        assert [kind for kind, _ in got] == [b"1", b"t", b"T", b"Z"], got
        assert field_names(got[2][1]) == [b"k", b"big", b"f"]
        (count, *oids) = struct.unpack("!h" + "i" * 1, got[1][1])
        assert count == 1 and oids == [25]
        pg.sock.sendall(parse(b"bad", "SELECT * FROM nowhere") + describe_statement(b"bad") + SYNC)
        got = pg.until(b"Z")
        assert [kind for kind, _ in got] == [b"1", b"E", b"Z"], got
        assert b"C42P01\0" in got[1][1]
    finally:
        server.shutdown()
        server.server_close()
        writer.expire()
