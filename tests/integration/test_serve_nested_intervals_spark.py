"""A year-month interval inside an array, map or struct is sent as a day-time one nested
the same way is: an array of them as PostgreSQL's ``interval[]`` (``{"1 year",...}``), a
struct or map as JSON holding each interval's text. PySpark collects no year-month
interval, and only a top-level column of them was turned into its months: a nested one
failed the query (XX000, ``YearMonthIntervalType.fromInternal is not implemented``)."""

from __future__ import annotations

import datetime
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


@pytest.fixture(scope="module")
def pgconn(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    path = Path(tmp_path_factory.mktemp("nested_intervals"))
    with served_pgconn(spark, path, pa.schema([("one", pa.int64())]), (1,)) as conn:
        yield conn


@pytest.mark.parametrize(
    ("sql", "oid", "text"),
    [
        (
            b"SELECT array(INTERVAL '1' YEAR, INTERVAL '-14' MONTH, NULL) FROM t",
            1187,
            b'{"1 year","-1 years -2 mons",NULL}',
        ),
        (b"SELECT array(INTERVAL '3' DAY) FROM t", 1187, b'{"3 days"}'),
        (
            b"SELECT named_struct('a', INTERVAL '2-3' YEAR TO MONTH, 'b', "
            b"array(INTERVAL '5' MONTH)) FROM t",
            114,
            b'{"a":"2 years 3 mons","b":["5 mons"]}',
        ),
        (b"SELECT named_struct('a', INTERVAL '2' DAY) FROM t", 114, b'{"a":"2 days"}'),
        (
            b"SELECT map_from_arrays(array(INTERVAL '1' YEAR), array(INTERVAL '1' MONTH)) FROM t",
            114,
            b'{"1 year":"1 mon"}',
        ),
        (b"SELECT array(array(INTERVAL '1' YEAR)) FROM t", 114, b'[["1 year"]]'),
    ],
)
def test_a_nested_interval_is_sent_as_a_day_time_one_nested_so(
    pgconn: Any, sql: bytes, oid: int, text: bytes
) -> None:
    result = pgconn.exec_params(sql, [])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert (result.ftype(0), result.get_value(0, 0)) == (oid, text)
    assert pgconn.prepare(b"", sql, []).status == psycopg.pq.ExecStatus.COMMAND_OK
    assert describe_prepared(pgconn).ftype(0) == oid


def test_a_driver_reads_an_array_of_them_as_intervals(pgconn: Any) -> None:
    """psycopg's ``interval[]`` loader reads it (its ``timedelta`` takes a year as 365 days)."""
    conn = psycopg.Connection(pgconn)
    row = conn.execute("SELECT array(INTERVAL '1' YEAR, INTERVAL '2' MONTH) FROM t").fetchone()
    assert row == ([datetime.timedelta(days=365), datetime.timedelta(days=60)],)
