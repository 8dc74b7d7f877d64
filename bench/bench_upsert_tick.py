"""UPSERT per-tick cost against the size of the state: same-size ticks at 100k and 10M keys.

For each ``--keys`` value, on ``local[2]`` with the embedded location, a
KEY VALUE source (64-byte values, ``--deletes`` of the commands after the
snapshot are deletes) goes through ``Ingestion(envelope="upsert",
key_columns=["key"])``, the public ingestion API, as in
``bench_ingest_kv.py``:

1. *load*: the snapshot (every key once) in one tick;
2. *data ticks*: ``--ticks`` ticks of ``--commands`` commands each, back to
   back; per tick the latency of ``Ingestion.step`` (the commands are
   readable at its start and in the output shard at its end) and the Spark
   jobs submitted meanwhile (:class:`timeshard.spark.jobs.JobCounter`, which
   counts every job of the application, on any thread), split by scheduler
   pool: the tick's own (``default``) and the background layer merges
   (``timeshard-merge``), which share the cores with the tick but are off its
   path;
3. *idle ticks*: ``--idle`` ticks with no new command: latency and jobs;
4. *check*: the live keys of the output shard against the last command per
   key, recomputed from the generator with Spark.

A warm-up run at 1,000 keys, not reported, comes first (a cold JVM would
slow the first size's ticks and flatter the ratio). The peer, in the same
run: a plain Spark job that reads the same number of generated commands and
writes them as Parquet (the ceiling of the data path), at each size.
Reported: per size the median tick latency, Spark jobs per data and idle
tick, the ratio to the peer; and the ratio of the median tick latency at the
largest size to the smallest. Then the goals of issue 13 with "met" / "not
met": the tick at 10M keys <= 3x the tick at 100k keys, 1 Spark job per
20k-command tick, 0 per idle tick. Writes
``bench/results/upsert_tick.json``.

    source scripts/bootstrap.sh
    python bench/bench_upsert_tick.py --keys 100000 10000000 --commands 20000 --ticks 5
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "bench" / "compare"))

import report

from bench_ingest_kv import PARTITIONS, PhasedKeyValue, parquet_ceiling
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark import spark_session
from timeshard.spark.jobs import JobCounter
from timeshard.storage.ingest import Ingestion

MAX_SCALING = 3.0
SPEC_COMMANDS = 20_000
MAX_JOBS_DATA_TICK = 1


@dataclass
class PausableKeyValue(PhasedKeyValue):
    """:class:`PhasedKeyValue` whose ticks add no command while :attr:`paused`."""

    paused: bool = False

    def tick(self) -> None:
        if not self.paused:
            super().tick()


def timed_step(spark: Any, ing: Ingestion) -> tuple[float, int, int]:
    """One ``ing.step()``: its seconds, its own Spark jobs and the background jobs meanwhile."""
    with JobCounter(spark) as jobs:
        t0 = time.perf_counter()
        ing.step()
        seconds = time.perf_counter() - t0
    pools = jobs.by_pool()
    own = pools.pop("default", 0)
    return seconds, own, sum(pools.values())


def expected_live_keys(spark: Any, gen: PausableKeyValue) -> int:
    """Keys whose last command (highest offset; one partition owns a key) is not a delete."""
    from pyspark.sql import functions as F

    upper = gen.upper()
    df = gen.read(spark, dict.fromkeys(upper, 0), upper)
    latest = df.groupBy("key").agg(F.max_by("value", "_offset").alias("value"))
    return int(latest.where("value IS NOT NULL").count())


def run(spark: Any, args: argparse.Namespace, keys: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="timeshard-bench-upsert-tick-"))
    console = Console()
    try:
        client = PersistClient(Location.embedded(tmp))
        gen = PausableKeyValue(
            keys=keys,
            value_size=64,
            partitions=PARTITIONS,
            rate=max(1, args.commands // PARTITIONS),
            snapshot=-(-keys // PARTITIONS),
            deletes=args.deletes,
        )
        ing = Ingestion(spark, client, gen, envelope="upsert", key_columns=["key"])
        load_s, load_jobs, _ = timed_step(spark, ing)
        console.print(f"{keys:,} keys: load {load_s:.1f} s, {load_jobs} jobs")
        ticks = []
        for i in range(args.ticks):
            seconds, jobs, background = timed_step(spark, ing)
            ticks.append({"tick_s": seconds, "jobs": jobs, "background_jobs": background})
            console.print(
                f"{keys:,} keys: tick {i + 1}: {seconds:.2f} s, {jobs} jobs "
                f"(+ {background} background merge jobs)"
            )
        gen.paused = True
        idle = []
        for _ in range(args.idle):
            seconds, jobs, background = timed_step(spark, ing)
            idle.append({"tick_s": seconds, "jobs": jobs + background})
        shard = client.open_leased_reader(ing.exports[""].shard)
        upper = (shard.fetch_recent_upper().time or 1) - 1
        live = shard.snapshot(upper).num_rows
        shard.expire()
        ing.close()
        expected = expected_live_keys(spark, gen)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ceiling_s = parquet_ceiling(spark, keys, args.commands, 3)
    tick_p50 = statistics.median(t["tick_s"] for t in ticks)
    return {
        "keys": keys,
        "commands_per_tick": gen.rate * PARTITIONS,
        "load_s": load_s,
        "load_jobs": load_jobs,
        "ticks": ticks,
        "tick_p50_s": tick_p50,
        "tick_max_s": max(t["tick_s"] for t in ticks),
        "jobs_max": max(t["jobs"] for t in ticks),
        "jobs_median": statistics.median(t["jobs"] for t in ticks),
        "background_jobs": sum(t["background_jobs"] for t in ticks),
        "idle": idle,
        "idle_p50_s": statistics.median(t["tick_s"] for t in idle) if idle else None,
        "idle_jobs_max": max((t["jobs"] for t in idle), default=None),
        "parquet_ceiling_s": ceiling_s,
        "vs_ceiling": tick_p50 / ceiling_s,
        "live_keys": live,
        "expected_live_keys": expected,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--keys", type=int, nargs="+", default=[100_000, 10_000_000])
    parser.add_argument("--commands", type=int, default=SPEC_COMMANDS, help="per tick")
    parser.add_argument("--deletes", type=float, default=0.1)
    parser.add_argument("--ticks", type=int, default=5)
    parser.add_argument("--idle", type=int, default=3)
    parser.add_argument("--driver-memory", default="12g")
    parser.add_argument(
        "--no-warmup",
        dest="warmup",
        action="store_false",
        help="skip the unreported warm-up run at 1,000 keys",
    )
    args = parser.parse_args()
    args.keys = sorted(args.keys)
    spark = spark_session(
        app_name="timeshard-bench-upsert-tick",
        extra_conf={"spark.driver.memory": args.driver_memory},
    )
    spark.sparkContext.setLogLevel("ERROR")
    if args.warmup:  # the JVM's first ticks are slow: keep them out of the smallest size
        run(spark, argparse.Namespace(**vars(args) | {"ticks": 2, "idle": 1}), 1_000)
    runs = [run(spark, args, k) for k in args.keys]
    console = Console(width=max(Console().width, 140))
    table = Table(
        "keys",
        "load s",
        "tick p50 s",
        "tick max s",
        "jobs/tick, its own (median, max)",
        "merge jobs meanwhile (all ticks)",
        "idle tick p50 s",
        "jobs/idle tick (max)",
        "peer: Parquet read+write s",
        "tick / peer",
        "live keys (expected)",
        title=f"UPSERT ticks of {runs[0]['commands_per_tick']:,} commands "
        f"({args.deletes:.0%} deletes), local[2]",
    )
    for r in runs:
        table.add_row(
            f"{r['keys']:,}",
            f"{r['load_s']:.1f}",
            f"{r['tick_p50_s']:.2f}",
            f"{r['tick_max_s']:.2f}",
            f"{r['jobs_median']:g}, {r['jobs_max']}",
            str(r["background_jobs"]),
            "-" if r["idle_p50_s"] is None else f"{r['idle_p50_s']:.2f}",
            "-" if r["idle_jobs_max"] is None else str(r["idle_jobs_max"]),
            f"{r['parquet_ceiling_s']:.2f}",
            f"{r['vs_ceiling']:.2f}x",
            f"{r['live_keys']:,} ({r['expected_live_keys']:,})",
        )
    console.print(table)
    small, large = runs[0], runs[-1]
    scaling = large["tick_p50_s"] / small["tick_p50_s"]
    console.print(
        f"tick p50 at {large['keys']:,} keys / at {small['keys']:,} keys: {scaling:.2f}x; "
        f"the peer's: {large['parquet_ceiling_s'] / small['parquet_ceiling_s']:.2f}x"
    )
    spec = args.commands == SPEC_COMMANDS
    goals = [
        report.goal(
            f"tick p50 @ {large['keys']:,} keys / @ {small['keys']:,} keys",
            scaling,
            MAX_SCALING,
            at_most=True,
            spec_size=spec and small["keys"] <= 100_000 and large["keys"] >= 10_000_000,
        )
    ]
    for r in runs:
        goals.append(
            report.goal(
                f"Spark jobs per data tick, its own (max) @ {r['keys']:,} keys",
                r["jobs_max"],
                MAX_JOBS_DATA_TICK,
                at_most=True,
                unit="",
                fmt="{:.0f}",
                spec_size=spec,
            )
        )
        if r["idle_jobs_max"] is not None:
            goals.append(
                report.goal(
                    f"Spark jobs per idle tick (max) @ {r['keys']:,} keys",
                    r["idle_jobs_max"],
                    0,
                    at_most=True,
                    unit="",
                    fmt="{:.0f}",
                )
            )
        goals.append(
            {
                "goal": f"live keys = last command per key @ {r['keys']:,} keys",
                "target": f"{r['expected_live_keys']:,}",
                "measured": f"{r['live_keys']:,}",
                "value": None,
                "met": r["live_keys"] == r["expected_live_keys"],
                "spec_size": True,
            }
        )
    report.print_goals(goals, "UPSERT per-tick cost: goals of issue 13")
    doc = {"params": vars(args), "versions": report.versions("pyspark", "timeshard")}
    doc |= {"runs": runs, "scaling": scaling, "goals": goals}
    print(f"wrote {report.save_json(doc, 'upsert_tick')}")
    spark.stop()


if __name__ == "__main__":
    main()
