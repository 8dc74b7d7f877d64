"""A string cast to interval (``'1 day'::interval``, ``CAST('2 mons' AS interval)``) is
the interval PostgreSQL's input reads: Spark's own cast of the text made a calendar
interval, which PySpark cannot collect (XX000, ``CalendarIntervalType.fromInternal is
not implemented``), and read PostgreSQL's ``mon`` as nothing, so a timestamp moved by
``'1 mon 1 day'::interval`` was NULL. Text PostgreSQL refuses answers its SQLSTATE."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from tests.integration.test_serve_time_params_spark import served_pgconn

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def pgconn(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    path = Path(tmp_path_factory.mktemp("interval_literals"))
    with served_pgconn(spark, path, pa.schema([("one", pa.int64())]), (1,)) as conn:
        yield conn


@pytest.mark.parametrize(
    ("sql", "value"),
    [
        (b"SELECT '1 day 02:03:04'::interval FROM t", b"1 day 02:03:04"),
        (b"SELECT CAST('2 years 3 mons' AS interval) FROM t", b"2 years 3 mons"),
        (b"SELECT '1 day'::interval + '2 hours'::interval FROM t", b"1 day 02:00:00"),
        (
            b"SELECT CAST(TIMESTAMP '2026-01-01 00:00:00' - '1 mon 1 day'::interval AS STRING)"
            b" FROM t",
            b"2025-11-30 00:00:00",
        ),
        (
            b"SELECT CAST(TIMESTAMP '2026-01-01 00:00:00' + '1 mon 00:00:01.5'::interval AS "
            b"STRING) FROM t",
            b"2026-02-01 00:00:01.5",
        ),
    ],
)
def test_a_string_cast_to_interval_is_postgresql_s_interval(
    pgconn: Any, sql: bytes, value: bytes
) -> None:
    result = pgconn.exec_params(sql, [])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert result.get_value(0, 0) == value


@pytest.mark.parametrize(
    ("text", "sqlstate"),
    [(b"soon", b"22007"), (b"2147483648 months", b"22015"), (b"178956971 years", b"22008")],
)
def test_text_postgresql_refuses_answers_its_sqlstate(
    pgconn: Any, text: bytes, sqlstate: bytes
) -> None:
    result = pgconn.exec_params(b"SELECT '" + text + b"'::interval FROM t", [])
    assert result.error_field(ord("C")) == sqlstate, result.error_message
