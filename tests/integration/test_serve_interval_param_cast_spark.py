"""A string parameter a prepared statement casts to interval itself (``$1::interval``,
undeclared or text) is described as PostgreSQL describes it: an undeclared one is an
interval (1186), as PostgreSQL infers it, and the statement's columns are those its
Execute sends. Its Describe placeholder was the string ``'null'``, which the string cast
to interval read as an error (22007): the statement was described as answering no rows
(NoData) while its Execute sent rows."""

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
    path = Path(tmp_path_factory.mktemp("interval_param_cast"))
    with served_pgconn(spark, path, pa.schema([("one", pa.int64())]), (1,)) as conn:
        yield conn


@pytest.mark.parametrize(
    ("sql", "types", "value", "described", "row"),
    [
        (
            b"SELECT TIMESTAMP '2026-01-01 00:00:00' - $1::interval AS x FROM t",
            [],
            b"1 day",
            ([1186], [1184]),
            [b"2025-12-31 00:00:00+00"],
        ),
        (
            b"SELECT CAST(($1) AS interval) AS i FROM t",
            [0],
            b"2 mons",
            ([1186], [1186]),
            [b"2 mons"],
        ),
        (b"SELECT $1::interval AS i FROM t", [25], b"1 day", ([25], [1186]), [b"1 day"]),
        (
            b"SELECT DATE '2020-01-01' + $1::interval AS d FROM t",
            [],
            b"1 year",
            ([1186], [1184]),
            [b"2021-01-01 00:00:00+00"],
        ),
    ],
)
def test_a_string_cast_to_interval_is_described_as_execute_sends_it(
    pgconn: Any,
    sql: bytes,
    types: list[int],
    value: bytes,
    described: tuple[list[int], list[int]],
    row: list[bytes],
) -> None:
    assert pgconn.prepare(b"", sql, types).status == psycopg.pq.ExecStatus.COMMAND_OK
    answer = describe_prepared(pgconn)
    params = [answer.param_type(i) for i in range(answer.nparams)]
    assert (params, [answer.ftype(i) for i in range(answer.nfields)]) == described
    result = pgconn.exec_prepared(b"", [value])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert [result.ftype(i) for i in range(result.nfields)] == described[1]
    assert [result.get_value(0, i) for i in range(result.nfields)] == row
