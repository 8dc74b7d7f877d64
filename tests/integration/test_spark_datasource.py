"""``spark.read.format("timeshard")``: rows per part, options, empty snapshots."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from tests.integration.spark_checks import (
    COLUMNS,
    SCHEMA,
    as_counter,
    consolidated,
    expect_part_error,
    model_at,
    read_source,
    sql_model,
    updates_sql,
)

from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark import snapshot_df, typed_errors

pytestmark = pytest.mark.spark


def test_rows_are_consolidated_within_parts_only(spark: SparkSession, tmp_path: Path) -> None:
    writer, reader = PersistClient(Location.embedded(tmp_path)).open("s", SCHEMA)
    writer.append(spark.sql(updates_sql(0, 20, 0)), 0, 1)
    writer.append(spark.sql(updates_sql(0, 20, 1)), 1, 2)
    rows = read_source(spark, tmp_path, "s", 1).collect()
    assert len(rows) == 40 and {r["_diff"] for r in rows} == {1}
    summed = consolidated(read_source(spark, tmp_path, "s", 1)).collect()
    want = model_at(sql_model(0, 20, 0) + sql_model(0, 20, 1), 1)
    assert len(summed) == 20 and as_counter(summed) == want
    assert as_counter(snapshot_df(spark, reader, 1).collect()) == want
    assert as_counter(read_source(spark, tmp_path, "s", 0).collect()) == model_at(
        sql_model(0, 20, 0), 0
    )


def test_a_read_leaves_no_reader_registered(spark: SparkSession, tmp_path: Path) -> None:
    """Planning registers no leased reader, so a query holds neither since nor GC back."""
    client = PersistClient(Location.embedded(tmp_path))
    client.open_writer("s", SCHEMA).append(spark.sql(updates_sql(0, 10, 0)), 0, 1)
    assert client.state("s").leased_readers == {}
    assert as_counter(read_source(spark, tmp_path, "s", None).collect()) == model_at(
        sql_model(0, 10, 0), 0
    )
    assert client.state("s").leased_readers == {}


def test_default_as_of_is_the_latest_readable_time(spark: SparkSession, tmp_path: Path) -> None:
    writer = PersistClient(Location.embedded(tmp_path)).open_writer("s", SCHEMA)
    writer.append(spark.sql(updates_sql(0, 10, 2)), 0, 4)
    rows = read_source(spark, tmp_path, "s", None).collect()
    assert len(rows) == 10 and {r["_ts"] for r in rows} == {3}


def test_blob_and_consensus_options(spark: SparkSession, tmp_path: Path) -> None:
    location = Location.embedded(tmp_path)
    PersistClient(location).open_writer("s", SCHEMA).append(spark.sql(updates_sql(0, 10, 0)), 0, 1)
    assert location.blob_uri is not None and location.consensus_uri is not None
    df = (
        spark.read.format("timeshard")
        .option("blob", location.blob_uri)
        .option("consensus", location.consensus_uri)
        .option("shard", "s")
        .load()
    )
    assert df.columns == COLUMNS
    assert as_counter(df.collect()) == model_at(sql_model(0, 10, 0), 0)


def test_empty_snapshot(spark: SparkSession, tmp_path: Path) -> None:
    writer = PersistClient(Location.embedded(tmp_path)).open_writer("s", SCHEMA)
    writer.append([], 0, 1)
    df = read_source(spark, tmp_path, "s", 0)
    assert df.columns == COLUMNS
    assert df.collect() == []


def load(spark: SparkSession, options: dict[str, str]) -> list[Any]:
    with typed_errors():
        return spark.read.format("timeshard").options(**options).load().collect()


def test_invalid_options_name_the_value(spark: SparkSession, tmp_path: Path) -> None:
    writer = PersistClient(Location.embedded(tmp_path)).open_writer("s", SCHEMA)
    writer.append(spark.sql(updates_sql(0, 10, 0)), 0, 1)
    here = {"location": str(tmp_path)}
    memory = f"memory://ds-{uuid.uuid4().hex}"
    cases: list[tuple[dict[str, str], str]] = [
        ({"shard": "s"}, r"needs option 'location', or options 'blob' and 'consensus'"),
        ({"location": str(tmp_path / "nowhere"), "shard": "s"}, "is not a timeshard location"),
        ({**here, "blob": "file:///x", "shard": "s"}, "not both"),
        (here, "needs option 'shard'"),
        ({**here, "shard": "nope"}, "unknown shard id 'nope'"),
        ({**here, "shard": "../s"}, "invalid shard id '../s'"),
        ({**here, "shard": "s", "as_of": "yesterday"}, "integer timestamp, got 'yesterday'"),
        ({**here, "shard": "s", "as_of": "-1"}, "timestamp >= 0, got '-1'"),
        ({**here, "shard": "s", "as_of": "5"}, r"as_of 5 is not before the upper \[1\]"),
        ({"blob": memory, "consensus": memory, "shard": "s"}, "needs a blob executors can reach"),
    ]
    for options, match in cases:
        with pytest.raises(InvalidUsage, match=match):
            load(spark, options)
    assert not (tmp_path / "nowhere").exists()


def test_a_part_whose_digest_differs_is_a_part_error(spark: SparkSession, tmp_path: Path) -> None:
    """A byte flipped outside the pages (the footer's statistics) decodes as before, but
    the part is not the one the state recorded: the source checks the recorded digest."""
    writer, reader = PersistClient(Location.embedded(tmp_path)).open(
        "s", pa.schema([("s", pa.string())])
    )
    writer.append([(("UNIQUEVALUE-A-12345",), 0, 1)], 0, 1)
    [part] = reader.snapshot_parts(0)
    path = tmp_path / "blob" / part.key
    data = bytearray(path.read_bytes())
    data[data.rindex(b"UNIQUEVALUE-A-12345") + 12] ^= 0x03
    path.write_bytes(bytes(data))
    expect_part_error(
        part.key, "corrupt: its SHA-256 differs", read_source(spark, tmp_path, "s", 0).collect
    )


def test_a_schema_given_by_the_reader_must_be_the_shards(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``spark.read.format("timeshard").schema(...)`` with other columns (two swapped, of one
    type; some left out) is InvalidUsage naming both schemas (the rows were read under the
    given names by position: a's values as b's, or the read failed in the JVM); the shard's
    own schema, nullable anywhere, reads as without one."""
    schema = pa.schema([("a", pa.int64()), ("b", pa.int64())])
    writer = PersistClient(Location.embedded(tmp_path)).open_writer("t", schema)
    writer.append([((1, 2), 0, 1)], 0, 1)

    def load(ddl: str) -> list[Any]:
        reader = spark.read.format("timeshard").schema(ddl).option("location", str(tmp_path))
        with typed_errors():
            return reader.option("shard", "t").load().collect()

    for ddl in [
        "b long, a long, _ts long, _diff long, _err string",
        "a long",
        "a int, b long, _ts long, _diff long, _err string",
        "a long not null, b long, _ts long, _diff long, _err string",
    ]:
        with pytest.raises(InvalidUsage, match=r"given .* shard 't' has: a bigint, b bigint,"):
            load(ddl)
    [row] = load("a long, b long, _ts long, _diff long, _err string")
    assert (row["a"], row["b"], row["_diff"]) == (1, 2, 1)


def test_an_as_of_below_the_since_is_invalid_usage(spark: SparkSession, tmp_path: Path) -> None:
    """An ``as_of`` the shard no longer keeps is InvalidUsage naming it and the readable
    times, as one past the upper is (it was a bare Spark exception, with the SinceError's
    message in its Python traceback)."""
    writer, reader = PersistClient(Location.embedded(tmp_path)).open("s", SCHEMA)
    writer.append(spark.sql(updates_sql(0, 10, 0)), 0, 4)
    reader.downgrade_since(2)
    for as_of in ("0", "1"):
        match = rf"as_of {as_of} is not readable.*\[2, 3\]"
        with pytest.raises(InvalidUsage, match=match), typed_errors():
            read_source(spark, tmp_path, "s", int(as_of)).collect()
    assert len(read_source(spark, tmp_path, "s", 2).collect()) == 10
