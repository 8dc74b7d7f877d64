"""Persist through Spark: parallel part writes, snapshots, bad input, damaged parts."""

from __future__ import annotations

import os
import re
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from tests.integration.spark_checks import (
    COLUMNS,
    SCHEMA,
    as_counter,
    check_err_rows,
    check_missing_and_corrupt_parts,
    check_write_and_snapshot,
    expect_part_error,
    model_at,
    read_source,
    sql_model,
    updates_sql,
)

from timeshard.errors import InvalidUsage, PartError
from timeshard.location import Location, open_location
from timeshard.persist import Appended, PersistClient, updates_schema
from timeshard.spark import part_read, snapshot_df, typed_errors, updates_df
from timeshard.spark import parts as spark_parts

pytestmark = pytest.mark.spark

PART_NAME = re.compile(r"^part-\d{5}-[0-9a-f]{12}\.parquet$")


def all_files(location: Path) -> list[Path]:
    """Every file under the blob root, hidden temporaries included."""
    return sorted(p for p in (location / "blob").rglob("*") if p.is_file())


def test_write_and_snapshot(spark: SparkSession, tmp_path: Path) -> None:
    check_write_and_snapshot(spark, tmp_path)


def test_err_rows(spark: SparkSession, tmp_path: Path) -> None:
    check_err_rows(spark, tmp_path)


def test_missing_and_corrupt_parts(spark: SparkSession, tmp_path: Path) -> None:
    check_missing_and_corrupt_parts(spark, tmp_path)


def test_a_flipped_data_byte_is_a_part_error(spark: SparkSession, tmp_path: Path) -> None:
    """One byte of a value flipped in place (same size, still valid Parquet) is never read
    as another value: a part written by a Spark task and one written by the driver both
    carry page checksums, which Spark verifies, and a digest, which pyarrow verifies."""
    schema = pa.schema([("s", pa.string())])
    writer, reader = PersistClient(Location.embedded(tmp_path)).open("s", schema)
    spark_value, driver_value = b"UNIQUEVALUE-A-12345", b"UNIQUEVALUE-C-12345"
    writer.append(spark.sql(f"SELECT '{spark_value.decode()}' AS s, 0L AS _ts, 1L AS _diff"), 0, 1)
    writer.append([((driver_value.decode(),), 1, 1)], 1, 2)
    [spark_part] = reader.snapshot_parts(0)
    [driver_part] = [p for p in reader.snapshot_parts(1) if p != spark_part]
    assert spark_part.sha256 is not None and driver_part.sha256 is not None
    for part, value in [(spark_part, spark_value), (driver_part, driver_value)]:
        path = tmp_path / "blob" / part.key
        original = path.read_bytes()
        flipped = bytearray(original)
        flipped[original.index(value) + 12] ^= 0x03  # 'A' -> 'B', 'C' -> '@'
        path.write_bytes(bytes(flipped))
        expect_part_error(part.key, "corrupt", lambda: reader.snapshot(1))
        expect_part_error(part.key, "corrupt", snapshot_df(spark, reader, 1).collect)
        expect_part_error(part.key, "corrupt", read_source(spark, tmp_path, "s", 1).collect)
        path.write_bytes(original)
    rows = snapshot_df(spark, reader, 1).collect()
    assert sorted(r["s"] for r in rows) == [spark_value.decode(), driver_value.decode()]


def test_a_location_whose_path_is_escaped_in_its_uri(spark: SparkSession, tmp_path: Path) -> None:
    """A blob root with a space, a '%' and a non-ASCII letter: its URI is percent-encoded,
    and Spark reads the parts written there; a part gone is PartError naming it."""
    location = tmp_path / "a dir é 100%"
    writer, reader = PersistClient(Location.embedded(location)).open("s", SCHEMA)
    assert "%20" in str(reader.blob.root_uri)
    writer.append(spark.sql(updates_sql(0, 100, 0)), 0, 1)
    want = model_at(sql_model(0, 100, 0), 0)
    assert as_counter(snapshot_df(spark, reader, 0).collect()) == want
    assert as_counter(read_source(spark, location, "s", 0).collect()) == want
    part = reader.snapshot_parts(0)[0]
    df = snapshot_df(spark, reader, 0)
    (location / "blob" / part.key).unlink()
    expect_part_error(part.key, "missing", df.count)
    expect_part_error(part.key, "missing", lambda: snapshot_df(spark, reader, 0))


def test_a_location_whose_path_holds_glob_characters(spark: SparkSession, tmp_path: Path) -> None:
    """A blob root whose path holds Hadoop glob characters ('[', '{', '\\'): Spark reads the
    parts written there as they are named (they were taken as a pattern that matched
    nothing: PartError 'missing' for parts that exist), and a part gone is still PartError."""
    location = tmp_path / "run[1]{a,b}\\x"
    sibling = tmp_path / "run1a\\x"  # what the pattern matches, if it were one
    writer, reader = PersistClient(Location.embedded(location)).open("s", SCHEMA)
    PersistClient(Location.embedded(sibling)).open_writer("s", SCHEMA)
    writer.append(spark.sql(updates_sql(0, 100, 0)), 0, 1)
    writer.append(spark.sql(updates_sql(100, 10, 1)), 1, 2)
    want = model_at(sql_model(0, 100, 0), 0)
    with typed_errors():
        assert as_counter(snapshot_df(spark, reader, 0).collect()) == want
        assert updates_df(spark, reader, 1, 2).count() == 10
    assert as_counter(read_source(spark, location, "s", 0).collect()) == want
    part = reader.snapshot_parts(0)[0]
    df = snapshot_df(spark, reader, 0)
    (location / "blob" / part.key).unlink()
    expect_part_error(part.key, "missing", df.count)


def test_a_part_deleted_before_spark_lists_it_is_a_part_error(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GC deleting a part between check_parts and Spark's listing of the files."""
    writer, reader = PersistClient(Location.embedded(tmp_path)).open("s", SCHEMA)
    writer.append(spark.sql(updates_sql(0, 100, 0)), 0, 1)
    part = reader.snapshot_parts(0)[1]
    (tmp_path / "blob" / part.key).unlink()
    skipped: list[int] = []  # check_parts would find it missing too: the patch must run
    monkeypatch.setattr(part_read, "check_parts", lambda blob, parts: skipped.append(len(parts)))
    with pytest.raises(PartError, match=f"part '{re.escape(part.key)}' is missing"):
        snapshot_df(spark, reader, 0)
    assert skipped, "read_parts did not call the patched check_parts"


def test_one_part_per_partition_in_the_gc_layout(spark: SparkSession, tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    writer = client.open_writer("s", SCHEMA)
    batch = writer.batch(spark.sql(updates_sql(0, 100, 3)), 3, 4)
    assert len(batch.parts) == 4
    assert sum(p.num_rows for p in batch.parts) == 100
    files = all_files(tmp_path)
    assert len(files) == 4  # no temporaries left
    for part in batch.parts:
        shard, writer_id, batch_id, name = part.key.split("/")
        assert (shard, writer_id) == ("s", writer.writer_id) and batch_id
        assert PART_NAME.match(name), name
        path = tmp_path / "blob" / part.key
        assert path.stat().st_size == part.size_in_bytes
        assert (part.ts_min, part.ts_max) == (3, 3)
        assert pq.read_schema(path).equals(updates_schema(SCHEMA))
        assert pq.read_metadata(path).num_rows == part.num_rows


def test_empty_partitions_write_no_parts(spark: SparkSession, tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    writer, reader = client.open("s", SCHEMA)
    # range(0, 100, 1, 4): only the first partition holds k < 10.
    batch = writer.batch(spark.sql(updates_sql(0, 100, 0)).where("k < 10"), 0, 1)
    assert len(batch.parts) == 1 and batch.num_rows == 10
    assert isinstance(writer.compare_and_append_batch([batch], 0, 1), Appended)
    empty = writer.batch(spark.sql(updates_sql(0, 100, 1)).where("k < 0"), 1, 2)
    assert empty.parts == ()
    assert isinstance(writer.compare_and_append_batch([empty], 1, 2), Appended)
    assert len(all_files(tmp_path)) == 1
    assert as_counter(snapshot_df(spark, reader, 1).collect()) == model_at(sql_model(0, 10, 0), 1)


def test_schema_mismatch_writes_nothing(spark: SparkSession, tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    writer = client.open_writer("s", SCHEMA)
    missing = "SELECT id AS k, 0L AS _ts, 1L AS _diff FROM range(3)"
    with pytest.raises(InvalidUsage, match=r"missing \['name', 'amount'\], unexpected \[\]"):
        writer.batch(spark.sql(missing), 0, 1)
    extra = f"SELECT *, 1 AS extra FROM ({updates_sql(0, 3, 0)})"
    with pytest.raises(InvalidUsage, match=r"missing \[\], unexpected \['extra'\]"):
        writer.batch(spark.sql(extra), 0, 1)
    wrong = "SELECT id AS k, 1 AS name, 'x' AS amount, 0L AS _ts, 1L AS _diff FROM range(3)"
    with pytest.raises(
        InvalidUsage,
        match="column 'name' is int, the shard has string; column 'amount' is string",
    ):
        writer.batch(spark.sql(wrong), 0, 1)
    narrow = PersistClient(Location.embedded(tmp_path)).open_writer(
        "narrow", pa.schema([("k", pa.int32())])
    )
    with pytest.raises(InvalidUsage, match="column 'k' is bigint, the shard has int"):
        narrow.batch(spark.sql("SELECT id AS k, 0L AS _ts, 1L AS _diff FROM range(3)"), 0, 1)
    assert all_files(tmp_path) == []
    assert client.state("s").upper.time == 0
    widened = "SELECT CAST(id AS INT) AS k, 'n' AS name, 1.5F AS amount, 0 AS _ts, 1L AS _diff"
    assert writer.batch(spark.sql(widened + " FROM range(3)"), 0, 1).num_rows == 3


def test_times_outside_the_bounds_leave_no_parts(spark: SparkSession, tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    writer = client.open_writer("s", SCHEMA)
    with pytest.raises(InvalidUsage, match=r"update at time 7 is beyond upper \[5\]"):
        writer.batch(spark.sql(updates_sql(0, 100, 7)), 0, 5)
    with pytest.raises(InvalidUsage, match=r"update at time 1 is not beyond lower \[2\]"):
        writer.batch(spark.sql(updates_sql(0, 100, 1)), 2, 5)
    assert all_files(tmp_path) == []
    assert client.state("s").upper.time == 0


def test_failed_write_job_deletes_its_parts(spark: SparkSession, tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    writer = client.open_writer("s", SCHEMA)

    blob = str(tmp_path / "blob")

    def null_on_one_once_the_other_part_is_written(k):  # type: ignore[no-untyped-def]
        """Row 1's task waits (minutes at most: slow, not stuck) until the other partition's
        part is in the blob (a file no longer ``.tmp-``), then fails the job."""
        if k == 1:
            deadline = time.monotonic() + 300
            while not [n for _, _, names in os.walk(blob) for n in names if n[0] != "."]:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the other partition wrote no part under {blob}")
                time.sleep(0.05)
            return None
        return 0

    ts = F.udf(null_on_one_once_the_other_part_is_written, "long")
    df = (
        spark.range(0, 2, 1, 2)
        .select(F.col("id").alias("k"), F.lit("n").alias("name"), F.lit(1.0).alias("amount"))
        .withColumn("_ts", ts("k"))
        .withColumn("_diff", F.lit(1).cast("long"))
    )
    with pytest.raises(InvalidUsage, match="every update needs a _ts: 1 rows have none"):
        writer.batch(df, 0, 1)
    assert all_files(tmp_path) == []


def test_memory_blob_small_data_path(spark: SparkSession) -> None:
    name = f"spark-{uuid.uuid4().hex}"
    location = open_location(f"memory://{name}", f"memory://{name}")
    assert location.blob.root_uri is None
    writer, reader = PersistClient(location).open("s", SCHEMA)
    batch = writer.batch(spark.sql(updates_sql(0, 50, 0)), 0, 1)
    assert len(batch.parts) == 1
    assert isinstance(writer.compare_and_append_batch([batch], 0, 1), Appended)
    want = model_at(sql_model(0, 50, 0), 0)
    assert as_counter(snapshot_df(spark, reader, 0).collect()) == want
    assert as_counter(reader.snapshot(0).to_pylist()) == want
    location.blob.delete(batch.parts[0].key)
    with pytest.raises(PartError, match="is missing"):
        snapshot_df(spark, reader, 0)


def test_awkward_column_names_and_null_keys(spark: SparkSession, tmp_path: Path) -> None:
    schema = pa.schema([("a.b", pa.int64()), ("c d", pa.string())])
    writer, reader = PersistClient(Location.embedded(tmp_path)).open("s", schema)
    df = spark.sql(
        "SELECT IF(id % 2 = 0, NULL, id % 3) AS `a.b`, IF(id % 3 = 0, NULL, 'x') AS `c d`, "
        "0L AS _ts, 1L AS _diff FROM range(0, 12, 1, 3)"
    )
    writer.append(df, 0, 1)
    got = sorted(
        ((r["a.b"], r["c d"], r["_diff"]) for r in snapshot_df(spark, reader, 0).collect()),
        key=repr,
    )
    want = sorted(
        (
            (a, c, d)
            for (a, c, _, _), d in as_counter(
                [
                    {"k": r["a.b"], "name": r["c d"], "amount": None, "_err": None, "_diff": 1}
                    for r in reader.snapshot(0).to_pylist()
                    for _ in range(r["_diff"])
                ]
            ).items()
        ),
        key=repr,
    )
    assert got == want
    assert (None, None, 2) in got  # ids 0 and 6: nulls group together


def test_map_columns_consolidate_by_their_entries(spark: SparkSession, tmp_path: Path) -> None:
    """Spark and persist agree on a shard with a map column: a map is one value whatever
    the order of its entries."""
    schema = pa.schema([("m", pa.map_(pa.string(), pa.int64()))])
    writer, reader = PersistClient(Location.embedded(tmp_path)).open("s", schema)
    writer.append(spark.sql("SELECT map('a', id) AS m, 0L AS _ts, 1L AS _diff FROM range(3)"), 0, 1)
    writer.append(
        spark.sql(
            "SELECT map('b', 2L, 'a', 1L) AS m, 1L AS _ts, 1L AS _diff "
            "UNION ALL SELECT map('a', 1L, 'b', 2L), 1L, -1L "
            "UNION ALL SELECT map('a', 0L), 1L, -1L"
        ),
        1,
        2,
    )
    got = sorted(dict(r["m"])["a"] for r in snapshot_df(spark, reader, 1).collect())
    assert got == [1, 2]
    assert reader.snapshot(1).num_rows == 2


def test_updates_df_keeps_times_and_duplicates(spark: SparkSession, tmp_path: Path) -> None:
    writer, reader = PersistClient(Location.embedded(tmp_path)).open("s", SCHEMA)
    for t in range(3):
        writer.append(spark.sql(updates_sql(0, 10, t, mod=1)), t, t + 1)
    df = updates_df(spark, reader, 1, 3)
    assert df.columns == COLUMNS
    rows = df.collect()
    assert len(rows) == 20 and {r["_ts"] for r in rows} == {1, 2}
    with pytest.raises(InvalidUsage, match=r"lower < upper, got \[2, 2\)"):
        updates_df(spark, reader, 2, 2)


def test_typed_errors_leaves_other_errors_alone(spark: SparkSession) -> None:
    with pytest.raises(AnalysisException), typed_errors():
        spark.sql("SELECT no_such_column").collect()


def test_planning_a_read_of_many_parts_runs_no_job(spark: SparkSession, tmp_path: Path) -> None:
    """Spark lists more than 32 files in a job of its own unless told otherwise."""
    from timeshard.spark.jobs import JobCounter

    client = PersistClient(Location.embedded(tmp_path))
    schema = pa.schema([("k", pa.int64())])
    writer, reader = client.open("s", schema)
    for t in range(40):
        writer.append([((t,), t, 1)], t, t + 1)
    assert len(reader.snapshot_parts(39)) > 32
    with JobCounter(spark) as jobs:
        df = snapshot_df(spark, reader, 39)
    assert jobs.count == 0
    assert df.count() == 40


def test_a_part_left_by_another_attempt_is_deleted_when_the_write_succeeds(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A task attempt that wrote its part and then failed (or lost to a speculative copy)
    leaves a part no batch names under the batch's prefix; the successful write deletes it
    (it stayed: GC keeps unnamed parts of a writer that is still registered, so a
    long-running writer leaked one per retried task)."""
    location = Location.embedded(tmp_path)
    writer = PersistClient(location).open_writer("s", SCHEMA)
    blob = location.blob
    prefix = f"s/{writer.writer_id}/{uuid.uuid4().hex}"
    root = tmp_path / "blob" / prefix

    def leave_a_part(k):  # type: ignore[no-untyped-def]
        if k == 0:  # what an earlier attempt of this partition left behind
            root.mkdir(parents=True, exist_ok=True)
            (root / "part-00000-0123456789ab.parquet").write_bytes(b"PAR1 half a part")
        return k

    df = spark.sql(updates_sql(0, 20, 0)).withColumn("k", F.udf(leave_a_part, "long")("k"))
    parts = spark_parts.write_parts(df, blob, prefix, SCHEMA)
    assert sum(p.num_rows for p in parts) == 20
    assert sorted(m.key for m in blob.list_keys(prefix + "/")) == [p.key for p in parts]
