"""Write and snapshot throughput on local[2]: timeshard vs plain Spark Parquet.

The same generated rows (``--rows``, default 10M: an id, a string and a
double) are written four ways, each ``--repeats`` times (median reported):

* timeshard write: ``WriteHandle.batch(df)`` (Spark tasks write parts into the
  blob directory) plus ``compare_and_append_batch``;
* plain write: ``df.write.parquet`` of the same DataFrame;
* timeshard snapshot: ``snapshot_df(...)`` consolidated at ``as_of``, written
  to the ``noop`` format so every row is produced;
* plain read: ``spark.read.parquet`` of the plain files to ``noop``.

Prints a table with seconds, rows/s and the timeshard/plain ratio and writes
bench/results/spark_io.json.

    .venv/bin/python bench/bench_spark_io.py --rows 10000000
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from timeshard.location import Location
from timeshard.persist import Appended, PersistClient
from timeshard.spark import snapshot_df, spark_session

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    spark = spark_session(app_name="timeshard-bench-io")
    sql = (
        f"SELECT id, concat('name-', id % 1000) AS name, CAST(id AS DOUBLE) * 0.5 AS amount, "
        f"CAST(0 AS BIGINT) AS _ts, CAST(1 AS BIGINT) AS _diff FROM range(0, {args.rows}, 1, 8)"
    )
    results: dict[str, list[float]] = {
        "ts_write": [],
        "plain_write": [],
        "ts_snapshot": [],
        "plain_read": [],
    }
    spark.sql(sql).write.format("noop").mode("overwrite").save()  # warm up
    for rep in range(args.repeats):
        tmp = Path(tempfile.mkdtemp(prefix="timeshard-bench-"))
        try:
            client = PersistClient(Location.embedded(tmp / "loc"))
            writer, reader = client.open(f"bench{rep}", SCHEMA)
            df = spark.sql(sql)

            def ts_write() -> None:
                batch = writer.batch(df, 0, 1)
                assert isinstance(writer.compare_and_append_batch([batch], 0, 1), Appended)

            plain = tmp / "plain"
            results["ts_write"].append(timed(ts_write))
            results["plain_write"].append(
                timed(lambda: spark.sql(sql).drop("_ts", "_diff").write.parquet(str(plain)))
            )
            results["ts_snapshot"].append(
                timed(
                    lambda: (
                        snapshot_df(spark, reader, 0).write.format("noop").mode("overwrite").save()
                    )
                )
            )
            results["plain_read"].append(
                timed(
                    lambda: (
                        spark.read.parquet(str(plain)).write.format("noop").mode("overwrite").save()
                    )
                )
            )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in results.items()}
    table = Table(
        "operation",
        "seconds (median)",
        "rows/s",
        "ratio to plain Spark",
        title=f"{args.rows:,} rows on {spark.sparkContext.master}, median of {args.repeats}",
    )
    for op, peer in (("ts_write", "plain_write"), ("ts_snapshot", "plain_read")):
        for name in (op, peer):
            ratio = f"{med[op] / med[peer]:.2f}x" if name == op else "1.00x"
            table.add_row(name, f"{med[name]:.2f}", f"{args.rows / med[name]:,.0f}", ratio)
    Console().print(table)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "spark_io.json").write_text(
        json.dumps(
            {
                "rows": args.rows,
                "repeats": args.repeats,
                "runs": results,
                "median_s": med,
                "write_ratio": med["ts_write"] / med["plain_write"],
                "snapshot_ratio": med["ts_snapshot"] / med["plain_read"],
            },
            indent=2,
        )
    )
    spark.stop()


if __name__ == "__main__":
    main()
