"""One instance of an export of the shard ``kv`` (key ``k``), as its own OS process.

Usage: export_worker.py BLOB_URI CONSENSUS_URI STOP_FILE kafka BOOTSTRAP TOPIC
       export_worker.py BLOB_URI CONSENSUS_URI STOP_FILE postgres DSN SCHEMA
       export_worker.py BLOB_URI CONSENSUS_URI STOP_FILE delta TABLE_URI -

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
from timeshard.storage.delta_export import DeltaExport
from timeshard.storage.export import ShardExport
from timeshard.storage.kafka_export import KafkaExport
from timeshard.storage.postgres_export import PostgresExport


def main() -> None:
    blob_uri, consensus_uri, stop, kind, target, where = sys.argv[1:7]
    spark = spark_session(master="local[1]", app_name="export-worker")
    client = PersistClient(open_location(blob_uri, consensus_uri))
    export: ShardExport
    if kind == "kafka":
        export = KafkaExport(spark, client, "kv", target, where, key_columns=["k"])
    elif kind == "delta":
        export = DeltaExport(spark, client, "kv", target, key_columns=["k"])
    else:
        export = PostgresExport(spark, client, "kv", target, "kv", key_columns=["k"], schema=where)
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
