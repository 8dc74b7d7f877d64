"""Peer: the ceiling of the data path -- a plain Spark job that reads a batch and writes Parquet.

No upsert, no state, no consensus: at every tick the batches that became
available are read (``spark.read.parquet``) and written as Parquet to a new
directory. Anything that keeps state must do at least this much I/O, so
its rate is the ceiling of timeshard's data path on this machine.

Runs in timeshard's venv (the same PySpark), as a child process::

    .venv/bin/python bench/compare/peer_parquet.py --workload w1 --input DIR --out result.json
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import report
from inputs import Manifest

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = "parquet"


def run(workload: str, input_dir: Path, out_json: Path, **opts: Any) -> None:
    """Run the peer as a child process of timeshard's venv; it writes ``out_json``."""
    python = ROOT / ".venv" / "bin" / "python"
    cmd = [str(python), __file__, "--workload", workload, "--input", str(input_dir)]
    cmd += ["--out", str(out_json)]
    cmd += report.option_flags(opts)
    report.run_child(cmd, out_json, opts.get("timeout_s", 900), SYSTEM, workload)


def main() -> None:
    args = report.peer_arguments(__doc__, ("w1", "w2"))
    manifest = Manifest.load(args.input)
    last = report.last_batch(args.batches, len(manifest.batches))

    spark = report.peer_spark("bench-peer-parquet", args.driver_memory)
    result = report.new_result(SYSTEM, args.workload, vars(args) | {"last": last})
    result["versions"] = report.versions("pyspark")
    work = Path(tempfile.mkdtemp(prefix="bench-parquet-"))

    def process(indices: list[int]) -> None:
        for sub in manifest.subsources:
            files = [str(manifest.path(i, sub)) for i in indices]
            target = work / sub / f"batch-{indices[0]:05d}-{indices[-1]:05d}"
            spark.read.parquet(*files).write.parquet(str(target))

    try:
        report.run_ticks(result, manifest, last, args.interval, args.budget_s, process)
        result["disk_bytes"] = report.dir_bytes(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report.write_result(result, args.out)
    spark.stop()


if __name__ == "__main__":
    main()
