"""One instance of a KAFKA export, as its own OS process.

Usage: kafka_export_worker.py BLOB_URI CONSENSUS_URI BOOTSTRAP TOPIC STOP_FILE

Steps the export until STOP_FILE exists and the export caught up with the
shard; the test kills it with SIGKILL. A failed step is retried on the next.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from timeshard.location import open_location
from timeshard.persist import PersistClient
from timeshard.spark import spark_session
from timeshard.storage.kafka_export import KafkaExport


def main() -> None:
    blob_uri, consensus_uri, bootstrap, topic, stop = sys.argv[1:6]
    spark = spark_session(master="local[1]", app_name="kafka-export-worker")
    client = PersistClient(open_location(blob_uri, consensus_uri))
    export = KafkaExport(spark, client, "kv", bootstrap, topic, key_columns=["k"])
    print("worker running", flush=True)
    while True:
        try:
            step = export.step()
            print(f"step {step}", flush=True)
            if step.status == "idle" and Path(stop).exists():
                return
        except Exception as e:
            print(f"step failed: {type(e).__name__}: {e}", flush=True)
        time.sleep(0.1)


if __name__ == "__main__":
    main()
