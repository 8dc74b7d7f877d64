"""Which query failures are data (err rows) and which are faults, and what the err says.

A failure the data alone decides is the same on every replica and every retry:
the view writes it as data. Spark gives most of them SQLSTATE class 22, but not
all: those below were retried as faults for ever, so the view never passed
that time. A coarse err row's message names the failure, never the Py4J
object a wrapper names (another at every evaluation).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.compute import MaterializedView, ViewDefinition
from timeshard.compute.view import data_error_message, is_data_error
from timeshard.location import Location
from timeshard.persist import PersistClient

pytestmark = pytest.mark.spark

A = pa.schema([("k", pa.int64()), ("v", pa.int64())])


@pytest.mark.parametrize(
    ("sql", "condition"),
    [
        ("SELECT (SELECT id FROM range(2) WHERE id >= v) FROM VALUES (0) AS t(v)", "SCALAR_SUB"),
        ("SELECT map(v, 1, 3, 2) FROM VALUES (3) AS t(v)", "DUPLICATED_MAP_KEY"),
        ("SELECT raise_error(concat('bad ', v)) FROM VALUES (3) AS t(v)", "USER_RAISED"),
        ("SELECT assert_true(v < 0) FROM VALUES (3) AS t(v)", "USER_RAISED"),
        ("SELECT 1 / (v - 3) FROM VALUES (3) AS t(v)", "DIVIDE_BY_ZERO"),
    ],
)
def test_failures_the_data_decides_are_data_errors(
    spark: SparkSession, sql: str, condition: str
) -> None:
    with pytest.raises(Exception) as caught:
        spark.sql(sql).collect()
    assert is_data_error(caught.value), caught.value
    assert condition in data_error_message(caught.value)


def test_an_unknown_column_is_no_data_error(spark: SparkSession) -> None:
    with pytest.raises(Exception) as caught:
        spark.sql("SELECT nope FROM VALUES (3) AS t(v)").collect()
    assert not is_data_error(caught.value)


def _view_at(client: PersistClient, spark: SparkSession, sql: str, inputs: dict[str, str]) -> str:
    view = MaterializedView.install(
        spark, client, ViewDefinition("v", inputs, sql), as_of=0, background_io=False
    )
    try:
        view.catch_up()
        assert view.sink.last_error is None, view.sink.last_error
        rows = client.open_unleased_reader("v").snapshot(0).to_pylist()
    finally:
        view.close()
    [row] = rows
    assert row["_diff"] == 1 and row["_err"] is not None, rows
    return str(row["_err"])


def test_a_scalar_subquery_of_two_rows_is_the_views_err_row(
    spark: SparkSession, tmp_path: Path
) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    writer = client.open_writer("a", A)
    writer.append([((1, 1), 0, 1), ((2, 2), 0, 1)], 0, 1)
    err = _view_at(client, spark, "SELECT k FROM a WHERE v = (SELECT v FROM a)", {"a": "a"})
    assert "SCALAR_SUBQUERY_TOO_MANY_ROWS" in err and " o" not in err.split(":")[-1], err
    writer.expire()


def test_a_coarse_err_row_names_the_failure_not_a_py4j_object(
    spark: SparkSession, tmp_path: Path
) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    a, b = client.open_writer("a", A), client.open_writer("b", A)
    a.append([((1, 20), 0, 1)], 0, 1)
    b.append([((1, 0), 0, 1)], 0, 1)
    sql = "SELECT k, v FROM a WHERE v > (SELECT 12 / min(v) FROM b)"
    err = _view_at(client, spark, sql, {"a": "a", "b": "b"})
    assert "DIVIDE_BY_ZERO" in err and "An error occurred while calling" not in err, err
    a.expire()
    b.expire()


def _raises_on_3(v: int) -> int:
    if v == 3:
        raise ValueError(f"bad value {v}")
    return v


def _out_of_memory_on_3(v: int) -> int:
    if v == 3:
        raise MemoryError()
    return v


def _connection_lost_on_3(v: int) -> int:
    if v == 3:
        raise ConnectionResetError("peer went away")
    return v


def _crashes_on_3(v: int) -> int:
    if v == 3:
        import os

        os._exit(3)  # the Python worker dies: a lost worker, not the function's error
    return v


def _register(spark: SparkSession) -> None:
    from pyspark.sql.types import LongType

    for name, function in [
        ("ts_raises", _raises_on_3),
        ("ts_out_of_memory", _out_of_memory_on_3),
        ("ts_connection_lost", _connection_lost_on_3),
        ("ts_crashes", _crashes_on_3),
    ]:
        spark.udf.register(name, function, LongType())


def test_a_python_udf_raising_on_a_row_is_a_data_error(spark: SparkSession) -> None:
    """The user's function raising on a row fails the query the same way on every replica and
    every retry: data, its message the exception (it was a fault, retried for ever)."""
    _register(spark)
    with pytest.raises(Exception) as caught:
        spark.sql("SELECT ts_raises(v) FROM VALUES (1), (3) AS t(v)").collect()
    assert is_data_error(caught.value), caught.value
    message = data_error_message(caught.value)
    assert message == "PythonException: ValueError: bad value 3", message


@pytest.mark.parametrize("udf", ["ts_out_of_memory", "ts_connection_lost", "ts_crashes"])
def test_a_python_worker_out_of_memory_io_or_crash_is_a_fault(
    spark: SparkSession, udf: str
) -> None:
    _register(spark)
    with pytest.raises(Exception) as caught:
        spark.sql(f"SELECT {udf}(v) FROM VALUES (1), (3) AS t(v)").collect()
    assert not is_data_error(caught.value), caught.value


def test_a_view_whose_python_udf_raises_on_a_row_has_an_err_row_not_a_fault(
    spark: SparkSession, tmp_path: Path
) -> None:
    _register(spark)
    client = PersistClient(Location.embedded(tmp_path))
    writer = client.open_writer("a", A)
    writer.append([((1, 3), 0, 1)], 0, 1)
    err = _view_at(client, spark, "SELECT k, ts_raises(v) AS w FROM a", {"a": "a"})
    assert err.endswith("PythonException: ValueError: bad value 3"), err
    writer.expire()
