"""Per-tick cost of a materialized view over a 1M-row input with 1% change per tick.

The input shard holds ``--rows`` rows ``(k, v)``; each tick retracts and
re-inserts 1% of them with new values. The view is
``SELECT k, v * 2 AS w FROM inp WHERE v % 2 = 0`` (about half the rows). For
each tick it reports the sink's latency (from the input append to the view's
shard reaching the new time), the update rows and parts the sink wrote, and
the cost of recomputing the same query from scratch and writing it as Parquet
(the peer). Then it runs ``--idle`` ticks with no input change and reports
the parts written (must be 0). Writes bench/results/view_tick.json.

    .venv/bin/python bench/bench_view_tick.py --rows 1000000 --ticks 5
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from timeshard.compute import MaterializedView, ViewDefinition
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark import snapshot_df, spark_session

INPUT = pa.schema([("k", pa.int64()), ("v", pa.int64())])
SQL = "SELECT k, v * 2 AS w FROM inp WHERE v % 2 = 0"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--ticks", type=int, default=5)
    parser.add_argument("--idle", type=int, default=3)
    parser.add_argument(
        "--adaptive", action="store_true", help="adaptive execution on (off by default)"
    )
    args = parser.parse_args()
    spark = spark_session(
        app_name="timeshard-bench-view",
        extra_conf={"spark.sql.adaptive.enabled": str(args.adaptive).lower()},
    )
    tmp = Path(tempfile.mkdtemp(prefix="timeshard-bench-view-"))
    console = Console()
    try:
        client = PersistClient(Location.embedded(tmp / "loc"))
        writer, reader = client.open("inp", INPUT)
        n, change = args.rows, max(args.rows // 100, 1)
        writer.append(
            spark.sql(f"SELECT id AS k, id AS v, 0L AS _ts, 1L AS _diff FROM range(0, {n}, 1, 8)"),
            0,
            1,
        )
        t0 = time.perf_counter()
        view = MaterializedView.install(
            spark, client, ViewDefinition("out", {"inp": "inp"}, SQL), as_of=0
        )
        view.catch_up()
        hydrate_s = time.perf_counter() - t0
        ticks = []
        for tick in range(1, args.ticks + 1):
            lo = (tick * 7919 * change) % (n - change)
            # The retraction must name the row as it is now: rows of earlier ticks may
            # overlap, so read the current values instead of guessing them.
            current = snapshot_df(spark, reader, tick - 1).where(f"k >= {lo} AND k < {lo + change}")
            retract = current.selectExpr("k", "v", f"{tick}L AS _ts", "-_diff AS _diff")
            insert = current.selectExpr("k", "v + 1 AS v", f"{tick}L AS _ts", "_diff")
            writer.append(retract.unionByName(insert), tick, tick + 1)
            before_rows, before_parts = view.stats.rows_written, view.stats.parts_written
            t0 = time.perf_counter()
            view.catch_up()
            sink_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            snap = snapshot_df(spark, reader, tick)
            expanded = snap.selectExpr("k", "v", "explode(sequence(1, CAST(_diff AS INT))) AS _n")
            expanded.createOrReplaceTempView("inp")
            spark.sql(SQL).write.mode("overwrite").parquet(str(tmp / "scratch"))
            scratch_s = time.perf_counter() - t0
            ticks.append(
                {
                    "tick": tick,
                    "sink_s": sink_s,
                    "scratch_s": scratch_s,
                    "rows_written": view.stats.rows_written - before_rows,
                    "parts_written": view.stats.parts_written - before_parts,
                }
            )
        idle_parts = view.stats.parts_written
        for tick in range(args.ticks + 1, args.ticks + 1 + args.idle):
            writer.append([], tick, tick + 1)
            view.catch_up()
        idle_parts = view.stats.parts_written - idle_parts
        view.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    table = Table(
        "tick",
        "sink latency s",
        "rows written",
        "parts",
        "from scratch s",
        "ratio",
        title=f"view over {args.rows:,} rows, {change:,} changed per tick "
        f"(hydration {hydrate_s:.1f} s)",
    )
    for t in ticks:
        table.add_row(
            str(t["tick"]),
            f"{t['sink_s']:.2f}",
            str(t["rows_written"]),
            str(t["parts_written"]),
            f"{t['scratch_s']:.2f}",
            f"{t['sink_s'] / t['scratch_s']:.2f}x",
        )
    med_sink = statistics.median(t["sink_s"] for t in ticks)
    med_scratch = statistics.median(t["scratch_s"] for t in ticks)
    table.add_row(
        "median",
        f"{med_sink:.2f}",
        "",
        "",
        f"{med_scratch:.2f}",
        f"{med_sink / med_scratch:.2f}x",
        style="bold",
    )
    console.print(table)
    console.print(f"idle ticks: {args.idle}, parts written while idle: {idle_parts}")
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "view_tick.json").write_text(
        json.dumps(
            {
                "rows": args.rows,
                "hydrate_s": hydrate_s,
                "ticks": ticks,
                "idle_parts": idle_parts,
                "median_sink_s": med_sink,
                "median_scratch_s": med_scratch,
            },
            indent=2,
        )
    )
    spark.stop()


if __name__ == "__main__":
    main()
