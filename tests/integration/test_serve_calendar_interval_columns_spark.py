"""A column of Spark's calendar interval (months with days or time: ``'1 mon 1 day'::
interval``, ``make_interval(1)``) is PostgreSQL's interval (1186), written as its
``postgres`` output writes it (checked against PostgreSQL 15), in a Describe of the
statement and in its rows alike. PySpark could not collect one (XX000,
``CalendarIntervalType.fromInternal is not implemented``), and it was described as
text (25)."""

from __future__ import annotations

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
    path = Path(tmp_path_factory.mktemp("calendar_interval_columns"))
    with served_pgconn(spark, path, pa.schema([("one", pa.int64())]), (1,)) as conn:
        yield conn


@pytest.mark.parametrize(
    ("sql", "value"),
    [
        (b"SELECT '1 mon 1 day'::interval AS i FROM t", b"1 mon 1 day"),
        (b"SELECT make_interval(1) AS i FROM t", b"1 year"),
        (
            b"SELECT '-1 mon -2 days -03:04:05.5'::interval AS i FROM t",
            b"-1 mons -2 days -03:04:05.5",
        ),
        (
            b"SELECT '1 year 2 mons 3 days 00:00:00.000001'::interval AS i FROM t",
            b"1 year 2 mons 3 days 00:00:00.000001",
        ),
        (b"SELECT CAST(NULL AS INTERVAL) AS i FROM t", None),
    ],
)
def test_a_calendar_interval_column_is_postgresql_s_interval(
    pgconn: Any, sql: bytes, value: bytes | None
) -> None:
    assert pgconn.prepare(b"", sql, []).status == psycopg.pq.ExecStatus.COMMAND_OK
    described = describe_prepared(pgconn)
    result = pgconn.exec_prepared(b"", [])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert (described.ftype(0), result.ftype(0), result.get_value(0, 0)) == (1186, 1186, value)
