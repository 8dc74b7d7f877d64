"""A KAFKA upsert ingestion killed with SIGKILL at random and restarted, two instances at once.

A real broker (``kafka_broker``); the test produces KEY VALUE records with
tombstones to a 3-partition topic the whole time, some in transactions it
aborts. Two worker processes ingest the topic into one shard with the UPSERT
envelope, concurrently; one of them is killed and restarted at seeded random
moments. At the end, at every time, the output holds exactly the last value
per key among the committed records reclocked to that time or before:
nothing lost, nothing duplicated, nothing of an aborted transaction.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from tests.faults.killing import race_and_kill, worker_starter

from timeshard.location import open_location
from timeshard.persist import PersistClient
from timeshard.storage import Remap

WORKER = Path(__file__).with_name("kafka_ingest_worker.py")
PARTITIONS = 3


class Producing(threading.Thread):
    """Produces upserts and tombstones to ``topic`` until stopped; every 7th batch is aborted."""

    def __init__(self, bootstrap: str, topic: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.rng = random.Random(seed)
        self.stopped = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            producer = Producer(
                {"bootstrap.servers": self.bootstrap, "transactional.id": f"p-{uuid.uuid4().hex}"}
            )
            producer.init_transactions(30)
            batch = 0
            while not self.stopped.is_set():
                producer.begin_transaction()
                for _ in range(20):
                    key = f"k{self.rng.randrange(30)}"
                    value = None if self.rng.random() < 0.2 else f"v{self.rng.randrange(10**6)}"
                    producer.produce(
                        self.topic,
                        key=key.encode(),
                        value=None if value is None else value.encode(),
                        partition=self.rng.randrange(PARTITIONS),
                    )
                batch += 1
                if batch % 7 == 0:
                    producer.abort_transaction(30)
                else:
                    producer.commit_transaction(30)
                time.sleep(0.1)
        except BaseException as e:
            self.error = e


def committed_records(bootstrap: str, topic: str, end: dict[str, int]) -> list[dict[str, Any]]:
    """Every committed record below ``end`` (partition -> offset), read back with a real client."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    records: list[dict[str, Any]] = []
    try:
        for p, hi in end.items():
            if hi == 0:
                continue
            consumer.assign([TopicPartition(topic, int(p), 0)])
            deadline = time.monotonic() + 60
            while True:
                [pos] = consumer.position([TopicPartition(topic, int(p))])
                if pos.offset >= hi:
                    break
                assert time.monotonic() < deadline, f"partition {p} not read to {hi}"
                msg = consumer.poll(0.5)
                if msg is None or msg.offset() >= hi:
                    continue
                assert msg.error() is None, msg.error()
                value = msg.value()
                records.append(
                    {
                        "p": p,
                        "o": msg.offset(),
                        "key": msg.key().decode(),
                        "value": None if value is None else value.decode(),
                    }
                )
    finally:
        consumer.close()
    return records


@pytest.mark.faults
@pytest.mark.spark
@pytest.mark.kafka
def test_kafka_ingestion_killed_and_concurrent(tmp_path: Path, kafka_broker: Any) -> None:
    from timeshard.dev.kafka import create_topic

    rng = random.Random(13)
    bootstrap = kafka_broker.bootstrap
    topic = f"kill-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    producing = Producing(bootstrap, topic, seed=5)
    producing.start()
    blob_uri, consensus_uri = f"file://{tmp_path / 'blob'}", f"sqlite:///{tmp_path / 'c.db'}"
    stop = tmp_path / "stop"
    start = worker_starter(WORKER, [blob_uri, consensus_uri, bootstrap, topic, str(stop)], tmp_path)

    client = PersistClient(open_location(blob_uri, consensus_uri))
    try:
        hold = race_and_kill(client, "kv", start, stop, rng)
    finally:
        producing.stopped.set()
        producing.join(60)
    assert producing.error is None, producing.error
    remap = Remap(client, "kv.remap")
    upper = client.state("kv").upper.time
    assert upper is not None and upper > 0
    end = remap.frontier_at(upper - 1)
    assert sum(end.values()) > 0
    records = committed_records(bootstrap, topic, end)
    timed = sorted(
        ((remap.reclock(r["p"], r["o"]), r["p"], r["o"], r["key"], r["value"]) for r in records),
        key=lambda x: (x[0], x[1], x[2]),
    )
    times = sorted({t for t, *_ in timed if t is not None and t >= (hold.since.time or 0)})
    assert len(times) >= 3
    for at in times[-12:]:
        want: dict[str, str] = {}
        for t, _, _, k, v in timed:
            if t is not None and t <= at:
                if v is None:
                    want.pop(k, None)
                else:
                    want[k] = v
        rows = hold.snapshot(at).to_pylist()
        assert all(r["_diff"] == 1 for r in rows), "a key is duplicated"
        assert {r["key"]: r["value"] for r in rows} == want, at
