"""Results of a comparison: one JSON per system and repetition, ratios, a table and a plot.

A system's run writes one JSON document (``SCHEMA``)::

    {"schema": "timeshard-bench-result/1",
     "system": "delta", "workload": "w1", "versions": {"pyspark": "4.2.0", ...},
     "params": {...},                     # what the run was given
     "batches": [                         # one per input batch processed, batch 0 = snapshot
        {"index": 0, "rows": 1000000,     # input rows of the batch
         "step": 0,                       # the processing step (micro-batch, tick) it was in
         "available": 1.7e9,              # wall time (epoch s) the batch became available
         "start": ..., "end": ...,        # wall time the step that processed it began / ended
         "visible": ...}, ...],           # wall time its effect was visible in the output
     "totals": {"rows": ..., "wall_s": ...},
     "peak_rss_bytes": 123,               # RSS of the process tree incl. the JVM (psutil)
     "disk_bytes": 456,                   # the output (and state) on disk, after compaction
     "notes": ["..."], "error": null}

Several input batches may share a step (a micro-batch that found several
files). The metrics below are derived from that document the same way for
every system, from the batches with ``index >= 1`` (the snapshot is reported
apart as ``load_s``):

* ``rows_per_s``: input rows / busy seconds (the sum of the durations of the
  distinct steps that processed them) -- what the system sustains;
* ``freshness_p50_s`` / ``p99``: ``visible - available`` per batch;
* ``freshness_steady_p50_s``: the p50 of the batches made available
  :data:`WARMUP_S` or more after the first: the steady state, without the
  first minute after the load (the JVM's warm-up, the load's compaction), which
  dominates the p50 of a run of a minute or two (None for a shorter run);
* ``step_p50_s``: the median step duration (the per-tick latency);
* ``peak_rss_bytes``, ``disk_bytes``.

:func:`run_child` runs a system as a child process and samples the RSS of
its process tree; :func:`summarize` takes the medians over repetitions and
the ratios of timeshard to each peer (per repetition, then the median);
:func:`print_table`, :func:`save_json` and :func:`save_plot` report them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SCHEMA = "timeshard-bench-result/1"
ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"

# metric -> (label, higher is better, format)
METRICS: dict[str, tuple[str, bool, str]] = {
    "rows_per_s": ("rows/s", True, "{:,.0f}"),
    "freshness_p50_s": ("freshness p50 s", False, "{:.2f}"),
    "freshness_steady_p50_s": ("freshness p50 after 60 s", False, "{:.2f}"),
    "freshness_p99_s": ("freshness p99 s", False, "{:.2f}"),
    "step_p50_s": ("step p50 s", False, "{:.2f}"),
    "load_s": ("load s", False, "{:.1f}"),
    "peak_rss_bytes": ("peak RSS MiB", False, "{:,.0f}"),
    "disk_bytes": ("disk MiB", False, "{:,.1f}"),
}
_MIB = ("peak_rss_bytes", "disk_bytes")
#: Batches made available this long after the first are the steady state
#: (``freshness_steady_p50_s``).
WARMUP_S = 60.0


def new_result(system: str, workload: str, params: dict[str, Any]) -> dict[str, Any]:
    """An empty result document for ``system``."""
    return {
        "schema": SCHEMA,
        "system": system,
        "workload": workload,
        "versions": {},
        "params": params,
        "batches": [],
        "totals": {},
        "peak_rss_bytes": None,
        "disk_bytes": None,
        "notes": [],
        "error": None,
    }


def add_batch(
    result: dict[str, Any],
    index: int,
    rows: int,
    step: int,
    available: float,
    start: float,
    end: float,
    visible: float | None = None,
) -> None:
    result["batches"].append(
        {
            "index": index,
            "rows": rows,
            "step": step,
            "available": available,
            "start": start,
            "end": end,
            "visible": end if visible is None else visible,
        }
    )


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def write_result(result: dict[str, Any], out: Path) -> None:
    timed = [b for b in result["batches"] if b["index"] >= 1]
    if timed:
        result["totals"] = {
            **result["totals"],
            "rows": sum(b["rows"] for b in timed),
            "wall_s": max(b["visible"] for b in timed) - min(b["available"] for b in timed),
        }
    Path(out).write_text(json.dumps(result, indent=1, default=str))


class RssSampler(threading.Thread):
    """The peak RSS of a process and its descendants, sampled every ``period`` seconds."""

    def __init__(self, pid: int, period: float = 0.2) -> None:
        super().__init__(daemon=True, name=f"rss-{pid}")
        self.pid = pid
        self.period = period
        self.peak = 0
        self._done = threading.Event()

    def run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        while not self._done.is_set():
            total = 0
            try:
                for p in [root, *root.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        total += p.memory_info().rss
            except psutil.Error:
                return
            self.peak = max(self.peak, total)
            self._done.wait(self.period)

    def stop(self) -> int:
        self._done.set()
        self.join(timeout=5)
        return self.peak


def child_env(python: Path) -> dict[str, str]:
    """The environment of a child running Spark with ``python``."""
    env = dict(os.environ)
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=str(python),
        PYSPARK_DRIVER_PYTHON=str(python),
    )
    env.pop("SPARK_HOME", None)  # each venv's pyspark brings its own
    return env


RUN_OPTIONS = ("interval", "batches", "budget_s", "driver_memory")


def option_flags(opts: dict[str, Any], keys: Sequence[str] = RUN_OPTIONS) -> list[str]:
    """The command-line flags of the run options ``keys`` that ``opts`` sets."""
    flags: list[str] = []
    for k in keys:
        if opts.get(k) is not None:
            flags += [f"--{k.replace('_', '-')}", str(opts[k])]
    return flags


def run_child(
    cmd: Sequence[str], out_json: Path, timeout_s: float, system: str, workload: str
) -> None:
    """Run ``cmd`` (which writes ``out_json``); add the peak RSS of its process tree.

    If the child fails or runs past ``timeout_s`` (its process group is then
    killed), ``out_json`` records the error instead.
    """
    out_json = Path(out_json)
    out_json.unlink(missing_ok=True)
    log = out_json.with_suffix(".log")
    python = Path(cmd[0])
    with log.open("w") as f:
        proc = subprocess.Popen(
            list(cmd),
            stdout=f,
            stderr=subprocess.STDOUT,
            env=child_env(python),
            start_new_session=True,
        )
        sampler = RssSampler(proc.pid)
        sampler.start()
        error = None
        try:
            rc = proc.wait(timeout=timeout_s)
            if rc != 0:
                error = f"exit code {rc}; see {log}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            error = f"killed after {timeout_s:.0f} s; see {log}"
        peak = sampler.stop()
    if out_json.exists():
        result = json.loads(out_json.read_text())
    else:
        result = new_result(system, workload, {})
        error = error or f"no result written; see {log}"
    if error:
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]
        result["error"] = error + ("\n" + "\n".join(tail) if tail else "")
    result["peak_rss_bytes"] = peak
    out_json.write_text(json.dumps(result, indent=1))


# -- metrics ------------------------------------------------------------------------------------


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def metrics(result: dict[str, Any]) -> dict[str, float | None]:
    """The figures of one run (None where it has none)."""
    timed = [b for b in result["batches"] if b["index"] >= 1 and b.get("visible") is not None]
    snapshot = [b for b in result["batches"] if b["index"] == 0]
    steps: dict[int, float] = {}
    for b in timed:
        steps[b["step"]] = b["end"] - b["start"]
    busy = sum(steps.values())
    fresh = [b["visible"] - b["available"] for b in timed]
    out: dict[str, float | None] = dict.fromkeys(METRICS)
    if timed and busy > 0:
        out["rows_per_s"] = sum(b["rows"] for b in timed) / busy
        out["freshness_p50_s"] = statistics.median(fresh)
        out["freshness_p99_s"] = _quantile(fresh, 0.99)
        warm = min(b["available"] for b in timed) + WARMUP_S
        steady = [b["visible"] - b["available"] for b in timed if b["available"] >= warm]
        out["freshness_steady_p50_s"] = statistics.median(steady) if steady else None
        out["step_p50_s"] = statistics.median(list(steps.values()))
    if snapshot:
        out["load_s"] = snapshot[0]["end"] - snapshot[0]["start"]
    out["peak_rss_bytes"] = result.get("peak_rss_bytes")
    out["disk_bytes"] = result.get("disk_bytes")
    return out


def summarize(runs: dict[str, list[dict[str, Any]]], base: str = "timeshard") -> dict[str, Any]:
    """Medians per system over repetitions, and ratios ``base / system`` per repetition.

    ``runs[system][rep]`` is a result document; repetition ``rep`` of every
    system ran in the same round. The ratio of a metric is the median over
    repetitions of ``base[rep] / system[rep]`` (for rows/s above 1 means
    timeshard is faster; for times and bytes below 1 means timeshard is
    smaller).
    """
    systems: dict[str, Any] = {}
    for system, results in runs.items():
        per_rep = [metrics(r) for r in results]
        medians: dict[str, float | None] = {}
        for m in METRICS:
            vals = [v for p in per_rep if (v := p[m]) is not None]
            medians[m] = statistics.median(vals) if vals else None
        systems[system] = {
            "reps": len(results),
            "ok_reps": sum(1 for r in results if not r.get("error")),
            "errors": [r["error"] for r in results if r.get("error")],
            "notes": sorted({n for r in results for n in r.get("notes", [])}),
            "versions": results[0].get("versions", {}) if results else {},
            "per_rep": per_rep,
            "median": medians,
        }
    ratios: dict[str, dict[str, float | None]] = {}
    for system in runs:
        if system == base or base not in runs:
            continue
        ratios[system] = {}
        for m in METRICS:
            rs = []
            for a, b in zip(systems[base]["per_rep"], systems[system]["per_rep"], strict=False):
                if a[m] is not None and b[m]:
                    rs.append(a[m] / b[m])
            ratios[system][m] = statistics.median(rs) if rs else None
    return {"systems": systems, "ratios": ratios, "base": base}


def _fmt(metric: str, value: float | None) -> str:
    if value is None:
        return "-"
    if metric in _MIB:
        value = value / 2**20
    return METRICS[metric][2].format(value)


def print_table(summary: dict[str, Any], title: str, keys: Sequence[str]) -> None:
    """Medians per system, then the ratios of timeshard to each peer."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 140))
    table = Table("system", "reps ok", *(METRICS[k][0] for k in keys), title=title)
    for system, s in summary["systems"].items():
        table.add_row(
            system, f"{s['ok_reps']}/{s['reps']}", *(_fmt(k, s["median"][k]) for k in keys)
        )
    console.print(table)
    ratios = Table(
        "timeshard / peer",
        *(METRICS[k][0] for k in keys),
        title=f"{title}: ratios (median over repetitions of the same-round ratio)",
    )
    for system, r in summary["ratios"].items():
        ratios.add_row(system, *("-" if r[k] is None else f"{r[k]:.2f}x" for k in keys))
    console.print(ratios)
    for system, s in summary["systems"].items():
        for note in s["notes"]:
            console.print(f"[dim]{system}: {note}[/dim]")
        for err in s["errors"]:
            console.print(f"[red]{system}: {err}[/red]")


def save_json(doc: dict[str, Any], name: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(doc, indent=1))
    return path


def save_plot(runs: dict[str, list[dict[str, Any]]], name: str, title: str) -> Path:
    """Throughput (rows/s of each step) and freshness of each batch over time, first repetition."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for system, results in runs.items():
        ok = [r for r in results if r["batches"] and not r.get("error")] or results
        if not ok or not ok[0]["batches"]:
            continue
        timed = [b for b in ok[0]["batches"] if b["index"] >= 1]
        if not timed:
            continue
        t0 = min(b["available"] for b in timed)
        steps: dict[int, dict[str, float]] = {}
        for b in timed:
            s = steps.setdefault(b["step"], {"start": b["start"], "end": b["end"], "rows": 0})
            s["rows"] += b["rows"]
        xs = [s["end"] - t0 for s in steps.values()]
        top.plot(xs, [s["rows"] / max(s["end"] - s["start"], 1e-9) for s in steps.values()], "o-")
        bottom.plot(
            [b["visible"] - t0 for b in timed],
            [b["visible"] - b["available"] for b in timed],
            "o-",
            label=system,
        )
    top.set_ylabel("rows/s (per step)")
    top.set_yscale("log")
    bottom.set_ylabel("freshness s (available -> visible)")
    bottom.set_xlabel("s since the first timed batch was available")
    bottom.legend()
    fig.suptitle(title)
    fig.tight_layout()
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def versions(*modules: str) -> dict[str, str]:
    """Versions of the named distributions, and of Python."""
    from importlib import metadata

    out = {"python": sys.version.split()[0]}
    for m in modules:
        try:
            out[m] = metadata.version(m)
        except metadata.PackageNotFoundError:
            out[m] = "missing"
    return out


def wait_until(t: float) -> None:
    delay = t - time.time()
    if delay > 0:
        time.sleep(delay)


def run_ticks(
    result: dict[str, Any],
    manifest: Any,
    last: int,
    interval: float,
    budget_s: float,
    process: Any,
    idle: Any = None,
) -> None:
    """Drive a system tick by tick, as Spark's processing-time trigger does.

    Batch 0 is processed first (``process([0])``), then batches ``1 ..
    last`` become available by a :class:`inputs.Schedule`; at every multiple
    of ``interval`` (or at once, if the previous tick overran) the batches
    available and not yet processed go to ``process(indices)``; a tick with
    none calls ``idle()`` if given. Stops after ``budget_s`` seconds of
    schedule. Every processed batch is recorded in ``result``.
    """
    from inputs import Schedule

    t = time.time()
    process([0])
    end = time.time()
    add_batch(result, 0, manifest.rows(0), 0, t, t, end)
    schedule = Schedule(interval, time.time())
    deadline = schedule.start + budget_s
    done, step, started = 1, 1, schedule.start - interval / 2
    while done <= last and time.time() < deadline:
        wait_until(schedule.next_tick(started) if time.time() < started + interval else 0)
        started = time.time()
        n = schedule.released(started, last + 1)
        if n <= done:
            if idle is not None:
                idle()
            continue
        indices = list(range(done, n))
        process(indices)
        end = time.time()
        for i in indices:
            add_batch(result, i, manifest.rows(i), step, schedule.available(i), started, end)
        done, step = n, step + 1


class StreamRecorder:
    """What a Structured Streaming peer's ``foreachBatch`` saw, for :func:`run_stream`.

    Call :meth:`begin` first thing in ``foreachBatch`` and :meth:`done` once the
    micro-batch's output is committed (visible).
    """

    def __init__(self, checkpoint: Path) -> None:
        self.checkpoint = Path(checkpoint)
        self.steps: dict[int, dict[str, Any]] = {}
        self.visible: set[int] = set()
        self.lock = threading.Lock()

    def begin(self, batch_id: int) -> list[int]:
        """The input batches of micro-batch ``batch_id`` (from the checkpoint's source log)."""
        from inputs import micro_batch_indices

        indices: list[int] = micro_batch_indices(self.checkpoint, batch_id)
        with self.lock:
            self.steps[batch_id] = {"indices": indices, "begin": time.time()}
        return indices

    def done(self, batch_id: int) -> None:
        with self.lock:
            self.steps[batch_id]["end"] = time.time()
            self.visible.update(self.steps[batch_id]["indices"])


def run_stream(
    result: dict[str, Any],
    manifest: Any,
    releaser: Any,
    recorder: StreamRecorder,
    query: Any,
    last: int,
    interval: float,
    budget_s: float,
    rows: Any = None,
) -> None:
    """Feed a started streaming ``query`` by ``releaser`` and record its micro-batches.

    Batch 0 (already released) must be visible first; then batches ``1 ..
    last`` are released on schedule until all are visible or ``budget_s``
    passed. A step's start is its trigger's start (from the query's progress
    reports), its end when ``foreachBatch`` finished. ``rows(index)`` gives a
    batch's input rows (default: the manifest's).
    """
    from datetime import datetime

    rows = rows or manifest.rows

    def wait_for(indices: set[int], deadline: float) -> None:
        while time.time() < deadline and not indices <= recorder.visible:
            if query.exception() is not None:
                raise RuntimeError(f"streaming query failed: {query.exception()}")
            time.sleep(0.05)

    wait_for({0}, time.time() + 900)
    schedule = releaser.start_schedule(interval)
    wait_for(set(range(1, last + 1)), schedule.start + budget_s)
    releaser.stop()
    query.stop()
    starts = {}
    for p in query.recentProgress:
        ts = datetime.fromisoformat(p.timestamp.replace("Z", "+00:00")).timestamp()
        starts[p.batchId] = ts
    for batch_id, s in sorted(recorder.steps.items()):
        if "end" not in s:
            continue
        start = starts.get(batch_id, s["begin"])
        for i in s["indices"]:
            add_batch(result, i, rows(i), batch_id, releaser.available[i], start, s["end"])
    missing = sorted(set(range(1, last + 1)) - recorder.visible)
    if missing:
        result["notes"].append(f"batches not processed within the budget: {missing}")


def ensure_venv(name: str, requirements: Sequence[str]) -> Path:
    """The python of ``bench/.venvs/<name>/`` with ``requirements``, installed on first use."""
    import hashlib

    venv = ROOT / "bench" / ".venvs" / name
    python = venv / "bin" / "python"
    digest = hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:12]
    stamp = venv / f".installed-{digest}"
    if not stamp.exists():
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        print(f"installing {' '.join(requirements)} into {venv}", flush=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *requirements], check=True)
        stamp.touch()
    return python


def load_peer(name: str) -> Any:
    """The ``run`` launcher of ``bench/compare/peer_<name>.py``, or None if it has none."""
    import importlib.util

    path = ROOT / "bench" / "compare" / f"peer_{name}.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(f"peer_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, "run", None)


def run_systems(
    workload: str, input_dir: Path, launchers: dict[str, Any], reps: int, opts: dict[str, Any]
) -> dict[str, list[dict[str, Any]]]:
    """Run every system once per repetition, one after another; their result documents.

    A launcher that writes no result (a workload it does not implement) is
    left out of that repetition.
    """
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in launchers}
    out_dir = RESULTS / f"{workload}_runs"
    out_dir.mkdir(parents=True, exist_ok=True)
    for rep in range(reps):
        for name, launcher in launchers.items():
            out = out_dir / f"{name}-rep{rep}.json"
            out.unlink(missing_ok=True)
            print(f"rep {rep + 1}/{reps}: {name} ...", flush=True)
            t0 = time.time()
            launcher(workload, input_dir, out, **opts)
            if out.exists():
                runs[name].append(json.loads(out.read_text()))
                err = runs[name][-1].get("error")
                print(
                    f"  {time.time() - t0:.0f} s" + (f", error: {err}" if err else ""), flush=True
                )
    return {name: rs for name, rs in runs.items() if rs}


def launchers_for(peers: str, known: Sequence[str], base: Any) -> dict[str, Any]:
    """timeshard's launcher ``base`` and those of the available ``peers`` (comma-separated)."""
    out: dict[str, Any] = {"timeshard": base}
    for name in [p for p in peers.split(",") if p]:
        if name not in known:
            raise SystemExit(f"unknown peer {name!r}; choose from {','.join(known)}")
        launcher = load_peer(name)
        if launcher is None:
            print(f"peer {name}: not available (no bench/compare/peer_{name}.py with run())")
            continue
        out[name] = launcher
    return out


# -- goals --------------------------------------------------------------------------------------


def goal(
    name: str,
    measured: float | None,
    target: float,
    *,
    at_most: bool,
    unit: str = "x",
    spec_size: bool = True,
    fmt: str = "{:.2f}",
) -> dict[str, Any]:
    """A goal of an issue against its measured figure: ``measured <= target`` if ``at_most``.

    ``spec_size`` says whether the run had the sizes the goal is stated
    for; a goal met at other sizes is reported, but not as met at spec size.
    """
    met = None if measured is None else (measured <= target if at_most else measured >= target)
    return {
        "goal": name,
        "target": ("<= " if at_most else ">= ") + fmt.format(target) + unit,
        "measured": "-" if measured is None else fmt.format(measured) + unit,
        "value": measured,
        "met": met,
        "spec_size": spec_size,
    }


def print_goals(goals: Sequence[dict[str, Any]], title: str) -> None:
    """The goals with their measured figures and "met" / "not met" (rich table)."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 140))
    table = Table("goal", "target", "measured", "status", "at spec size", title=title)
    for g in goals:
        status = {True: "[green]met[/green]", False: "[red]not met[/red]"}.get(
            g["met"], "not measured"
        )
        table.add_row(
            g["goal"], g["target"], g["measured"], status, "yes" if g["spec_size"] else "no"
        )
    console.print(table)


def peer_arguments(
    description: str | None,
    workloads: tuple[str, ...],
    *,
    budget_s: float = 600.0,
    more: Any = None,
) -> Any:
    """A peer's command line: the options every peer takes (``more(parser)`` adds its own)."""
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--workload", choices=workloads, required=True)
    parser.add_argument("--input", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    if more is not None:
        more(parser)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--batches", type=int, default=None, help="timed batches (default all)")
    parser.add_argument("--budget-s", type=float, default=budget_s)
    parser.add_argument("--driver-memory", default="6g")
    return parser.parse_args()


def last_batch(batches: int | None, available: int) -> int:
    """The index of the last timed batch: ``batches`` if given, never past the input's last."""
    return min(batches or available - 1, available - 1)


def peer_spark(app: str, driver_memory: str, conf: dict[str, str] | None = None) -> Any:
    """A peer's local[2] SparkSession: its app name, driver memory and ``conf``, quiet."""
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
