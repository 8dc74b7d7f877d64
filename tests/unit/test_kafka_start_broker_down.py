"""A controller that starts with its Kafka broker down does not wait on it for the topic
ids of its KAFKA sources; each source learns its id later and records it before it binds
an offset (no Spark, no broker: the admin and the consumer are stand-ins).

The broker's silence is stood in for by an admin whose answers never come: each wait on
one is counted (and ends as the source's timeout would), rather than timed.
"""

from __future__ import annotations

from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, ClassVar

import confluent_kafka
import confluent_kafka.admin
import pytest

from timeshard.catalog import stored_entry
from timeshard.controller import Pipeline
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spec import RunSpec, SourceSpec
from timeshard.storage import kafka_commit, kafka_silence
from timeshard.storage.kafka_source import BrokerSilence

TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"


def kafka(name: str) -> SourceSpec:
    options = {"bootstrap_servers": "127.0.0.1:1", "topic": name, "value_format": "text"}
    return SourceSpec(name=name, kind="kafka", options=options)


SPEC = RunSpec(source=[kafka("orders"), kafka("payments")])


class Broker:
    """Whether the stand-in broker answers, and how often a caller waited on its silence."""

    up: ClassVar[bool] = False
    waits: ClassVar[int] = 0


class Uuid:
    """A topic id as confluent-kafka gives it."""

    def get_most_significant_bits(self) -> int:
        return 0

    def get_least_significant_bits(self) -> int:
        return 1

    def __str__(self) -> str:
        return TOPIC_ID


class Answer:
    """An admin's answer for one topic: its id, or (broker down) a wait that times out."""

    def result(self, timeout: float | None = None) -> Any:
        if not Broker.up:
            Broker.waits += 1
            raise FutureTimeout()
        return type("Described", (), {"topic_id": Uuid()})()


class Admin:
    def __init__(self, config: dict[str, Any]) -> None:
        pass

    def describe_topics(self, topics: Any, request_timeout: float) -> dict[str, Answer]:
        return {name: Answer() for name in topics.topic_names}


class Consumer:
    """A consumer whose metadata and offsets wait on the broker as the admin's do."""

    def __init__(self, config: dict[str, Any]) -> None:
        pass

    def list_topics(self, topic: str, timeout: float) -> Any:
        if not Broker.up:
            Broker.waits += 1
            raise confluent_kafka.KafkaException(
                confluent_kafka.KafkaError(confluent_kafka.KafkaError._TRANSPORT)
            )
        meta = type("Topic", (), {"error": None, "partitions": {}})()  # no records to read
        return type("Metadata", (), {"topics": {topic: meta}})()

    def close(self) -> None:
        pass


@pytest.fixture
def silent_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", Admin)
    monkeypatch.setattr(confluent_kafka, "Consumer", Consumer)
    Broker.up, Broker.waits = False, 0


def recorded_topic_id(client: PersistClient, name: str) -> Any:
    stored = stored_entry(client, name, "source")
    assert stored is not None
    return stored.definition["options"].get("topic_id")


@pytest.mark.usefixtures("silent_broker")
def test_a_start_with_the_broker_down_waits_on_it_once_per_source_tick_not_for_topic_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: each KAFKA source's build waited the admin's timeout for its topic's id
    (about 10 s, serially), then its first tick waited again for the topic's partitions."""
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    pipeline = Pipeline(None, client, SPEC)
    assert [i.output for i in pipeline.ingestions] == ["orders", "payments"]
    assert sorted(pipeline.first_failures) == ["orders", "payments"]  # stalled: a fault
    # One wait per first tick, none for a topic id: the first source's ask in full, the
    # second's short probe of the cluster the first found silent (they share its silence).
    assert Broker.waits == 2
    assert [recorded_topic_id(client, s) for s in ("orders", "payments")] == [None, None]

    Broker.up = True  # the broker is back: each source learns its id, records it, binds
    later = kafka_silence.monotonic() + BrokerSilence.FIRST_PROBE_PAUSE_S  # after the probe's
    for module in (kafka_silence, kafka_commit):  # pause, shared by both; the commits' clock
        monkeypatch.setattr(module, "monotonic", lambda: later)
    assert pipeline.step() == {}
    for source in ("orders", "payments"):
        assert recorded_topic_id(client, source) == TOPIC_ID
        assert client.state(f"{source}.remap").upper.time  # a binding, minted after it
    pipeline.close()


@pytest.mark.usefixtures("silent_broker")
def test_a_build_from_a_catalog_read_before_another_instance_recorded_the_id_keeps_it(
    tmp_path: Path,
) -> None:
    """Two instances of one source: the second read the catalog before the first recorded
    the topic's id, and builds with the broker down. Before: its record of the source
    (no id) replaced the entry, erasing the id, so a topic made again later would be taken
    for the source's own. Now the recorded id is kept, and the second is held to it."""
    from timeshard.spec import build_source
    from timeshard.storage.ingest import Ingestion

    client = PersistClient(Location.embedded(tmp_path / "loc"))
    Broker.up = True
    first = Ingestion(None, client, build_source(kafka("orders")))  # asks, and records it
    assert recorded_topic_id(client, "orders") == TOPIC_ID

    Broker.up = False
    second = build_source(kafka("orders"))
    Ingestion(None, client, second, catalog=[], ask_topic_id=False)  # a stale read: no id
    assert recorded_topic_id(client, "orders") == TOPIC_ID
    assert second.topic_id == TOPIC_ID  # held to it: another id found later is refused
    first.close()
