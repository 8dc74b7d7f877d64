"""A prepared statement's rows are sent as its Describe described them, whatever kind
of interval a parameter binds: ``DATE '2020-01-01' + $1`` (``$1`` an interval) is
described as a TIMESTAMP (its placeholder a day-time interval), and a year-month value
made the rows DATEs (1082) under that description. They are now the TIMESTAMP
described, as PostgreSQL's ``date + interval`` is a timestamp whatever the interval."""

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

SQL = b"SELECT DATE '2020-01-01' + $1 AS d, $1 AS i FROM t"


@pytest.fixture(scope="module")
def pgconn(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    path = Path(tmp_path_factory.mktemp("interval_describe"))
    with served_pgconn(spark, path, pa.schema([("one", pa.int64())]), (1,)) as conn:
        yield conn


@pytest.mark.parametrize(
    ("value", "row"),
    [
        (b"1 day", [b"2020-01-02 00:00:00+00", b"1 day"]),
        (b"1 year", [b"2021-01-01 00:00:00+00", b"1 year"]),
        (b"-2 mons", [b"2019-11-01 00:00:00+00", b"-2 mons"]),
        (None, [None, None]),
    ],
)
def test_the_rows_have_the_types_described(
    pgconn: Any, value: bytes | None, row: list[bytes | None]
) -> None:
    assert pgconn.prepare(b"", SQL, [1186]).status == psycopg.pq.ExecStatus.COMMAND_OK
    described = describe_prepared(pgconn)
    described_types = [described.ftype(i) for i in range(described.nfields)]
    result = pgconn.exec_prepared(b"", [value])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    sent_types = [result.ftype(i) for i in range(result.nfields)]
    assert (described_types, sent_types) == ([1184, 1186], [1184, 1186])
    assert [result.get_value(0, i) for i in range(result.nfields)] == row


def test_an_unprepared_statement_of_a_year_month_value_is_described_so(pgconn: Any) -> None:
    """libpq's exec_params: Parse, Bind, a Describe of the portal, Execute."""
    result = pgconn.exec_params(SQL, [b"1 year"], [1186])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert (result.ftype(0), result.get_value(0, 0)) == (1184, b"2021-01-01 00:00:00+00")
