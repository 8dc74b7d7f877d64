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
