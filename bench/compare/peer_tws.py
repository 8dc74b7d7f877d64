"""Peer: Spark Structured Streaming ``transformWithStateInPandas`` on the RocksDB state store.

W1 only. The commands stream from a watched directory, grouped by key; the
stateful processor keeps the latest ``(value, offset)`` of each key in a
``ValueState`` and emits retractions: for a key whose latest command is
newer than its state, a ``-1`` row of the old value (if any) and a ``+1``
row of the new one (none for a delete, which clears the state). The
retractions are written to Parquet by ``foreachBatch`` (which lets us
record when each micro-batch became visible).

It is slow (about 0.7k commands/s measured before), so it runs on a bounded
number of commands: the first ``--commands / --batches`` commands of every
batch after the snapshot, and not the snapshot itself (its state starts
empty), for at most ``--budget-s`` seconds. Its commands/s is what it did
on that bounded input; its freshness and memory are not comparable with
runs over the full input, and ``final_rows`` is not reported.

Runs in ``bench/.venvs/tws/``: timeshard's PySpark (4.3) plus ``protobuf``,
which the Python state server of ``transformWithStateInPandas`` imports and
timeshard's venv does not have::

    bench/.venvs/tws/bin/python bench/compare/peer_tws.py --workload w1 \
        --input DIR --out X --commands 2000
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow.parquet as pq
import report
from inputs import Batch, Manifest, Releaser

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = "tws"
# timeshard's PySpark, plus protobuf, which transformWithStateInPandas needs and timeshard not.
REQUIREMENTS = ["pyspark==4.3.0", "pandas", "pyarrow", "protobuf", "psutil"]
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def run(workload: str, input_dir: Path, out_json: Path, **opts: Any) -> None:
    """Run the peer as a child process of timeshard's venv; it writes ``out_json``."""
    if workload != "w1":
        print(f"peer {SYSTEM}: workload {workload} not implemented (W1 only)")
        return
    python = report.ensure_venv(SYSTEM, REQUIREMENTS)
    cmd = [str(python), __file__, "--workload", workload, "--input", str(input_dir)]
    cmd += ["--out", str(out_json), "--commands", str(opts.get("tws_commands", 20_000))]
    cmd += report.option_flags(opts, ("interval", "batches", "driver_memory"))
    budget = min(float(opts.get("budget_s", 170.0)), 170.0)
    cmd += ["--budget-s", str(budget)]
    report.run_child(cmd, out_json, budget + 300, SYSTEM, workload)


def processor() -> Any:
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class LatestWithRetractions(StatefulProcessor):  # type: ignore[misc]
        def init(self, handle: Any) -> None:
            self.latest = handle.getValueState("latest", "value STRING, offset BIGINT")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[pd.DataFrame]:
            commands = pd.concat(list(rows))
            new = commands.iloc[int(commands["offset"].to_numpy().argmax())]
            out = []
            if self.latest.exists():
                old_value, old_offset = self.latest.get()
                if int(new["offset"]) <= old_offset:
                    return
                out.append((key[0], old_value, old_offset, -1))
            if pd.isna(new["value"]):
                self.latest.clear()
            else:
                self.latest.update((new["value"], int(new["offset"])))
                out.append((key[0], new["value"], int(new["offset"]), 1))
            if out:
                yield pd.DataFrame(out, columns=["key", "value", "offset", "diff"])

        def close(self) -> None:
            pass

    return LatestWithRetractions()


def bounded_inputs(manifest: Manifest, last: int, per_batch: int, dir: Path) -> Manifest:
    """A copy of batches ``1 .. last`` cut to their first ``per_batch`` rows; batch 0 empty."""
    batches = []
    for b in manifest.batches[: last + 1]:
        table = pq.read_table(manifest.path(b.index, "commands"))
        table = table.slice(0, 0 if b.index == 0 else per_batch)
        name = b.files["commands"]
        pq.write_table(table, dir / name)
        hi = b.offset_lo + table.num_rows
        batches.append(
            Batch(b.index, b.offset_lo, hi, {"commands": name}, {"commands": table.num_rows})
        )
    return Manifest(dir, manifest.workload, manifest.params, batches)


def main() -> None:
    args = report.peer_arguments(
        __doc__,
        ("w1",),
        budget_s=170.0,
        more=lambda p: p.add_argument(
            "--commands", type=int, default=20_000, help="total commands, bounded"
        ),
    )
    full = Manifest.load(args.input)
    last = report.last_batch(args.batches, len(full.batches))

    conf = {
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
        "spark.sql.streaming.numRecentProgressUpdates": "1000",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }
    spark = report.peer_spark("bench-peer-tws", args.driver_memory, conf)
    result = report.new_result(SYSTEM, args.workload, vars(args) | {"last": last})
    result["versions"] = report.versions("pyspark")
    work = Path(tempfile.mkdtemp(prefix="bench-tws-"))
    try:
        per_batch = max(1, args.commands // last)
        (work / "bounded").mkdir()
        manifest = bounded_inputs(full, last, per_batch, work / "bounded")
        result["notes"].append(
            f"bounded: the first {per_batch:,} commands of each batch, no snapshot (state starts "
            "empty); rows/s is over those commands only"
        )
        releaser = Releaser(manifest, {"commands": work / "incoming"}, last)
        checkpoint = work / "checkpoint"
        recorder = report.StreamRecorder(checkpoint)
        out = work / "retractions"

        def for_each(df: Any, batch_id: int) -> None:
            recorder.begin(batch_id)
            df.write.mode("append").parquet(str(out))
            recorder.done(batch_id)

        from inputs import W1_SCHEMA

        schema = ", ".join(
            f"`{f.name}` {'BIGINT' if f.type == 'int64' else 'STRING'}" for f in W1_SCHEMA
        )
        releaser.release_snapshot()
        query = (
            spark.readStream.schema(schema)
            .parquet(str(work / "incoming"))
            .groupBy("key")
            .transformWithStateInPandas(
                statefulProcessor=processor(),
                outputStructType="key BIGINT, value STRING, offset BIGINT, diff INT",
                outputMode="Update",
                timeMode="None",
            )
            .writeStream.foreachBatch(for_each)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime=f"{args.interval} seconds")
            .start()
        )
        report.run_stream(
            result, manifest, releaser, recorder, query, last, args.interval, args.budget_s
        )
        result["disk_bytes"] = report.dir_bytes(out) + report.dir_bytes(checkpoint)
        result["notes"].append("disk: the retractions written plus the checkpoint (RocksDB state)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report.write_result(result, args.out)
    spark.stop()


if __name__ == "__main__":
    main()
