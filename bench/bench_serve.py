"""``timeshard serve``: latency of SELECT ... AS OF against ``timeshard query``, and view start-up.

    .venv/bin/python bench/bench_serve.py

One server (``timeshard serve --tick 0.5 --port 0 --dashboard-port 0``, its
output in ``bench/results/serve_server.log``) on a new embedded location runs a
KEY VALUE source ``kv`` with ``--keys`` keys over ``--partitions`` partitions,
ENVELOPE UPSERT; RATE (``--rate``) is commands per partition per tick, so the
source keeps writing ``partitions x rate`` upserts per tick while everything
below is measured: the realistic case, a server whose source is live. The
default, RATE 500 over 2 partitions, rewrites a tenth of the 10,000 keys per
tick (2,000 upserts/s if ticks keep up); a RATE of at least ``keys /
partitions`` would rewrite every key every tick. With ``--rate`` below ``keys /
partitions`` the snapshot (every key once) takes several ticks; measuring
starts once ``SELECT count(*) FROM kv`` gives ``--keys``.

1. *SELECT AS OF*, a point lookup (``SELECT * FROM kv WHERE key = 1234 AS OF
   t``) and a scan of every key (``SELECT * FROM kv AS OF t``, fetched whole by
   the client), alternated: ``--warmup`` runs each, then ``--runs`` timed ones,
   each with psycopg over one connection from this process (the time from
   sending the query to the last row converted). ``t`` is read fresh before
   every run, untimed, from the location (``kv``'s upper - 1): the source keeps
   no history, so a time is readable only until the next tick compacts past
   it. A run whose time was compacted away meanwhile is retried with a fresh
   one (counted: ``retries``). Reported: median and p95 (inclusive
   interpolation).
2. The same two queries through ``timeshard query --as-of t --json`` (``--limit
   <keys>`` for the scan), a new process each run with its own Spark session,
   while the server keeps running on the same location: the wall time of the
   process, ``--cli-runs`` runs each, median.
3. *Materialized view start-up*, ``--views`` views of each kind, alternated,
   each dropped once measured (so every one meets the same server: the source
   and no other view): a GROUP BY view (``SELECT key % 10 AS g, count(*) AS n
   FROM kv GROUP BY key % 10``) and a filter view (``SELECT key, value FROM kv
   WHERE key < 100``). Per view: how long CREATE took, the time from sending
   CREATE until ``SELECT count(*) FROM view`` returns (the server's SELECT
   without AS OF waits for the view's first readable time), and, polled from
   the location every 20 ms, when the view's shard first held a readable time.

The machine may be shared: every part notes the 1-minute load average before
and after it, and the source's lag (wall clock - ``kv``'s upper, about the
duration of its last tick) whenever a time is read. Prints the load average
at start, the tables and the ERROR/WARN lines of the server's log; writes
``bench/results/serve.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console
from rich.markup import escape
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient

RESULTS = ROOT / "bench" / "results"
TIMESHARD = str(Path(sys.executable).with_name("timeshard"))
LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")
NOT_READABLE = "not readable"
MAX_RETRIES = 5
VIEW_SQL = {
    "group": "SELECT key % 10 AS g, count(*) AS n FROM kv GROUP BY key % 10",
    "filter": "SELECT key, value FROM kv WHERE key < 100",
}


@dataclass
class Server:
    """A ``timeshard serve`` child process and a connection to it."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def connect(self) -> psycopg.Connection[Any]:
        """A connection that never prepares: after a DROP, psycopg would send DEALLOCATE ALL
        for its prepared statements, which the server rejects (0A000)."""
        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user="timeshard",
            dbname="timeshard",
            autocommit=True,
            prepare_threshold=None,
        )

    def stop(self) -> tuple[int | None, float]:
        """SIGTERM; the exit code (None: killed after 180 s) and the seconds it took."""
        t0 = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code: int | None = self.proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            code = None
        return code, time.perf_counter() - t0


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    return env


def start_server(location: Path, log: Path, tick: float) -> tuple[Server, float]:
    """Start ``timeshard serve``; the server and the seconds until it listened."""
    cmd = [TIMESHARD, "serve", "--location", str(location), "--port", "0"]
    cmd += ["--dashboard-port", "0", "--tick", str(tick)]
    t0 = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=child_env())
    while time.perf_counter() - t0 < 300:
        found = LISTENING.findall(log.read_text(errors="replace"))
        if found and proc.poll() is None:
            return Server(proc, int(found[-1]), log), time.perf_counter() - t0
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"timeshard serve did not start:\n{log.read_text(errors='replace')}")


class Times:
    """Readable times of ``kv``, read from the location; the source's lag at each."""

    def __init__(self, location: Path) -> None:
        self.client = PersistClient(Location.embedded(location))
        self.lags_ms: list[int] = []

    def fresh(self, shard: str = "kv") -> int:
        """The latest readable time of ``shard`` now (its upper - 1)."""
        upper = self.client.state(shard).upper.time
        assert upper is not None and upper > 0, (shard, upper)
        self.lags_ms.append(time.time_ns() // 1_000_000 - upper)
        return upper - 1

    def readable(self, shard: str) -> bool:
        """Whether ``shard`` exists and holds a readable time."""
        try:
            state = self.client.state(shard)
        except InvalidUsage:
            return False
        upper = state.upper.time
        return upper is not None and upper > 0 and state.since.less_equal(upper - 1)


def retried(times: Times, run: Callable[[int], dict[str, Any]]) -> dict[str, Any]:
    """``run(t)`` at a fresh time, again at a newer one while ``t`` was compacted away."""
    for attempt in range(MAX_RETRIES + 1):
        try:
            return run(times.fresh()) | {"retries": attempt}
        except (psycopg.errors.InvalidParameterValue, RuntimeError) as e:
            if NOT_READABLE not in " ".join(str(e).split()) or attempt == MAX_RETRIES:
                raise
    raise AssertionError("unreachable")


def server_select(conn: psycopg.Connection[Any], sql: str, expect: int) -> Callable[[int], Any]:
    def run(t: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        rows = conn.execute(f"{sql} AS OF {t}").fetchall()
        seconds = time.perf_counter() - t0
        assert len(rows) == expect, (sql, t, len(rows))
        return {"seconds": seconds, "as_of": t}

    return run


def cli_select(location: Path, sql: str, expect: int) -> Callable[[int], Any]:
    def run(t: int) -> dict[str, Any]:
        cmd = [TIMESHARD, "query", sql, "--location", str(location), "--as-of", str(t)]
        cmd += ["--json", "--limit", str(max(expect, 50))]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), timeout=600)
        seconds = time.perf_counter() - t0
        if done.returncode != 0:
            raise RuntimeError(f"{cmd} exited {done.returncode}: {done.stdout} {done.stderr}")
        rows = json.loads(done.stdout)["rows"]
        assert len(rows) == expect, (sql, t, len(rows))
        return {"seconds": seconds, "as_of": t}

    return run


def wait_for_snapshot(conn: psycopg.Connection[Any], keys: int) -> float:
    """Wait until ``kv`` holds every key; the seconds it took."""
    t0 = time.perf_counter()
    while True:
        row = conn.execute("SELECT count(*) FROM kv").fetchone()
        if row is not None and row[0] == keys:
            return time.perf_counter() - t0
        if time.perf_counter() - t0 > 300:
            raise RuntimeError(f"kv holds {row} keys after 300 s, expected {keys}")
        time.sleep(0.2)


def measure_selects(
    conn: psycopg.Connection[Any], times: Times, args: argparse.Namespace
) -> dict[str, list[dict[str, Any]]]:
    """The server's SELECT AS OF runs, point and scan alternated; warm-up runs left out."""
    queries = {
        "point": server_select(conn, f"SELECT * FROM kv WHERE key = {args.point_key}", 1),
        "scan": server_select(conn, "SELECT * FROM kv", args.keys),
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in queries}
    for i in range(args.warmup + args.runs):
        for name, query in queries.items():
            result = retried(times, query)
            if i >= args.warmup:
                runs[name].append(result)
    return runs


def measure_cli(
    location: Path, times: Times, args: argparse.Namespace
) -> dict[str, list[dict[str, Any]]]:
    queries = {
        "point": cli_select(location, f"SELECT * FROM kv WHERE key = {args.point_key}", 1),
        "scan": cli_select(location, "SELECT * FROM kv", args.keys),
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in queries}
    for _ in range(args.cli_runs):
        for name, query in queries.items():
            runs[name].append(retried(times, query))
    return runs


def first_readable(times: Times, shard: str, t0: float, done: threading.Event) -> list[float]:
    """Poll ``shard`` every 20 ms on a thread; the list gets the seconds since ``t0`` it took."""
    seen: list[float] = []

    def poll() -> None:
        while not done.is_set():
            if times.readable(shard):
                seen.append(time.perf_counter() - t0)
                return
            time.sleep(0.02)

    threading.Thread(target=poll, daemon=True, name=f"poll-{shard}").start()
    return seen


def measure_view(
    conn: psycopg.Connection[Any], times: Times, name: str, kind: str
) -> dict[str, Any]:
    """CREATE one view, read it once without AS OF, DROP it."""
    done = threading.Event()
    t0 = time.perf_counter()
    seen = first_readable(times, name, t0, done)
    conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {VIEW_SQL[kind]}")
    create_s = time.perf_counter() - t0
    row = conn.execute(f"SELECT count(*) FROM {name}").fetchone()
    first_read_s = time.perf_counter() - t0
    done.set()
    t1 = time.perf_counter()
    conn.execute(f"DROP MATERIALIZED VIEW {name}")
    return {
        "view": name,
        "kind": kind,
        "create_s": create_s,
        "first_read_s": first_read_s,
        "readable_in_location_s": seen[0] if seen else None,
        "count": row[0] if row else None,
        "drop_s": time.perf_counter() - t1,
    }


def quantile(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[round(q * 100) - 1]


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    xs = [r["seconds"] for r in runs]
    return {
        "n": len(xs),
        "median_s": statistics.median(xs),
        "p95_s": quantile(xs, 0.95) if len(xs) >= 2 else xs[0],
        "min_s": min(xs),
        "max_s": max(xs),
        "retries": sum(r["retries"] for r in runs),
    }


def log_findings(log: Path) -> list[str]:
    """The lines of the server's log that report an error, a warning or a traceback."""
    pattern = re.compile(r"ERROR|WARN|Traceback|Exception|not restored", re.IGNORECASE)
    return [line for line in log.read_text(errors="replace").splitlines() if pattern.search(line)]


def select_table(doc: dict[str, Any]) -> Table:
    server, cli = doc["server_select"], doc["cli_select"]
    table = Table(
        "query",
        "server median s",
        "server p95 s",
        "server min-max s",
        "retries server / CLI",
        "CLI median s",
        "CLI runs s",
        "CLI / server (medians)",
        title=(
            f"SELECT AS OF on a running server ({server['point']['n']} runs after "
            f"{doc['params']['warmup']} warm-up, psycopg) vs timeshard query "
            f"({cli['point']['n']} runs, a process each)"
        ),
    )
    labels = {
        "point": f"point: key = {doc['params']['point_key']}",
        "scan": f"scan: {doc['params']['keys']:,} rows",
    }
    for name, label in labels.items():
        s, c = server[name], cli[name]
        table.add_row(
            label,
            f"{s['median_s']:.3f}",
            f"{s['p95_s']:.3f}",
            f"{s['min_s']:.3f}-{s['max_s']:.3f}",
            f"{s['retries']} / {c['retries']}",
            f"{c['median_s']:.2f}",
            " ".join(f"{x:.2f}" for x in c["runs_s"]),
            f"{c['median_s'] / s['median_s']:.1f}x",
        )
    return table


def view_table(views: list[dict[str, Any]]) -> Table:
    table = Table(
        "view",
        "kind",
        "CREATE s",
        "CREATE -> SELECT count(*) returned s",
        "CREATE -> readable in location s",
        "count(*)",
        "DROP s",
        title="CREATE MATERIALIZED VIEW to its first readable time (each dropped after)",
    )
    for v in views:
        seen = v["readable_in_location_s"]
        table.add_row(
            v["view"],
            v["kind"],
            f"{v['create_s']:.2f}",
            f"{v['first_read_s']:.2f}",
            "-" if seen is None else f"{seen:.2f}",
            str(v["count"]),
            f"{v['drop_s']:.2f}",
        )
    return table


PARTS = {
    "server_select": "server SELECT AS OF",
    "cli_select": "timeshard query",
    "views": "views",
}


def measured_part(doc: dict[str, Any], part: str, times: Times, fn: Callable[[], Any]) -> Any:
    """``fn()``; notes in ``doc["parts"]`` the 1-minute load before and after and kv's lags."""
    times.lags_ms = []
    load1 = os.getloadavg()[0]
    t0 = time.perf_counter()
    result = fn()
    doc["parts"][part] = {
        "seconds": time.perf_counter() - t0,
        "load1_before": load1,
        "load1_after": os.getloadavg()[0],
        "source_lag_ms": times.lags_ms,
    }
    return result


def measure_views(conn: psycopg.Connection[Any], times: Times, views: int) -> list[dict[str, Any]]:
    out = []
    for i in range(1, views + 1):
        for kind in VIEW_SQL:
            times.fresh()  # kv's lag, before each view
            out.append(measure_view(conn, times, f"bench_{kind}_{i}", kind))
    times.fresh()
    return out


def run(args: argparse.Namespace, console: Console, scratch: Path) -> dict[str, Any]:
    """Start the server, measure every part, stop it; the results document."""
    location, log = scratch / "loc", RESULTS / "serve_server.log"
    server, start_s = start_server(location, log, args.tick)
    doc: dict[str, Any] = {"server_start_s": start_s, "server_log": str(log), "parts": {}}
    try:
        conn = server.connect()
        t0 = time.perf_counter()
        conn.execute(
            f"CREATE SOURCE kv FROM LOAD GENERATOR KEY VALUE (KEYS {args.keys}, "
            f"RATE {args.rate}, PARTITIONS {args.partitions}) ENVELOPE UPSERT (KEY (key))"
        )
        doc["create_source_s"] = time.perf_counter() - t0
        doc["snapshot_wait_s"] = wait_for_snapshot(conn, args.keys)
        console.print(
            f"server up in {start_s:.1f} s; CREATE SOURCE {doc['create_source_s']:.1f} s; "
            f"every key readable {doc['snapshot_wait_s']:.1f} s later"
        )
        times = Times(location)
        selects = measured_part(
            doc, "server_select", times, lambda: measure_selects(conn, times, args)
        )
        cli = measured_part(doc, "cli_select", times, lambda: measure_cli(location, times, args))
        views = measured_part(doc, "views", times, lambda: measure_views(conn, times, args.views))
        doc["objects_at_end"] = [
            list(r)
            for r in conn.execute(
                "SELECT name, status, lag_ms, rows, error FROM timeshard_objects"
            ).fetchall()
        ]
        conn.close()
    finally:
        doc["server_exit_code"], doc["server_stop_s"] = server.stop()
    doc["server_select"] = {k: summary(v) | {"runs": v} for k, v in selects.items()}
    doc["cli_select"] = {
        k: summary(v) | {"runs": v, "runs_s": [r["seconds"] for r in v]} for k, v in cli.items()
    }
    doc["views"] = views
    doc["log_findings"] = log_findings(log)
    return doc


def part_table(parts: dict[str, dict[str, Any]]) -> Table:
    table = Table(
        "part",
        "seconds",
        "load1 before -> after",
        "kv lag median s",
        "kv lag max s",
        title="Conditions: the machine's 1-minute load and kv's lag (wall clock - upper)",
    )
    for part, label in PARTS.items():
        p = parts[part]
        lags = p["source_lag_ms"]
        table.add_row(
            label,
            f"{p['seconds']:.0f}",
            f"{p['load1_before']:.2f} -> {p['load1_after']:.2f}",
            f"{statistics.median(lags) / 1000:.2f}",
            f"{max(lags) / 1000:.2f}",
        )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--rate", type=int, default=500, help="per partition per tick")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--tick", type=float, default=0.5, help="the server's --tick, s")
    parser.add_argument("--point-key", type=int, default=1234)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--cli-runs", type=int, default=3)
    parser.add_argument("--views", type=int, default=3, help="views of each kind")
    args = parser.parse_args()
    console = Console(width=max(Console().width, 140))
    load_start = os.getloadavg()
    console.print(
        f"load average at start (1, 5, 15 min): {', '.join(f'{x:.2f}' for x in load_start)}; "
        f"{os.cpu_count()} cores"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    wall0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="timeshard-bench-serve-") as scratch:
        doc = run(args, console, Path(scratch))
    doc = {
        "params": vars(args),
        "cpu_count": os.cpu_count(),
        "load_avg_start": load_start,
        "load_avg_end": os.getloadavg(),
        "wall_s": time.perf_counter() - wall0,
    } | doc
    per_tick = args.partitions * args.rate
    console.print(
        f"kv: KEYS {args.keys:,}, PARTITIONS {args.partitions}, RATE {args.rate:,}: "
        f"{per_tick:,} upserts per tick of {args.tick} s (~{per_tick / args.tick:,.0f}/s "
        "if ticks keep up), live throughout"
    )
    console.print(select_table(doc))
    console.print(view_table(doc["views"]))
    console.print(part_table(doc["parts"]))
    console.print(
        f"load average at end: {', '.join(f'{x:.2f}' for x in doc['load_avg_end'])}; "
        f"server: start {doc['server_start_s']:.1f} s, stop {doc['server_stop_s']:.1f} s, "
        f"exit code {doc['server_exit_code']}; whole run {doc['wall_s']:.0f} s"
    )
    findings = doc["log_findings"]
    console.print(f"server log {doc['server_log']}: {len(findings)} ERROR/WARN/traceback lines")
    for line in findings[:20]:
        console.print(f"  {escape(line)}", soft_wrap=True)
    out = RESULTS / "serve.json"
    out.write_text(json.dumps(doc, indent=2, default=str))
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
