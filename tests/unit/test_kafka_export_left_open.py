"""A KAFKA export whose task's abort got no answer ends the transaction it may have left
open at its next tick, as soon as the transaction coordinator answers, even if that tick
fails later (no Spark, no broker: the stand-ins of the export's down-broker test).
"""

from __future__ import annotations

import json
import logging
import pickle
from pathlib import Path
from typing import Any, ClassVar

import confluent_kafka
import confluent_kafka.admin
import pytest
from confluent_kafka import KafkaError, KafkaException
from tests.unit import test_kafka_export_down_broker as down
from tests.unit.test_kafka_down_broker_backoff import Clock, SleepingClock
from tests.unit.test_kafka_export_down_broker import Brokers, brokers  # noqa: F401

from timeshard.storage import kafka_source


class Coordinator(down.Producer):
    """A producer whose transaction coordinator keeps the export's transaction: begun, it
    is open until committed, aborted, or ended by the next ``init_transactions`` of the
    id. While :attr:`silent`, a commit or an abort gets no answer (it stays open)."""

    open: ClassVar[bool] = False
    silent: ClassVar[bool] = False

    def init_transactions(self, timeout: float) -> None:
        super().init_transactions(timeout)
        Coordinator.open = False  # aborted; its producer fenced

    def begin_transaction(self) -> None:
        super().begin_transaction()
        Coordinator.open = True

    def _unanswered(self, timeout: float) -> None:
        if Coordinator.silent:
            Brokers.waits.append(timeout)
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    def commit_transaction(self, timeout: float) -> None:
        self._unanswered(timeout)
        super().commit_transaction(timeout)
        Coordinator.open = False

    def abort_transaction(self, timeout: float) -> None:
        self._unanswered(timeout)
        super().abort_transaction(timeout)
        Coordinator.open = False


@pytest.mark.usefixtures("brokers")
def test_a_transaction_an_unanswered_abort_left_open_ends_at_the_next_ticks_progress_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: only the next task's ``init_transactions`` ended it, so a tick that failed
    before its task (the target topic's configuration, asked of a silent controller)
    left it open, holding back the topic's read_committed readers, until the transaction
    timed out or a task ran again."""
    monkeypatch.setattr(confluent_kafka, "Producer", Coordinator)
    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", down.ControllerDown)
    down.ControllerDown.up, Coordinator.open, Coordinator.silent = True, False, True
    Brokers.up.add(down.DOWN)
    _, run = down.pipeline(tmp_path)
    fault = run.step()["out"]  # the task's commit, then its abort, get no answer
    assert "its transaction" in fault and Coordinator.open
    Coordinator.silent, down.ControllerDown.up = False, False
    fault = run.step()["out"]  # probed at once: the tick fails at the configuration read
    assert "BrokerSilent" in fault and "its transaction" not in fault, fault
    assert not Coordinator.open  # ended all the same
    assert (Brokers.log, Brokers.commits) == ([], 0)  # nothing written meanwhile
    down.ControllerDown.up = True
    Clock.now += 31.0
    assert run.step() == {}
    assert Brokers.commits == 1 and len(Brokers.log) == 1  # the progress, once
    assert not Coordinator.open
    run.close()


def left_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, producer: type[Coordinator] = Coordinator
) -> Any:
    """A pipeline of one KAFKA export whose first task's commit and abort got no answer
    (the coordinator silent): its transaction is open, and the coordinator still silent."""
    monkeypatch.setattr(confluent_kafka, "Producer", producer)
    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", down.Admin)
    Coordinator.open, Coordinator.silent = False, True
    Brokers.up.add(down.DOWN)
    _, run = down.pipeline(tmp_path)
    assert "its transaction" in run.step()["out"] and Coordinator.open
    return run


@pytest.mark.usefixtures("brokers")
def test_a_transaction_left_open_is_ended_at_a_clean_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: close left the transaction of a task whose commit and abort got no answer
    open, holding back the topics' read_committed readers until its transaction timeout
    (no later tick would end it)."""
    run = left_open(tmp_path, monkeypatch)
    Coordinator.silent = False
    run.close()
    assert not Coordinator.open  # ended by init_transactions of the export's id
    assert (Brokers.log, Brokers.commits) == ([], 0)


@pytest.mark.usefixtures("brokers")
def test_a_close_whose_broker_is_silent_leaves_the_transaction_after_one_short_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    run = left_open(tmp_path, monkeypatch)
    Brokers.up.discard(down.DOWN)
    waits = len(Brokers.waits)
    with caplog.at_level(logging.WARNING, logger="timeshard.storage.kafka_export"):
        run.close()  # raises nothing
    assert Brokers.waits[waits:] == [1.0]  # one short probe, then nothing asked
    assert Coordinator.open  # its transaction timeout ends it
    assert "left open" in caplog.text, caplog.text


@pytest.mark.usefixtures("brokers")
def test_a_close_leaves_a_transaction_of_a_newer_version_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A newer version of the export owns the target (its progress says so): the open
    transaction may be its own, in flight, which a stale instance must not abort."""
    run = left_open(tmp_path, monkeypatch)
    Coordinator.silent = False
    (export,) = run.exports
    newer = {"frontier": 1, "version": export.version + 1}
    Brokers.log.append((export.export_id.encode(), json.dumps(newer).encode()))
    run.close()
    assert Coordinator.open


class OtherOpen(down.Consumer):
    """A consumer of a progress topic where another export's transaction is open: the high
    watermark is one past the last stable offset until its transaction timeout."""

    def get_watermark_offsets(self, tp: Any, timeout: float = -1, cached: bool = False) -> Any:
        low, stable = super().get_watermark_offsets(tp, timeout, cached)
        return (low, stable + 1) if cached else (low, stable)


@pytest.mark.usefixtures("brokers")
def test_a_close_ends_its_own_transaction_without_waiting_for_another_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: close read the progress as a tick does, which waits up to timeout_s (30 s)
    for every transaction open on the shared progress topic to end, then logged this
    export's transaction as left open, though it had ended it."""
    run = left_open(tmp_path, monkeypatch)
    Coordinator.silent = False
    monkeypatch.setattr(confluent_kafka, "Consumer", OtherOpen)
    with caplog.at_level(logging.WARNING, logger="timeshard.storage.kafka_export"):
        run.close()
    assert not Coordinator.open  # ended by init_transactions of the export's id
    assert "left open" not in caplog.text, caplog.text


class Recorded(Coordinator):
    """A :class:`Coordinator` whose configurations are recorded."""

    configs: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, config: dict[str, Any]) -> None:
        Recorded.configs.append(dict(config))
        super().__init__(config)


@pytest.mark.usefixtures("brokers")
def test_the_producer_that_ends_a_transaction_left_open_logs_quietly_within_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: it had no logger (librdkafka's connection retries went to stderr) and
    librdkafka's default socket timeout (60 s), not the export's."""
    Recorded.configs = []
    run = left_open(tmp_path, monkeypatch, Recorded)
    Coordinator.silent = False
    run.close()
    ending = Recorded.configs[-1]  # the close's, which ended the transaction
    assert not Coordinator.open and "logger" in ending, ending
    assert 0 < ending.get("socket.timeout.ms", 0) <= 30_000, ending


@pytest.mark.parametrize("timeout_s", [0.01, 1.0, 30.0, 60.2, 120.0, 300.0])
def test_the_producer_that_ends_a_transaction_is_made_for_any_export_timeout(
    timeout_s: float,
) -> None:
    """Before: a ``socket.timeout.ms`` of the export's timeout past librdkafka's 60 s
    default transaction timeout (+ 100 ms) was refused when the producer was made
    (``_INVALID_ARG``), and every tick after a silent task failed on it."""
    from timeshard.storage import kafka_export

    conf = kafka_export._ending_producer_conf("127.0.0.1:1", "e", timeout_s)
    confluent_kafka.Producer(conf)  # librdkafka checks the configuration here


class RecordedConsumer(down.Consumer):
    """The progress topic's stand-in consumer, its configurations recorded."""

    configs: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, config: dict[str, Any]) -> None:
        RecordedConsumer.configs.append(dict(config))
        super().__init__(config)


@pytest.mark.usefixtures("brokers")
def test_the_tasks_clients_log_quietly_and_the_task_pickles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: the task's producer and its progress reader had no logger, unlike the
    driver's clients, so librdkafka's connection retries went to the executors' stderr.
    The logger is made in the task, on the executor: the task pickles as it did."""
    from timeshard.storage.kafka_export import _ProduceTask

    monkeypatch.setattr(confluent_kafka, "Producer", Recorded)
    monkeypatch.setattr(confluent_kafka, "Consumer", RecordedConsumer)
    Recorded.configs, RecordedConsumer.configs = [], []
    Brokers.up.add(down.DOWN)
    task = _ProduceTask(down.DOWN, "out", "p", "x", 1, "upsert", ("k",), ("k",), 0, 5, 1.0)
    task = pickle.loads(pickle.dumps(task))
    [batch] = list(task(iter([])))
    assert batch.to_pylist()[0]["status"] == "committed", batch.to_pylist()
    [producer] = Recorded.configs
    assert RecordedConsumer.configs, "no progress read"
    for config in [producer, *RecordedConsumer.configs]:
        assert config.get("logger") is kafka_source._quiet_logger(), config
    # One null handler, however many clients the tasks of a reused process made.
    handlers = kafka_source._quiet_logger().handlers
    assert [type(h) for h in handlers].count(logging.NullHandler) == 1, handlers


class Slow(SleepingClock):
    """The export's clock (``time``), which each poll of :class:`SlowConsumer` moves."""

    now: ClassVar[float] = 0.0


class SlowConsumer(down.Consumer):
    """A consumer of the progress topic whose fetches answer, each after 1 s."""

    def poll(self, timeout: float) -> Any:
        Slow.now += 1.0
        return super().poll(timeout)


@pytest.mark.usefixtures("brokers")
def test_a_close_whose_progress_scan_keeps_moving_ends_within_one_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: the scan for a newer version's progress waited the time left of the close
    for each fetch, not in all: a scan that kept moving (100 records of other exports,
    each fetch answered in 1 s) held the close for 100 s past its 30 s timeout."""
    run = left_open(tmp_path, monkeypatch)
    Coordinator.silent = False
    monkeypatch.setattr(confluent_kafka, "Consumer", SlowConsumer)
    for module in down.EXPORT_CLOCKS:
        monkeypatch.setattr(module, "time", Slow)
    Brokers.log.extend((b"other", b"{}") for _ in range(100))
    (export,) = run.exports
    Slow.now = 0.0
    with caplog.at_level(logging.WARNING, logger="timeshard.storage.kafka_export"):
        run.close()
    assert Slow.now <= export.timeout_s + 1.0, Slow.now  # one fetch past it at most
    assert Coordinator.open  # not known to be its own: its transaction timeout ends it
    assert "left open" in caplog.text, caplog.text
