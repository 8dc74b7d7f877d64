"""A view whose shard is closed is not installed again: the message names both causes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.compute import MaterializedView, ViewDefinition
from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient

pytestmark = pytest.mark.spark

INPUT = pa.schema([("k", pa.string()), ("v", pa.int64())])


def test_a_view_complete_because_its_inputs_closed_is_not_called_dropped(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A sink closes its view's shard itself once every input closed (desired never
    changes again): reinstalling it was refused as if the view had been dropped."""
    client = PersistClient(Location.embedded(tmp_path))
    writer = client.open_writer("inp", INPUT)
    writer.append([(("a", 1), 0, 1)], 0, 1)
    writer.expire()
    client.close_shard("inp")
    definition = ViewDefinition("v", {"inp": "inp"}, "SELECT k, v FROM inp")
    view = MaterializedView.install(spark, client, definition, background_io=False)
    view.catch_up()
    assert client.state("v").upper.is_empty()
    view.close()
    with pytest.raises(InvalidUsage, match="every input closed"):
        MaterializedView.install(spark, client, definition, background_io=False)


def test_a_dropped_view_closes_its_shard_before_it_lets_go_of_its_inputs(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``MaterializedView.drop`` closed nothing (only serve closed the shard, after the
    holds went): the name was installed again, resuming the dropped view's shard, and a
    standby promoted before the close held the inputs for good."""
    client = PersistClient(Location.embedded(tmp_path))
    writer = client.open_writer("inp", INPUT)
    writer.append([(("a", 1), 0, 1)], 0, 1)
    definition = ViewDefinition("v", {"inp": "inp"}, "SELECT k, v FROM inp")
    view = MaterializedView.install(spark, client, definition, background_io=False)
    view.catch_up()
    view.drop()
    assert client.state("v").upper.is_empty()
    assert not client.state("inp").critical_readers
    with pytest.raises(InvalidUsage, match="dropped"):
        MaterializedView.install(spark, client, definition, background_io=False)
    assert not client.state("inp").critical_readers
    writer.expire()
