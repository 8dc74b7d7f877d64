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


class Coordinator(Group):
    """A consumer whose reads answer and whose group commits get no answer while
    :attr:`silent` (only the group's coordinator is down)."""

    silent: ClassVar[bool] = True

    def commit(self, offsets: Any, asynchronous: bool) -> None:
        if Coordinator.silent and self.group == "timeshard-orders":
            Brokers.waits.append(10.0)
            raise confluent_kafka.KafkaException(KafkaError(KafkaError._TIMED_OUT))
        Group.committed.append({str(tp.partition): tp.offset for tp in offsets})

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.group = config["group.id"]


@pytest.mark.usefixtures("brokers")
def test_a_commit_that_gets_no_answer_pauses_that_groups_commits_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before (the first fix): a commit without an answer was the source's silence, which
    its next upper, answered, ended at once, so every tick's commit waited its whole
    timeout again (120 in 120 s); and it marked the cluster, so the other sources of the
    cluster skipped their own group's commits."""
    monkeypatch.setattr(confluent_kafka, "Consumer", Coordinator)
    Group.committed, Coordinator.silent = [], True
    orders = kafka_source.KafkaSource("orders", backoff.UP, "orders", value_format="text")
    prices = kafka_source.KafkaSource("prices", backoff.UP, "prices", value_format="text")
    faults = []
    for tick in range(120):
        Clock.now += 1.0
        for source in (orders, prices):
            assert source.upper() == {}
        try:
            orders.commit({"0": tick})
        except kafka_source.SourceUnavailable as e:
            faults.append(str(e))
        prices.commit({"0": tick})  # its group answers: committed every tick
        assert Group.committed[-1] == {"0": tick}
    assert len(Brokers.waits) <= 10, len(Brokers.waits)  # pauses up to 30 s
    assert len(set(faults)) == 1 and "committed again after a pause" in faults[0]
    Coordinator.silent = False
    Clock.now += 30.0
    orders.commit({"0": 120})
    assert Group.committed[-1] == {"0": 120}
    orders.close()
    prices.close()


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
