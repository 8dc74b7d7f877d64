"""Spark checks shared by the local tier and the standalone-cluster run.

Each check takes a SparkSession and a scratch directory. The local tier calls
them with the session-scoped ``local[2]`` session; ``standalone_main.py``
calls them in a child process with a session on a standalone master.

Every snapshot is compared with a from-scratch dict model: the multiset of
rows ``(k, name, amount, _err)`` whose diffs at times ``<= as_of`` do not sum
to zero.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from timeshard.errors import PartError
from timeshard.location import Location
from timeshard.persist import Appended, PersistClient, ReadHandle, WriteHandle
from timeshard.spark import snapshot_df, typed_errors

SCHEMA = pa.schema([("k", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])
DATA = SCHEMA.names
COLUMNS = [*DATA, "_ts", "_diff", "_err"]

Key = tuple[Any, ...]
Update = tuple[Key, int, int]


def updates_sql(start: int, n: int, ts: int, diff: int = 1, mod: int = 7) -> str:
    """``n`` updates (no ``_err`` column) from ``range`` in 4 partitions."""
    return (
        f"SELECT id AS k, concat('n', id % {mod}) AS name, CAST(id AS DOUBLE) / 4 AS amount, "
        f"CAST({ts} AS BIGINT) AS _ts, CAST({diff} AS BIGINT) AS _diff "
        f"FROM range({start}, {start + n}, 1, 4)"
    )


def sql_model(start: int, n: int, ts: int, diff: int = 1, mod: int = 7) -> list[Update]:
    return [((k, f"n{k % mod}", k / 4, None), ts, diff) for k in range(start, start + n)]


def random_updates(rng: random.Random, lower: int, upper: int, n: int) -> list[Update]:
    """Updates over a small domain, so that rows repeat, cancel and hold nulls."""
    out: list[Update] = []
    for _ in range(n):
        if rng.random() < 0.1:
            key: Key = (None, None, None, f"cannot decode record {rng.randrange(5)}")
        else:
            key = (rng.randrange(30), rng.choice(["a", "b", None]), rng.choice([0.5, -1.0]), None)
        out.append((key, rng.randrange(lower, upper), rng.choice([1, 1, 2, -1])))
    return out


def updates_df(spark: SparkSession, updates: list[Update], partitions: int) -> DataFrame:
    table = pa.table(
        {
            "k": pa.array([u[0][0] for u in updates], pa.int64()),
            "name": pa.array([u[0][1] for u in updates], pa.string()),
            "amount": pa.array([u[0][2] for u in updates], pa.float64()),
            "_ts": pa.array([u[1] for u in updates], pa.int64()),
            "_diff": pa.array([u[2] for u in updates], pa.int64()),
            "_err": pa.array([u[0][3] for u in updates], pa.string()),
        }
    )
    return spark.createDataFrame(table).repartition(partitions)


def model_at(updates: list[Update], as_of: int) -> Counter[Key]:
    out: Counter[Key] = Counter()
    for key, t, d in updates:
        if t <= as_of:
            out[key] += d
    return Counter({k: v for k, v in out.items() if v})


def as_counter(rows: list[Any]) -> Counter[Key]:
    """Rows (Spark Rows or dicts) summed by ``(data, _err)``; zero sums dropped."""
    out: Counter[Key] = Counter()
    for r in rows:
        d = r.asDict() if hasattr(r, "asDict") else r
        out[(d["k"], d["name"], d["amount"], d["_err"])] += d["_diff"]
    return Counter({k: v for k, v in out.items() if v})


def consolidated(df: DataFrame) -> DataFrame:
    """What a user of the data source does: sum the diffs per distinct row."""
    return df.groupBy(*DATA, "_err").agg(F.sum("_diff").alias("_diff")).where(F.col("_diff") != 0)


def read_source(spark: SparkSession, location: Path, shard: str, as_of: int | None) -> DataFrame:
    reader = spark.read.format("timeshard").option("location", str(location))
    if as_of is not None:
        reader = reader.option("as_of", str(as_of))
    return reader.option("shard", shard).load()


def append(writer: WriteHandle, df: DataFrame, lower: int, upper: int) -> int:
    """Stage ``df`` as one batch and append it; return its number of parts."""
    batch = writer.batch(df, lower, upper)
    assert isinstance(writer.compare_and_append_batch([batch], lower, upper), Appended)
    return len(batch.parts)


def check_snapshots(
    spark: SparkSession,
    location: Path,
    reader: ReadHandle,
    model: list[Update],
    upper: int,
    times: set[int] | None = None,
) -> None:
    """snapshot_df, the pyarrow snapshot and the data source agree with the model, at every
    readable time before ``upper`` (or at those of ``times``)."""
    for as_of in range(reader.since.time or 0, upper):
        if times is not None and as_of not in times:
            continue
        want = model_at(model, as_of)
        df = snapshot_df(spark, reader, as_of)
        assert df.columns == COLUMNS
        rows = df.collect()
        assert len(rows) == len(want), (as_of, rows)
        assert {r["_ts"] for r in rows} <= {as_of}
        assert as_counter(rows) == want, as_of
        assert as_counter(reader.snapshot(as_of).to_pylist()) == want, as_of
        source = read_source(spark, location, reader.shard_id, as_of)
        assert source.columns == COLUMNS
        assert {r["_ts"] for r in source.select("_ts").distinct().collect()} <= {as_of}
        summed = consolidated(source).collect()
        assert len(summed) == len(want) and as_counter(summed) == want, as_of


def check_write_and_snapshot(spark: SparkSession, tmp: Path, every_time: bool = True) -> None:
    """Batches written by Spark tasks read back at every time, three ways.

    Without ``every_time``, the reads are at the first time, a batch boundary
    and the last time, before and after compaction (a cluster run: each time
    is three Spark jobs, and the local tier reads at every time).
    """
    location = tmp / "loc"
    client = PersistClient(Location.embedded(location))
    writer, reader = client.open("orders", SCHEMA)
    assert append(writer, spark.sql(updates_sql(0, 400, 0)), 0, 1) == 4
    model = sql_model(0, 400, 0)
    rng = random.Random(7)
    bounds = [(1, 3), (3, 4), (4, 7)]
    for lower, upper in bounds:
        updates = random_updates(rng, lower, upper, 300)
        assert append(writer, updates_df(spark, updates, 3), lower, upper) == 3
        model += updates
    assert append(writer, spark.sql(updates_sql(0, 100, 7, diff=-1)), 7, 8) >= 2
    model += sql_model(0, 100, 7, diff=-1)
    check_snapshots(spark, location, reader, model, 8, None if every_time else {0, 3, 7})
    reader.downgrade_since(5)
    assert writer.compact() > 0
    client.gc("orders")
    check_snapshots(spark, location, reader, model, 8, None if every_time else {5, 7})


def check_err_rows(spark: SparkSession, tmp: Path) -> None:
    """Err rows are data: stored, consolidated, retracted, with null data columns."""
    location = tmp / "err"
    client = PersistClient(Location.embedded(location))
    writer, reader = client.open("e", SCHEMA)
    err = (
        "SELECT CAST(NULL AS BIGINT) AS k, CAST(NULL AS STRING) AS name, "
        "CAST(NULL AS DOUBLE) AS amount, CAST({ts} AS BIGINT) AS _ts, "
        "CAST({diff} AS BIGINT) AS _diff, 'bad record at offset ' || (id % 3) AS _err "
        "FROM range(0, {n}, 1, 2)"
    )
    append(writer, spark.sql(err.format(ts=0, diff=1, n=6)), 0, 1)
    append(writer, spark.sql(err.format(ts=1, diff=-1, n=2)), 1, 2)
    bad = [(None, None, None, f"bad record at offset {i % 3}") for i in range(6)]
    model: list[Update] = [(key, 0, 1) for key in bad]
    model += [(key, 1, -1) for key in bad[:2]]
    rows = snapshot_df(spark, reader, 1).collect()
    assert sorted((r["_err"], r["_diff"]) for r in rows) == [
        ("bad record at offset 0", 1),
        ("bad record at offset 1", 1),
        ("bad record at offset 2", 2),
    ]
    check_snapshots(spark, location, reader, model, 2)


def part_files(location: Path) -> list[Path]:
    return sorted(p for p in (location / "blob").rglob("*.parquet"))


def expect_part_error(key: str, reason: str, action: Any) -> None:
    """``action()`` inside typed_errors raises PartError naming ``key``."""
    try:
        with typed_errors():
            action()
    except PartError as e:
        assert e.key == key, (e.key, key)
        assert e.reason.startswith(reason), e.reason
        return
    raise AssertionError(f"no PartError for {key}")


def check_missing_and_corrupt_parts(spark: SparkSession, tmp: Path) -> None:
    """A damaged part raises PartError naming it, on every read path; never skipped."""
    location = tmp / "bad"
    client = PersistClient(Location.embedded(location))
    writer, reader = client.open("s", SCHEMA)
    append(writer, spark.sql(updates_sql(0, 400, 0)), 0, 1)
    files = part_files(location)
    assert len(files) == 4
    victim = files[1]
    key = victim.relative_to(location / "blob").as_posix()
    original = victim.read_bytes()

    def source() -> Any:
        return read_source(spark, location, "s", 0).collect()

    # Corrupt in place (same size): only the Parquet reader notices, at the action.
    damaged = bytearray(original)
    damaged[4:400] = b"\x55" * 396
    victim.write_bytes(bytes(damaged))
    df = snapshot_df(spark, reader, 0)
    expect_part_error(key, "corrupt", df.collect)
    expect_part_error(key, "corrupt", source)
    expect_part_error(key, "corrupt", lambda: reader.snapshot(0))

    # Truncated: the size check on the driver notices before any task runs.
    victim.write_bytes(original[: len(original) // 2])
    expect_part_error(key, "corrupt", lambda: snapshot_df(spark, reader, 0))
    expect_part_error(key, "corrupt", source)

    # Missing before the read, and missing by the time the action runs.
    victim.unlink()
    expect_part_error(key, "missing", lambda: snapshot_df(spark, reader, 0))
    expect_part_error(key, "missing", source)
    victim.write_bytes(original)
    df = snapshot_df(spark, reader, 0)
    victim.unlink()
    expect_part_error(key, "missing", df.count)

    victim.write_bytes(original)
    assert as_counter(snapshot_df(spark, reader, 0).collect()) == model_at(sql_model(0, 400, 0), 0)
