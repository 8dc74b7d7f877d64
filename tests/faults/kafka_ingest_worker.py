"""One instance of a KAFKA upsert ingestion, as its own OS process.

Usage: kafka_ingest_worker.py BLOB_URI CONSENSUS_URI BOOTSTRAP TOPIC STOP_FILE

Steps the ingestion until STOP_FILE exists; the test kills it with SIGKILL.
A step that fails (the broker slow to answer) is retried on the next one,
as the controller does.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.faults.killing import step_until_stopped

from timeshard.location import open_location
from timeshard.persist import PersistClient
from timeshard.spark import spark_session
from timeshard.spark.session import spark_kafka_package
from timeshard.storage.ingest import Ingestion
from timeshard.storage.kafka_source import KafkaSource


def main() -> None:
    blob_uri, consensus_uri, bootstrap, topic, stop = sys.argv[1:6]
    spark = spark_session(
        master="local[1]",
        app_name="kafka-ingest-worker",
        extra_conf={"spark.sql.shuffle.partitions": "2"},
        packages=[spark_kafka_package()],
    )
    client = PersistClient(open_location(blob_uri, consensus_uri))
    source = KafkaSource("kv", bootstrap, topic, key_format="text", value_format="text")
    ingestion = Ingestion(spark, client, source, envelope="upsert", key_columns=["key"])
    step_until_stopped(ingestion, Path(stop))


if __name__ == "__main__":
    main()
