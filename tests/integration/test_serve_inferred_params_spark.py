"""An undeclared parameter is described as the type PostgreSQL infers for it.

The Describe of a statement answered text (25) for every undeclared parameter but one
cast to interval: ``SELECT $1::int8`` (PostgreSQL 15: int8, 20), ``SELECT $1 + 1`` (int4,
23), ``WHERE i = $1`` with an int4 column (23). A driver that sends the described types
(asyncpg) then refused a Python ``int`` there (``expected str, got int``). Each query
here is described by serve and by PostgreSQL 15 over a table of the same columns, and
the parameter types must agree; a value sent in binary in the described type is read as
that type.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from tests.integration.test_serve_declared_types_spark import describe_prepared
from tests.integration.test_serve_time_params_spark import served_pgconn

pytestmark = pytest.mark.spark

SCHEMA = pa.schema(
    [
        ("one", pa.int64()),
        ("i", pa.int32()),
        ("s", pa.int16()),
        ("d", pa.float64()),
        ("r", pa.float32()),
        ("n", pa.decimal128(10, 2)),
        ("b", pa.bool_()),
        ("x", pa.string()),
        ("dt", pa.date32()),
        ("ts", pa.timestamp("us")),
        ("tz", pa.timestamp("us", tz="UTC")),
        ("by", pa.binary()),
    ]
)
ROW = (
    5,
    7,
    3,
    1.5,
    2.5,
    decimal.Decimal("1.25"),
    True,
    "a",
    datetime.date(2020, 1, 2),
    datetime.datetime(2020, 1, 2, 3, 4, 5),
    datetime.datetime(2020, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
    b"\x01",
)
POSTGRES_TABLE = (
    "CREATE TABLE t (one int8, i int4, s int2, d float8, r float4, n numeric(10, 2), "
    "b bool, x text, dt date, ts timestamp, tz timestamptz, by bytea)"
)

QUERIES = [
    "SELECT $1::int8 AS v FROM t",
    "SELECT CAST($1 AS bigint) AS v FROM t",
    "SELECT $1::int4 AS v FROM t",
    "SELECT $1::int2 AS v FROM t",
    "SELECT $1::float8 AS v FROM t",
    "SELECT $1::real AS v FROM t",
    "SELECT $1::numeric AS v FROM t",
    "SELECT $1::bool AS v FROM t",
    "SELECT $1::text AS v FROM t",
    "SELECT $1::varchar AS v FROM t",
    "SELECT $1::date AS v FROM t",
    "SELECT $1::timestamp AS v FROM t",
    "SELECT $1::timestamptz AS v FROM t",
    "SELECT $1::bytea AS v FROM t",
    "SELECT $1::jsonb AS v FROM t",
    "SELECT $1::interval AS v FROM t",
    "SELECT $1 AS v FROM t",
    "SELECT $1 || 'x' AS v FROM t",
    "SELECT $1 + 1 AS v FROM t",
    "SELECT 1 + $1 AS v FROM t",
    "SELECT ($1) * 2 AS v FROM t",
    "SELECT $1 + 1.5 AS v FROM t",
    "SELECT $1 - 1::int8 AS v FROM t",
    "SELECT $1 > 1 AS v FROM t",
    "SELECT $1 = 'a' AS v FROM t",
    "SELECT $1 = DATE '2020-01-01' AS v FROM t",
    "SELECT $1 = $2::int8 AS v FROM t",
    "SELECT one FROM t WHERE one = $1",
    "SELECT one FROM t WHERE i = $1",
    "SELECT one FROM t WHERE $1 <> s",
    "SELECT one FROM t WHERE d = $1",
    "SELECT one FROM t WHERE r < $1",
    "SELECT one FROM t WHERE n = $1",
    "SELECT one FROM t WHERE b = $1",
    "SELECT one FROM t WHERE x = $1",
    "SELECT one FROM t WHERE dt = $1",
    "SELECT one FROM t WHERE ts = $1",
    "SELECT one FROM t WHERE tz = $1",
    "SELECT one FROM t WHERE by = $1",
    "SELECT one FROM t AS u WHERE u.i = $1",
    "SELECT one FROM t WHERE one IN ($1, $2)",
    "SELECT one FROM t WHERE one BETWEEN $1 AND $2",
    "SELECT one + $1 AS v FROM t",
    "SELECT $1 + one * 2 AS v FROM t",
    "SELECT one % $1 AS v FROM t",
    "WITH c AS (SELECT i FROM t) SELECT i FROM c WHERE i = $1",
    "SELECT now() > $1 AS v FROM t",
    "SELECT one FROM t WHERE d >= $1 AND $1 > 0",
]


@pytest.fixture(scope="module")
def pgconn(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    path = Path(tmp_path_factory.mktemp("inferred"))
    with served_pgconn(spark, path, SCHEMA, ROW) as conn:
        yield conn


@pytest.fixture(scope="module")
def postgres(postgres_dsn: str) -> Iterator[Any]:
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS t")
        conn.execute(POSTGRES_TABLE)
        yield conn.pgconn


def _parameter_oids(pgconn: Any, sql: str) -> list[int] | str:
    prepared = pgconn.prepare(b"", sql.encode(), None)
    if prepared.status != psycopg.pq.ExecStatus.COMMAND_OK:
        return prepared.error_message.decode()
    described = describe_prepared(pgconn)
    return [described.param_type(i) for i in range(described.nparams)]


@pytest.mark.parametrize("sql", QUERIES)
def test_an_undeclared_parameter_is_described_as_postgresql_infers_it(
    pgconn: Any, postgres: Any, sql: str
) -> None:
    expected = _parameter_oids(postgres, sql)
    assert isinstance(expected, list), expected
    assert _parameter_oids(pgconn, sql) == expected


@pytest.mark.parametrize(
    ("sql", "value", "answer"),
    [
        ("SELECT $1::int8 AS v FROM t", struct.pack("!q", 5), b"5"),
        ("SELECT $1 + 1 AS v FROM t", struct.pack("!i", 41), b"42"),
        ("SELECT one FROM t WHERE i = $1", struct.pack("!i", 7), b"5"),
        ("SELECT one FROM t WHERE one = $1", struct.pack("!q", 5), b"5"),
        ("SELECT one FROM t WHERE d = $1", struct.pack("!d", 1.5), b"5"),
        ("SELECT one FROM t WHERE dt = $1", struct.pack("!i", 7306), b"5"),
    ],
)
def test_a_binary_value_of_the_described_type_is_read_as_it(
    pgconn: Any, sql: str, value: bytes, answer: bytes
) -> None:
    """What asyncpg does: Parse without types, Describe, then send each value in binary
    in the type described (``fetchval("SELECT $1::int8", 5)``)."""
    prepared = pgconn.prepare(b"", sql.encode(), None)
    assert prepared.status == psycopg.pq.ExecStatus.COMMAND_OK, prepared.error_message
    assert describe_prepared(pgconn).status == psycopg.pq.ExecStatus.COMMAND_OK
    result = pgconn.exec_prepared(b"", [value], [1])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert (result.ntuples, result.get_value(0, 0)) == (1, answer)


def test_a_text_value_of_an_inferred_type_is_checked_as_it(pgconn: Any) -> None:
    """Sent as text, a value of a parameter inferred int8 is read as an int8, as in
    PostgreSQL: 22P02 for one that is none."""
    result = pgconn.exec_params(b"SELECT $1::int8 AS v FROM t", [b"5"], [0])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert (result.get_value(0, 0), result.ftype(0)) == (b"5", 20)
    result = pgconn.exec_params(b"SELECT $1::int8 AS v FROM t", [b"five"], [0])
    assert result.error_field(psycopg.pq.DiagnosticField.SQLSTATE) == b"22P02"


@pytest.mark.parametrize("sql", [b"SELECT $1::json AS v FROM t", b"SELECT $1::jsonb AS v FROM t"])
def test_a_null_of_an_inferred_json_parameter_is_null(pgconn: Any, sql: bytes) -> None:
    """An undeclared ``$1::json`` is inferred json, and its NULL bound as json's (a text
    NULL): Spark refused the cast of that to json (``to_json``, 42K09), where a bare NULL
    had passed. The NULL of a json or jsonb column is NULL, as in PostgreSQL."""
    result = pgconn.exec_params(sql, [None], [0])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert (result.ntuples, result.get_value(0, 0)) == (1, None)
