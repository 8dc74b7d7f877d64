"""A KAFKA source and the identity of its topic, against a real broker.

A topic deleted and made again under the same name restarts its offsets at
0. Once it holds as many records as the source had bound, its offsets no
longer look behind: only the topic's id tells the new topic from the old.
The catalog records the id, so that a restart tells them apart too (those
tests ingest, with Spark).
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession
from tests.integration.test_kafka_source import _rows, _status

from timeshard.catalog import Catalog, CatalogEntry, stored_entry
from timeshard.errors import SourceUnavailable
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.ingest import Ingestion
from timeshard.storage.kafka_source import KafkaSource

pytestmark = [pytest.mark.kafka]


def _produce(bootstrap: str, topic: str, n: int, first: int = 0) -> None:
    """Records ``r<first>``, ``r<first + 1>``, ... to partition 0."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(first, first + n):
        producer.produce(topic, value=b"r%d" % i, partition=0)
    assert producer.flush(30) == 0


def _delete(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"topic {topic!r} is still listed"
        time.sleep(0.1)


def _made_again(bootstrap: str, topic: str, n: int) -> None:
    """Delete ``topic``, make it again (one partition) and produce ``n`` records to it."""
    from timeshard.dev.kafka import create_topic

    _delete(bootstrap, topic)
    create_topic(bootstrap, topic, partitions=1)
    _produce(bootstrap, topic, n)


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


def _restartable(
    spark: SparkSession, client: PersistClient, bootstrap: str, topic: str
) -> Callable[[], Ingestion]:
    """Builds the ingestion of source ``again`` anew each call, as a restart does."""
    clock = itertools.count(1)

    def build() -> Ingestion:
        source = KafkaSource("again", bootstrap, topic, value_format="text", timeout_s=5)
        return Ingestion(spark, client, source, clock=lambda: next(clock))

    return build


def _values(client: PersistClient, shard: str) -> list[str]:
    upper = client.state(shard).upper.time
    assert upper is not None
    return sorted(r["value"] for r in _rows(client, shard, upper - 1))


def _recorded_topic_id(client: PersistClient) -> Any:
    stored = stored_entry(client, "again", "source")
    assert stored is not None
    return stored.definition["options"].get("topic_id")


@pytest.mark.spark
def test_a_topic_made_again_while_no_process_ran_is_a_definite_error_at_restart(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    """(The id lived in memory only: restarted, the source took the new topic's id for its
    first one and read on from the old topic's offsets, so the new topic's first records
    were lost.)"""
    from timeshard.dev.kafka import create_topic

    bootstrap = kafka_broker.bootstrap
    topic = f"t-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, partitions=1)
    _produce(bootstrap, topic, 3)
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    ingestion = _restartable(spark_kafka, client, bootstrap, topic)
    ing = ingestion()
    ing.step()
    assert _values(client, "again") == ["r0", "r1", "r2"]
    recorded = _recorded_topic_id(client)
    ing.close()
    _made_again(bootstrap, topic, 5)  # while no process runs
    upper = client.state("again").upper.time
    for _ in range(2):  # it stays refused, restart after restart
        ing = ingestion()
        with pytest.raises(SourceUnavailable, match="deleted and made again") as e:
            ing.step()
        assert e.value.definite
        assert _status(client, "again") == "stalled"
        assert client.state("again").upper.time == upper  # nothing written
        assert _recorded_topic_id(client) == recorded  # the old topic's id holds
        ing.close()
    assert _values(client, "again") == ["r0", "r1", "r2"]
    assert isinstance(recorded, str) and recorded


@pytest.mark.spark
def test_a_source_recorded_without_a_topic_id_records_the_one_it_finds(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    """A source recorded before ids were (or when the broker could not tell) reads on, and
    its next build records the id: a topic made again after that is refused at restart."""
    from timeshard.dev.kafka import create_topic

    bootstrap = kafka_broker.bootstrap
    topic = f"t-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, partitions=1)
    _produce(bootstrap, topic, 2)
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    ingestion = _restartable(spark_kafka, client, bootstrap, topic)
    ing = ingestion()
    ing.step()
    ing.close()
    recorded = _recorded_topic_id(client)
    assert isinstance(recorded, str) and recorded
    stored = stored_entry(client, "again", "source")
    assert stored is not None
    options = {k: v for k, v in stored.definition["options"].items() if k != "topic_id"}
    Catalog(client).record(
        [CatalogEntry("again", "source", {**stored.definition, "options": options})]
    )
    _produce(bootstrap, topic, 1, first=2)
    ing = ingestion()
    assert _recorded_topic_id(client) == recorded  # the id it found, the topic's own
    ing.step()
    assert _values(client, "again") == ["r0", "r1", "r2"]
    ing.close()
    _made_again(bootstrap, topic, 4)
    ing = ingestion()
    with pytest.raises(SourceUnavailable, match="deleted and made again") as e:
        ing.step()
    assert e.value.definite
    ing.close()


@pytest.mark.spark
def test_a_topic_id_unknown_when_the_source_was_recorded_is_recorded_before_offsets_bind(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    """A source built before its topic exists records no id (the broker cannot tell one).
    The id its first read learned lived in memory only: restarted after the topic was made
    again, the source took the new topic's id and read it on from the old one's offsets."""
    from timeshard.dev.kafka import create_topic

    bootstrap = kafka_broker.bootstrap
    topic = f"t-{uuid.uuid4().hex[:10]}"
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    ingestion = _restartable(spark_kafka, client, bootstrap, topic)
    ing = ingestion()
    assert _recorded_topic_id(client) is None
    with pytest.raises(SourceUnavailable, match="does not exist"):
        ing.step()
    create_topic(bootstrap, topic, partitions=1)
    _produce(bootstrap, topic, 3)
    ing.step()
    assert _values(client, "again") == ["r0", "r1", "r2"]
    recorded = _recorded_topic_id(client)
    assert isinstance(recorded, str) and recorded
    ing.close()
    _made_again(bootstrap, topic, 5)  # while no process runs
    ing = ingestion()
    with pytest.raises(SourceUnavailable, match="deleted and made again") as e:
        ing.step()
    assert e.value.definite
    assert _recorded_topic_id(client) == recorded
    ing.close()
    assert _values(client, "again") == ["r0", "r1", "r2"]


@pytest.mark.spark
def test_an_id_another_instance_recorded_is_kept_and_a_different_one_refused(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    """Two instances of a source built before its topic existed: the first learns the
    topic's id and records it; the topic is made again before the second learns one. The
    second overwrote the recorded id with the new topic's, so a restart read the new topic
    from the old one's offsets (review of 548439f). It keeps the recorded id, and refuses."""
    from timeshard.dev.kafka import create_topic

    bootstrap = kafka_broker.bootstrap
    topic = f"t-{uuid.uuid4().hex[:10]}"
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    ingestion = _restartable(spark_kafka, client, bootstrap, topic)
    first, second = ingestion(), ingestion()
    create_topic(bootstrap, topic, partitions=1)
    _produce(bootstrap, topic, 3)
    first.step()
    recorded = _recorded_topic_id(client)
    assert isinstance(recorded, str) and recorded
    _made_again(bootstrap, topic, 5)
    upper = client.state("again").upper.time
    with pytest.raises(SourceUnavailable, match="deleted and made again") as e:
        second.step()
    assert e.value.definite
    assert _recorded_topic_id(client) == recorded
    assert client.state("again").upper.time == upper  # nothing bound nor written
    first.close()
    second.close()
