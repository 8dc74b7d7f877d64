"""Kafka ingestion on local[2]: timeshard's KAFKA source vs Spark Structured Streaming.

A Kafka broker (:class:`timeshard.dev.kafka.KafkaBroker`, KRaft, on
loopback) gets one topic of ``--partitions`` partitions (default 4), and
``--records`` JSON records (default 200k) of about ``--record-bytes`` bytes
(default 1 KB) are produced into it round robin before anything reads:
``id`` (int), ``user`` (string), ``amount`` (double), ``created`` (an ISO
timestamp, as a string) and ``payload`` (hex text filling the record).
Then, in the same SparkSession (``spark_session(packages=[spark_kafka_package()])``),
each system reads the whole topic into Parquet files, ``--repeats`` times
(median reported; the order alternates between repetitions):

* timeshard: ``KafkaSource`` (``value_format="json"``) and ``Ingestion``
  with the NONE envelope into a new embedded location, stepped until the
  resumption frontier reaches the topic's end offsets. A step reads the new
  offsets with Spark's batch Kafka reader, decodes each record's JSON in
  Python tasks, reclocks it and appends one batch; seconds count from
  opening the ``Ingestion`` to the step that finishes the topic;
* Spark: ``spark.readStream.format("kafka")`` from the earliest offsets,
  ``from_json`` with the same columns, ``writeStream.format("parquet")``
  with a new checkpoint and ``trigger(availableNow=True)``, from ``start()``
  to ``awaitTermination()``.

Each run is checked (not timed): the shard at its last time and the Parquet
output must both hold ``--records`` rows (timeshard: and no err rows).
Prints a table with seconds, records/s, MB/s of record values, the ratio
timeshard / Spark of records/s (of the medians, and per repetition) and the
1-minute load average before and after each run (the machine may be
shared), and writes bench/results/kafka_ingest.json.

    .venv/bin/python bench/bench_kafka_ingest.py --records 200000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka
import pyarrow as pa
import pyspark
from pyspark.sql import functions as F
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from timeshard.dev.kafka import KAFKA_VERSION, KafkaBroker, create_topic
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark import snapshot_df, spark_session
from timeshard.spark.session import spark_kafka_package
from timeshard.storage.ingest import Ingestion
from timeshard.storage.kafka_source import KafkaSource

VALUE = pa.schema(
    [
        ("id", pa.int64()),
        ("user", pa.string()),
        ("amount", pa.float64()),
        ("created", pa.string()),
        ("payload", pa.string()),
    ]
)
SPARK_VALUE = "id BIGINT, user STRING, amount DOUBLE, created STRING, payload STRING"
SYSTEMS = ("timeshard", "spark")
MAX_STEPS = 1000


def record(i: int, size: int, rng: random.Random) -> bytes:
    """Record ``i``: a JSON object of about ``size`` bytes."""
    head = {
        "id": i,
        "user": f"user-{(i * 7919) % 100_003}",
        "amount": (i % 100_000) * 0.25,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_700_000_000 + i)),
        "payload": "",
    }
    fill = max(0, size - len(json.dumps(head)))
    head["payload"] = rng.randbytes(fill // 2 + 1).hex()[:fill]
    return json.dumps(head).encode()


def produce(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> int:
    """Produce ``records`` records round robin over the partitions; their value bytes."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000}
    )
    rng = random.Random(13)
    total = 0
    for i in range(records):
        value = record(i, size, rng)
        total += len(value)
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"{remaining} records were not acknowledged")
    return total


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[str, int]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}"}
    )
    try:
        return {
            str(p): consumer.get_watermark_offsets(
                confluent_kafka.TopicPartition(topic, p), timeout=30
            )[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def disk_bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())


def measured(fn: Callable[[], object]) -> dict[str, Any]:
    """Run ``fn``: its seconds and the 1-minute load average before and after it."""
    before = os.getloadavg()[0]
    t0 = time.perf_counter()
    fn()
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "load1_before": before, "load1_after": os.getloadavg()[0]}


def timeshard_ingest(
    spark: Any, bootstrap: str, topic: str, end: dict[str, int], work: Path
) -> dict[str, Any]:
    client = PersistClient(Location.embedded(work / "loc"))
    source = KafkaSource("bench_kafka", bootstrap, topic, value_schema=VALUE)
    opened: list[Ingestion] = []
    steps = []

    def run() -> None:
        opened.append(Ingestion(spark, client, source))
        ing = opened[0]
        while len(steps) < MAX_STEPS:
            t0 = time.perf_counter()
            ing.step()
            steps.append(time.perf_counter() - t0)
            done = ing.remap.resume_frontier(ing.resume_upper())
            if all(done.get(p, 0) >= hi for p, hi in end.items()):
                return
        raise RuntimeError(f"the topic is not ingested after {MAX_STEPS} steps")

    try:
        result = measured(run)
    finally:
        if opened:
            opened[0].close()
    result["steps"] = len(steps)
    result["step_s"] = steps
    reader = client.open_leased_reader("bench_kafka")
    try:
        upper = reader.fetch_recent_upper().time
        assert upper is not None
        snapshot = snapshot_df(spark, reader, upper - 1)
        summed, errs = snapshot.agg(F.sum("_diff"), F.count("_err")).collect()[0]
    finally:
        reader.expire()
    result["rows"] = int(summed or 0)
    result["err_rows"] = int(errs)
    result["disk_bytes"] = disk_bytes(work / "loc" / "blob")
    return result


def spark_ingest(spark: Any, bootstrap: str, topic: str, work: Path) -> dict[str, Any]:
    out = work / "parquet"

    def run() -> None:
        records = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
        )
        decoded = records.select(
            F.from_json(F.col("value").cast("string"), SPARK_VALUE).alias("v")
        ).select("v.*")
        query = (
            decoded.writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(work / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()

    result = measured(run)
    result["rows"] = spark.read.parquet(str(out)).count()  # untimed
    result["disk_bytes"] = disk_bytes(out)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-bytes", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    console = Console(width=max(Console().width, 140))
    tmp = Path(tempfile.mkdtemp(prefix="timeshard-bench-kafka-"))
    broker = KafkaBroker(tmp / "broker")
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SYSTEMS}
    spark = None
    try:
        bootstrap = broker.start()
        topic = "bench-records"
        create_topic(bootstrap, topic, partitions=args.partitions)
        t0 = time.perf_counter()
        value_bytes = produce(bootstrap, topic, args.records, args.record_bytes, args.partitions)
        produce_s = time.perf_counter() - t0
        end = end_offsets(bootstrap, topic, args.partitions)
        console.print(
            f"produced {args.records:,} records ({value_bytes / 1e6:,.0f} MB of values) "
            f"into {args.partitions} partitions in {produce_s:.1f} s; end offsets {end}"
        )
        spark = spark_session(app_name="timeshard-bench-kafka", packages=[spark_kafka_package()])
        warm = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .load()
        )
        warm.write.format("noop").mode("overwrite").save()
        for rep in range(args.repeats):
            order = SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]
            for system in order:
                work = tmp / f"{system}-{rep}"
                if system == "timeshard":
                    runs[system].append(timeshard_ingest(spark, bootstrap, topic, end, work))
                else:
                    runs[system].append(spark_ingest(spark, bootstrap, topic, work))
                shown = {k: v for k, v in runs[system][-1].items() if k != "step_s"}
                console.print(f"rep {rep} {system}: {shown}")
                shutil.rmtree(work, ignore_errors=True)
        master = spark.sparkContext.master
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    wrong = [
        f"{s} rep {i}: {r['rows']:,} rows, {r.get('err_rows', 0)} err rows"
        for s in SYSTEMS
        for i, r in enumerate(runs[s])
        if r["rows"] != args.records or r.get("err_rows")
    ]
    median_s = {s: statistics.median(r["seconds"] for r in runs[s]) for s in SYSTEMS}
    records_per_s = {s: args.records / median_s[s] for s in SYSTEMS}
    ratio = records_per_s["timeshard"] / records_per_s["spark"]
    # Per repetition too: its two runs are adjacent, so they share the machine's load.
    per_repeat = [
        sp["seconds"] / ts["seconds"]
        for ts, sp in zip(runs["timeshard"], runs["spark"], strict=True)
    ]
    table = Table(
        "system",
        "s (median)",
        "records/s",
        "MB/s",
        "ts / spark",
        "runs s",
        "load1 before->after",
        "out MiB",
        title=(
            f"Kafka -> Parquet, {args.records:,} JSON records of ~{args.record_bytes} B, "
            f"{args.partitions} partitions, {master}, {os.cpu_count()} cores, "
            f"median of {args.repeats}"
        ),
        caption=(
            "timeshard: KafkaSource + Ingestion (NONE), steps until the topic is in; "
            "spark: readStream kafka + from_json -> parquet, availableNow"
        ),
    )
    for s in SYSTEMS:
        table.add_row(
            s,
            f"{median_s[s]:.2f}",
            f"{records_per_s[s]:,.0f}",
            f"{value_bytes / median_s[s] / 1e6:,.1f}",
            f"{ratio:.3f}x" if s == "timeshard" else "1.00x",
            " ".join(f"{r['seconds']:.1f}" for r in runs[s]),
            ", ".join(f"{r['load1_before']:.1f}->{r['load1_after']:.1f}" for r in runs[s]),
            f"{statistics.median(r['disk_bytes'] for r in runs[s]) / 2**20:,.0f}",
        )
    console.print(table)
    console.print(
        "timeshard / spark (records/s) per repetition: "
        + " ".join(f"{r:.3f}x" for r in per_repeat)
        + f" (median {statistics.median(per_repeat):.3f}x)"
    )
    steps = [r["steps"] for r in runs["timeshard"]]
    console.print(f"timeshard steps per run: {steps}")
    if wrong:
        console.print(f"[red]row counts differ from {args.records:,}: {'; '.join(wrong)}[/red]")
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "kafka_ingest.json").write_text(
        json.dumps(
            {
                "records": args.records,
                "record_bytes": args.record_bytes,
                "value_bytes": value_bytes,
                "partitions": args.partitions,
                "repeats": args.repeats,
                "produce_s": produce_s,
                "master": master,
                "cpu_count": os.cpu_count(),
                "versions": {
                    "pyspark": pyspark.__version__,
                    "pyarrow": pa.__version__,
                    "confluent_kafka": confluent_kafka.version()[0],
                    "kafka_broker": KAFKA_VERSION,
                },
                "runs": runs,
                "median_s": median_s,
                "records_per_s": records_per_s,
                "ratio_records_per_s": ratio,
                "ratio_records_per_s_per_repeat": per_repeat,
                "wrong_counts": wrong,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
