"""Persist through Spark: parallel writes, snapshots, the data source, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from tests.integration.spark_checks import (
    SCHEMA,
    check_err_rows,
    check_write_and_snapshot,
    updates_sql,
)

from timeshard import InvalidUsage, PartError
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark import snapshot_df

pytestmark = pytest.mark.spark


def test_write_and_snapshot(spark: SparkSession, tmp_path: Path) -> None:
    check_write_and_snapshot(spark, tmp_path)


def test_err_rows(spark: SparkSession, tmp_path: Path) -> None:
    check_err_rows(spark, tmp_path)


def part_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "blob").rglob("*.parquet"))


def test_bad_dataframes_write_nothing(spark: SparkSession, tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    writer = client.open_writer("s", SCHEMA)
    with pytest.raises(InvalidUsage, match="schema mismatch: DataFrame has columns"):
        writer.batch(spark.sql("SELECT id AS k, 0L AS _ts, 1L AS _diff FROM range(3)"), 0, 1)
    with pytest.raises(InvalidUsage, match="column 'name' is int"):
        writer.batch(
            spark.sql(
                "SELECT id AS k, 1 AS name, 1.0D AS amount, 0L AS _ts, 1L AS _diff FROM range(3)"
            ),
            0,
            1,
        )
    with pytest.raises(InvalidUsage, match=r"update at time 7 is beyond upper \[5\]"):
        writer.batch(spark.sql(updates_sql(0, 100, 7)), 0, 5)
    with pytest.raises(InvalidUsage, match=r"update at time 1 is not beyond lower \[2\]"):
        writer.batch(spark.sql(updates_sql(0, 100, 1)), 2, 5)
    assert part_files(tmp_path) == []
    assert client.state("s").upper.time == 0


def test_missing_and_corrupt_parts(spark: SparkSession, tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    writer, reader = client.open("s", SCHEMA)
    writer.append(spark.sql(updates_sql(0, 100, 0)), 0, 1)
    files = part_files(tmp_path)
    assert len(files) >= 2
    files[0].write_bytes(files[0].read_bytes()[:50])
    key0 = files[0].relative_to(tmp_path / "blob").as_posix()
    with pytest.raises(PartError, match=f"part '{key0}' is corrupt"):
        snapshot_df(spark, reader, 0)
    files[0].unlink()
    with pytest.raises(PartError, match=f"part '{key0}' is missing"):
        snapshot_df(spark, reader, 0)
    ds = (
        spark.read.format("timeshard")
        .option("location", str(tmp_path))
        .option("shard", "s")
        .option("as_of", "0")
        .load()
    )
    with pytest.raises(Exception, match=r"is (missing|corrupt)"):
        ds.collect()


def test_data_source_bad_options(spark: SparkSession, tmp_path: Path) -> None:
    PersistClient(Location.embedded(tmp_path)).open_writer("s", SCHEMA)
    with pytest.raises(Exception, match="needs option 'shard'"):
        spark.read.format("timeshard").option("location", str(tmp_path)).load().collect()
    with pytest.raises(Exception, match="unknown shard id 'nope'"):
        (
            spark.read.format("timeshard")
            .option("location", str(tmp_path))
            .option("shard", "nope")
            .load()
            .collect()
        )


def test_spark_schema_opens_shard(spark: SparkSession, tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    struct = spark.sql(updates_sql(0, 1, 0)).drop("_ts", "_diff").schema
    writer = client.open_writer("s", struct)
    assert writer.schema == SCHEMA
    assert client.open_writer("s", SCHEMA).schema == SCHEMA
