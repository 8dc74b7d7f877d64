"""The Kafka broker the tests start (KRaft, Maven Central jars), used with a real client."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from timeshard.dev.kafka import KafkaBroker, KafkaUnavailable, create_topic

pytestmark = pytest.mark.kafka


def _consume(bootstrap: str, topic: str, partitions: int, n: int) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < n:
            assert time.monotonic() < deadline, f"{len(got)} of {n} records"
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append((msg.partition(), msg.value()))
        assert consumer.poll(1.0) is None  # nothing more
    finally:
        consumer.close()
    return got


def test_records_round_trip_in_partition_order(kafka_broker: KafkaBroker) -> None:
    topic = f"rt-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_broker.bootstrap, topic, partitions=3)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for i in range(1000):
        producer.produce(topic, value=str(i).encode(), partition=i % 3)
    assert producer.flush(30) == 0
    got = _consume(kafka_broker.bootstrap, topic, 3, 1000)
    for p in range(3):
        assert [int(v) for q, v in got if q == p] == list(range(p, 1000, 3))


def test_only_committed_transactions_are_read(kafka_broker: KafkaBroker) -> None:
    topic = f"tx-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_broker.bootstrap, topic)
    producer = Producer(
        {"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": uuid.uuid4().hex}
    )
    producer.init_transactions(30)
    for value, commit in [(b"aborted", False), (b"committed", True)]:
        producer.begin_transaction()
        producer.produce(topic, value=value)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    assert _consume(kafka_broker.bootstrap, topic, 1, 1) == [(0, b"committed")]


def test_a_killed_broker_restarts_with_its_data(tmp_path: Path) -> None:
    broker = KafkaBroker(tmp_path / "k")
    try:
        broker.start()
    except KafkaUnavailable as e:
        pytest.fail(f"the broker must start here: {e}")
    try:
        topic = "kept"
        create_topic(broker.bootstrap, topic)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        producer.produce(topic, value=b"x")
        assert producer.flush(30) == 0
        group = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "kept-group"})
        group.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        group.close()
        broker.kill()
        assert not broker.running
        broker.start()
        assert _consume(broker.bootstrap, topic, 1, 1) == [(0, b"x")]
        group = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "kept-group"})
        [committed] = group.committed([TopicPartition(topic, 0)], timeout=30)
        group.close()
        assert committed.offset == 1
    finally:
        broker.stop()


def test_a_taken_port_fails_fast(tmp_path: Path, kafka_broker: KafkaBroker) -> None:
    """The JVM exits (its port is taken): reported at once, not after the timeout."""
    started = time.monotonic()
    with pytest.raises(KafkaUnavailable, match="exited"):
        KafkaBroker(tmp_path / "k2", port=kafka_broker.port).start(timeout_s=300)
    assert time.monotonic() - started < 120
