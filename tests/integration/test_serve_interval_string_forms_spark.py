"""The string cast to interval (``'1 day'::interval``, read as PostgreSQL's input) left
gaps that went to Spark's calendar cast, whose value PySpark cannot collect (XX000,
``CalendarIntervalType.fromInternal is not implemented``): a NULL cast to interval
(``NULL::interval``, an undeclared ``$1::interval`` bound to NULL), and PostgreSQL's
other string constants (``E'...'``, ``$$...$$``, ``U&'...'``). A ``TRY_CAST`` of text
that is no interval answered 22007 where a try_cast is NULL. Each is now a day-time
NULL or the interval its text reads as."""

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
    path = Path(tmp_path_factory.mktemp("interval_string_forms"))
    with served_pgconn(spark, path, pa.schema([("one", pa.int64())]), (1,)) as conn:
        yield conn


@pytest.mark.parametrize(
    ("sql", "params", "value"),
    [
        (b"SELECT TRY_CAST('x' AS interval) AS i FROM t", [], None),
        (b"SELECT TRY_CAST('2 days' AS interval) AS i FROM t", [], b"2 days"),
        (b"SELECT NULL::interval AS i FROM t", [], None),
        (b"SELECT $1::interval AS i FROM t", [None], None),
        (b"SELECT E'1 day'::interval AS i FROM t", [], b"1 day"),
        (b"SELECT $$1 day$$::interval AS i FROM t", [], b"1 day"),
        (b"SELECT U&'1\\0020day'::interval AS i FROM t", [], b"1 day"),
    ],
)
def test_each_is_postgresql_s_interval(
    pgconn: Any, sql: bytes, params: list[bytes | None], value: bytes | None
) -> None:
    result = pgconn.exec_params(sql, params)
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert (result.ftype(0), result.get_value(0, 0)) == (1186, value)
