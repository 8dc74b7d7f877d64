"""A Spark read of a part the file blob refuses (a link out of its root) is CorruptState."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.errors import CorruptState
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark import snapshot_df, typed_errors

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("k", pa.int64())])


def test_a_part_linked_out_of_the_root_is_not_read(spark: SparkSession, tmp_path: Path) -> None:
    """The part's file is moved out of the root and a link left at its key: the blob's
    ``get`` refuses it, so the snapshot does too, naming the key (it read the rows)."""
    client = PersistClient(Location.embedded(tmp_path))
    client.open_writer("s", SCHEMA).append([((k,), 0, 1) for k in range(10)], 0, 1)
    [key] = client.state("s").referenced_keys()
    path = tmp_path / "blob" / key
    outside = tmp_path / "outside.parquet"
    shutil.move(path, outside)
    path.symlink_to(outside)
    with pytest.raises(CorruptState, match=f"'{key}'"):
        client.location.blob.get(key)
    with pytest.raises(CorruptState, match=f"'{key}'"), typed_errors():
        rows = snapshot_df(spark, client.open_unleased_reader("s"), 0).collect()
        pytest.fail(f"the snapshot read {len(rows)} rows through a link out of the root")


def test_parts_written_through_a_link_out_of_the_root_are_refused(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The shard's directory is a link out of the root: the write's tasks refuse to write
    there, and the write raises CorruptState naming a part key (it wrote them outside)."""
    from timeshard.location import FileBlob
    from timeshard.spark import write_parts

    blob = FileBlob(tmp_path / "root")
    outside = tmp_path / "outside"
    outside.mkdir()
    (blob.root / "s").symlink_to(outside)
    df = spark.createDataFrame([(k, 0, 1) for k in range(10)], "k long, _ts long, _diff long")
    with pytest.raises(CorruptState, match=r"blob key 's/w1/b1/part-.*' passes through 's'"):
        write_parts(df, blob, "s/w1/b1", SCHEMA)
    assert list(outside.rglob("*.parquet")) == []
