"""One replica of a materialized view, as its own OS process.

Usage: view_replica.py BLOB_URI CONSENSUS_URI STOP_FILE

Maintains the view ``per_key`` over the shard ``inp`` (as_of 0) until
STOP_FILE exists. The test kills it with SIGKILL at random moments.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from timeshard.compute import MaterializedView, ViewDefinition
from timeshard.location import open_location
from timeshard.persist import PersistClient
from timeshard.spark import spark_session

SQL = "SELECT k, count(*) AS n, sum(v) AS s FROM inp GROUP BY k"


def main() -> None:
    blob_uri, consensus_uri, stop = sys.argv[1:4]
    spark = spark_session(
        master="local[1]", app_name="view-replica", extra_conf={"spark.sql.shuffle.partitions": "2"}
    )
    client = PersistClient(open_location(blob_uri, consensus_uri))
    view = MaterializedView.install(
        spark, client, ViewDefinition("per_key", {"inp": "inp"}, SQL), as_of=0, tick_interval_s=0.2
    )
    print("replica running", flush=True)
    while not Path(stop).exists():
        view.step()
        time.sleep(0.1)
    view.close()


if __name__ == "__main__":
    main()
