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

1. *SELECT AS OF* on the server, a point lookup (``SELECT * FROM kv WHERE key
   = 1234 AS OF t``) and a scan of every key (``SELECT * FROM kv AS OF t``,
   fetched whole by the client), alternated and back to back: ``--warmup`` runs
   each, then ``--runs`` timed ones, each with psycopg over one connection from
   this process (from sending the query to the last row converted). ``t`` is
   read fresh before every run, untimed, from the location (``kv``'s upper -
   1): the source keeps no history, so a time is readable only until a later
   tick compacts past it. A run whose time was compacted away meanwhile is
   retried with a fresh one (counted: ``retries``). Median and p95 (inclusive
   interpolation).
2. The same two queries through ``timeshard query --as-of t --json`` (``--limit
   <keys>`` for the scan), a new process each run, ``--cli-runs`` runs each,
   median of the process's wall time, while the server keeps running:

   * *own Spark*: the location given as ``--blob``/``--consensus`` URIs, so the
     CLI does not find the server (it looks for one only with ``--location``)
     and starts a Spark session of its own: the query without a server;
   * *via serve*: with ``--location``, the CLI finds the server and sends it the
     query (no Spark in the CLI).

3. *Materialized view start-up*, ``--views`` views of each kind, alternated,
   each dropped once measured (so every one meets the same server: the source
   and no other view): a GROUP BY view (``SELECT key % 10 AS g, count(*) AS n
   FROM kv GROUP BY key % 10``) and a filter view (``SELECT key, value FROM kv
   WHERE key < 100``). Per view: how long CREATE took, the time from sending
   CREATE until ``SELECT count(*) FROM view`` returns (the server's SELECT
   without AS OF waits for the view's first readable time), and, polled from
   the location every 20 ms, when the view's shard first held a readable time.

The machine may be shared, and the server's work competes with the source's
ticks: every part notes the 1-minute load average before and after it, and a
thread samples ``kv``'s state every 0.25 s from the location: its upper (its
lag, wall clock - upper, is about the time since the last tick committed),
batches and rows. Prints the commit measured, the load average at start, the
tables and the ERROR/WARN lines of the server's log; writes
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
VIA_SERVE = "(ran on timeshard serve at"
NOT_READABLE = "not readable"
MAX_RETRIES = 5
VIEW_SQL = {
    "group": "SELECT key % 10 AS g, count(*) AS n FROM kv GROUP BY key % 10",
    "filter": "SELECT key, value FROM kv WHERE key < 100",
}
PATHS = {
    "server": "server, psycopg",
    "cli_own_spark": "timeshard query, own Spark",
    "cli_via_serve": "timeshard query, via serve",
}
PARTS = {
    "server": "server SELECT AS OF",
    "cli_via_serve": "timeshard query, via serve",
    "cli_own_spark": "timeshard query, own Spark",
    "views": "views",
}


@dataclass
class Server:
    """A ``timeshard serve`` child process."""

    proc: subprocess.Popen[bytes]
    port: int

    def connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="timeshard", dbname="timeshard", autocommit=True
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


def git_head() -> str:
    """The commit measured, with ``+dirty`` if ``src/`` differs from it."""
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "src"], cwd=ROOT).returncode
    return head + ("+dirty" if dirty else "")


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
            return Server(proc, int(found[-1])), time.perf_counter() - t0
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"timeshard serve did not start:\n{log.read_text(errors='replace')}")


class Times:
    """Readable times of shards, read from the location."""

    def __init__(self, location: Path) -> None:
        self.client = PersistClient(Location.embedded(location))

    def fresh(self, shard: str = "kv") -> int:
        """The latest readable time of ``shard`` now (its upper - 1)."""
        upper = self.client.state(shard).upper.time
        assert upper is not None and upper > 0, (shard, upper)
        return upper - 1

    def readable(self, shard: str) -> bool:
        """Whether ``shard`` exists and holds a readable time."""
        try:
            state = self.client.state(shard)
        except InvalidUsage:
            return False
        upper = state.upper.time
        return upper is not None and upper > 0 and state.since.less_equal(upper - 1)


class UpperSampler(threading.Thread):
    """``kv``'s state every ``period`` seconds, from a client of its own:
    (wall s, upper ms, batches, rows)."""

    def __init__(self, location: Path, period: float = 0.25) -> None:
        super().__init__(daemon=True, name="upper-sampler")
        self.client = PersistClient(Location.embedded(location))
        self.period = period
        self.samples: list[tuple[float, int, int, int]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.period):
            state = self.client.state("kv")
            if state.upper.time is not None:
                sample = (time.time(), state.upper.time, len(state.batches), state.num_rows())
                self.samples.append(sample)

    def between(self, start: float, end: float) -> dict[str, Any]:
        """kv's commits seen, its lag (median, max) and its batches at most, in a window."""
        window = [s for s in self.samples if start <= s[0] <= end]
        lags = [w - u / 1000 for w, u, _, _ in window]
        return {
            "commits": len({s[1] for s in window}) - 1 if window else 0,
            "lag_median_s": statistics.median(lags) if lags else None,
            "lag_max_s": max(lags) if lags else None,
            "batches_max": max((s[2] for s in window), default=None),
            "rows_max": max((s[3] for s in window), default=None),
        }


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


def cli_select(
    location: Path, sql: str, expect: int, via_serve: bool
) -> Callable[[int], dict[str, Any]]:
    """``timeshard query`` as a process; ``via_serve``: with ``--location``, else with URIs."""
    if via_serve:
        where = ["--location", str(location)]
    else:
        where = ["--blob", (location / "blob").as_uri()]
        where += ["--consensus", f"sqlite://{location / 'consensus.sqlite'}"]

    def run(t: int) -> dict[str, Any]:
        cmd = [TIMESHARD, "query", sql, *where, "--as-of", str(t), "--json"]
        cmd += ["--limit", str(max(expect, 50))]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), timeout=600)
        seconds = time.perf_counter() - t0
        if done.returncode != 0:
            raise RuntimeError(f"{cmd} exited {done.returncode}: {done.stdout} {done.stderr}")
        rows = json.loads(done.stdout)["rows"]
        assert len(rows) == expect, (sql, t, len(rows))
        assert (VIA_SERVE in done.stderr) == via_serve, (cmd, done.stderr)
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


def queries(args: argparse.Namespace, make: Callable[[str, int], Any]) -> dict[str, Any]:
    return {
        "point": make(f"SELECT * FROM kv WHERE key = {args.point_key}", 1),
        "scan": make("SELECT * FROM kv", args.keys),
    }


def measure(
    times: Times, runs: dict[str, Callable[[int], Any]], warmup: int, n: int
) -> dict[str, list[dict[str, Any]]]:
    """Each query ``warmup + n`` times, alternated; the last ``n`` runs of each."""
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in runs}
    for i in range(warmup + n):
        for name, run in runs.items():
            result = retried(times, run)
            if i >= warmup:
                out[name].append(result)
    return out


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


def measure_views(conn: psycopg.Connection[Any], times: Times, views: int) -> list[dict[str, Any]]:
    return [
        measure_view(conn, times, f"bench_{kind}_{i}", kind)
        for i in range(1, views + 1)
        for kind in VIEW_SQL
    ]


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
        "runs_s": xs,
        "runs": runs,
    }


def log_findings(log: Path) -> list[str]:
    """The lines of the server's log that report an error, a warning or a traceback."""
    pattern = re.compile(r"ERROR|WARN|Traceback|Exception|not restored", re.IGNORECASE)
    return [line for line in log.read_text(errors="replace").splitlines() if pattern.search(line)]


class Parts:
    """The wall-time window and the 1-minute load before and after each measured part."""

    def __init__(self) -> None:
        self.windows: dict[str, dict[str, float]] = {}

    def run(self, part: str, fn: Callable[[], Any]) -> Any:
        window = {"start": time.time(), "load1_before": os.getloadavg()[0]}
        result = fn()
        window |= {"end": time.time(), "load1_after": os.getloadavg()[0]}
        self.windows[part] = window
        return result

    def report(self, sampler: UpperSampler) -> dict[str, dict[str, Any]]:
        return {
            part: w | {"seconds": w["end"] - w["start"]} | sampler.between(w["start"], w["end"])
            for part, w in self.windows.items()
        }


def measure_selects(
    conn: psycopg.Connection[Any],
    location: Path,
    times: Times,
    parts: Parts,
    args: argparse.Namespace,
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Both queries on every path of ``PATHS``, each path a part of its own."""
    paths = {
        "server": (
            queries(args, lambda sql, n: server_select(conn, sql, n)),
            args.warmup,
            args.runs,
        ),
        "cli_via_serve": (
            queries(args, lambda sql, n: cli_select(location, sql, n, via_serve=True)),
            0,
            args.cli_runs,
        ),
        "cli_own_spark": (
            queries(args, lambda sql, n: cli_select(location, sql, n, via_serve=False)),
            0,
            args.cli_runs,
        ),
    }
    return {
        path: parts.run(path, lambda r=runs, w=warmup, n=n: measure(times, r, w, n))
        for path, (runs, warmup, n) in paths.items()
    }


def run(args: argparse.Namespace, console: Console, scratch: Path) -> dict[str, Any]:
    """Start the server, measure every part, stop it; the results document."""
    location, log = scratch / "loc", RESULTS / "serve_server.log"
    server, start_s = start_server(location, log, args.tick)
    doc: dict[str, Any] = {"server_start_s": start_s, "server_log": str(log)}
    parts, sampler = Parts(), None
    try:
        conn = server.connect()
        t0 = time.perf_counter()
        conn.execute(
            f"CREATE SOURCE kv FROM LOAD GENERATOR KEY VALUE (KEYS {args.keys}, "
            f"RATE {args.rate}, PARTITIONS {args.partitions}) ENVELOPE UPSERT (KEY (key))"
        )
        doc["create_source_s"] = time.perf_counter() - t0
        sampler = UpperSampler(location)
        sampler.start()
        doc["snapshot_wait_s"] = wait_for_snapshot(conn, args.keys)
        console.print(
            f"server up in {start_s:.1f} s; CREATE SOURCE {doc['create_source_s']:.1f} s; "
            f"every key readable {doc['snapshot_wait_s']:.1f} s later"
        )
        times = Times(location)
        results = measure_selects(conn, location, times, parts, args)
        views = parts.run("views", lambda: measure_views(conn, times, args.views))
        doc["objects_at_end"] = [
            list(r)
            for r in conn.execute(
                "SELECT name, status, lag_ms, rows, error FROM timeshard_objects"
            ).fetchall()
        ]
        conn.close()
    finally:
        if sampler is not None:
            sampler.done.set()
        doc["server_exit_code"], doc["server_stop_s"] = server.stop()
    assert sampler is not None
    doc["parts"] = parts.report(sampler)
    doc["selects"] = {
        path: {q: summary(r) for q, r in by_query.items()} for path, by_query in results.items()
    }
    doc["views"] = views
    doc["kv_upper_samples"] = sampler.samples
    doc["log_findings"] = log_findings(log)
    return doc


def select_table(doc: dict[str, Any]) -> Table:
    p = doc["params"]
    table = Table(
        "query",
        "path",
        "n",
        "median s",
        "p95 s",
        "min-max s",
        "runs s (CLI)",
        "retries",
        "/ server median",
        title=(
            f"SELECT ... AS OF t on a running server (after {p['warmup']} warm-up runs) and "
            "through timeshard query (a process a run)"
        ),
    )
    labels = {"point": f"point: key = {p['point_key']}", "scan": f"scan: {p['keys']:,} rows"}
    for query, label in labels.items():
        base = doc["selects"]["server"][query]["median_s"]
        for path, path_label in PATHS.items():
            s = doc["selects"][path][query]
            table.add_row(
                label if path == "server" else "",
                path_label,
                str(s["n"]),
                f"{s['median_s']:.3f}",
                f"{s['p95_s']:.3f}" if s["n"] >= 10 else "-",
                f"{s['min_s']:.3f}-{s['max_s']:.3f}",
                " ".join(f"{x:.2f}" for x in s["runs_s"]) if path != "server" else "",
                str(s["retries"]),
                f"{s['median_s'] / base:.1f}x",
                end_section=path == "cli_via_serve",
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


def part_table(parts: dict[str, dict[str, Any]], tick: float) -> Table:
    table = Table(
        "part",
        "seconds",
        "load1 before -> after",
        "kv commits",
        "kv lag median s",
        "kv lag max s",
        "kv batches, rows (max)",
        title=(
            f"Conditions: 1-minute load; kv's commits and lag (wall clock - upper; "
            f"tick {tick} s), sampled every 0.25 s"
        ),
    )
    for part, label in PARTS.items():
        p = parts[part]
        table.add_row(
            label,
            f"{p['seconds']:.0f}",
            f"{p['load1_before']:.2f} -> {p['load1_after']:.2f}",
            str(p["commits"]),
            "-" if p["lag_median_s"] is None else f"{p['lag_median_s']:.2f}",
            "-" if p["lag_max_s"] is None else f"{p['lag_max_s']:.2f}",
            f"{p['batches_max']}, {p['rows_max']:,}" if p["batches_max"] is not None else "-",
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
    console = Console(width=max(Console().width, 150))
    load_start, commit = os.getloadavg(), git_head()
    console.print(
        f"timeshard {commit}; load average at start (1, 5, 15 min): "
        f"{', '.join(f'{x:.2f}' for x in load_start)}; {os.cpu_count()} cores"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    wall0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="timeshard-bench-serve-") as scratch:
        doc = run(args, console, Path(scratch))
    doc = {
        "params": vars(args),
        "commit": commit,
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
    console.print(part_table(doc["parts"], args.tick))
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
