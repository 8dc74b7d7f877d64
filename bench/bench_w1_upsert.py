"""W1, upsert ingest: timeshard against its peers on the same KEY VALUE commands, in one run.

The input (``bench/compare/inputs.py``): ``--keys`` keys with 64-byte
values, a snapshot batch (every key once), then ``--batches`` batches of
``--commands`` commands, 10% of them deletes (value NULL: UPSERT removes
the key). It is generated once by timeshard's ``KeyValueGenerator`` and
written as Parquet; every system reads those files. Batches become
available one every ``--interval`` seconds (half an interval after a tick),
and each system runs as its own child process, one after another:

* ``timeshard``: ``Ingestion(envelope="upsert", key_columns=["key"])`` over
  a source that reads the Parquet batches, stepped at every tick;
* ``delta``: Structured Streaming + foreachBatch + Delta Lake MERGE
  (``bench/compare/peer_delta.py``, in its own venv);
* ``deltars``: a Spark batch dedupe per tick, then a delta-rs MERGE
  (``bench/compare/peer_deltars.py``, the ``deltalake`` package);
* ``tws``: Structured Streaming ``transformWithStateInPandas`` on RocksDB
  emitting retractions, on a bounded number of commands
  (``bench/compare/peer_tws.py``);
* ``parquet``: the ceiling, read a batch and write it as Parquet;
* ``bytewax``, ``pathway``: if ``bench/compare/peer_<name>.py`` provides
  ``run(workload, input_dir, out_json, **opts)``.

Reported, as the median of ``--reps`` repetitions (each repetition runs
every system once) and as the ratio timeshard / peer per repetition:
sustained commands/s (commands / busy seconds), freshness p50/p99 (a batch
available -> visible in the output), step p50, peak RSS of the process tree
(psutil, JVM included) and bytes on disk after compaction. Then both
Delta peers side by side with timeshard, every system's live keys at the
end against a pyarrow recomputation, and the goals of issue 13 with
"met" / "not met". Writes ``bench/results/w1_upsert.json`` and
``bench/results/w1_upsert.png``.

``--offered-rate R`` offers ``R`` commands/s instead: batches of ``R *
--interval`` commands, one every ``--interval`` seconds (``--commands`` is
ignored), and reports the freshness p50 at that rate, measured as above
(a batch available -> visible in the output shard). Writes
``bench/results/w1_upsert_rate<R>.json`` (and ``.png``).

    source scripts/bootstrap.sh
    python bench/bench_w1_upsert.py --quick
    python bench/bench_w1_upsert.py --keys 1000000 --commands 100000 --batches 10 --reps 3
    python bench/bench_w1_upsert.py --keys 1000000 --offered-rate 20000 --batches 30 --reps 3
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench" / "compare"))

import report
from inputs import Manifest, ParquetBatchSource, default_dir, ensure_inputs

WORKLOAD = "w1"
PEERS = ("delta", "deltars", "tws", "parquet", "bytewax", "pathway")
KEYS = ["rows_per_s", "freshness_p50_s", "freshness_steady_p50_s", "freshness_p99_s"]
KEYS += ["step_p50_s", "load_s"]
KEYS += ["peak_rss_bytes", "disk_bytes"]


def run_timeshard(workload: str, input_dir: Path, out_json: Path, **opts: Any) -> None:
    """Run timeshard's side as a child process (this script with ``--child``)."""
    python = ROOT / ".venv" / "bin" / "python"
    cmd = [str(python), __file__, "--child", "--input", str(input_dir), "--out", str(out_json)]
    cmd += report.option_flags(opts)
    report.run_child(cmd, out_json, opts.get("timeout_s", 900), "timeshard", workload)


def child(args: argparse.Namespace) -> None:
    """timeshard's side: ingest the batches with UPSERT, one step per tick."""
    from timeshard.location import Location
    from timeshard.persist import PersistClient
    from timeshard.spark import spark_session
    from timeshard.storage.ingest import Ingestion

    manifest = Manifest.load(args.input)
    last = min(args.batches or len(manifest.batches) - 1, len(manifest.batches) - 1)
    spark = spark_session(
        app_name="bench-w1-timeshard", extra_conf={"spark.driver.memory": args.driver_memory}
    )
    spark.sparkContext.setLogLevel("ERROR")
    result = report.new_result("timeshard", WORKLOAD, vars(args) | {"last": last})
    result["versions"] = report.versions("pyspark", "timeshard")
    work = Path(tempfile.mkdtemp(prefix="bench-w1-timeshard-"))
    try:
        client = PersistClient(Location.embedded(work))
        source = ParquetBatchSource("kv", manifest, last)
        ing = Ingestion(spark, client, source, envelope="upsert", key_columns=["key"])

        def process(indices: list[int]) -> None:
            source.released = indices[-1] + 1
            ing.step()
            covered = source.covered()
            assert covered > indices[-1], (covered, indices)

        report.run_ticks(result, manifest, last, args.interval, args.budget_s, process, ing.step)
        shard = client.open_leased_reader("kv")
        upper = (shard.fetch_recent_upper().time or 1) - 1
        result["totals"]["final_rows"] = shard.snapshot(upper).num_rows
        shard.expire()
        ing.close()  # a stopped pipeline holds back no state: GC may delete what it held
        merges = {s: client.compact(s) for s in client.list_shards()}
        for s in client.list_shards():
            client.gc(s)
        result["notes"].append(f"compaction merges before measuring disk: {sum(merges.values())}")
        result["disk_bytes"] = report.dir_bytes(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report.write_result(result, args.out)
    spark.stop()


def expected_live_keys(manifest: Manifest, last: int) -> int:
    """Keys alive after batches ``0 .. last``, recomputed with pyarrow (the reference)."""
    import pyarrow.parquet as pq

    live: dict[int, bool] = {}
    for i in range(last + 1):
        t = pq.read_table(manifest.path(i, "commands"), columns=["key", "value"])
        keys = t.column("key").to_pylist()
        nulls = t.column("value").is_null().to_pylist()
        for k, dead in zip(keys, nulls, strict=True):
            live[k] = not dead
    return sum(live.values())


def live_keys_ok(check: dict[str, Any] | None) -> str:
    """ "ok", "MISMATCH" or "-" for a system's live keys at the end against the reference.

    Each repetition is compared with the reference after the last batch it
    processed (``check["expected"]``, one per repetition): a peer the budget
    stopped early is checked against what it was given, not against batches
    it never read.
    """
    if check is None or all(f is None for f in check["final_rows"]):
        return "-"
    pairs = zip(check["final_rows"], check["expected"], strict=True)
    return "ok" if all(f == e for f, e in pairs) else "MISMATCH"


def print_delta_peers(summary: dict[str, Any], checks: dict[str, dict[str, Any]]) -> None:
    """timeshard and both Delta peers side by side: rows/s, freshness p50, disk, live keys."""
    from rich.console import Console
    from rich.table import Table

    labels = {
        "timeshard": "timeshard",
        "delta": "Spark SS + delta-spark MERGE",
        "deltars": "Spark dedupe + delta-rs MERGE",
    }
    table = Table(
        "system",
        "rows/s",
        "timeshard / peer rows/s",
        "freshness p50 s",
        "timeshard / peer freshness",
        "disk MiB",
        "timeshard / peer disk",
        "live keys",
        title="W1: timeshard and the two Delta peers (same run; ratios per repetition, median)",
    )
    systems, ratios = summary["systems"], summary["ratios"]
    for name, label in labels.items():
        if name not in systems:
            continue
        med = systems[name]["median"]
        r = ratios.get(name, {})

        def ratio(metric: str, r: dict[str, Any] = r) -> str:
            return "-" if r.get(metric) is None else f"{r[metric]:.2f}x"

        disk = med["disk_bytes"]
        table.add_row(
            label,
            "-" if med["rows_per_s"] is None else f"{med['rows_per_s']:,.0f}",
            ratio("rows_per_s") if name != "timeshard" else "",
            "-" if med["freshness_p50_s"] is None else f"{med['freshness_p50_s']:.2f}",
            ratio("freshness_p50_s") if name != "timeshard" else "",
            "-" if disk is None else f"{disk / 2**20:,.1f}",
            ratio("disk_bytes") if name != "timeshard" else "",
            live_keys_ok(checks.get(name)),
        )
    Console(width=max(Console().width, 160)).print(table)


def goals(
    args: argparse.Namespace, summary: dict[str, Any], checks: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """The W1 goals of issue 13 against this run.

    Throughput (the default mode) at 1M keys, 100k-command batches, 10%
    deletes, 1 s interval; freshness (``--offered-rate``) at 20k commands/s
    offered at 1M keys, 1 s interval.
    """
    ratios = summary["ratios"]
    ts = summary["systems"].get("timeshard", {}).get("median", {})
    base = args.keys == 1_000_000 and args.deletes == 0.1 and args.interval == 1.0
    out = []
    if args.offered_rate is None:
        spec = base and args.commands == 100_000
        out.append(
            report.goal(
                "rows/s vs Spark SS + delta-spark MERGE",
                ratios.get("delta", {}).get("rows_per_s"),
                2.0,
                at_most=False,
                spec_size=spec,
            )
        )
        out.append(
            report.goal(
                "rows/s vs the Parquet ceiling",
                ratios.get("parquet", {}).get("rows_per_s"),
                0.5,
                at_most=False,
                spec_size=spec,
            )
        )
    else:
        which = {
            "freshness_p50_s": "",
            "freshness_steady_p50_s": f", batches after the first {report.WARMUP_S:.0f} s",
        }
        for metric, batches in which.items():
            out.append(
                report.goal(
                    f"freshness p50 at {args.offered_rate:,} commands/s offered{batches}",
                    ts.get(metric),
                    1.5,
                    at_most=True,
                    unit=" s",
                    spec_size=base and args.offered_rate == 20_000,
                )
            )
    for name, check in checks.items():
        ok = live_keys_ok(check)
        if ok == "-":
            continue
        finals = ", ".join(f"{f:,}" if f is not None else "-" for f in check["final_rows"])
        stopped = sorted({last for last in check["last_batch"] if last < args.batches})
        early = f" (after batch {', '.join(map(str, stopped))}: the budget)" if stopped else ""
        out.append(
            {
                "goal": f"{name}: live keys at the end = the pyarrow reference{early}",
                "target": ", ".join(f"{e:,}" for e in sorted(set(check["expected"]))),
                "measured": finals,
                "value": None,
                "met": ok == "ok",
                "spec_size": True,
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--commands", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--deletes", type=float, default=0.1)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument("--interval", type=float, default=1.0, help="tick interval, s")
    parser.add_argument(
        "--offered-rate",
        type=int,
        default=None,
        help="offer this many commands/s (batches of rate x interval); overrides --commands",
    )
    parser.add_argument("--budget-s", type=float, default=300.0, help="per system and rep")
    parser.add_argument("--tws-commands", type=int, default=20_000, help="bound for tws")
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 3 batches")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--input", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.quick:
        args.keys, args.commands, args.batches = 10_000, 2_000, 4
        args.tws_commands = min(args.tws_commands, 800)
    if args.offered_rate is not None:
        args.commands = max(1, round(args.offered_rate * args.interval))
    params = {"keys": args.keys, "commands": args.commands, "batches": args.batches}
    params["deletes"] = args.deletes
    manifest = ensure_inputs(WORKLOAD, default_dir(WORKLOAD, **params), **params)
    launchers = report.launchers_for(args.peers, PEERS, run_timeshard)
    opts = {
        "interval": args.interval,
        "batches": args.batches,
        "budget_s": args.budget_s,
        "driver_memory": args.driver_memory,
        "timeout_s": args.budget_s + 600,
        "tws_commands": args.tws_commands,
    }
    runs = report.run_systems(WORKLOAD, manifest.dir, launchers, args.reps, opts)
    expected: dict[int, int] = {}  # the reference after batch i, computed once per i
    checks: dict[str, dict[str, Any]] = {}
    for name, results in runs.items():
        finals = [r["totals"].get("final_rows") for r in results]
        # The last batch each repetition processed (all of them unless the budget stopped it).
        lasts = [max((b["index"] for b in r["batches"]), default=args.batches) for r in results]
        for last in lasts:
            if last not in expected:
                expected[last] = expected_live_keys(manifest, last)
        checks[name] = {
            "final_rows": finals,
            "expected": [expected[last] for last in lasts],
            "last_batch": lasts,
        }
    summary = report.summarize(runs)
    title = (
        f"W1 upsert: {args.keys:,} keys, {args.batches} x {args.commands:,} commands "
        f"({args.deletes:.0%} deletes), tick {args.interval} s, local[2]"
    )
    if args.offered_rate is not None:
        title += f", {args.offered_rate:,} commands/s offered"
    report.print_table(summary, title, KEYS)
    doc = {"workload": WORKLOAD, "params": params, "opts": opts, "summary": summary}
    doc["checks"] = checks
    doc["runs"] = runs
    doc["goals"] = goals(args, summary, checks)
    print_delta_peers(summary, checks)
    report.print_goals(doc["goals"], f"{title}: goals of issue 13")
    name = "w1_upsert" if args.offered_rate is None else f"w1_upsert_rate{args.offered_rate}"
    json_path = report.save_json(doc, name)
    print(f"wrote {json_path} and {report.save_plot(runs, name, title)}")


if __name__ == "__main__":
    main()
