"""A column that is a json, jsonb or varchar parameter itself is described with the
parameter's type (114, 3802, 1043), as PostgreSQL describes it, by a Describe of the
portal and of the statement: it was text (25), Spark having no such types. A string
literal cast to json (``$1::json``) was ``to_json`` of a string, which Spark refuses
(42K09); it is the string, and text that is not JSON 22P02."""

from __future__ import annotations

import select
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from tests.integration.test_serve_time_params_spark import served_pgconn

pytestmark = pytest.mark.spark

OK = psycopg.pq.ExecStatus.TUPLES_OK


@pytest.fixture(scope="module")
def pgconn(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    path = Path(tmp_path_factory.mktemp("declared"))
    with served_pgconn(spark, path, pa.schema([("one", pa.int64())]), (1,)) as conn:
        yield conn


@pytest.mark.parametrize(
    ("sql", "oids", "types"),
    [
        (b"SELECT $1 AS x FROM t", [114], [114]),
        (b"SELECT $1 FROM t", [3802], [3802]),
        (b"SELECT $1 FROM t", [1043], [1043]),
        (b"SELECT $1::json AS x FROM t", [0], [114]),
        (b"SELECT one, CAST($1 AS jsonb) FROM t", [25], [20, 3802]),
        (b"SELECT $1 || 'x' FROM t", [1043], [25]),
    ],
)
def test_a_parameter_column_has_its_declared_type(
    pgconn: Any, sql: bytes, oids: list[int], types: list[int]
) -> None:
    values = [b'{"a": 1}'] * len(oids)
    result = pgconn.exec_params(sql, values, oids)
    assert result.status == OK, result.error_message
    assert [result.ftype(i) for i in range(result.nfields)] == types
    assert pgconn.prepare(b"", sql, oids).status == psycopg.pq.ExecStatus.COMMAND_OK
    described = describe_prepared(pgconn)
    assert [described.ftype(i) for i in range(described.nfields)] == types


@pytest.fixture(scope="module")
def text_pgconn(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    path = Path(tmp_path_factory.mktemp("declared_text"))
    schema = pa.schema([("one", pa.int64()), ("s", pa.string())])
    with served_pgconn(spark, path, schema, (1, "x")) as conn:
        yield conn


@pytest.mark.parametrize(
    ("sql", "oids"),
    [(b"SELECT *, $1 FROM t", [114]), (b"SELECT t.*, $1::json FROM t", [0])],
)
def test_a_parameter_after_a_star_is_the_column_it_is(
    text_pgconn: Any, sql: bytes, oids: list[int]
) -> None:
    """The star is the table's columns ``one`` and ``s``, and the parameter the third
    column: the parameter's type was given to the second, ``s``, whose text psycopg then
    failed to read as JSON."""
    result = text_pgconn.exec_params(sql, [b'{"a": 1}'], oids)
    assert result.status == OK, result.error_message
    assert [result.ftype(i) for i in range(result.nfields)] == [20, 25, 114]
    assert text_pgconn.prepare(b"", sql, oids).status == psycopg.pq.ExecStatus.COMMAND_OK
    described = describe_prepared(text_pgconn)
    assert [described.ftype(i) for i in range(described.nfields)] == [20, 25, 114]


def describe_prepared(pgconn: Any) -> Any:
    """The Describe of the unnamed statement, its answer read without holding the GIL the
    server (in this process) needs: libpq's blocking ``describe_prepared`` holds it."""
    pgconn.send_describe_prepared(b"")
    deadline = time.monotonic() + 120  # far past any Describe's: past it, it is stuck
    results = []
    while True:
        while pgconn.is_busy():
            assert time.monotonic() < deadline, "the Describe of the statement is not answered"
            select.select([pgconn.socket], [], [], 1.0)
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:
            break
        results.append(result)
    assert len(results) == 1, results
    return results[0]


def test_a_cast_to_json_of_text_that_is_not_json_is_22p02(pgconn: Any) -> None:
    result = pgconn.exec_params(b"SELECT $1::json FROM t", [b"nope"], [0])
    assert result.error_field(psycopg.pq.DiagnosticField.SQLSTATE) == b"22P02"


def test_json_compared_is_refused_not_compared_as_text(pgconn: Any) -> None:
    """The two casts were their strings, so the texts were compared: false, where
    PostgreSQL's jsonb equality is true."""
    sql = b"""SELECT '{"a":1}'::jsonb = $1::jsonb FROM t"""
    result = pgconn.exec_params(sql, [b'{"a": 1}'], [0])
    assert result.error_field(psycopg.pq.DiagnosticField.SQLSTATE) == b"0A000"
