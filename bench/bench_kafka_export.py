"""Records per second of the exactly-once Kafka export, against Spark's own Kafka writer.

A shard ``kv`` (``k`` string, ``v`` string of ``--value-bytes``) gets
``--records`` rows in ``--ticks`` appends (one time each, distinct keys), on
a broker the benchmark starts (:class:`timeshard.dev.kafka.KafkaBroker`).
Then, in the same process and session:

* timeshard: a :class:`~timeshard.storage.kafka_export.KafkaExport` (UPSERT,
  key ``k``) steps until it has exported the shard's upper: one transaction
  per tick with its progress record, exactly once;
* Spark: the same rows read as one DataFrame (``snapshot_df`` at the last
  time) and written with ``df.write.format("kafka")`` (Spark's writer: at
  least once, no transaction, no progress).

Both topics have 4 partitions. Reported: seconds and records/s of each and
the ratio; the records in each topic are counted afterwards (read_committed).

    source scripts/bootstrap.sh
    python bench/bench_kafka_export.py --records 200000
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow as pa
from rich.console import Console
from rich.table import Table

from timeshard.dev.kafka import KafkaBroker, create_topic
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark import snapshot_df, spark_session
from timeshard.spark.session import spark_kafka_package
from timeshard.storage.kafka_export import KafkaExport

RESULTS = Path(__file__).with_name("results")
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.string())])


def topic_count(bootstrap: str, topic: str) -> int:
    """Committed records in ``topic`` (high watermarks minus markers would overcount: read them)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"count-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    meta = consumer.list_topics(topic, timeout=30).topics[topic]
    consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
    n, idle = 0, 0
    while idle < 10:
        batch = consumer.consume(10_000, timeout=0.5)
        idle = 0 if batch else idle + 1
        n += sum(1 for m in batch if m.error() is None)
    consumer.close()
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--ticks", type=int, default=10)
    parser.add_argument("--value-bytes", type=int, default=1000)
    args = parser.parse_args()
    console = Console()
    scratch = Path(tempfile.mkdtemp(prefix="bench-kafka-export-"))
    broker = KafkaBroker(scratch / "kafka")
    broker.start()
    try:
        bootstrap = broker.bootstrap
        spark = spark_session(app_name="bench-kafka-export", packages=[spark_kafka_package()])
        client = PersistClient(Location.embedded(scratch / "loc"))
        writer = client.open_writer("kv", SCHEMA)
        per_tick = args.records // args.ticks
        filler = "x" * args.value_bytes
        for t in range(args.ticks):
            keys = [f"k{t * per_tick + i}" for i in range(per_tick)]
            table = pa.table(
                {
                    "k": keys,
                    "v": [filler] * per_tick,
                    "_ts": pa.array([t] * per_tick, pa.int64()),
                    "_diff": pa.array([1] * per_tick, pa.int64()),
                }
            )
            writer.append(table, t, t + 1)
        ours, theirs = f"ours-{uuid.uuid4().hex[:6]}", f"spark-{uuid.uuid4().hex[:6]}"
        for topic in (ours, theirs):
            create_topic(bootstrap, topic, partitions=4)
        export = KafkaExport(spark, client, "kv", bootstrap, ours, key_columns=["k"])
        started = time.monotonic()
        while True:
            step = export.step()
            if step.upper >= args.ticks and step.status == "idle":
                break
        ours_s = time.monotonic() - started
        export.close()
        reader = client.open_leased_reader("kv")
        df = snapshot_df(spark, reader, args.ticks - 1).selectExpr("k AS key", "v AS value")
        started = time.monotonic()
        df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option(
            "topic", theirs
        ).save()
        theirs_s = time.monotonic() - started
        reader.expire()
        counts = {
            "timeshard": topic_count(bootstrap, ours),
            "spark": topic_count(bootstrap, theirs),
        }
        rows = per_tick * args.ticks
        result = {
            "records": rows,
            "value_bytes": args.value_bytes,
            "ticks": args.ticks,
            "seconds": {"timeshard": ours_s, "spark": theirs_s},
            "records_per_s": {"timeshard": rows / ours_s, "spark": rows / theirs_s},
            "ratio": theirs_s / ours_s,
            "records_in_topic": counts,
            "load1_after": os.getloadavg()[0],
        }
        table = Table(title="Kafka export, records/s")
        for column in ("writer", "seconds", "records/s", "records in topic"):
            table.add_column(column, justify="right")
        for who in ("timeshard", "spark"):
            table.add_row(
                who,
                f"{result['seconds'][who]:.2f}",  # type: ignore[index]
                f"{result['records_per_s'][who]:,.0f}",  # type: ignore[index]
                str(counts[who]),
            )
        console.print(table)
        console.print(f"timeshard / spark records/s: {result['ratio']:.2f}")
        RESULTS.mkdir(exist_ok=True)
        out = RESULTS / "kafka_export.json"
        out.write_text(json.dumps(result, indent=2))
        console.print(f"written {out}")
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
