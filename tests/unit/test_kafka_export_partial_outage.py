"""A KAFKA export whose cluster answers its metadata but not the request of one step (the
progress topic's creation, the transaction coordinator's ``init_transactions``) counts
that as the cluster's silence, not asked again on every tick; a refusal is no silence
(no Spark, no broker: the stand-ins of the export's down-broker test).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import confluent_kafka
import confluent_kafka.admin
import pytest
from confluent_kafka import KafkaError, KafkaException
from tests.unit import test_kafka_export_down_broker as down
from tests.unit.test_kafka_down_broker_backoff import Clock
from tests.unit.test_kafka_export_down_broker import Brokers, brokers  # noqa: F401

from timeshard.storage.health import latest_health

DOWN = down.DOWN


class Refused:
    """A future whose answer is a refusal (an error code the broker answered with)."""

    def __init__(self, code: int) -> None:
        self.code = code

    def result(self, timeout: float | None = None) -> Any:
        Brokers.waits.append(0.0)  # asked, answered at once
        raise KafkaException(KafkaError(self.code))


class NoProgressTopic(down.Admin):
    """A cluster without the progress topic, whose controller answers a topic's creation
    with ``answer`` (None: not at all; the metadata answers all along)."""

    answer: ClassVar[int | None] = None

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return down.metadata("out")

    def create_topics(self, topics: list[Any]) -> dict[str, Any]:
        if NoProgressTopic.answer is None:
            return {t.topic: down.Future(DOWN + "-controller", None) for t in topics}
        return {t.topic: Refused(NoProgressTopic.answer) for t in topics}


class Coordinator(down.Producer):
    """A producer whose transaction coordinator answers ``init_transactions`` with
    ``answer`` (None: not at all, the producer waits its whole timeout)."""

    answer: ClassVar[int | None] = None

    def init_transactions(self, timeout: float) -> None:
        if Coordinator.answer is None:
            Brokers.waits.append(timeout)
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        Brokers.waits.append(0.0)
        raise KafkaException(KafkaError(Coordinator.answer))


def ticks(run: Any, n: int = 120) -> list[dict[str, str]]:
    """``n`` ticks, one every 0.5 s: each tick's failures."""
    out = []
    for _ in range(n):
        Clock.now += 0.5
        out.append(run.step())
    return out


@pytest.mark.usefixtures("brokers")
def test_a_progress_topic_whose_creation_gets_no_answer_is_not_asked_every_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the creation's timeout was no silence: every tick waited 30 s on it."""
    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", NoProgressTopic)
    NoProgressTopic.answer = None
    Brokers.up.add(DOWN)
    client, run = down.pipeline(tmp_path)
    failures = ticks(run)
    full = [w for w in Brokers.waits if w == 30.0]
    assert 1 <= len(full) <= 8  # one per probe that answers (pauses 1, 2, .. 30 s)
    assert all(f["out"].startswith("BrokerSilent: ") for f in failures), failures[-1]
    assert latest_health(client)["out"]["status"] == "stalled"
    assert (Brokers.log, Brokers.commits) == ([], 0)
    run.close()


@pytest.mark.usefixtures("brokers")
def test_a_transaction_coordinator_that_does_not_answer_is_not_asked_every_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: ``init_transactions`` timing out was no silence: every tick waited 30 s."""
    monkeypatch.setattr(confluent_kafka, "Producer", Coordinator)
    Coordinator.answer = None
    Brokers.up.add(DOWN)
    client, run = down.pipeline(tmp_path)
    failures = ticks(run)
    full = [w for w in Brokers.waits if w == 30.0]
    assert 1 <= len(full) <= 8
    assert all(f["out"].startswith("BrokerSilent: ") for f in failures), failures[-1]
    assert "init_transactions" in failures[0]["out"]
    assert latest_health(client)["out"]["status"] == "stalled"
    assert (Brokers.log, Brokers.commits) == ([], 0)
    Coordinator.answer = None
    monkeypatch.setattr(confluent_kafka, "Producer", down.Producer)  # the coordinator is back
    Clock.now += 30.0
    assert run.step() == {}
    assert Brokers.commits == 1
    run.close()


@pytest.mark.parametrize(
    "refusal",
    [
        ("producer", KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        ("admin", KafkaError.TOPIC_AUTHORIZATION_FAILED),
        ("admin", KafkaError.INVALID_CONFIG),
    ],
)
@pytest.mark.usefixtures("brokers")
def test_a_refusal_is_no_silence_and_is_asked_again_every_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refusal: tuple[str, int]
) -> None:
    which, code = refusal
    if which == "producer":
        monkeypatch.setattr(confluent_kafka, "Producer", Coordinator)
        Coordinator.answer = code
    else:
        monkeypatch.setattr(confluent_kafka.admin, "AdminClient", NoProgressTopic)
        NoProgressTopic.answer = code
    Brokers.up.add(DOWN)
    _, run = down.pipeline(tmp_path)
    failures = ticks(run, 5)
    assert len(Brokers.waits) == 5  # asked at every tick, answered at once
    assert not [f for f in failures if f["out"].startswith("BrokerSilent")], failures
    assert (Brokers.log, Brokers.commits) == ([], 0)
    run.close()


@pytest.mark.usefixtures("brokers")
def test_a_step_that_fails_with_the_brokers_answer_starts_the_pause_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: after an outage that took the pause to its cap (30 s), a step that failed
    every tick with an answer (here a refusal) kept that pause: a later outage's first
    probe waited 30 s instead of coming at once."""
    monkeypatch.setattr(confluent_kafka, "Producer", Coordinator)
    Coordinator.answer = KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    _, run = down.pipeline(tmp_path)
    ticks(run, 200)  # 100 s of an outage: the pause is at its cap
    Brokers.up.add(DOWN)
    Clock.now += 30.0
    refused = [run.step()["out"], *(f["out"] for f in ticks(run, 4))]
    assert not [f for f in refused if f.startswith("BrokerSilent")], refused
    Brokers.up.discard(DOWN)  # a later outage
    waits = len(Brokers.waits)
    assert run.step()["out"].startswith("BrokerSilent")  # its first ask, in full
    ticks(run, 1)  # the next tick probes at once
    assert Brokers.waits[waits:] == [30.0, 1.0]
    run.close()


class SilentCommit(down.Producer):
    """A producer whose transaction coordinator answers ``init_transactions`` but not the
    commit: the commit waits its whole timeout."""

    def init_transactions(self, timeout: float) -> None:
        pass

    def commit_transaction(self, timeout: float) -> None:
        Brokers.waits.append(timeout)
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))


@pytest.mark.usefixtures("brokers")
def test_a_commit_that_gets_no_answer_is_a_silence_not_asked_every_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the task raised the commit's timeout as a fault after the progress read had
    answered, which started the pause anew: every tick waited 30 s on the commit."""
    monkeypatch.setattr(confluent_kafka, "Producer", SilentCommit)
    Brokers.up.add(DOWN)
    client, run = down.pipeline(tmp_path)
    failures = ticks(run)
    full = [w for w in Brokers.waits if w == 30.0]
    assert 1 <= len(full) <= 8, len(full)
    assert all(f["out"].startswith("BrokerSilent: ") for f in failures), failures[-1]
    assert "transaction" in failures[0]["out"]
    assert latest_health(client)["out"]["status"] == "stalled"
    assert (Brokers.log, Brokers.commits) == ([], 0)
    monkeypatch.setattr(confluent_kafka, "Producer", down.Producer)  # the coordinator is back
    Clock.now += 30.0
    assert run.step() == {}
    assert Brokers.commits == 1
    run.close()
