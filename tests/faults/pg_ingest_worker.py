"""One instance of a POSTGRES source's ingestion, as its own OS process.

Usage: pg_ingest_worker.py BLOB_URI CONSENSUS_URI DSN PUBLICATION NAME STOP_FILE

Steps the ingestion until STOP_FILE exists; the test kills it with SIGKILL.
A step that fails (the slot busy with the other instance's read) is retried
on the next one, as the controller does.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.faults.killing import step_until_stopped

from timeshard.location import open_location
from timeshard.persist import PersistClient
from timeshard.spark import spark_session
from timeshard.storage.ingest import Ingestion
from timeshard.storage.postgres_source import PostgresSource


def main() -> None:
    blob_uri, consensus_uri, dsn, publication, name, stop = sys.argv[1:7]
    spark = spark_session(
        master="local[1]",
        app_name="pg-ingest-worker",
        extra_conf={"spark.sql.shuffle.partitions": "2"},
    )
    client = PersistClient(open_location(blob_uri, consensus_uri))
    ingestion = Ingestion(spark, client, PostgresSource(name, dsn, publication))
    step_until_stopped(ingestion, Path(stop))


if __name__ == "__main__":
    main()
