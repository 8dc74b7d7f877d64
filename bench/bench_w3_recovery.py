"""W3, recovery: kill -9 a KEY VALUE upsert ingestion, restart it, and check nothing was lost.

One repetition, on ``local[2]`` with the embedded location in a fresh
directory, each ingestion in its own OS process (its own JVM):

1. *run*: an ``Ingestion(envelope="upsert", key_columns=["key"])`` of the
   KEY VALUE generator of ``bench_ingest_kv.py`` (``PhasedKeyValue``: the
   first tick is the snapshot, every key once, then ``--commands``
   commands per tick, 64-byte values, ``--deletes`` of them deletes) steps
   back to back. Once the snapshot step has returned (the output shard holds
   ``--keys`` keys) and ``--steps-before-kill`` more steps have, the next
   step is let run for ``--kill-at`` of the previous step's duration and
   the process group (Python and JVM) gets SIGKILL: a step is in flight.
2. *restart*: a new process over the same directory. It reports when its
   SparkSession is up, when the ``Ingestion`` is open (``ready``: shards
   opened, bindings read; the output upper then is the upper the killed
   process left), when its first step returns (it rebuilds the upsert state
   from the output shard and reads what the source has), and when a step
   first appends beyond that upper (new data). All times from the restart's
   launch.
3. *check*: after ``--steps-after`` steps it stops and compares the output
   snapshot at ``upper - 1`` with the last value per key, by offset, of every
   command the remap binds at that time (all commands from offset 0 to the
   bound frontier, re-read from the generator): the key count and the sum of
   ``xxhash64(key, value)`` (as a decimal) must be equal, every row's diff 1.

Reported, median over ``--reps`` repetitions: the phases of the restart and
the check.

Peers (``--peers``, default ``bytewax,pathway``), same round, on the W1
input of ``bench/compare/inputs.py`` with as many keys and commands per batch
(``KeyValueGenerator`` with one partition): the peer's W1 child
(``peer_<name>.py --release-all --events``, every batch available at once)
is killed with SIGKILL ``--kill-at`` of a batch's duration after batch
``--steps-before-kill`` became visible, then restarted with ``--resume`` on
the same work directory (bytewax: its SQLite recovery partitions; pathway:
its filesystem persistence store). Reported: ready (dataflow built), first
batch visible, first batch beyond those visible before the kill, all caught
up; and the peer's check of its output against the last value per key
(for pathway, the killed run's output files plus the resumed run's, since
pathway rewrites its jsonlines outputs on restart). A restart still running
after ``--peer-timeout-s`` is killed and reported as such; ``--peer-reps``
runs the peers in the first repetitions only. The Delta MERGE peer
keeps no process state (its table is its state, and Structured Streaming
restarts from its checkpoint), so it has nothing to rebuild and is not run.

    source scripts/bootstrap.sh
    python bench/bench_w3_recovery.py --quick          # 20k keys
    python bench/bench_w3_recovery.py                  # 1M keys, 100k commands/tick

Writes bench/results/w3_recovery.json and bench/results/w3_recovery.png.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PARTITIONS = 2
PHASES = ["spark_s", "ready_s", "first_step_s", "new_data_s"]
"""Restart phases, seconds from the restart's launch."""


# -- the ingestion process ----------------------------------------------------------------------


def emit(event: str, **fields: Any) -> None:
    """One progress line for the parent: JSON on stdout, flushed."""
    print(json.dumps({"event": event, "t": time.time(), **fields}), flush=True)


def child(args: argparse.Namespace) -> None:
    """Ingest steps back to back (``--steps`` of them, or until killed); optionally check."""
    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(ROOT / "bench"))
    phased_key_value = importlib.import_module("bench_ingest_kv").PhasedKeyValue
    from timeshard.location import Location
    from timeshard.persist import PersistClient
    from timeshard.spark import spark_session
    from timeshard.storage.ingest import Ingestion

    spark = spark_session(
        app_name="bench-w3-recovery", extra_conf={"spark.driver.memory": args.driver_memory}
    )
    spark.sparkContext.setLogLevel("ERROR")
    emit("spark")
    client = PersistClient(Location.embedded(args.dir))
    gen = phased_key_value(
        keys=args.keys,
        value_size=64,
        partitions=PARTITIONS,
        rate=max(1, args.commands // PARTITIONS),
        snapshot=-(-args.keys // PARTITIONS),
        deletes=args.deletes,
    )
    ing = Ingestion(spark, client, gen, envelope="upsert", key_columns=["key"])
    emit("ready", output_upper=ing.resume_upper().time, ticks=gen.ticks)
    step = 0
    while args.steps is None or step < args.steps:
        emit("step_begin", step=step)
        t0 = time.time()
        report = ing.step()
        emit(
            "step",
            step=step,
            begin=t0,
            appended=report.appended,
            output_upper=ing.resume_upper().time,
        )
        step += 1
    if args.check:
        emit("check", **check(spark, client, ing, gen))
    spark.stop()


def check(spark: Any, client: Any, ing: Any, gen: Any) -> dict[str, Any]:
    """The output at ``upper - 1`` against last-value-per-key of every command bound there."""
    from pyspark.sql import functions as F

    from timeshard.spark.snapshot import snapshot_df

    upper = ing.resume_upper().time
    as_of = upper - 1
    reader = client.open_leased_reader(ing.exports[""].shard)
    got = snapshot_df(spark, reader, as_of)
    digest = F.sum(F.xxhash64("key", "value").cast("decimal(38,0)"))
    g = got.agg(
        F.count("*").alias("rows"),
        F.countDistinct("key").alias("keys"),
        digest.alias("digest"),
        F.sum(F.when((F.col("_diff") != 1) | F.col("_err").isNotNull(), 1).otherwise(0)).alias(
            "bad"
        ),
    ).first()
    reader.expire()
    frontier = ing.remap.frontier_at(as_of)
    commands = gen.read(spark, {p: 0 for p in frontier}, frontier)
    latest = commands.groupBy("key").agg(
        F.max_by("value", "_offset").alias("value"), F.max("_offset").alias("_o")
    )
    live = latest.where(F.col("value").isNotNull())
    e = live.agg(F.count("*").alias("keys"), digest.alias("digest")).first()
    assert g is not None and e is not None
    return {
        "as_of": as_of,
        "frontier": frontier,
        "commands": sum(frontier.values()),
        "keys": int(g["keys"]),
        "rows": int(g["rows"]),
        "bad_rows": int(g["bad"] or 0),
        "digest": str(g["digest"]),
        "expected_keys": int(e["keys"]),
        "expected_digest": str(e["digest"]),
    }


# -- the driver ---------------------------------------------------------------------------------


def ingest_cmd(args: argparse.Namespace, work: Path, extra: list[str]) -> list[str]:
    """The command of one timeshard ingestion process (this script with ``--child``)."""
    python = ROOT / ".venv" / "bin" / "python"
    cmd = [str(python if python.exists() else sys.executable), __file__, "--child"]
    cmd += ["--dir", str(work), "--keys", str(args.keys), "--commands", str(args.commands)]
    return [*cmd, "--deletes", str(args.deletes), "--driver-memory", args.driver_memory, *extra]


class Process:
    """One child process (its own process group) and the events it printed on stdout."""

    def __init__(self, cmd: list[str], log: Path) -> None:
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=cmd[0])
        env["PYSPARK_DRIVER_PYTHON"] = cmd[0]
        self.log = log.open("w")
        self.exited: float | None = None
        self.launched = time.time()
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.events: list[dict[str, Any]] = []
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not line.startswith('{"event"'):
                self.log.write(line)
                continue
            with self.cond:
                self.events.append(json.loads(line))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait_for(self, pred: Any, timeout: float) -> dict[str, Any]:
        """The first event satisfying ``pred``, waiting up to ``timeout`` seconds."""
        deadline = time.time() + timeout
        with self.cond:
            while True:
                for e in self.events:
                    if pred(e):
                        return e
                if self.proc.poll() is not None and not self.reader.is_alive():
                    raise RuntimeError(
                        f"child exited ({self.proc.returncode}); see {self.log.name}"
                    )
                if time.time() > deadline:
                    raise TimeoutError(f"no such event in {timeout} s; see {self.log.name}")
                self.cond.wait(1.0)

    def kill(self) -> float:
        """SIGKILL the process group (Python and its JVM); the wall time it was sent."""
        t = time.time()
        if self.proc.poll() is not None:
            raise RuntimeError(f"the child ended before the kill; see {self.log.name}")
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        return t

    def finish(self, timeout: float) -> None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.exited = time.time()
        self.reader.join(timeout=5)
        self.log.close()


def repetition(args: argparse.Namespace, rep: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-w3-"))
    logs = RESULTS / "w3_runs"
    logs.mkdir(parents=True, exist_ok=True)
    try:
        first = Process(ingest_cmd(args, work / "location", []), logs / f"rep{rep}-run.log")
        try:
            last = first.wait_for(
                lambda e: e["event"] == "step" and e["step"] >= args.steps_before_kill,
                args.timeout_s,
            )
            duration = last["t"] - last["begin"]
            first.wait_for(
                lambda e: e["event"] == "step_begin" and e["step"] == last["step"] + 1, 60
            )
            time.sleep(args.kill_at * duration)
            killed = first.kill()
        finally:
            first.finish(10)
        steps_before = [e for e in first.events if e["event"] == "step"]
        load = steps_before[0]
        second = Process(
            ingest_cmd(args, work / "location", ["--steps", str(args.steps_after), "--check"]),
            logs / f"rep{rep}-restart.log",
        )
        try:
            check = second.wait_for(lambda e: e["event"] == "check", args.timeout_s)
        finally:
            second.finish(60)
        ev = second.events
        t0 = second.launched
        ready = next(e for e in ev if e["event"] == "ready")
        steps = [e for e in ev if e["event"] == "step"]
        new_data = next(
            (s for s in steps if (s["output_upper"] or 0) > (ready["output_upper"] or 0)), None
        )
        spark_up = next(e for e in ev if e["event"] == "spark")
        lost = (
            check["keys"] != check["expected_keys"] or check["digest"] != check["expected_digest"]
        )
        return {
            "load_s": load["t"] - load["begin"],
            "step_before_kill_s": duration,
            "killed_after_step_s": killed - last["t"],
            "relaunch_gap_s": t0 - killed,
            "spark_s": spark_up["t"] - t0,
            "ready_s": ready["t"] - t0,
            "first_step_s": steps[0]["t"] - t0,
            "first_step_only_s": steps[0]["t"] - steps[0]["begin"],
            "new_data_s": None if new_data is None else new_data["t"] - t0,
            "upper_at_kill": ready["output_upper"],
            "steps_after": [s["t"] - s["begin"] for s in steps],
            "check": check,
            "ok": not lost and check["bad_rows"] == 0,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def peer_input(args: argparse.Namespace) -> Path:
    """The W1 input of the peers: as many keys and commands per batch as timeshard's run."""
    sys.path.insert(0, str(ROOT / "bench" / "compare"))
    from inputs import default_dir, ensure_inputs

    params = {"keys": args.keys, "commands": args.commands, "deletes": args.deletes}
    params["batches"] = args.steps_before_kill + args.steps_after + 1
    return Path(ensure_inputs("w1", default_dir("w1", **params), **params).dir)


def peer_repetition(
    args: argparse.Namespace, peer: str, input_dir: Path, rep: int
) -> dict[str, Any]:
    """kill -9 a bytewax or pathway W1 run after the snapshot and some batches; resume it.

    Every batch is available from the start (the backlog of a restart). The
    first run is killed ``--kill-at`` of a batch's duration after batch
    ``--steps-before-kill`` became visible; the second resumes from the
    peer's store, processes the rest, and checks its output against the
    last value per key of every batch (the peer's own check).
    """
    sys.path.insert(0, str(ROOT / "bench" / "compare"))
    module: Any = importlib.import_module(f"peer_{peer}")
    python = importlib.import_module("peer_bytewax").ensure_venv(module.VENV, module.REQUIREMENTS)
    logs = RESULTS / "w3_runs"
    logs.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"bench-w3-{peer}-"))
    out = logs / f"{peer}-rep{rep}.json"
    out.unlink(missing_ok=True)
    cmd = [str(python), module.__file__, "--workload", "w1", "--input", str(input_dir)]
    cmd += ["--out", str(out), "--work", str(work / "peer"), "--release-all", "--events"]
    try:
        first = Process(cmd, logs / f"{peer}-rep{rep}-run.log")
        try:
            b = args.steps_before_kill
            last = first.wait_for(lambda e: e["event"] == "visible" and e["batch"] == b, 600)
            before = first.wait_for(lambda e: e["event"] == "visible" and e["batch"] == b - 1, 1)
            duration = last["t"] - before["t"]
            time.sleep(args.kill_at * duration)
            killed = first.kill()
        finally:
            first.finish(10)
        seen = max(e["batch"] for e in first.events if e["event"] == "visible")
        second = Process([*cmd, "--resume"], logs / f"{peer}-rep{rep}-restart.log")
        second.finish(args.peer_timeout_s)
        timed_out = second.proc.returncode == -signal.SIGKILL
        ev, t0 = second.events, second.launched
        ready = next((e for e in ev if e["event"] == "ready"), None)
        visible = [e for e in ev if e["event"] == "visible"]
        new = [e for e in visible if e["batch"] > seen]
        result = json.loads(out.read_text()) if out.exists() else {"error": "no result written"}
        if timed_out:
            result["error"] = f"the restart had not finished after {args.peer_timeout_s:.0f} s"
        check = next((n for n in result.get("notes", []) if n.startswith("output checked")), None)
        return {
            "step_before_kill_s": duration,
            "relaunch_gap_s": t0 - killed,
            "visible_before_kill": seen,
            "killed_mid_run": seen < args.steps_before_kill + args.steps_after + 1,
            "ready_s": None if ready is None else ready["t"] - t0,
            "first_step_s": visible[0]["t"] - t0 if visible else None,
            "new_data_s": new[0]["t"] - t0 if new else None,
            "caught_up_s": None if timed_out else (second.exited or t0) - t0,
            "check": result.get("error") or check or "no check",
            "ok": second.proc.returncode == 0 and not result.get("error") and check is not None,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def median_of(reps: list[dict[str, Any]], key: str) -> float | None:
    """The median of ``key`` over repetitions that have it."""
    values = [r[key] for r in reps if r.get(key) is not None]
    return statistics.median(values) if values else None


def summarize(reps: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ["load_s", "step_before_kill_s", *PHASES, "first_step_only_s"]
    return {
        "median": {k: median_of(reps, k) for k in keys},
        "ok": all(r["ok"] for r in reps),
    }


def print_table(reps: list[dict[str, Any]], summary: dict[str, Any], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=140)
    table = Table(
        "rep",
        "load s",
        "SparkSession s",
        "ready s",
        "1st step s",
        "new data s",
        "keys (expected)",
        "digest equal",
        title=title,
    )

    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f}"

    for i, r in enumerate(reps):
        c = r["check"]
        table.add_row(
            str(i),
            fmt(r["load_s"]),
            fmt(r["spark_s"]),
            fmt(r["ready_s"]),
            fmt(r["first_step_s"]),
            fmt(r["new_data_s"]),
            f"{c['keys']:,} ({c['expected_keys']:,})",
            "yes" if c["digest"] == c["expected_digest"] else "NO",
        )
    m = summary["median"]
    table.add_row(
        "median",
        fmt(m["load_s"]),
        fmt(m["spark_s"]),
        fmt(m["ready_s"]),
        fmt(m["first_step_s"]),
        fmt(m["new_data_s"]),
        "",
        "all" if summary["ok"] else "NOT ALL",
        style="bold",
    )
    console.print(table)
    console.print(
        "times from the restart's launch; 'ready' = Ingestion open (shards, bindings); "
        "'1st step' includes rebuilding the upsert state from the output shard"
    )
    console.print(
        "[dim]delta: keeps no process state (the table and the streaming checkpoint are "
        "its state): nothing to rebuild, not run here[/dim]"
    )


PEER_KEYS = ["ready_s", "first_step_s", "new_data_s", "caught_up_s", "step_before_kill_s"]


def peer_summary(peer: list[dict[str, Any]], ts: list[dict[str, Any]]) -> dict[str, Any]:
    """A peer's medians, and the ratios timeshard / peer (per repetition, then the median)."""
    ratios: dict[str, float | None] = {}
    for k in ("ready_s", "first_step_s", "new_data_s"):
        rs = [a[k] / b[k] for a, b in zip(ts, peer, strict=False) if a.get(k) and b.get(k)]
        ratios[k] = statistics.median(rs) if rs else None
    return {
        "median": {k: median_of(peer, k) for k in PEER_KEYS},
        "ok": all(r["ok"] for r in peer),
        "ratios": ratios,
    }


def print_peers(peers: dict[str, dict[str, Any]], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=140)
    table = Table(
        "peer",
        "reps ok",
        "ready s",
        "1st step s",
        "new data s",
        "caught up s",
        "check",
        title=f"{title}: peers, kill -9 and resume from their stores (median)",
    )
    ratio = Table(
        "timeshard / peer",
        "ready",
        "1st step",
        "new data",
        title="ratios (median over repetitions of the same-round ratio)",
    )

    def fmt(x: float | None, unit: str = "") -> str:
        return "-" if x is None else f"{x:.2f}{unit}"

    for name, p in peers.items():
        m = p["summary"]["median"]
        ok = sum(1 for r in p["reps"] if r["ok"])
        checks = sorted({r["check"] for r in p["reps"]})
        late = sum(1 for r in p["reps"] if not r["killed_mid_run"])
        if late:
            checks.insert(0, f"{late} killed after its last batch")
        table.add_row(
            name,
            f"{ok}/{len(p['reps'])}",
            fmt(m["ready_s"]),
            fmt(m["first_step_s"]),
            fmt(m["new_data_s"]),
            fmt(m["caught_up_s"]),
            "; ".join(checks)[:60],
        )
        r = p["summary"]["ratios"]
        ratio.add_row(name, *(fmt(r[k], "x") for k in ("ready_s", "first_step_s", "new_data_s")))
    console.print(table)
    console.print(ratio)
    console.print(
        "peers: every batch is available at the restart; 'ready' = the dataflow built, "
        "'1st step' = the first batch visible after the restart, 'new data' = the first "
        "batch beyond those visible before the kill, 'caught up' = all batches, process exit"
    )


def plot(reps: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3 + 0.4 * len(reps)))
    labels = ["SparkSession up", "Ingestion open", "first step", "new data appended"]
    for i, r in enumerate(reps):
        prev = 0.0
        for j, (k, label) in enumerate(zip(PHASES, labels, strict=True)):
            v = r[k]
            if v is None:
                continue
            ax.barh(i, v - prev, left=prev, color=f"C{j}", label=label if i == 0 else None)
            prev = v
    ax.set_yticks(range(len(reps)), [f"rep {i}" for i in range(len(reps))])
    ax.set_xlabel("s since the restart was launched")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--commands", type=int, default=100_000, help="commands per tick")
    parser.add_argument("--deletes", type=float, default=0.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps-before-kill", type=int, default=2, help="after the snapshot")
    parser.add_argument("--kill-at", type=float, default=0.5, help="fraction of a step")
    parser.add_argument("--steps-after", type=int, default=3)
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--timeout-s", type=float, default=1800.0)
    parser.add_argument("--quick", action="store_true", help="20k keys, 5k commands per tick")
    parser.add_argument("--peers", default="bytewax,pathway", help="comma-separated, or ''")
    parser.add_argument("--peer-reps", type=int, default=None, help="default: --reps")
    parser.add_argument(
        "--peer-timeout-s", type=float, default=600.0, help="a peer's restart is killed then"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.quick:
        args.keys, args.commands = 20_000, 5_000
    peer_names = [p for p in args.peers.split(",") if p]
    unknown = set(peer_names) - {"bytewax", "pathway"}
    if unknown:
        parser.error(f"unknown peers {sorted(unknown)}: choose from bytewax,pathway")
    input_dir = peer_input(args) if peer_names else None
    reps: list[dict[str, Any]] = []
    peer_reps: dict[str, list[dict[str, Any]]] = {p: [] for p in peer_names}
    for rep in range(args.reps):
        print(f"rep {rep + 1}/{args.reps}: timeshard ...", flush=True)
        reps.append(repetition(args, rep))
        this_round = peer_names if rep < (args.peer_reps or args.reps) else []
        for peer in this_round:
            assert input_dir is not None
            print(f"rep {rep + 1}/{args.reps}: {peer} ...", flush=True)
            peer_reps[peer].append(peer_repetition(args, peer, input_dir, rep))
    summary = summarize(reps)
    title = (
        f"W3 recovery after kill -9: KEY VALUE upsert, {args.keys:,} keys, "
        f"{args.commands:,} commands/tick, local[2], {args.reps} reps"
    )
    print_table(reps, summary, title)
    peers = {p: {"reps": r, "summary": peer_summary(r, reps)} for p, r in peer_reps.items()}
    if peers:
        print_peers(peers, title)
    RESULTS.mkdir(parents=True, exist_ok=True)
    params = {k: v for k, v in vars(args).items() if k not in ("child", "dir", "steps", "check")}
    doc = {
        "benchmark": "w3_recovery",
        "params": params,
        "systems": {"timeshard": {"reps": reps, **summary}, **peers},
        "not_run": {"delta": "no process state to rebuild: the Delta table is the state"},
    }
    (RESULTS / "w3_recovery.json").write_text(json.dumps(doc, indent=1))
    plot(reps, RESULTS / "w3_recovery.png", title)
    print(f"wrote {RESULTS / 'w3_recovery.json'} and {RESULTS / 'w3_recovery.png'}")
    if not summary["ok"]:
        sys.exit("W3: timeshard's output after recovery differs from the reference")


if __name__ == "__main__":
    main()
