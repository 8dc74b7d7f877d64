"""Peer: a Spark batch dedupe per tick, then a delta-rs MERGE (the ``deltalake`` package).

Runs in timeshard's venv (the same PySpark; ``deltalake`` is in the
``bench`` extra), as a child process, driven tick by tick like the Parquet
ceiling (:func:`report.run_ticks`). W1 only.

At every tick the batches that became available are read with Spark, and
one Spark job keeps the latest command per key (``max_by(value, offset)``,
``max(offset)``); the result comes to the driver as Arrow (``toArrow``) and
is merged into the Delta table ``(key, value, offset)`` by delta-rs::

    matched, a delete, newer      -> delete
    matched, newer                -> update all columns
    not matched, not a delete     -> insert all columns

The batch is visible when the MERGE has committed. After the run:
``optimize.compact()`` and ``vacuum(retention_hours=0)``, then the table's
bytes on disk, and its row count (the live keys).

Runs on the driver: the dedupe in Spark tasks, the MERGE in delta-rs's own
threads (no JVM).

    .venv/bin/python bench/compare/peer_deltars.py --workload w1 --input DIR --out result.json
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

import report
from inputs import W1_SCHEMA, Manifest

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = "deltars"


def run(workload: str, input_dir: Path, out_json: Path, **opts: Any) -> None:
    """Run the peer as a child process of timeshard's venv; it writes ``out_json``.

    W1 only: for any other workload it writes nothing (and is left out).
    """
    if workload != "w1":
        return
    python = ROOT / ".venv" / "bin" / "python"
    cmd = [str(python), __file__, "--workload", workload, "--input", str(input_dir)]
    cmd += ["--out", str(out_json)]
    cmd += report.option_flags(opts)
    report.run_child(cmd, out_json, opts.get("timeout_s", 900), SYSTEM, workload)


def create_table(path: Path) -> None:
    """An empty Delta table ``(key, value, offset)`` at ``path``."""
    from deltalake import DeltaTable

    DeltaTable.create(str(path), schema=W1_SCHEMA)


def merge_latest(path: Path, latest: pa.Table) -> None:
    """MERGE the latest command per key (``key`` unique in ``latest``) into the table at ``path``.

    A command with a null ``value`` is a delete. A command older than the
    row it matches (a smaller ``offset``) changes nothing.
    """
    from deltalake import DeltaTable

    if latest.num_rows == 0:
        return
    (
        DeltaTable(str(path))
        .merge(
            latest.select(W1_SCHEMA.names).cast(W1_SCHEMA),
            predicate="t.key = s.key",
            source_alias="s",
            target_alias="t",
            streamed_exec=False,
        )
        .when_matched_delete(predicate="s.value IS NULL AND s.offset > t.offset")
        .when_matched_update_all(predicate="s.offset > t.offset")
        .when_not_matched_insert_all(predicate="s.value IS NOT NULL")
        .execute()
    )


def live_keys(path: Path) -> int:
    from deltalake import DeltaTable

    return int(DeltaTable(str(path)).count())


def main() -> None:
    args = report.peer_arguments(__doc__, ("w1",))
    manifest = Manifest.load(args.input)
    last = report.last_batch(args.batches, len(manifest.batches))

    from deltalake import DeltaTable
    from pyspark.sql import functions as F

    spark = report.peer_spark("bench-peer-deltars", args.driver_memory)
    result = report.new_result(SYSTEM, args.workload, vars(args) | {"last": last})
    result["versions"] = report.versions("pyspark", "deltalake")
    work = Path(tempfile.mkdtemp(prefix="bench-deltars-"))
    table = work / "kv"

    def process(indices: list[int]) -> None:
        files = [str(manifest.path(i, "commands")) for i in indices]
        latest = (
            spark.read.parquet(*files)
            .groupBy("key")
            .agg(F.max_by("value", "offset").alias("value"), F.max("offset").alias("offset"))
        )
        merge_latest(table, latest.toArrow())

    try:
        create_table(table)
        report.run_ticks(result, manifest, last, args.interval, args.budget_s, process)
        result["totals"]["final_rows"] = live_keys(table)
        dt = DeltaTable(str(table))
        dt.optimize.compact()
        dt.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)
        result["disk_bytes"] = report.dir_bytes(table)
        result["notes"].append("disk: the Delta table after optimize.compact() and vacuum(0 h)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report.write_result(result, args.out)
    spark.stop()


if __name__ == "__main__":
    main()
