"""One instance of a KEY VALUE upsert ingestion, as its own OS process.

Usage: ingest_worker.py BLOB_URI CONSENSUS_URI STOP_FILE

Steps the ingestion until STOP_FILE exists; the test kills it with SIGKILL.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from timeshard.location import open_location
from timeshard.persist import PersistClient
from timeshard.spark import spark_session
from timeshard.storage.ingest import Ingestion
from timeshard.storage.sources import KeyValueGenerator


def generator() -> KeyValueGenerator:
    return KeyValueGenerator(keys=40, value_size=8, partitions=2, rate=15, seed=7)


def main() -> None:
    blob_uri, consensus_uri, stop = sys.argv[1:4]
    spark = spark_session(
        master="local[1]",
        app_name="ingest-worker",
        extra_conf={"spark.sql.shuffle.partitions": "2"},
    )
    client = PersistClient(open_location(blob_uri, consensus_uri))
    ingestion = Ingestion(spark, client, generator(), envelope="upsert", key_columns=["key"])
    print("worker running", flush=True)
    while not Path(stop).exists():
        ingestion.step()
        time.sleep(0.2)


if __name__ == "__main__":
    main()
