"""Ingestion killed with SIGKILL at random and restarted, with two instances at once.

Two worker processes ingest one KEY VALUE source with the UPSERT envelope into
one shard, concurrently; one of them is killed and restarted at seeded random
moments. At the end, at every time, the output holds exactly the last value
per key among the source's records reclocked to that time or before: nothing
lost, nothing duplicated.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from tests.faults.ingest_worker import generator
from tests.faults.killing import race_and_kill, worker_starter

from timeshard.location import open_location
from timeshard.persist import PersistClient
from timeshard.storage import Remap

WORKER = Path(__file__).with_name("ingest_worker.py")


@pytest.mark.faults
@pytest.mark.spark
def test_ingestion_killed_and_concurrent(spark: SparkSession, tmp_path: Path) -> None:
    rng = random.Random(11)
    blob_uri, consensus_uri = f"file://{tmp_path / 'blob'}", f"sqlite:///{tmp_path / 'c.db'}"
    stop = tmp_path / "stop"
    start = worker_starter(WORKER, [blob_uri, consensus_uri, str(stop)], tmp_path)

    client = PersistClient(open_location(blob_uri, consensus_uri))
    hold = race_and_kill(client, "kv", start, stop, rng)
    remap = Remap(client, "kv.remap")
    upper = client.state("kv").upper.time
    assert upper is not None and upper > 0
    end = remap.frontier_at(upper - 1)
    assert sum(end.values()) > 0
    records = generator().read(spark, {}, end).collect()
    timed = sorted(
        (
            (remap.reclock(r["_partition"], r["_offset"]), r["_offset"], r["key"], r["value"])
            for r in records
        ),
        key=lambda x: (x[0], x[1]),
    )
    times = sorted({t for t, *_ in timed if t is not None and t >= (hold.since.time or 0)})
    for at in times[-12:]:
        want = {k: v for t, _, k, v in timed if t <= at}
        rows = hold.snapshot(at).to_pylist()
        assert all(r["_diff"] == 1 for r in rows), "a key is duplicated"
        assert {r["key"]: r["value"] for r in rows} == want, at
