"""One instance of a MYSQL source's ingestion, as its own OS process.

Usage: mysql_ingest_worker.py BLOB_URI CONSENSUS_URI URL NAME STOP_FILE

Steps the ingestion until STOP_FILE exists; the test kills it with SIGKILL.
A step that fails is retried on the next one, as the controller does.
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
from timeshard.storage.mysql_source import MySqlSource


def main() -> None:
    blob_uri, consensus_uri, url, name, stop = sys.argv[1:6]
    spark = spark_session(
        master="local[1]",
        app_name="mysql-ingest-worker",
        extra_conf={"spark.sql.shuffle.partitions": "2"},
    )
    client = PersistClient(open_location(blob_uri, consensus_uri))
    ingestion = Ingestion(spark, client, MySqlSource(name, url))
    step_until_stopped(ingestion, Path(stop))


if __name__ == "__main__":
    main()
