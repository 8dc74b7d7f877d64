"""A KAFKA source and the identity of its topic, against a real broker (no Spark).

A topic deleted and made again under the same name restarts its offsets at
0. Once it holds as many records as the source had bound, its offsets no
longer look behind: only the topic's id tells the new topic from the old.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from timeshard.errors import SourceUnavailable
from timeshard.storage.kafka_source import KafkaSource

pytestmark = [pytest.mark.kafka]


def _produce(bootstrap: str, topic: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        producer.produce(topic, value=b"r%d" % i, partition=0)
    assert producer.flush(30) == 0


def _delete(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"topic {topic!r} is still listed"
        time.sleep(0.1)


def test_a_topic_made_again_longer_than_the_offsets_read_is_a_definite_error(
    kafka_broker: Any,
) -> None:
    """(The source read on from the old offsets: the new topic's first records were lost.)"""
    from timeshard.dev.kafka import create_topic

    bootstrap = kafka_broker.bootstrap
    topic = f"t-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, partitions=1)
    _produce(bootstrap, topic, 3)
    source = KafkaSource("again", bootstrap, topic, value_format="text", timeout_s=5)
    assert source.upper() == {"0": 3}
    _delete(bootstrap, topic)
    with pytest.raises(SourceUnavailable, match="does not exist"):
        source.upper()
    create_topic(bootstrap, topic, partitions=1)
    _produce(bootstrap, topic, 5)
    with pytest.raises(SourceUnavailable, match="deleted and made again") as e:
        source.upper()
    assert e.value.definite
    with pytest.raises(SourceUnavailable, match="deleted and made again"):
        source.upper()  # it stays refused: the offsets bound are the old topic's
    source.close()


def test_a_topic_that_stays_is_read_on(kafka_broker: Any) -> None:
    from timeshard.dev.kafka import create_topic

    bootstrap = kafka_broker.bootstrap
    topic = f"t-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, partitions=2)
    source = KafkaSource("stays", bootstrap, topic, value_format="text", timeout_s=5)
    assert source.upper() == {"0": 0, "1": 0}
    _produce(bootstrap, topic, 2)
    assert source.upper() == {"0": 2, "1": 0}
    source.close()
