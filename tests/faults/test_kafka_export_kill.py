"""A KAFKA export killed with SIGKILL at random points, three times: every change exactly once.

The test appends KEY VALUE changes (updates and deletes) to a shard the whole
time; a worker process exports it to a topic (UPSERT envelope) and is killed
(its whole process group: driver, JVM, Python workers) and restarted three
times, at seeded random moments. When the appends stop, a last worker
catches up. The topic, read back with a ``read_committed`` consumer, then
holds for every change time exactly one record per key changed at that time
(its value after the time, or a tombstone), in time order, and the export's
progress in the target is the shard's upper.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from tests.faults.export_kill import ExportUnderKills

from timeshard.storage.kafka_export import TIME_HEADER, read_progress


def topic_records(bootstrap: str, topic: str) -> list[tuple[int, str, int | None]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    out: list[tuple[int, str, int | None]] = []
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 120
        while high > 0 and consumer.position([TopicPartition(topic, 0)])[0].offset < high:
            assert time.monotonic() < deadline, f"{topic} not read to {high}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            t = int(dict(msg.headers() or [])[TIME_HEADER])
            value = None if msg.value() is None else json.loads(msg.value())["v"]
            out.append((t, json.loads(msg.key())["k"], value))
    finally:
        consumer.close()
    return out


@pytest.mark.faults
@pytest.mark.spark
@pytest.mark.kafka
def test_kafka_export_killed_three_times_delivers_every_change_once(
    tmp_path: Path, kafka_broker: Any
) -> None:
    from timeshard.dev.kafka import create_topic

    bootstrap = kafka_broker.bootstrap
    topic = f"exp-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=1)
    run = ExportUnderKills(tmp_path, seed=17, target=["kafka", bootstrap, topic])

    def exported() -> int:
        conf = {
            "bootstrap.servers": bootstrap,
            "group.id": "check-progress",
            "isolation.level": "read_committed",
        }
        try:
            progress = read_progress(conf, "_timeshard-progress", f"kv-to-{topic}", 10)
        except Exception:  # the progress topic does not exist yet
            return 0
        return 0 if progress is None else progress.frontier

    run.run(exported)
    assert exported() == run.t
    records = topic_records(bootstrap, topic)
    assert [r[0] for r in records] == sorted(r[0] for r in records), "not in time order"
    got: dict[int, dict[str, int | None]] = {}
    for at, k, v in records:
        assert k not in got.setdefault(at, {}), f"key {k} twice at time {at}: a duplicate"
        got[at][k] = v
    assert got == {at: changes for at, changes in run.changed.items() if changes}
