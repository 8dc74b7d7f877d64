"""W4, persist: latency of a small compare_and_append, SQLite vs PostgreSQL consensus.

Each measured operation is one ``WriteHandle.compare_and_append`` of
``--rows`` rows (the pyarrow path: no Spark) at ``[i, i + 1)`` on a local
file blob, after ``--warmup`` unmeasured appends. It writes one Parquet part
to the blob and commits the new shard state through consensus. Per run it
reports p50, p99 and mean latency, and, through a counting wrapper around
the consensus, how many consensus calls one append makes, the time spent in
them, and the mean size of the state document written. The writer compacts
and collects garbage in the background, as the product's writers do (its
consensus calls are counted too); ``--no-compaction`` turns that off to show
how the state document grows without it.

The peers, in the same run, on the same server:

- *raw sqlite3*: ``INSERT ... ON CONFLICT DO NOTHING`` at ``seqno + 1`` into a
  ``(shard, seqno, data)`` table in WAL mode with ``synchronous=FULL`` (the
  settings of timeshard's SQLite consensus), one statement per
  compare-and-set, data of the size timeshard's state document had: the
  floor of a durable compare-and-set on one machine.
- *raw psycopg*: the same statement, autocommit, on the same PostgreSQL
  server: one round trip per compare-and-set.

PostgreSQL is a throwaway cluster started here (``tests/pg_server.py``,
``fsync=off``) unless ``--pg-dsn`` names one. Every figure is the median over
``--repeats`` runs; the ratios are timeshard's figure over the reference's.
This script supersedes ``bench_append_latency.py`` (``--rows 100`` gives its
figures).

    source scripts/bootstrap.sh
    python bench/bench_w4_persist.py            # 500 appends x 3 runs per system
    python bench/bench_w4_persist.py --quick    # 60 appends x 3 runs

Writes bench/results/w4_persist.json and bench/results/w4_persist.png.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from timeshard.location import Location, open_blob, open_consensus
from timeshard.location.consensus import CaSResult, Consensus, SeqNo, VersionedData
from timeshard.persist import Appended, PersistClient

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])
RESULTS = ROOT / "bench" / "results"
RAW_TABLE = (
    "CREATE TABLE IF NOT EXISTS cas (shard TEXT NOT NULL, seqno BIGINT NOT NULL, "
    "data {blob} NOT NULL, PRIMARY KEY (shard, seqno))"
)


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q``-quantile (``0 < q <= 1``) of ``values``.

    >>> percentile([5.0, 1.0, 3.0, 2.0, 4.0], 0.5)
    3.0
    >>> percentile(list(map(float, range(1, 101))), 0.99)
    99.0
    """
    if not values or not 0 < q <= 1:
        raise ValueError(f"percentile of {len(values)} values at q={q}")
    ordered = sorted(values)
    rank = -(-len(ordered) * q // 1)  # ceil(n * q), 1-based
    return ordered[int(rank) - 1]


def summarize(latencies_ms: list[float]) -> dict[str, float]:
    """p50, p99 and mean of one run's latencies."""
    return {
        "p50_ms": percentile(latencies_ms, 0.5),
        "p99_ms": percentile(latencies_ms, 0.99),
        "mean_ms": statistics.fmean(latencies_ms),
    }


def median_runs(runs: list[dict[str, float]]) -> dict[str, float]:
    """The median of each figure over runs (each run a dict of the same figures)."""
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


@dataclass
class CountingConsensus:
    """A consensus that counts and times the calls it forwards to ``inner``."""

    inner: Consensus
    calls: int = 0
    seconds: float = 0.0
    written_bytes: list[int] = field(default_factory=list)

    def _timed(self, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1

    def head(self, key: str) -> VersionedData | None:
        result: VersionedData | None = self._timed(lambda: self.inner.head(key))
        return result

    def compare_and_set(self, key: str, expected: SeqNo | None, new: VersionedData) -> CaSResult:
        self.written_bytes.append(len(new.data))
        result: CaSResult = self._timed(lambda: self.inner.compare_and_set(key, expected, new))
        return result

    def scan(self, key: str, from_seqno: SeqNo, limit: int) -> list[VersionedData]:
        result: list[VersionedData] = self._timed(lambda: self.inner.scan(key, from_seqno, limit))
        return result

    def truncate(self, key: str, seqno: SeqNo) -> int:
        result: int = self._timed(lambda: self.inner.truncate(key, seqno))
        return result

    def list_keys(self) -> list[str]:
        result: list[str] = self._timed(self.inner.list_keys)
        return result


def updates(rows: int, ts: int) -> pa.Table:
    """``rows`` updates at ``ts`` with diff 1."""
    return pa.table(
        {
            "k": pa.array(range(rows), pa.int64()),
            "v": [f"value-{i}" for i in range(rows)],
            "_ts": pa.array([ts] * rows, pa.int64()),
            "_diff": pa.array([1] * rows, pa.int64()),
        }
    )


def timeshard_run(
    blob_uri: str,
    consensus_uri: str,
    rows: int,
    appends: int,
    warmup: int,
    compaction: bool = True,
) -> dict[str, float]:
    """One run of ``warmup + appends`` appends to a new shard; figures of the measured ones."""
    counting = CountingConsensus(open_consensus(consensus_uri))
    client = PersistClient(Location(open_blob(blob_uri), counting))
    writer = client.open_writer(
        f"w4-{uuid.uuid4().hex[:8]}", SCHEMA, background_compaction=compaction
    )
    latencies: list[float] = []
    for i in range(warmup + appends):
        table = updates(rows, i)
        if i == warmup:
            counting.calls, counting.seconds, counting.written_bytes = 0, 0.0, []
        t0 = time.perf_counter()
        result = writer.compare_and_append(table, i, i + 1)
        elapsed = time.perf_counter() - t0
        assert isinstance(result, Appended), result
        if i >= warmup:
            latencies.append(elapsed * 1000)
    if writer.compactor is not None:
        writer.compactor.wait_idle(60)
    writer.expire()
    close = getattr(counting.inner, "close", None)
    if close is not None:
        close()
    return {
        **summarize(latencies),
        "consensus_calls_per_append": counting.calls / appends,
        "consensus_ms_per_append": counting.seconds * 1000 / appends,
        "state_bytes": statistics.fmean(counting.written_bytes or [0]),
    }


def raw_sqlite_run(path: Path, payload: int, appends: int, warmup: int) -> dict[str, float]:
    """Compare-and-set floor: one ``INSERT ... ON CONFLICT DO NOTHING`` per operation."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(RAW_TABLE.format(blob="BLOB"))
        shard, data = uuid.uuid4().hex, bytes(payload)
        latencies: list[float] = []
        for seqno in range(warmup + appends):
            t0 = time.perf_counter()
            cursor = conn.execute(
                "INSERT INTO cas (shard, seqno, data) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                (shard, seqno, data),
            )
            elapsed = time.perf_counter() - t0
            assert cursor.rowcount == 1, (seqno, cursor.rowcount)
            if seqno >= warmup:
                latencies.append(elapsed * 1000)
    finally:
        conn.close()
    return summarize(latencies)


def raw_postgres_run(dsn: str, payload: int, appends: int, warmup: int) -> dict[str, float]:
    """The same compare-and-set on PostgreSQL: autocommit, one round trip."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(RAW_TABLE.format(blob="BYTEA"))
        shard, data = uuid.uuid4().hex, bytes(payload)
        latencies: list[float] = []
        for seqno in range(warmup + appends):
            t0 = time.perf_counter()
            cursor = conn.execute(
                "INSERT INTO cas (shard, seqno, data) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                (shard, seqno, data),
            )
            elapsed = time.perf_counter() - t0
            assert cursor.rowcount == 1, (seqno, cursor.rowcount)
            if seqno >= warmup:
                latencies.append(elapsed * 1000)
    return summarize(latencies)


def measure(args: argparse.Namespace, dsn: str, tmp: Path) -> dict[str, dict[str, Any]]:
    """Every system, ``args.repeats`` runs each, interleaved; the medians and the runs."""
    systems = ["timeshard sqlite", "timeshard postgres", "raw sqlite3", "raw psycopg"]
    runs: dict[str, list[dict[str, float]]] = {s: [] for s in systems}
    blob = f"file://{tmp}/blob"
    for rep in range(args.repeats):
        sqlite_uri = f"sqlite://{tmp}/consensus-{rep}.sqlite"
        run = (args.rows, args.appends, args.warmup, args.compaction)
        ts_sqlite = timeshard_run(blob, sqlite_uri, *run)
        ts_pg = timeshard_run(blob, dsn, *run)
        runs["timeshard sqlite"].append(ts_sqlite)
        runs["timeshard postgres"].append(ts_pg)
        runs["raw sqlite3"].append(
            raw_sqlite_run(
                tmp / f"raw-{rep}.sqlite", int(ts_sqlite["state_bytes"]), args.appends, args.warmup
            )
        )
        runs["raw psycopg"].append(
            raw_postgres_run(dsn, int(ts_pg["state_bytes"]), args.appends, args.warmup)
        )
    return {s: {"median": median_runs(r), "runs": r} for s, r in runs.items()}


RATIOS = [
    ("timeshard postgres", "timeshard sqlite"),
    ("timeshard sqlite", "raw sqlite3"),
    ("timeshard postgres", "raw psycopg"),
]


def ratios(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``"a / b"`` -> figure -> a's median over b's median, for each pair in RATIOS."""
    out: dict[str, dict[str, float]] = {}
    for a, b in RATIOS:
        ma, mb = results[a]["median"], results[b]["median"]
        out[f"{a} / {b}"] = {k: ma[k] / mb[k] for k in ("p50_ms", "p99_ms", "mean_ms")}
    return out


def print_tables(
    console: Console,
    results: dict[str, dict[str, Any]],
    rel: dict[str, dict[str, float]],
    title: str,
) -> None:
    table = Table(
        "system",
        "p50 ms",
        "p99 ms",
        "mean ms",
        "consensus calls",
        "consensus ms",
        "state B",
        title=title,
    )
    for name, r in results.items():
        m = r["median"]
        extra = (
            [
                f"{m['consensus_calls_per_append']:.1f}",
                f"{m['consensus_ms_per_append']:.2f}",
                f"{m['state_bytes']:,.0f}",
            ]
            if "consensus_calls_per_append" in m
            else ["1", "", ""]
        )
        table.add_row(
            name, f"{m['p50_ms']:.2f}", f"{m['p99_ms']:.2f}", f"{m['mean_ms']:.2f}", *extra
        )
    console.print(table)
    ratio_table = Table("ratio", "p50", "p99", "mean", title="ratios of medians")
    for name, r in rel.items():
        ratio_table.add_row(name, *(f"{r[k]:.2f}x" for k in ("p50_ms", "p99_ms", "mean_ms")))
    console.print(ratio_table)


def plot(results: dict[str, dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.38
    xs = range(len(names))
    for offset, key in ((-width / 2, "p50_ms"), (width / 2, "p99_ms")):
        ax.bar(
            [x + offset for x in xs],
            [results[n]["median"][key] for n in names],
            width,
            label=key.removesuffix("_ms"),
        )
    ax.set_xticks(list(xs), names, rotation=10)
    ax.set_ylabel("ms")
    ax.set_yscale("log")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--appends", type=int, default=500, help="measured appends per run")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rows", type=int, default=10, help="rows per append")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pg-dsn", default=None, help="use this server instead of a new one")
    parser.add_argument("--quick", action="store_true", help="60 appends per run")
    parser.add_argument(
        "--no-compaction",
        dest="compaction",
        action="store_false",
        help="a writer without background compaction and GC (the state grows per append)",
    )
    args = parser.parse_args()
    if args.quick:
        args.appends = 60
    pg = None
    if args.pg_dsn is None:
        from tests.pg_server import PostgresServer

        pg = PostgresServer()
        pg.start()
        dsn = pg.isolated_dsn("w4")
    else:
        dsn = args.pg_dsn
    try:
        with tempfile.TemporaryDirectory(prefix="timeshard-w4-") as tmp:
            results = measure(args, dsn, Path(tmp))
    finally:
        if pg is not None:
            pg.cleanup()
    rel = ratios(results)
    title = (
        f"W4 compare_and_append of {args.rows} rows, file blob, {args.appends} appends "
        f"(+{args.warmup} warm-up), median of {args.repeats} runs"
    )
    console = Console(width=120)
    print_tables(console, results, rel, title)
    RESULTS.mkdir(parents=True, exist_ok=True)
    config = {k: v for k, v in vars(args).items() if k != "pg_dsn"}
    (RESULTS / "w4_persist.json").write_text(
        json.dumps(
            {"benchmark": "w4_persist", "config": config, "systems": results, "ratios": rel},
            indent=2,
        )
    )
    plot(results, RESULTS / "w4_persist.png", title)
    console.print(f"wrote {RESULTS / 'w4_persist.json'} and {RESULTS / 'w4_persist.png'}")


if __name__ == "__main__":
    main()
