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
from tests.unit.test_pgwire_lifetimes import SYNC, Client, describe, execute, message

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
        assert count == 1 and oids == [20]  # PostgreSQL infers k's int8 for k > $1
        pg.sock.sendall(parse(b"bad", "SELECT * FROM nowhere") + describe_statement(b"bad") + SYNC)
        got = pg.until(b"Z")
        assert [kind for kind, _ in got] == [b"1", b"E", b"Z"], got
        assert b"C42P01\0" in got[1][1]
    finally:
        server.shutdown()
        server.server_close()
        writer.expire()


def typed_parse(name: bytes, sql: str, oids: list[int]) -> bytes:
    body = name + b"\0" + sql.encode() + b"\0" + struct.pack(f"!h{len(oids)}i", len(oids), *oids)
    return message(b"P", body)


def bind_text(name: bytes, values: list[str]) -> bytes:
    """A Bind of the unnamed portal to statement ``name``: text parameters, text results."""
    body = b"\0" + name + b"\0" + struct.pack("!hh", 0, len(values))
    for value in values:
        body += struct.pack("!i", len(value.encode())) + value.encode()
    return message(b"B", body + struct.pack("!h", 0))


def field_types(body: bytes) -> list[int]:
    (count,) = struct.unpack("!h", body[:2])
    oids, rest = [], body[2:]
    for _ in range(count):
        _, rest = rest.split(b"\0", 1)
        oids.append(struct.unpack("!i", rest[6:10])[0])
        rest = rest[18:]
    return oids


def data_row(body: bytes) -> list[bytes | None]:
    (count,) = struct.unpack("!h", body[:2])
    values, rest = [], body[2:]
    for _ in range(count):
        (n,) = struct.unpack("!i", rest[:4])
        values.append(None if n < 0 else rest[4 : 4 + n])
        rest = rest[4 + max(n, 0) :]
    return values


@pytest.mark.parametrize(
    ("sql", "oids", "values", "want_types", "want_row"),
    [
        # A float8 parameter is a DOUBLE, not a DECIMAL literal.
        ("SELECT $1 AS x", [701], ["1.5"], [701], [b"1.5"]),
        ("SELECT $1 AS x", [700], ["0.25"], [700], [b"0.25"]),
        ("SELECT $1 * 2 AS x", [701], ["NaN"], [701], [b"NaN"]),
        ("SELECT count(*) AS n FROM kv WHERE d < $1", [701], ["2.5"], [20], [b"1"]),
        # A declared type is the parameter's type, whatever its value.
        ("SELECT $1 AS x", [20], ["5"], [20], [b"5"]),
        ("SELECT $1 AS x", [23], ["5"], [23], [b"5"]),
        ("SELECT $1 AS x", [1700], ["5"], [1700], [b"5"]),
        ("SELECT $1 AS x", [1700], ["-2.50"], [1700], [b"-2.50"]),
        ("SELECT $1 AS x", [16], ["t"], [16], [b"t"]),
        ("SELECT $1 AS x", [20], [None], [20], [None]),
        # An undeclared one is text, as the client sends it.
        ("SELECT $1::int8 + 1 AS x", [], ["41"], [20], [b"42"]),
        ("SELECT $1 AS x", [], ["abc"], [25], [b"abc"]),
        ("SELECT k FROM kv ORDER BY k LIMIT $1", [20], ["1"], [20], [b"1"]),
        ("SELECT k FROM kv ORDER BY k LIMIT $1", [1700], ["1"], [20], [b"1"]),  # a whole numeric
    ],
)
def test_describe_and_execute_agree_on_parameter_types(
    spark: SparkSession,
    tmp_path: Path,
    sql: str,
    oids: list[int],
    values: list[str | None],
    want_types: list[int],
    want_row: list[bytes | None],
) -> None:
    """A float8 parameter bound as a DECIMAL literal, a declared int8 as whatever Spark
    made of its digits (an INT), and Describe bound every parameter as an untyped NULL:
    its RowDescription differed from the rows Execute answered."""
    client = PersistClient(
        Location.embedded(tmp_path / "loc"), PersistConfig(heartbeat_interval_ms=0)
    )
    writer = client.open_writer("kv", pa.schema([("k", pa.int64()), ("d", pa.float64())]))
    writer.append([((1, 2.0), 0, 1), ((2, 3.0), 0, 1)], 0, 1)
    engine = Engine(spark, client, read_wait_s=5.0)
    server = PgServer(engine, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        pg = Client(server)
        pg.sock.sendall(typed_parse(b"s", sql, oids) + describe_statement(b"s") + SYNC)
        got = pg.until(b"Z")
        assert [kind for kind, _ in got] == [b"1", b"t", b"T", b"Z"], got
        described = field_types(got[2][1])
        nulls = [v is None for v in values]
        bound = bind_text(b"s", [v or "" for v in values])
        if any(nulls):  # a NULL's length is -1
            bound = message(b"B", b"\0s\0" + struct.pack("!hhih", 0, 1, -1, 0))
        pg.sock.sendall(bound + describe(b"") + execute(b"") + SYNC)
        got = pg.until(b"Z")
        kinds = [kind for kind, _ in got]
        assert kinds == [b"2", b"T", b"D", b"C", b"Z"], got
        assert (described, field_types(got[1][1])) == (want_types, want_types)
        assert data_row(got[2][1]) == want_row
    finally:
        server.shutdown()
        server.server_close()
        engine.close()
        writer.expire()
