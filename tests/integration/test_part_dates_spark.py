"""Spark reads a part's dates and timestamps as written, whatever the session's Parquet
rebase mode.

Parts are written by pyarrow, in the proleptic Gregorian calendar, with no
``org.apache.spark.version`` in their footers, so Spark would apply the
session's ``spark.sql.parquet.datetimeRebaseModeInRead`` to them: under
LEGACY a date before 1582 moved by days, under EXCEPTION every read of it
failed, and Spark reads disagreed with pyarrow snapshots of the same shard.
The part reader pins CORRECTED.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark import snapshot_df

pytestmark = pytest.mark.spark

OLD = pa.schema([("d", pa.date32()), ("t", pa.timestamp("us", tz="UTC"))])
ROWS = [
    (dt.date(1000, 3, 1), dt.datetime(1000, 3, 1, 12, tzinfo=dt.UTC)),
    (dt.date(1582, 10, 4), dt.datetime(1582, 10, 4, 23, 59, tzinfo=dt.UTC)),
    (dt.date(2026, 12, 6), dt.datetime(2026, 12, 6, 1, 2, 3, tzinfo=dt.UTC)),
]


@pytest.mark.parametrize("mode", ["LEGACY", "EXCEPTION"])
def test_old_dates_read_alike_whatever_the_sessions_rebase_mode(
    spark: SparkSession, tmp_path: Path, mode: str
) -> None:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    client.open_writer("old", OLD).append([(r, 1, 1) for r in ROWS], 0, 2)
    reader = client.open_leased_reader("old")
    names = (
        "spark.sql.parquet.datetimeRebaseModeInRead",
        "spark.sql.parquet.int96RebaseModeInRead",
    )
    before = {n: spark.conf.get(n) for n in names}
    try:
        for n in names:
            spark.conf.set(n, mode)
        got = sorted(tuple(r) for r in snapshot_df(spark, reader, 1).select("d", "t").collect())
    finally:
        for n, v in before.items():
            spark.conf.set(n, v)
        reader.expire()
    want = sorted((d, t.astimezone(dt.UTC).replace(tzinfo=None)) for d, t in ROWS)
    assert [(d, t.replace(tzinfo=None) if t.tzinfo else t) for d, t in got] == want
