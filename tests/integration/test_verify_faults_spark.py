"""``timeshard verify`` on Spark when recomputing a view fails on a fault, not on the data."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.compute import MaterializedView, ViewDefinition
from timeshard.compute.view import SparkViewDesired
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.verify import verify_location

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])


def _crash(v: Any) -> Any:
    os._exit(3)  # the Python worker dies: a fault, as a killed executor is


def test_a_fault_recomputing_a_view_is_no_difference_from_its_query(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recomputation that failed on a fault (here its Python worker died) was taken for
    the query failing on the data: verify compared the view with an error snapshot made
    of the fault and reported the correct view as differing from its query (an err row
    missing, every row extra)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("nums", SCHEMA)
    hold = client.open_leased_reader("nums")  # keep the history readable
    writer.append([((1, 10), 0, 1), ((2, 20), 0, 1)], 0, 5)
    writer.append([((3, 30), 5, 1)], 5, 10)
    definition = ViewDefinition("doubled", {"n": "nums"}, "SELECT id, v * 2 AS w FROM n")
    view = MaterializedView.install(spark, client, definition, background_io=False)
    hold_view = client.open_leased_reader("doubled")
    view.catch_up()
    assert client.state("doubled").upper.time == 10

    def spark_for(packages: list[str]) -> Any:
        return spark

    assert verify_location(client, spark=spark_for, samples=8, seed=3).ok
    snapshot = SparkViewDesired.snapshot
    crash = F.udf(_crash, LongType())

    def crashing(self: SparkViewDesired, t: int) -> Any:
        return snapshot(self, t).withColumn("w", crash(F.col("w")))

    monkeypatch.setattr(SparkViewDesired, "snapshot", crashing)
    try:
        report = verify_location(client, spark=spark_for, samples=8, seed=3)
    finally:
        monkeypatch.undo()
        view.close()
        hold.expire()
        hold_view.expire()
    described = [f.describe()[:300] for f in report.findings]
    assert [(f.object, f.check) for f in report.findings] == [("doubled", "recompute")], described
    assert "could not run" in report.findings[0].message
