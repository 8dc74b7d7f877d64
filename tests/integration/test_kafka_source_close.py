"""A KAFKA source's close, against the broker the tests start (no Spark): the offsets of
its last ticks reach its consumer group before its consumer closes."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from timeshard.dev.kafka import KafkaBroker, create_topic
from timeshard.storage.kafka_source import KafkaSource

pytestmark = pytest.mark.kafka


def _committed(bootstrap: str, group: str, topic: str) -> dict[str, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        offsets = consumer.committed([TopicPartition(topic, 0)], timeout=30)
    finally:
        consumer.close()
    return {str(tp.partition): tp.offset for tp in offsets if tp.offset >= 0}


def test_a_closed_source_leaves_its_group_at_its_last_ticks_offsets(
    kafka_broker: KafkaBroker,
) -> None:
    """Before: the last tick's offsets, kept while a commit was in flight, were never
    asked, and the group stayed behind the source after a clean stop."""
    topic = f"close-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_broker.bootstrap, topic)
    group = f"g-{uuid.uuid4().hex}"
    source = KafkaSource(
        "orders", kafka_broker.bootstrap, topic, value_format="text", group_id=group
    )
    assert source.upper() == {"0": 0}
    source.commit({"0": 3})  # asked, its answer read by the next commit
    source.commit({"0": 5})  # one in flight: kept for the next commit, which never comes
    source.close()
    assert _committed(kafka_broker.bootstrap, group, topic) == {"0": 5}
