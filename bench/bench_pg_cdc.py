"""Freshness of a POSTGRES source under a steady update load (issue 14).

Starts its own PostgreSQL (``wal_level=logical``, as the tests do), fills a
table ``kv (id int, v bigint)`` with ``--keys`` rows (``REPLICA IDENTITY
FULL``) and publishes it. A writer thread then commits ``--rate`` updates per
second in transactions of ``--batch`` rows, noting for each transaction its
commit's wall time and the WAL position just after it. The ingestion ticks
back to back (``Ingestion.step`` on a local Spark session) for ``--seconds``.

Freshness of a transaction: the wall time at which the first tick whose
bound LSN is at or past its WAL position has finished (its changes are then
readable in the output shard), minus its commit time. Reported: p50, p99 and
max freshness, the updates per second actually committed and ingested, the
ticks and their median duration. The first tick (the snapshot) is left out.

Spark has no change-data-capture reader of its own to compare with (the
obvious alternative, a JDBC re-read of the table each tick, gives no changes
and no timestamps); the figure stands alone.

    source scripts/bootstrap.sh
    python bench/bench_pg_cdc.py --rate 5000 --seconds 60
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

from timeshard.location import Location
from timeshard.nemesis.postgres_server import PostgresServer
from timeshard.persist import PersistClient
from timeshard.spark import spark_session
from timeshard.storage.ingest import Ingestion
from timeshard.storage.pgoutput import parse_lsn
from timeshard.storage.postgres_source import PostgresSource

RESULTS = Path(__file__).with_name("results")


class Writer(threading.Thread):
    """Commits ``rate`` updates per second, ``batch`` per transaction; notes (commit time, LSN)."""

    def __init__(self, dsn: str, keys: int, rate: int, batch: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.keys, self.rate, self.batch = dsn, keys, rate, batch
        self.commits: list[tuple[float, int]] = []
        self.stopped = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                period = self.batch / self.rate
                next_at, n = time.monotonic(), 0
                while not self.stopped.is_set():
                    first = (n * self.batch) % self.keys
                    with conn.transaction():
                        conn.execute(
                            "UPDATE kv SET v = v + 1 WHERE id >= %s AND id < %s",
                            (first, first + self.batch),
                        )
                    row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
                    assert row is not None
                    self.commits.append((time.time(), parse_lsn(row[0])))
                    n += 1
                    next_at += period
                    time.sleep(max(0.0, next_at - time.monotonic()))
        except BaseException as e:
            self.error = e


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=5000, help="updates per second")
    parser.add_argument("--batch", type=int, default=50, help="updates per transaction")
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    console = Console()
    server = PostgresServer()
    server.start()
    scratch = Path(tempfile.mkdtemp(prefix="bench-pg-cdc-"))
    try:
        dsn = server.dsn
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE kv (id int PRIMARY KEY, v bigint)")
            conn.execute("ALTER TABLE kv REPLICA IDENTITY FULL")
            conn.execute(
                "INSERT INTO kv SELECT g, 0 FROM generate_series(0, %s - 1) g", (args.keys,)
            )
            conn.execute("CREATE PUBLICATION bench FOR TABLE kv")
        spark = spark_session(app_name="bench-pg-cdc")
        client = PersistClient(Location.embedded(scratch / "loc"))
        ingestion = Ingestion(spark, client, PostgresSource("pg", dsn, "bench"))
        ingestion.step()  # the snapshot
        writer = Writer(dsn, args.keys, args.rate, args.batch)
        writer.start()
        ticks: list[tuple[float, int, float]] = []  # (finished at, bound LSN, duration)
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            started = time.monotonic()
            report = ingestion.step()
            bound = ingestion.remap.frontier_at((report.bound_upper.time or 1) - 1).get("0", 0)
            ticks.append((time.time(), bound, time.monotonic() - started))
        writer.stopped.set()
        writer.join(30)
        assert writer.error is None, writer.error
        ingestion.close()
        fresh: list[float] = []
        for committed_at, lsn in writer.commits:
            seen = next((at for at, bound, _ in ticks if bound >= lsn), None)
            if seen is not None:
                fresh.append(seen - committed_at)
        ingested = len(fresh) * args.batch
        pct = statistics.quantiles(fresh, n=100) if len(fresh) >= 2 else [float("nan")] * 99
        result: dict[str, Any] = {
            "rate_target": args.rate,
            "committed_updates_per_s": len(writer.commits) * args.batch / args.seconds,
            "ingested_updates": ingested,
            "freshness_p50_s": pct[49],
            "freshness_p99_s": pct[98],
            "freshness_max_s": max(fresh, default=float("nan")),
            "ticks": len(ticks),
            "tick_median_s": statistics.median(d for _, _, d in ticks),
            "keys": args.keys,
            "batch": args.batch,
            "seconds": args.seconds,
        }
        table = Table(title="POSTGRES source freshness")
        table.add_column("metric")
        table.add_column("value", justify="right")
        for key, value in result.items():
            table.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value))
        console.print(table)
        RESULTS.mkdir(exist_ok=True)
        out = RESULTS / f"pg_cdc_rate{args.rate}.json"
        out.write_text(json.dumps(result, indent=2))
        console.print(f"written {out}")
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()
