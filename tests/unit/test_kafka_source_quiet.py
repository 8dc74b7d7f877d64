"""A KAFKA source's pause after a silence, and its asks during one, when the broker's
answers are errors or the source only reports its progress upstream (no Spark, no broker:
the stand-in admin and consumer of the source's down-broker test).

``127.0.0.1:1`` is down until a test brings it back; ``127.0.0.1:2`` always answers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import confluent_kafka
import pytest
from confluent_kafka import KafkaError
from tests.unit import test_kafka_down_broker_backoff as backoff
from tests.unit.test_kafka_down_broker_backoff import DOWN, Brokers, Clock, brokers  # noqa: F401

from timeshard.spec import RunSpec
from timeshard.storage import kafka_source


class Refusing(backoff.Consumer):
    """A consumer whose broker, when it answers, answers the topic's metadata with
    ``error`` (None: the topic does not exist)."""

    error: ClassVar[int | None] = None

    def list_topics(self, topic: str, timeout: float) -> Any:
        super().list_topics(topic, timeout)  # waits on a silent broker
        if Refusing.error is None:
            return type("Metadata", (), {"topics": {}})()
        meta = type("Topic", (), {"error": KafkaError(Refusing.error), "partitions": {}})()
        return type("Metadata", (), {"topics": {topic: meta}})()


def ticks(run: Any, n: int) -> list[dict[str, str]]:
    """``n`` ticks, one every 0.5 s: each tick's failures."""
    out = []
    for _ in range(n):
        Clock.now += 0.5
        out.append(run.step())
    return out


@pytest.mark.parametrize("error", [None, KafkaError.TOPIC_AUTHORIZATION_FAILED])
@pytest.mark.usefixtures("brokers")
def test_an_upper_that_fails_with_the_brokers_answer_starts_the_pause_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: int | None
) -> None:
    """Before: after an outage that took the pause to its cap (30 s), an upper that failed
    every tick with an answer (a topic that does not exist, a refusal) kept that pause: a
    later outage's first probe waited 30 s instead of coming at once."""
    monkeypatch.setattr(confluent_kafka, "Consumer", Refusing)
    Refusing.error = error
    _, run = backoff.pipeline(tmp_path, RunSpec(source=[backoff.kafka("orders", DOWN)]))
    ticks(run, 200)  # 100 s of an outage: the pause is at its cap
    Brokers.up.add(DOWN)
    Clock.now += 30.0
    answered = [run.step()["orders"], *(f["orders"] for f in ticks(run, 4))]
    assert not [f for f in answered if "unreachable" in f], answered
    Brokers.up.discard(DOWN)  # a later outage
    waits = len(Brokers.waits)
    assert "unreachable" in run.step()["orders"]  # its first ask, in full
    ticks(run, 1)  # the next tick probes at once
    assert Brokers.waits[waits:] == [10.0, 1.0]
    run.close()


class Group(backoff.Consumer):
    """A consumer whose group commits are recorded; they wait their whole timeout on a
    silent broker."""

    committed: ClassVar[list[dict[str, int]]] = []

    def commit(self, offsets: Any, asynchronous: bool) -> None:
        if self.servers not in Brokers.up:
            Brokers.waits.append(10.0)
            raise confluent_kafka.KafkaException(KafkaError(KafkaError._TIMED_OUT))
        Group.committed.append({str(tp.partition): tp.offset for tp in offsets})


def source() -> kafka_source.KafkaSource:
    return kafka_source.KafkaSource("orders", DOWN, "orders", value_format="text")


@pytest.mark.parametrize("whose", ["its own", "another object's"])
@pytest.mark.usefixtures("brokers")
def test_a_commit_during_a_known_silence_asks_nothing_and_its_offsets_are_committed_after(
    monkeypatch: pytest.MonkeyPatch, whose: str
) -> None:
    """Before: a commit asked the group's coordinator in full even while the source knew
    its cluster was silent, and waited its whole timeout (10 s) on it."""
    monkeypatch.setattr(confluent_kafka, "Consumer", Group)
    Group.committed = []
    orders = source()
    other = kafka_source.BrokerSilence(DOWN)
    silence = orders._silence if whose == "its own" else other
    silence.silent("Kafka at 127.0.0.1:1 is unreachable")
    with pytest.raises(kafka_source.SourceUnavailable, match="unreachable"):
        orders.commit({"0": 5, "1": 7})
    with pytest.raises(kafka_source.SourceUnavailable, match="unreachable"):
        orders.commit({"0": 6})
    assert Brokers.waits == []  # not asked
    Brokers.up.add(DOWN)
    assert orders.upper() == {}  # its probe, then its ask, answered: the silence ends
    orders.commit({"0": 8})
    assert Group.committed == [{"0": 8, "1": 7}]  # the latest offsets, none lost
    orders.commit({"0": 9, "1": 7})
    assert Group.committed[-1] == {"0": 9, "1": 7}
    orders.close()


@pytest.mark.usefixtures("brokers")
def test_a_commit_that_gets_no_answer_is_a_silence_the_next_upper_probes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(confluent_kafka, "Consumer", Group)
    orders = source()
    with pytest.raises(kafka_source.SourceUnavailable, match="committing offsets"):
        orders.commit({"0": 5})
    with pytest.raises(kafka_source.SourceUnavailable):
        orders.upper()
    assert Brokers.waits == [10.0, 1.0]  # the commit in full, then a probe, not a full ask
    orders.close()


@pytest.mark.usefixtures("brokers")
def test_a_sources_silence_is_made_once_shares_its_clusters_record_and_is_forgotten_at_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(confluent_kafka, "Consumer", Group)
    orders = source()
    silence = orders._silence
    assert orders._silence is silence
    assert silence.cluster is kafka_source.BrokerSilence(DOWN).cluster
    orders.close()
    assert orders._silence is not silence
