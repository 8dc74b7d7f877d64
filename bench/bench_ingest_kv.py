"""KEY VALUE upsert ingestion: throughput, per-tick cost against state size, rehydration.

For each ``--keys`` value, ingests the snapshot (every key once) and then
``--ticks`` rounds of ``--commands`` upsert commands, on ``local[2]``, and
reports: commands/s over the update rounds, the per-tick latency (p50 and
max), the time from a round's append to its visibility in the output
(freshness: the step latency, as the output is visible once appended), and
the rehydration time of a restarted ingestion (construction plus its first
step). Writes bench/results/ingest_kv.json.

    .venv/bin/python bench/bench_ingest_kv.py --keys 100000 1000000 --commands 100000
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark import spark_session
from timeshard.storage.ingest import Ingestion
from timeshard.storage.sources import KeyValueGenerator


def run(spark: object, keys: int, commands: int, ticks: int) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="timeshard-bench-kv-"))
    try:
        client = PersistClient(Location.embedded(tmp))
        clock = itertools.count(1)

        def make() -> Ingestion:
            gen = KeyValueGenerator(keys=keys, value_size=64, partitions=2, rate=commands // 2)
            return Ingestion(
                spark,
                client,
                gen,
                envelope="upsert",
                key_columns=["key"],
                clock=lambda: next(clock),
            )

        ing = make()
        snapshot_ticks = -(-keys // commands)
        t0 = time.perf_counter()
        for _ in range(snapshot_ticks):
            ing.step()
        snapshot_s = time.perf_counter() - t0
        latencies = []
        for _ in range(ticks):
            t0 = time.perf_counter()
            ing.step()
            latencies.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        make().step()
        rehydrate_s = time.perf_counter() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "keys": keys,
        "commands_per_tick": commands,
        "snapshot_s": snapshot_s,
        "tick_p50_s": statistics.median(latencies),
        "tick_max_s": max(latencies),
        "commands_per_s": commands * ticks / sum(latencies),
        "rehydrate_s": rehydrate_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--commands", type=int, default=100_000)
    parser.add_argument("--ticks", type=int, default=3)
    args = parser.parse_args()
    spark = spark_session(app_name="timeshard-bench-kv")
    results = [run(spark, k, args.commands, args.ticks) for k in args.keys]
    table = Table(
        "keys",
        "commands/tick",
        "tick p50 s",
        "tick max s",
        "commands/s",
        "snapshot s",
        "rehydrate s",
        title="KEY VALUE upsert on local[2]",
    )
    for r in results:
        table.add_row(
            f"{r['keys']:,}",
            f"{r['commands_per_tick']:,}",
            f"{r['tick_p50_s']:.2f}",
            f"{r['tick_max_s']:.2f}",
            f"{r['commands_per_s']:,.0f}",
            f"{r['snapshot_s']:.1f}",
            f"{r['rehydrate_s']:.1f}",
        )
    Console().print(table)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "ingest_kv.json").write_text(json.dumps(results, indent=2))
    spark.stop()


if __name__ == "__main__":
    main()
