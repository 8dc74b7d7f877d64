"""Peer: Spark Structured Streaming + foreachBatch + Delta Lake MERGE.

Runs in its own venv, ``bench/.venvs/delta/`` (created on first use), with a
PySpark and a delta-spark released together: delta-spark pins PySpark, and
timeshard's PySpark is newer than any delta-spark supports. The Delta jar
comes from Maven Central through ``spark.jars.packages``, resolved with
timeshard's Ivy settings (:func:`timeshard.spark.jars.ivy_settings`, which
the parent process writes and passes as ``--ivy-settings``): Spark's own chain
would look in ``~/.m2`` first, where a pom left without its jar fails the
resolution.

W1 (upsert): the input batches appear in a directory a file stream watches
(processing-time trigger every ``--interval`` s). ``foreachBatch`` keeps
the latest command per key (max offset), then one MERGE into the Delta
table ``(key, value, offset)``::

    matched, delete, newer      -> delete
    matched, newer              -> update value, offset
    not matched, not a delete   -> insert

W2 (views): the stream watches the bids; ``foreachBatch`` reads the auctions
of the same input batches and MERGEs per-batch aggregates into two Delta
tables: ``bids_per_user (buyer, bids, total)`` (add counts and sums) and
``max_bid (auction_id, end_offset, max_amount)`` (keep the max; delete the
auctions that closed, ``end_offset <= `` the stream's offset, with
``whenNotMatchedBySourceDelete``). "Max bid per open auction" reads
``max_bid WHERE max_amount IS NOT NULL``.

After the run: ``OPTIMIZE`` and ``VACUUM RETAIN 0 HOURS``, then the tables'
bytes on disk.

    bench/.venvs/delta/bin/python bench/compare/peer_delta.py --workload w1 --input DIR --out X
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import report
from inputs import SUBSOURCES, Manifest, Releaser

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = "delta"
PYSPARK = "4.2.0"
DELTA = "4.4.0"
DELTA_PACKAGE = f"io.delta:delta-spark_4.2_2.13:{DELTA}"
REQUIREMENTS = [f"pyspark=={PYSPARK}", f"delta-spark=={DELTA}", "pyarrow", "pandas", "psutil"]


def run(workload: str, input_dir: Path, out_json: Path, **opts: Any) -> None:
    """Run the peer as a child process of its venv; it writes ``out_json``."""
    python = report.ensure_venv("delta", REQUIREMENTS)
    cmd = [str(python), __file__, "--workload", workload, "--input", str(input_dir)]
    cmd += ["--out", str(out_json)]
    from timeshard.spark.jars import ivy_settings

    settings = ivy_settings()
    if settings is not None:  # else Spark's own chain, as timeshard's sessions fall back to
        cmd += ["--ivy-settings", settings]
    cmd += report.option_flags(opts)
    report.run_child(cmd, out_json, opts.get("timeout_s", 900), SYSTEM, workload)


def session(driver_memory: str, ivy_settings: str | None) -> Any:
    conf = {
        "spark.jars.packages": DELTA_PACKAGE,
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.databricks.delta.retentionDurationCheck.enabled": "false",
        "spark.sql.streaming.numRecentProgressUpdates": "1000",
    }
    if ivy_settings is not None:
        conf["spark.jars.ivySettings"] = ivy_settings
    return report.peer_spark("bench-peer-delta", driver_memory, conf)


def spark_schema(workload: str, sub: str) -> Any:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    types = {"int64": LongType(), "string": StringType()}
    return StructType(
        [StructField(f.name, types[str(f.type)], True) for f in SUBSOURCES[workload][sub]]
    )


def w1_batch(spark: Any, table: str) -> Any:
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    target = DeltaTable.forPath(spark, table)

    def apply(df: Any) -> None:
        latest = df.groupBy("key").agg(
            F.max_by("value", "offset").alias("value"), F.max("offset").alias("offset")
        )
        (
            target.alias("t")
            .merge(latest.alias("s"), "t.key = s.key")
            .whenMatchedDelete(condition="s.value IS NULL AND s.offset > t.offset")
            .whenMatchedUpdate(
                condition="s.offset > t.offset", set={"value": "s.value", "offset": "s.offset"}
            )
            .whenNotMatchedInsert(
                condition="s.value IS NOT NULL",
                values={"key": "s.key", "value": "s.value", "offset": "s.offset"},
            )
            .execute()
        )

    return apply


def w2_batch(spark: Any, work: Path, manifest: Manifest, incoming: Path) -> Any:
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    per_user = DeltaTable.forPath(spark, str(work / "bids_per_user"))
    max_bid = DeltaTable.forPath(spark, str(work / "max_bid"))
    auctions_schema = spark_schema("w2", "auctions")

    def apply(bids: Any, indices: list[int]) -> None:
        files = [str(incoming / "auctions" / manifest.path(i, "auctions").name) for i in indices]
        auctions = spark.read.schema(auctions_schema).parquet(*files)
        now = manifest.batches[max(indices)].offset_hi - 1  # the stream's offset: max(auctions.id)
        counts = bids.groupBy("buyer").agg(
            F.count("*").alias("bids"), F.sum("amount").alias("total")
        )
        (
            per_user.alias("t")
            .merge(counts.alias("s"), "t.buyer = s.buyer")
            .whenMatchedUpdate(set={"bids": "t.bids + s.bids", "total": "t.total + s.total"})
            .whenNotMatchedInsertAll()
            .execute()
        )
        maxima = bids.groupBy(F.col("auction_id")).agg(F.max("amount").alias("max_amount"))
        opened = auctions.select(F.col("id").alias("auction_id"), "end_offset")
        changes = opened.join(maxima, "auction_id", "full_outer")
        (
            max_bid.alias("t")
            .merge(changes.alias("s"), "t.auction_id = s.auction_id")
            .whenMatchedDelete(condition=f"coalesce(t.end_offset, s.end_offset) <= {int(now)}")
            .whenMatchedUpdate(
                set={
                    "end_offset": "coalesce(t.end_offset, s.end_offset)",
                    "max_amount": "greatest(t.max_amount, s.max_amount)",
                }
            )
            .whenNotMatchedInsert(
                condition=f"s.end_offset > {int(now)}",
                values={
                    "auction_id": "s.auction_id",
                    "end_offset": "s.end_offset",
                    "max_amount": "s.max_amount",
                },
            )
            .whenNotMatchedBySourceDelete(condition=f"t.end_offset <= {int(now)}")
            .execute()
        )

    return apply


def w2_checks(spark: Any, work: Path) -> dict[str, int]:
    """The figures ``bench_w2_views.view_checks`` reports, from the two Delta tables."""
    per_user = spark.read.format("delta").load(str(work / "bids_per_user"))
    max_bid = spark.read.format("delta").load(str(work / "max_bid")).where("max_amount IS NOT NULL")
    u = per_user.selectExpr("count(*) AS n", "sum(bids) AS bids", "sum(total) AS total").first()
    m = max_bid.selectExpr("count(*) AS n", "sum(max_amount) AS s").first()
    return {
        "bids_per_user_rows": int(u["n"]),
        "bids_per_user_bids": int(u["bids"] or 0),
        "bids_per_user_total": int(u["total"] or 0),
        "max_bid_rows": int(m["n"]),
        "max_bid_sum": int(m["s"] or 0),
    }


def create_tables(spark: Any, workload: str, work: Path) -> list[Path]:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    def create(path: Path, fields: list[tuple[str, Any]]) -> Path:
        schema = StructType([StructField(n, t, True) for n, t in fields])
        spark.createDataFrame([], schema).write.format("delta").save(str(path))
        return path

    if workload == "w1":
        return [
            create(
                work / "kv", [("key", LongType()), ("value", StringType()), ("offset", LongType())]
            )
        ]
    return [
        create(
            work / "bids_per_user",
            [("buyer", LongType()), ("bids", LongType()), ("total", LongType())],
        ),
        create(
            work / "max_bid",
            [("auction_id", LongType()), ("end_offset", LongType()), ("max_amount", LongType())],
        ),
    ]


def main() -> None:
    args = report.peer_arguments(
        __doc__,
        ("w1", "w2"),
        more=lambda p: p.add_argument("--ivy-settings", help="a file: URI of Ivy settings"),
    )
    manifest = Manifest.load(args.input)
    last = report.last_batch(args.batches, len(manifest.batches))
    spark = session(args.driver_memory, args.ivy_settings)
    result = report.new_result(SYSTEM, args.workload, vars(args) | {"last": last})
    result["versions"] = report.versions("pyspark", "delta-spark") | {"maven": DELTA_PACKAGE}
    work = Path(tempfile.mkdtemp(prefix="bench-delta-"))
    try:
        tables = create_tables(spark, args.workload, work)
        incoming = work / "incoming"
        trigger = "bids" if args.workload == "w2" else "commands"
        releaser = Releaser(manifest, {sub: incoming / sub for sub in manifest.subsources}, last)
        checkpoint = work / "checkpoint"
        recorder = report.StreamRecorder(checkpoint)
        if args.workload == "w1":
            apply_w1 = w1_batch(spark, str(tables[0]))
        else:
            apply_w2 = w2_batch(spark, work, manifest, incoming)

        def for_each(df: Any, batch_id: int) -> None:
            indices = recorder.begin(batch_id)
            if indices:
                if args.workload == "w1":
                    apply_w1(df)
                else:
                    apply_w2(df, indices)
            recorder.done(batch_id)

        releaser.release_snapshot()
        stream = spark.readStream.schema(spark_schema(args.workload, trigger))
        query = (
            stream.parquet(str(incoming / trigger))
            .writeStream.foreachBatch(for_each)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime=f"{args.interval} seconds")
            .start()
        )
        report.run_stream(
            result, manifest, releaser, recorder, query, last, args.interval, args.budget_s
        )
        if args.workload == "w1":
            result["totals"]["final_rows"] = spark.read.format("delta").load(str(tables[0])).count()
        else:
            result["totals"]["checks"] = w2_checks(spark, work)
        for t in tables:
            spark.sql(f"OPTIMIZE delta.`{t}`")
            spark.sql(f"VACUUM delta.`{t}` RETAIN 0 HOURS")
        result["disk_bytes"] = sum(report.dir_bytes(t) for t in tables)
        result["notes"].append("disk: the Delta tables after OPTIMIZE and VACUUM RETAIN 0 HOURS")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report.write_result(result, args.out)
    spark.stop()


if __name__ == "__main__":
    main()
