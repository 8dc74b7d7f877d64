"""Part writes reuse one JVM write function per root and schema (spark.parts._written):
each write's tasks take its key prefix from the job, so writes from several threads at
once each write under their own prefix, and a write after the first costs the driver a
few py4j calls, not one per column and the function's making."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from timeshard.location import Location
from timeshard.spark.parts import PREFIX_PROPERTY, write_parts

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("k", pa.int64()), ("a.b", pa.string())])


def rows(spark: SparkSession, lo: int, hi: int) -> object:
    return spark.sql(
        f"SELECT id AS k, CAST(id AS STRING) AS `a.b`, 0L AS _ts, 1L AS _diff, "
        f"CAST(NULL AS STRING) AS _err FROM range({lo}, {hi}, 1, 3)"
    )


def test_concurrent_writes_each_write_their_rows_under_their_own_prefix(
    spark: SparkSession, tmp_path: Path
) -> None:
    location = Location.embedded(tmp_path)
    written: dict[int, list[object]] = {}
    failed: list[BaseException] = []

    def write(i: int) -> None:
        try:
            for round_ in range(3):
                prefix = f"s{i}/w{round_}"
                written[i * 10 + round_] = [
                    prefix,
                    write_parts(
                        rows(spark, i * 1000, i * 1000 + 50), location.blob, prefix, SCHEMA
                    ),
                ]
        except BaseException as e:
            failed.append(e)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not failed, failed
    assert not any(t.is_alive() for t in threads), "a write is stuck"
    assert len(written) == 9
    for n, (prefix, parts) in written.items():
        assert parts and all(p.key.startswith(f"{prefix}/part-") for p in parts)  # type: ignore[attr-defined]
        keys = sorted(
            k
            for p in parts  # type: ignore[attr-defined]
            for k in pq.read_table(tmp_path / "blob" / p.key).column("k").to_pylist()
        )
        i = n // 10
        assert keys == list(range(i * 1000, i * 1000 + 50))
    assert spark.sparkContext.getLocalProperty(PREFIX_PROPERTY) is None


def test_a_write_after_the_first_takes_few_calls(
    spark: SparkSession, tmp_path: Path, calls: list[int]
) -> None:
    location = Location.embedded(tmp_path)
    write_parts(rows(spark, 0, 5), location.blob, "s/first", SCHEMA)
    df = rows(spark, 0, 5)
    calls[0] = 0
    parts = write_parts(df, location.blob, "s/second", SCHEMA)
    assert parts
    assert calls[0] <= 20, calls[0]  # it was 47 with a function made per write
