"""Spark checks shared by the local tier and the standalone-cluster run.

Each check takes a SparkSession and a scratch directory; the local tier calls
them with the session-scoped local session, ``standalone_main.py`` with a
session on a standalone master.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from timeshard.location import Location
from timeshard.persist import Appended, PersistClient
from timeshard.spark import snapshot_df

SCHEMA = pa.schema([("k", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])


def updates_sql(start: int, n: int, ts: int, diff: int = 1, mod: int = 7) -> str:
    return (
        f"SELECT id AS k, concat('n', id % {mod}) AS name, CAST(id AS DOUBLE) / 4 AS amount, "
        f"CAST({ts} AS BIGINT) AS _ts, CAST({diff} AS BIGINT) AS _diff FROM range({start}, "
        f"{start + n}, 1, 4)"
    )


def as_counter(rows: list[Any]) -> Counter[tuple[Any, ...]]:
    out: Counter[tuple[Any, ...]] = Counter()
    for r in rows:
        d = r.asDict() if hasattr(r, "asDict") else r
        out[(d["k"], d["name"], d["amount"], d["_err"])] += d["_diff"]
    return Counter({k: v for k, v in out.items() if v})


def check_write_and_snapshot(spark: SparkSession, tmp: Path) -> None:
    """Batches written by Spark tasks read back at every time, three ways."""
    client = PersistClient(Location.embedded(tmp / "loc"))
    writer, reader = client.open("orders", SCHEMA)
    model: list[tuple[tuple[Any, ...], int, int]] = []
    plans = [(0, 1000, 0, 1), (500, 1000, 3, 1), (0, 200, 5, -1)]
    upper = 0
    for start, n, ts, diff in plans:
        batch = writer.batch(spark.sql(updates_sql(start, n, ts, diff)), upper, ts + 1)
        assert len(batch.parts) >= 2, batch
        assert isinstance(writer.compare_and_append_batch([batch], upper, ts + 1), Appended)
        upper = ts + 1
        for k in range(start, start + n):
            model.append(((k, f"n{k % 7}", k / 4, None), ts, diff))
    for as_of in range(upper):
        want: Counter[tuple[Any, ...]] = Counter()
        for row, t, d in model:
            if t <= as_of:
                want[row] += d
        want = Counter({k: v for k, v in want.items() if v})
        df = snapshot_df(spark, reader, as_of)
        assert df.columns == ["k", "name", "amount", "_ts", "_diff", "_err"]
        assert as_counter(df.collect()) == want, as_of
        assert as_counter(reader.snapshot(as_of).to_pylist()) == want
        ds = (
            spark.read.format("timeshard")
            .option("location", str(tmp / "loc"))
            .option("shard", "orders")
            .option("as_of", str(as_of))
            .load()
        )
        assert as_counter(ds.collect()) == want
        assert {r["_ts"] for r in ds.select("_ts").distinct().collect()} <= {as_of}
    reader.downgrade_since(upper - 1)
    writer.compact()
    client.gc("orders")
    assert as_counter(snapshot_df(spark, reader, upper - 1).collect()) == as_counter(
        reader.snapshot(upper - 1).to_pylist()
    )


def check_err_rows(spark: SparkSession, tmp: Path) -> None:
    client = PersistClient(Location.embedded(tmp / "err"))
    writer, reader = client.open("e", SCHEMA)
    df = spark.sql(
        "SELECT CAST(NULL AS BIGINT) AS k, CAST(NULL AS STRING) AS name, "
        "CAST(NULL AS DOUBLE) AS amount, CAST(0 AS BIGINT) AS _ts, CAST(1 AS BIGINT) AS _diff, "
        "'bad record at offset ' || id AS _err FROM range(3)"
    )
    writer.append(df, 0, 1)
    retract = df.where("id = 1").selectExpr(
        "k", "name", "amount", "CAST(1 AS BIGINT) AS _ts", "CAST(-1 AS BIGINT) AS _diff", "_err"
    )
    writer.append(retract, 1, 2)
    errs = sorted(r["_err"] for r in snapshot_df(spark, reader, 1).collect())
    assert errs == ["bad record at offset 0", "bad record at offset 2"]
