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
