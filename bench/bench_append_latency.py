"""Latency of compare_and_append for a 100-row batch: SQLite vs PostgreSQL consensus.

Both runs use a local file blob. PostgreSQL is a throwaway server started by
this script (tests/pg_server.py) unless ``--pg-dsn`` names one. Prints p50,
p99 and mean per backend, median over ``--repeats`` runs, and writes
bench/results/append_latency.json.

    .venv/bin/python bench/bench_append_latency.py --appends 300
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow as pa
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from timeshard.location import open_location
from timeshard.persist import Appended, PersistClient

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])


def measure(blob_uri: str, consensus_uri: str, appends: int) -> dict[str, float]:
    client = PersistClient(open_location(blob_uri, consensus_uri))
    writer = client.open_writer(f"bench-{uuid.uuid4().hex[:8]}", SCHEMA)
    rows = pa.table({"k": list(range(100)), "v": [f"value-{i}" for i in range(100)]})
    latencies = []
    for i in range(appends + 10):
        upper = i
        table = rows.append_column("_ts", pa.array([upper] * 100, pa.int64())).append_column(
            "_diff", pa.array([1] * 100, pa.int64())
        )
        t0 = time.perf_counter()
        result = writer.compare_and_append(table, upper, upper + 1)
        elapsed = time.perf_counter() - t0
        assert isinstance(result, Appended)
        if i >= 10:  # warm-up
            latencies.append(elapsed * 1000)
    latencies.sort()
    return {
        "p50_ms": latencies[len(latencies) // 2],
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "mean_ms": statistics.fmean(latencies),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--appends", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pg-dsn", default=None)
    args = parser.parse_args()
    pg = None
    if args.pg_dsn is None:
        from tests.pg_server import PostgresServer

        pg = PostgresServer()
        dsn = pg.start()
    else:
        dsn = args.pg_dsn
    results: dict[str, dict[str, float]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            backends = {
                "sqlite": f"sqlite:///{tmp}/consensus.sqlite",
                "postgres": dsn,
            }
            for name, uri in backends.items():
                runs = [
                    measure(f"file://{tmp}/blob", uri, args.appends) for _ in range(args.repeats)
                ]
                results[name] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    finally:
        if pg is not None:
            pg.stop()
    table = Table(
        "consensus",
        "p50 ms",
        "p99 ms",
        "mean ms",
        title=f"compare_and_append, 100 rows, file blob ({args.appends} appends, "
        f"median of {args.repeats})",
    )
    for name, r in results.items():
        table.add_row(name, f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}", f"{r['mean_ms']:.2f}")
    table.add_row("Materialize (reported)", "~5.5", "", "", style="dim")
    Console().print(table)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "append_latency.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
