"""KEY VALUE upsert ingestion: throughput, freshness, rehydration, per-tick cost against state.

For each ``--keys`` value, on ``local[2]`` with the embedded location:

1. *load*: the snapshot (every key once) in one tick;
2. *throughput*: ``--ticks`` back-to-back ticks of ``--commands`` upsert
   commands each (64-byte values); commands/s = commands / tick latency;
3. *rehydration*: a new ``Ingestion`` over the same location, and its first
   step with no new commands (it rebuilds the arranged state from the output
   shard); then one more tick of ``--commands`` on the rehydrated instance;
4. *freshness* (only for ``--freshness-keys``): the generator's upper follows
   the wall clock at ``--rate`` commands/s; the ingestion steps every
   ``--tick-interval`` seconds (back to back if a step takes longer) for
   ``--seconds``. A command that becomes readable from the source at wall
   time ``a`` is visible when the step that appends it returns at ``v``
   (its output shard's upper has passed its time): freshness = ``v - a``,
   sampled evenly over each step's offsets; p50 and p99.

The peer, in the same run and on the same generated commands: a plain Spark
job that reads the same ``--commands`` commands and writes them as Parquet
(the ceiling of the data path: no reclocking, no upsert, no consensus).

    source scripts/bootstrap.sh
    python bench/bench_ingest_kv.py --keys 100000 1000000 10000000 --freshness-keys 1000000

Writes bench/results/ingest_kv.json.
"""

from __future__ import annotations

import argparse
import json
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

from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark import spark_session
from timeshard.storage.ingest import Ingestion
from timeshard.storage.reclock import SourceFrontier
from timeshard.storage.sources import KeyValueGenerator

PARTITIONS = 2


@dataclass
class PhasedKeyValue(KeyValueGenerator):
    """KEY VALUE whose first tick is the whole snapshot, then ``rate`` per partition per tick.

    With ``live_since`` set, the offsets after the snapshot follow the wall
    clock instead: ``rate`` per partition per second since ``live_since``.
    """

    snapshot: int = 0
    live_since: float | None = None
    live_base: int = 0

    def upper(self) -> SourceFrontier:
        if self.live_since is not None:
            done = self.live_base + int(self.rate * (time.monotonic() - self.live_since))
        else:
            done = 0 if self.ticks == 0 else self.snapshot + self.rate * (self.ticks - 1)
        return {p: done for p in self.partition_names}

    def resume(self, bound: SourceFrontier) -> None:
        done = max(bound.values(), default=0)
        if done:
            self.ticks = max(self.ticks, 1 + -(-(done - self.snapshot) // self.rate))

    def arrival(self, offset: int) -> float:
        """The wall time (monotonic) offset ``offset`` became readable, in live mode."""
        assert self.live_since is not None
        return self.live_since + (offset - self.live_base) / self.rate


def generator(keys: int, commands: int) -> PhasedKeyValue:
    return PhasedKeyValue(
        keys=keys,
        value_size=64,
        partitions=PARTITIONS,
        rate=commands // PARTITIONS,
        snapshot=-(-keys // PARTITIONS),
    )


def timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(spark: Any, keys: int, commands: int, ticks: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="timeshard-bench-kv-"))
    try:
        client = PersistClient(Location.embedded(tmp))
        gen = generator(keys, commands)

        def make(source: PhasedKeyValue) -> Ingestion:
            return Ingestion(spark, client, source, envelope="upsert", key_columns=["key"])

        ing = make(gen)
        load_s = timed(ing.step)
        latencies = [timed(ing.step) for _ in range(ticks)]
        restarted = make(generator(keys, commands))
        restarted.source.ticks -= 1  # its step's tick() adds no commands: it only rehydrates
        rehydrate_s = timed(restarted.step)
        after_s = timed(restarted.step)
        state_layers = len(restarted.exports[""].upsert.state.layers)  # type: ignore[union-attr]
        disk = sum(f.stat().st_size for f in (tmp / "blob").rglob("*") if f.is_file())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "keys": keys,
        "commands_per_tick": commands,
        "load_s": load_s,
        "tick_s": latencies,
        "tick_p50_s": statistics.median(latencies),
        "tick_max_s": max(latencies),
        "commands_per_s": commands / statistics.median(latencies),
        "rehydrate_s": rehydrate_s,
        "tick_after_rehydrate_s": after_s,
        "layers_after_rehydrate": state_layers,
        "blob_bytes": disk,
    }


def freshness(spark: Any, keys: int, rate: int, seconds: float, interval: float) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="timeshard-bench-fresh-"))
    try:
        client = PersistClient(Location.embedded(tmp))
        gen = generator(keys, 2 * PARTITIONS)
        ing = Ingestion(spark, client, gen, envelope="upsert", key_columns=["key"])
        ing.step()  # the snapshot
        gen.live_base = gen.snapshot
        gen.rate = max(1, rate // PARTITIONS)
        gen.live_since = time.monotonic()
        samples: list[float] = []
        steps: list[float] = []
        done = gen.live_base
        end = gen.live_since + seconds
        while time.monotonic() < end:
            t0 = time.monotonic()
            ing.step()
            visible = time.monotonic()
            steps.append(visible - t0)
            bound = ing.remap.frontier_at((ing.remap.upper.time or 1) - 1)
            reached = min(bound.values(), default=done)
            if reached > done:
                for i in range(100):  # offsets in [done, reached), evenly
                    offset = done + (reached - done) * (i + 0.5) / 100
                    samples.append(visible - gen.arrival(int(offset)))
                done = reached
            time.sleep(max(0.0, interval - (time.monotonic() - t0)))
        committed = (done - gen.live_base) * PARTITIONS
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    samples.sort()
    return {
        "keys": keys,
        "offered_rate": rate,
        "tick_interval_s": interval,
        "seconds": seconds,
        "steps": len(steps),
        "step_p50_s": statistics.median(steps),
        "committed_per_s": committed / seconds,
        "freshness_p50_s": samples[len(samples) // 2],
        "freshness_p99_s": samples[min(len(samples) - 1, int(len(samples) * 0.99))],
    }


def parquet_ceiling(spark: Any, keys: int, commands: int, reps: int) -> float:
    """Median seconds to read ``commands`` generated commands and write them as Parquet."""
    gen = generator(keys, commands)
    start = {p: gen.snapshot for p in gen.partition_names}
    end = {p: gen.snapshot + gen.rate for p in gen.partition_names}
    out = Path(tempfile.mkdtemp(prefix="timeshard-bench-parquet-"))
    try:
        times = [
            timed(lambda i=i: gen.read(spark, start, end).write.parquet(str(out / f"r{i}")))
            for i in range(reps)
        ]
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--commands", type=int, default=100_000)
    parser.add_argument("--ticks", type=int, default=5)
    parser.add_argument("--freshness-keys", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=20_000, help="offered commands/s")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--tick-interval", type=float, default=1.0)
    parser.add_argument("--driver-memory", default="12g")
    args = parser.parse_args()
    spark = spark_session(
        app_name="timeshard-bench-kv", extra_conf={"spark.driver.memory": args.driver_memory}
    )
    console = Console()
    results = []
    for k in args.keys:
        results.append(run(spark, k, args.commands, args.ticks))
        console.print(results[-1])
    ceiling_s = parquet_ceiling(spark, max(args.keys), args.commands, 3)
    fresh = None
    if args.freshness_keys:
        fresh = freshness(spark, args.freshness_keys, args.rate, args.seconds, args.tick_interval)
        console.print(fresh)
    table = Table(
        "keys",
        "load s",
        "tick p50 s",
        "tick max s",
        "commands/s",
        "vs Parquet ceiling",
        "rehydrate s",
        "tick after s",
        title=f"KEY VALUE upsert, {args.commands:,} commands/tick, local[2]",
    )
    ceiling_rate = args.commands / ceiling_s
    for r in results:
        table.add_row(
            f"{r['keys']:,}",
            f"{r['load_s']:.1f}",
            f"{r['tick_p50_s']:.2f}",
            f"{r['tick_max_s']:.2f}",
            f"{r['commands_per_s']:,.0f}",
            f"{r['commands_per_s'] / ceiling_rate:.2f}x",
            f"{r['rehydrate_s']:.1f}",
            f"{r['tick_after_rehydrate_s']:.2f}",
        )
    console.print(table)
    console.print(
        f"peer: plain Spark read + Parquet write of the same {args.commands:,} commands: "
        f"{ceiling_s:.2f} s ({ceiling_rate:,.0f} commands/s)"
    )
    if fresh is not None:
        console.print(
            f"freshness at {fresh['keys']:,} keys, {fresh['offered_rate']:,} commands/s offered, "
            f"tick {fresh['tick_interval_s']} s: p50 {fresh['freshness_p50_s']:.2f} s, "
            f"p99 {fresh['freshness_p99_s']:.2f} s; step p50 {fresh['step_p50_s']:.2f} s; "
            f"committed {fresh['committed_per_s']:,.0f} commands/s"
        )
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "ingest_kv.json").write_text(
        json.dumps({"runs": results, "parquet_ceiling_s": ceiling_s, "freshness": fresh}, indent=2)
    )
    spark.stop()


if __name__ == "__main__":
    main()
