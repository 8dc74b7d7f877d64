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
from tests.unit.test_kafka_down_broker_backoff import Clock
from tests.unit.test_kafka_export_down_broker import Brokers, brokers  # noqa: F401

from timeshard.storage import kafka_export
from timeshard.storage.health import latest_health

DOWN = down.DOWN


class Leader:
    """Whether the progress partition's leader answers fetches; the clock of the scan's
    deadline, which a fetch that gets no answer moves past it."""

    down: ClassVar[bool] = False
    #: Whether the next consumer made is a task's (made after its init_transactions).
    task_next: ClassVar[bool] = False
    now: ClassVar[float] = 0.0

    @classmethod
    def monotonic(cls) -> float:
        return cls.now

    @staticmethod
    def sleep(seconds: float) -> None:
        Leader.now += seconds


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
    monkeypatch.setattr(kafka_export, "time", Leader)
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
