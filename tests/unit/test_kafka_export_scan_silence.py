"""A KAFKA export's task whose progress read gets no answer from the progress partition's
leader (its fetches never return) counts that as the cluster's silence, not asked again
on every tick (no Spark, no broker: the stand-ins of the export's down-broker test).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import confluent_kafka
import pytest
from tests.unit import test_kafka_export_down_broker as down
from tests.unit.test_kafka_down_broker_backoff import Clock, SleepingClock
from tests.unit.test_kafka_export_down_broker import Brokers, brokers  # noqa: F401

from timeshard.storage import kafka_export, kafka_progress
from timeshard.storage.health import latest_health

DOWN = down.DOWN


class Leader(SleepingClock):
    """Whether the progress partition's leader answers fetches; the clock of the scan's
    deadline, which a fetch that gets no answer moves past it."""

    down: ClassVar[bool] = False
    #: Whether the next consumer made is a task's (made after its init_transactions).
    task_next: ClassVar[bool] = False
    now: ClassVar[float] = 0.0


class TaskProducer(down.Producer):
    def init_transactions(self, timeout: float) -> None:
        super().init_transactions(timeout)
        Leader.task_next = True


class FetchlessConsumer(down.Consumer):
    """A consumer whose fetches get no answer while the leader is down, in a task only:
    the driver's progress read, just before, got its answer."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.silent, Leader.task_next = Leader.down and Leader.task_next, False
        self.waited = False

    def poll(self, timeout: float) -> Any:
        if not self.silent:
            return super().poll(timeout)
        if not self.waited:  # the scan's whole timeout, once
            Brokers.waits.append(30.0)
            self.waited = True
            Leader.now += 31.0
        return None


@pytest.mark.usefixtures("brokers")
def test_a_tasks_progress_read_that_gets_no_answer_is_a_silence_not_asked_every_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the scan's timeout in the task was an ordinary fault after the driver's
    progress read had answered, which started the pause anew: every tick waited 30 s."""
    monkeypatch.setattr(confluent_kafka, "Producer", TaskProducer)
    monkeypatch.setattr(confluent_kafka, "Consumer", FetchlessConsumer)
    for module in down.EXPORT_CLOCKS:
        monkeypatch.setattr(module, "time", Leader)
    Leader.down, Leader.task_next, Leader.now = False, False, 0.0
    Brokers.up.add(DOWN)
    client, run = down.pipeline(tmp_path)
    assert run.step() == {}  # a progress record to scan for
    assert Brokers.commits == 1
    Leader.down = True
    failures = []
    for _ in range(120):  # one tick every 0.5 s, 60 s
        Clock.now += 0.5
        failures.append(run.step())
    full = [w for w in Brokers.waits if w == 30.0]
    assert 1 <= len(full) <= 8, len(full)  # one per probe that answers (pauses 1, 2, .. 30 s)
    assert all(f["out"].startswith("BrokerSilent: ") for f in failures), failures[-1]
    assert "progress read" in failures[0]["out"]
    assert latest_health(client)["out"]["status"] == "stalled"
    assert Brokers.commits == 1  # nothing written meanwhile
    Leader.down = False  # the leader is back: the export goes on from its recorded progress
    Clock.now += 30.0
    assert run.step() == {}
    assert Brokers.commits == 2 and len(Brokers.log) == 2
    run.close()


class Fetches:
    """A progress partition's consumer for ``_scan``: each poll takes ``step_s`` of the
    scan's clock; ``answered`` polls return the next record (of another export), the
    others nothing, as a fetch still under way does."""

    def __init__(self, step_s: float, answered: bool) -> None:
        self.step_s, self.answered, self.position_ = step_s, answered, 0
        self.polls = 0

    def assign(self, partitions: list[Any]) -> None:
        self.position_ = partitions[0].offset

    def poll(self, timeout: float) -> Any:
        Leader.now += self.step_s
        self.polls += 1
        if not self.answered or self.polls % 2:
            return None
        offset, self.position_ = self.position_, self.position_ + 1
        record = {"error": None, "offset": offset, "key": b"another", "value": b"{}"}
        return type("Message", (), {k: staticmethod(lambda v=v: v) for k, v in record.items()})()

    def position(self, partitions: list[Any]) -> list[Any]:
        return [confluent_kafka.TopicPartition(partitions[0].topic, 0, self.position_)]


def test_a_progress_scan_that_moves_on_slowly_is_no_silence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: the scan's deadline was its window's, so a read that was answered but
    took longer than the timeout in all (0.1 s a record, 64 records, a 2 s timeout)
    was called a silence: the export paused and said the broker did not answer."""
    monkeypatch.setattr(kafka_progress, "time", Leader)
    Leader.now = 0.0
    assert kafka_progress._scan(Fetches(0.05, True), "p", "x", 0, 64, 2.0) is None


def test_a_progress_scan_whose_position_never_moves_is_a_silence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kafka_progress, "time", Leader)
    Leader.now = 0.0
    with pytest.raises(kafka_export.BrokerSilent, match=r"no fetch answered within 2\.0 s"):
        kafka_progress._scan(Fetches(0.05, False), "p", "x", 0, 64, 2.0)


class Unreached(Fetches):
    """A progress partition's consumer whose polls return the client's event of a broker
    it cannot reach (an error message, no record)."""

    def poll(self, timeout: float) -> Any:
        Leader.now += self.step_s
        error = confluent_kafka.KafkaError(confluent_kafka.KafkaError._TRANSPORT)
        return type("Message", (), {"error": staticmethod(lambda: error)})()


def test_a_progress_scan_whose_fetches_reach_no_broker_is_a_silence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: the client's event of an unreachable broker was an ordinary fault, which the
    driver took for the broker's answer (its pause started anew)."""
    monkeypatch.setattr(kafka_progress, "time", Leader)
    Leader.now = 0.0
    with pytest.raises(kafka_export.BrokerSilent):
        kafka_progress._scan(Unreached(0.05, False), "p", "x", 0, 64, 2.0)
