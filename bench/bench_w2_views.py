"""W2, view maintenance: timeshard against its peers on the same AUCTION stream, in one run.

The input (``bench/compare/inputs.py``): timeshard's ``AuctionGenerator``
(auctions and bids) written as Parquet, a snapshot batch of ``--snapshot``
offsets and ``--batches`` batches of ``--rate`` offsets each (an offset is
one auction and three bids: four input rows). Batches become available one
every ``--interval`` seconds. Two views over it:

* ``max_bid``: the highest bid of every open auction (an auction is open
  while the stream's offset, ``max(auctions.id)``, is below its
  ``end_offset``);
* ``bids_per_user``: per buyer, the number and the sum of its bids.

Systems, each its own child process, one after another:

* ``timeshard``: an ``Ingestion`` of both subsources (NONE envelope) and two
  ``MaterializedView``s, stepped at every tick as ``timeshard run`` steps
  them (ingest, then a step of each view, whose write runs in the
  background), then each view catches up: the batch is visible when both
  views have reached it;
* ``delta``: Structured Streaming + foreachBatch MERGE of per-batch
  aggregates into two Delta tables (``bench/compare/peer_delta.py``);
* ``parquet``: the ceiling, read the batch and write it as Parquet;
* ``bytewax``, ``pathway``: if their ``bench/compare/peer_<name>.py`` exist.

Reported as medians of ``--reps`` repetitions and ratios timeshard / peer:
input rows/s (rows / busy seconds), per-tick latency (step p50), freshness
p50/p99, peak RSS and bytes on disk. The views' final contents are checked
against a recomputation with pyarrow. Writes ``bench/results/w2_views.json``
and ``bench/results/w2_views.png``.

    source scripts/bootstrap.sh
    python bench/bench_w2_views.py --quick
    python bench/bench_w2_views.py --snapshot 100000 --rate 25000 --batches 10 --reps 3
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

WORKLOAD = "w2"
PEERS = ("delta", "tws", "parquet", "bytewax", "pathway")
KEYS = ["rows_per_s", "step_p50_s", "freshness_p50_s", "freshness_p99_s", "load_s"]
KEYS += ["peak_rss_bytes", "disk_bytes"]

MAX_BID = """
SELECT a.id AS auction_id, max(b.amount) AS max_amount
FROM auctions a JOIN bids b ON b.auction_id = a.id
WHERE a.end_offset > (SELECT max(id) FROM auctions)
GROUP BY a.id
"""
BIDS_PER_USER = "SELECT buyer, count(*) AS bids, sum(amount) AS total FROM bids GROUP BY buyer"
VIEWS = {
    "max_bid": ({"auctions": "auction.auctions", "bids": "auction.bids"}, MAX_BID),
    "bids_per_user": ({"bids": "auction.bids"}, BIDS_PER_USER),
}


def run_timeshard(workload: str, input_dir: Path, out_json: Path, **opts: Any) -> None:
    """Run timeshard's side as a child process (this script with ``--child``)."""
    python = ROOT / ".venv" / "bin" / "python"
    cmd = [str(python), __file__, "--child", "--input", str(input_dir), "--out", str(out_json)]
    cmd += report.option_flags(opts)
    report.run_child(cmd, out_json, opts.get("timeout_s", 900), "timeshard", workload)


def view_checks(rows: dict[str, list[dict[str, Any]]]) -> dict[str, int]:
    """Figures of the two views' contents that every system must agree on."""
    per_user, max_bid = rows["bids_per_user"], rows["max_bid"]
    return {
        "bids_per_user_rows": len(per_user),
        "bids_per_user_bids": sum(int(r["bids"]) for r in per_user),
        "bids_per_user_total": sum(int(r["total"]) for r in per_user),
        "max_bid_rows": len(max_bid),
        "max_bid_sum": sum(int(r["max_amount"]) for r in max_bid),
    }


def expected_checks(manifest: Manifest, last: int) -> dict[str, int]:
    """:func:`view_checks` of the views recomputed from the input with pyarrow."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    bids = pa.concat_tables(pq.read_table(manifest.path(i, "bids")) for i in range(last + 1))
    per_user = bids.group_by("buyer").aggregate([("amount", "count"), ("amount", "sum")])
    now = manifest.batches[last].offset_hi - 1
    open_bids = bids.filter(pc.greater(pc.add(bids.column("auction_id"), 5), now))
    maxima = open_bids.group_by("auction_id").aggregate([("amount", "max")])
    return view_checks(
        {
            "bids_per_user": [
                {"bids": r["amount_count"], "total": r["amount_sum"]} for r in per_user.to_pylist()
            ],
            "max_bid": [{"max_amount": r["amount_max"]} for r in maxima.to_pylist()],
        }
    )


def child(args: argparse.Namespace) -> None:
    """timeshard's side: ingest auctions and bids, keep both views, one step per tick."""
    from timeshard.compute import MaterializedView, ViewDefinition
    from timeshard.location import Location
    from timeshard.persist import PersistClient
    from timeshard.spark import spark_session
    from timeshard.storage.ingest import Ingestion

    manifest = Manifest.load(args.input)
    last = min(args.batches or len(manifest.batches) - 1, len(manifest.batches) - 1)
    spark = spark_session(
        app_name="bench-w2-timeshard", extra_conf={"spark.driver.memory": args.driver_memory}
    )
    spark.sparkContext.setLogLevel("ERROR")
    result = report.new_result("timeshard", WORKLOAD, vars(args) | {"last": last})
    result["versions"] = report.versions("pyspark", "timeshard")
    work = Path(tempfile.mkdtemp(prefix="bench-w2-timeshard-"))
    try:
        client = PersistClient(Location.embedded(work))
        source = ParquetBatchSource("auction", manifest, last)
        ing = Ingestion(spark, client, source)
        views: list[Any] = []

        def process(indices: list[int]) -> None:
            source.released = indices[-1] + 1
            ing.step()
            assert source.covered() > indices[-1], (source.covered(), indices)
            if not views:  # after the snapshot: install the views on it
                for name, (inputs, sql) in VIEWS.items():
                    definition = ViewDefinition(name, inputs, sql)
                    views.append(MaterializedView.install(spark, client, definition))
            # As `timeshard run` steps them: each view's step plans its tick and leaves its
            # write to its I/O thread, so one view plans while the other's job runs.
            for v in views:
                v.step()
            for v in views:
                v.catch_up()

        def idle() -> None:
            ing.step()
            for v in views:
                v.step()

        report.run_ticks(result, manifest, last, args.interval, args.budget_s, process, idle)
        for v in views:
            v.catch_up()
        contents = {}
        for v in views:
            reader = client.open_leased_reader(v.name)
            upper = (reader.fetch_recent_upper().time or 1) - 1
            snap = reader.snapshot(upper)
            assert all(d == 1 for d in snap.column("_diff").to_pylist())
            contents[v.name] = snap.to_pylist()
            reader.expire()
        result["totals"]["checks"] = view_checks(contents)
        for v in views:
            plan = v.desired.plan.classification
            result["notes"].append(f"view {v.name}: the {plan.path} path ({plan.reason})")
            v.close()
        merges = {s: client.compact(s) for s in client.list_shards()}
        for s in client.list_shards():
            client.gc(s)
        result["notes"].append(f"compaction merges before measuring disk: {sum(merges.values())}")
        result["disk_bytes"] = report.dir_bytes(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report.write_result(result, args.out)
    spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--snapshot", type=int, default=100_000, help="offsets in batch 0")
    parser.add_argument("--rate", type=int, default=25_000, help="offsets per batch")
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--peers", default="delta,parquet,bytewax,pathway")
    parser.add_argument("--interval", type=float, default=1.0, help="tick interval, s")
    parser.add_argument("--budget-s", type=float, default=300.0, help="per system and rep")
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 4 batches")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--input", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.quick:
        args.snapshot, args.rate, args.batches, args.users = 2_000, 500, 4, 200
    params = {"snapshot": args.snapshot, "rate": args.rate, "batches": args.batches}
    params["users"] = args.users
    manifest = ensure_inputs(WORKLOAD, default_dir(WORKLOAD, **params), **params)
    launchers = report.launchers_for(args.peers, PEERS, run_timeshard)
    opts = {
        "interval": args.interval,
        "batches": args.batches,
        "budget_s": args.budget_s,
        "driver_memory": args.driver_memory,
        "timeout_s": args.budget_s + 600,
    }
    runs = report.run_systems(WORKLOAD, manifest.dir, launchers, args.reps, opts)
    expected = expected_checks(manifest, args.batches)
    summary = report.summarize(runs)
    title = (
        f"W2 views: AUCTION {args.snapshot:,} + {args.batches} x {args.rate:,} offsets "
        f"({4 * args.rate:,} rows/batch), tick {args.interval} s, local[2]"
    )
    report.print_table(summary, title, KEYS)
    checks = {}
    for name, results in runs.items():
        got = [r["totals"].get("checks") for r in results]
        checks[name] = got
        if any(g is not None for g in got):
            ok = all(g == expected for g in got)
            print(f"{name}: views at the end {'match' if ok else 'DO NOT MATCH'} the recomputation")
            if not ok:
                print(f"  got {got}\n  expected {expected}")
    doc = {"workload": WORKLOAD, "params": params, "opts": opts, "summary": summary}
    doc |= {"checks": checks, "expected": expected, "runs": runs}
    json_path = report.save_json(doc, "w2_views")
    print(f"wrote {json_path} and {report.save_plot(runs, 'w2_views', title)}")


if __name__ == "__main__":
    main()
