"""Probe: what would a tick cost if its Spark plan were not built anew? (a design measurement)

A view tick builds its queries anew each time: temp views over the tick's
layers and updates, SQL text analysed, optimized and planned, lazy
checkpoints that each plan their part. On ``local[2]`` that planning is 0.3-0.7 s
of a tick (issue 13's note), rebuilt every tick whatever the change.

This script measures the floor of the other way, which timeshard does not
have: the tick's query built once over leaves whose rows are read when the
job runs. Each leaf is a Python RDD whose tasks read the file a small JSON
descriptor names (Arrow IPC, one per leaf and tick). A physical plan cannot
simply run again: its exchanges keep their shuffle, and a second job skips
the map stage and answers the first tick's rows (counted here).
So each tick makes a new Dataset of the plan kept from the first tick --
``analyzed`` (Spark optimizes and plans it again) or ``optimized`` (Spark
plans it again, its optimizer finding nothing more to do) -- against a tick
as timeshard does it: temp views made anew over the leaves, and the SQL
analysed, optimized and planned (the leaves' DataFrames are made anew too,
outside the timing: timeshard's are checkpoints, cheap to make).

The query is max_bid's shape over the touched keys: ``auctions`` joined with
``bids`` on the auction, grouped, ``max`` and ``count``. ``--rows`` rows of
each leaf per tick; every way must give the same answer at every tick.

    source scripts/bootstrap.sh
    python bench/probe_planned_once.py --rows 10000 --ticks 20
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

SQL = """
SELECT a.id AS auction_id, max(b.amount) AS max_amount, count(*) AS n
FROM auctions a JOIN bids b ON b.auction_id = a.id
WHERE a.end_offset > {bound}
GROUP BY a.id
"""
SCHEMAS = {
    "auctions": "id long, end_offset long, _ts long, _diff long",
    "bids": "auction_id long, amount long, _ts long, _diff long",
}
PARTITIONS = 2


def write_tick(directory: Path, tick: int, rows: int) -> dict[str, str]:
    """The tick's rows of each leaf as an Arrow IPC file; leaf -> its path."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.feather as feather

    rng = np.random.default_rng(tick)
    ids = rng.integers(0, rows * 10, rows, dtype=np.int64)
    ts = np.full(rows, tick, dtype=np.int64)
    ones = np.ones(rows, dtype=np.int64)
    tables = {
        "auctions": pa.table({"id": ids, "end_offset": ids + 5, "_ts": ts, "_diff": ones}),
        "bids": pa.table(
            {
                "auction_id": rng.choice(ids, rows),
                "amount": rng.integers(0, 1000, rows, dtype=np.int64),
                "_ts": ts,
                "_diff": ones,
            }
        ),
    }
    paths = {}
    for name, table in tables.items():
        path = directory / f"{name}-{tick}.arrow"
        feather.write_feather(table, str(path), compression="uncompressed")
        paths[name] = str(path)
    return paths


def leaf(spark: Any, name: str, descriptor: Path) -> Any:
    """A DataFrame whose tasks read the file ``descriptor`` names for ``name`` when the job
    runs (partition ``p`` of ``PARTITIONS`` takes every ``PARTITIONS``-th row)."""
    from pyspark.sql.types import StructType

    schema = StructType.fromDDL(SCHEMAS[name])
    columns = schema.fieldNames()
    target = str(descriptor)

    def read(index: int, _rows: Any) -> Any:
        import pyarrow.feather as feather

        with open(target) as f:
            path = json.load(f)[name]
        table = feather.read_table(path)
        picked = {c: table.column(c).to_pylist()[index::PARTITIONS] for c in columns}
        yield from zip(*(picked[c] for c in columns), strict=True)

    rdd = spark.sparkContext.parallelize(range(PARTITIONS), PARTITIONS)
    return spark.createDataFrame(rdd.mapPartitionsWithIndex(read), schema)


def of_plan(spark: Any, plan: Any) -> Any:
    """A new DataFrame of the JVM logical ``plan`` (Spark analyses, optimizes and plans it
    as for any new Dataset; an analysed plan's nodes are not resolved again)."""
    from pyspark.sql import DataFrame

    from timeshard.spark.sqltext import jvm_static

    dataset = jvm_static(spark, "org.apache.spark.sql.classic.Dataset", "ofRows")
    return DataFrame(dataset(spark._jsparkSession, plan), spark)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=10_000, help="of each leaf per tick")
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=10, help="ticks left out of the medians")
    args = parser.parse_args()
    if args.ticks < 1:
        parser.error("--ticks must be at least 1")

    from timeshard.spark import spark_session

    spark = spark_session(app_name="probe-planned-once")
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory(prefix="probe-planned-") as tmp:
        directory = Path(tmp)
        descriptor = directory / "tick.json"
        descriptor.write_text(json.dumps(write_tick(directory, 0, args.rows)))
        bound = args.rows * 5
        for name in SCHEMAS:
            leaf(spark, name, descriptor).createOrReplaceTempView(name)
        first = spark.sql(SQL.format(bound=bound))
        first.collect()
        kept_plans = {
            "analyzed": first._jdf.queryExecution().analyzed(),
            "optimized": first._jdf.queryExecution().optimizedPlan(),
        }
        times: dict[str, list[float]] = {"fresh": [], **{k: [] for k in kept_plans}}
        stale = 0
        for tick in range(1, args.warmup + args.ticks + 1):
            descriptor.write_text(json.dumps(write_tick(directory, tick, args.rows)))
            answers = {}
            # The leaves are made outside the timing: timeshard's are checkpoints, not the
            # Python RDDs of this probe, whose making is not planning.
            leaves = {name: leaf(spark, name, descriptor) for name in SCHEMAS}
            start = time.perf_counter()
            for name, df in leaves.items():  # as a tick does today: its views made anew
                df.createOrReplaceTempView(f"{name}_{tick}")
            sql = SQL.format(bound=bound).replace("FROM auctions", f"FROM auctions_{tick}")
            sql = sql.replace("JOIN bids", f"JOIN bids_{tick}")
            answers["fresh"] = sorted(spark.sql(sql).collect())
            times["fresh"].append(time.perf_counter() - start)
            for kind, plan in kept_plans.items():
                start = time.perf_counter()
                answers[kind] = sorted(of_plan(spark, plan).collect())
                times[kind].append(time.perf_counter() - start)
            stale += sorted(first.collect()) != answers["fresh"]
            assert answers["fresh"], "the query found no rows"
            assert all(a == answers["fresh"] for a in answers.values()), tick
        kept = slice(args.warmup, None)
        medians = ", ".join(
            f"{kind} {statistics.median(t[kept]) * 1000:.0f} ms" for kind, t in times.items()
        )
        print(f"{args.rows:,} rows per leaf and tick, {args.ticks} ticks after {args.warmup}:")
        print(f"  medians: {medians}")
        print(f"  the first tick's Dataset run again answered another tick's rows {stale} times")
    spark.stop()


if __name__ == "__main__":
    main()
