"""A KAFKA source's close: the offsets of its last ticks go to its consumer group before
the consumer closes, within the source's timeout, and a failure is logged, never raised
(no Spark, no broker: the stand-in consumer and coordinator of the source's quiet test).
"""

from __future__ import annotations

import gc
import logging
import weakref
from collections.abc import Iterator
from typing import Any, ClassVar

import confluent_kafka
import confluent_kafka.admin
import pytest
from tests.unit import test_kafka_down_broker_backoff as backoff
from tests.unit.test_kafka_down_broker_backoff import Brokers, Clock, brokers  # noqa: F401
from tests.unit.test_kafka_source_quiet import Coordinator, Group

from timeshard.errors import InvalidUsage
from timeshard.storage import kafka_source


class Closing(Coordinator):
    """A :class:`Coordinator` that records, at its close, the commits still unanswered."""

    unanswered_at_close: ClassVar[list[int]] = []

    def close(self) -> None:
        Closing.unanswered_at_close.append(len(self.answers))


@pytest.fixture
def orders(monkeypatch: pytest.MonkeyPatch) -> Iterator[kafka_source.KafkaSource]:
    """Source ``orders`` on the answering cluster, whose coordinator answers each commit
    3 s after it is asked."""
    monkeypatch.setattr(confluent_kafka, "Consumer", Closing)
    Group.committed, Closing.unanswered_at_close, Coordinator.asks = [], [], []
    Coordinator.silent, Coordinator.commits_silent, Coordinator.error = False, False, None
    Coordinator.probe_error, Coordinator.delay = None, 3.0
    yield kafka_source.KafkaSource("orders", backoff.UP, "orders", value_format="text")
    Coordinator.delay, Coordinator.commits_silent = 0.0, False


@pytest.mark.usefixtures("brokers")
def test_a_closed_source_commits_its_last_offsets_and_waits_for_the_answer(
    orders: kafka_source.KafkaSource,
) -> None:
    """Before: close closed the consumer with the last tick's offsets never asked (one
    commit was in flight) and the one in flight unanswered, so lag tools saw the group
    behind after a clean stop."""
    orders.upper()
    orders.commit({"0": 5, "1": 2})  # asked, answered in 3 s
    Clock.now += 1.0
    orders.commit({"0": 6})  # one in flight: kept for the next commit
    assert Group.committed == [{"0": 5, "1": 2}]
    orders.close()
    assert Group.committed == [{"0": 5, "1": 2}, {"0": 6}]  # partition 1 stays committed
    # Asked once the one in flight was answered: asked beside it, it might land first.
    assert Coordinator.asks[-1] >= Coordinator.asks[-2] + 3.0, Coordinator.asks
    assert Closing.unanswered_at_close == [0]  # every commit answered before the close


@pytest.mark.usefixtures("brokers")
def test_a_close_whose_commit_gets_no_answer_waits_the_timeout_at_most_and_logs_it(
    orders: kafka_source.KafkaSource, caplog: pytest.LogCaptureFixture
) -> None:
    Coordinator.commits_silent = True  # each commit answered _TIMED_OUT after 10 s
    orders.upper()
    orders.commit({"0": 5})
    start = Clock.now
    with caplog.at_level(logging.WARNING, logger="timeshard.storage.kafka_source"):
        orders.close()  # raises nothing
    assert Clock.now - start <= orders.timeout_s  # the clock moves only in polls
    assert "not committed" in caplog.text and "{'0': 5}" in caplog.text, caplog.text


@pytest.mark.usefixtures("brokers")
def test_a_close_during_a_known_silence_asks_nothing_and_logs_the_offsets(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(confluent_kafka, "Consumer", Group)
    Group.committed = []
    orders = kafka_source.KafkaSource("orders", backoff.DOWN, "orders", value_format="text")
    orders._silence.silent("Kafka at 127.0.0.1:1 is unreachable")
    with pytest.raises(kafka_source.SourceUnavailable):
        orders.commit({"0": 5})
    with caplog.at_level(logging.WARNING, logger="timeshard.storage.kafka_source"):
        orders.close()
    assert Group.committed == [] and Brokers.waits == []
    assert "unreachable" in caplog.text and "{'0': 5}" in caplog.text, caplog.text


class Refusing(Group):
    """A consumer whose client refuses every commit at once."""

    def commit(self, offsets: Any, asynchronous: bool) -> None:
        raise confluent_kafka.KafkaException(
            confluent_kafka.KafkaError(confluent_kafka.KafkaError._STATE)
        )


@pytest.mark.usefixtures("brokers")
def test_a_commit_the_client_refuses_at_close_is_logged_and_the_close_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(confluent_kafka, "Consumer", Group)
    orders = kafka_source.KafkaSource("orders", backoff.UP, "orders", value_format="text")
    orders.commit({"0": 5})
    Clock.now += 1.0
    orders.commit({"0": 6})  # answered at once: no commit in flight
    monkeypatch.setattr(Group, "commit", Refusing.commit)
    orders._uncommitted = {"0": 7}
    with caplog.at_level(logging.WARNING, logger="timeshard.storage.kafka_source"):
        orders.close()
    assert orders._client is None  # closed all the same
    assert "_STATE" in caplog.text and "{'0': 7}" in caplog.text, caplog.text


@pytest.mark.usefixtures("brokers")
def test_a_source_with_a_consumer_is_freed_without_the_cycle_collector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: the consumer's ``on_commit`` was a bound method of the source, a cycle
    (source -> consumer -> callback -> source) that only the cycle collector frees; a
    source dropped without close, with its consumer and its threads, stayed until it ran."""
    monkeypatch.setattr(confluent_kafka, "Consumer", Group)
    orders = kafka_source.KafkaSource("orders", backoff.UP, "orders", value_format="text")
    orders.commit({"0": 5})  # makes the consumer
    consumer = weakref.ref(orders._client)
    freed = weakref.ref(orders)
    gc.disable()
    try:
        del orders
        assert freed() is None and consumer() is None
    finally:
        gc.enable()


@pytest.mark.usefixtures("brokers")
def test_a_second_close_asks_nothing_makes_no_consumer_and_waits_for_nothing(
    orders: kafka_source.KafkaSource,
) -> None:
    """Before: a second close (a drop retried) found offsets still uncommitted, made a new
    consumer (the first was closed) and polled it its whole timeout for an answer to a
    commit it asked of a coordinator that could not answer in time."""
    Coordinator.commits_silent = True
    orders.upper()
    orders.commit({"0": 5})
    orders.close()  # the offsets stay uncommitted: logged
    asks, closed, now = list(Coordinator.asks), list(Closing.unanswered_at_close), Clock.now
    Coordinator.commits_silent = False
    orders.close()
    assert (Coordinator.asks, Closing.unanswered_at_close) == (asks, closed)
    assert Clock.now == now and orders._client is None


@pytest.mark.usefixtures("brokers")
def test_a_late_success_come_before_close_ends_the_groups_silence_and_close_commits(
    orders: kafka_source.KafkaSource, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: while the group's silence was known, close asked nothing without reading
    the answers come meanwhile, so a success answered late was ignored, the last offsets
    were left uncommitted and the log said the coordinator did not answer."""
    Coordinator.delay = 15.0  # answered after the source's timeout (10 s)
    orders.upper()
    orders.commit({"0": 5})
    Clock.now += 11.0
    with pytest.raises(kafka_source.SourceUnavailable, match="did not answer"):
        orders.commit({"0": 6})  # judged silent: kept for the next commit
    Clock.now += 5.0  # the success has come, not read yet
    Coordinator.delay = 0.0
    with caplog.at_level(logging.WARNING, logger="timeshard.storage.kafka_source"):
        orders.close()
    assert Group.committed == [{"0": 5}, {"0": 6}] and orders._uncommitted == {}
    assert "not committed" not in caplog.text, caplog.text


@pytest.mark.usefixtures("brokers")
def test_a_close_after_the_topic_got_another_id_commits_nothing_to_the_new_topic(
    orders: kafka_source.KafkaSource,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: close committed the old topic's offsets to the topic made again under its
    name, putting the group ahead of what was read from the new topic."""
    orders.upper()
    orders.commit({"0": 5})
    Clock.now += 1.0
    orders.commit({"0": 6})  # one in flight: kept for the next commit
    monkeypatch.setattr(orders, "_current_topic_id", lambda: "id-of-the-new-topic")
    with pytest.raises(kafka_source.SourceUnavailable, match="deleted and made again"):
        orders.upper()
    with caplog.at_level(logging.WARNING, logger="timeshard.storage.kafka_source"):
        orders.close()
    assert Group.committed == [{"0": 5}]
    assert "{'0': 6}" in caplog.text and "id-of-the-new-topic" in caplog.text, caplog.text


@pytest.mark.usefixtures("brokers", "orders")
def test_a_close_waits_for_the_answer_no_longer_than_the_timeout_even_between_polls() -> None:
    """Before: close polled ``ceil(timeout_s / 0.1)`` times 0.1 s, 0.3 s for a timeout of
    0.25 s."""
    Coordinator.delay = 100.0  # no answer before the close ends
    source = kafka_source.KafkaSource(
        "orders", backoff.UP, "orders", value_format="text", timeout_s=0.25
    )
    source.upper()
    source.commit({"0": 5})
    start = Clock.now
    source.close()
    assert Clock.now - start <= 0.25, Clock.now - start


def close_with_a_commit_in_flight(
    orders: kafka_source.KafkaSource, caplog: pytest.LogCaptureFixture
) -> None:
    """A tick's commit asked, offsets of a later one kept, then close: asking none itself
    (the tick's commit is the only one asked), its warnings captured."""
    orders.upper()
    orders.commit({"0": 5})
    orders.commit({"0": 6})  # one in flight: kept for the next commit
    with caplog.at_level(logging.WARNING, logger="timeshard.storage.kafka_source"):
        orders.close()
    assert len(Coordinator.asks) == 1, Coordinator.asks  # the tick's commit only


@pytest.mark.parametrize("answer", ["no answer (_WAIT_COORD)", "a success, when time is up"])
@pytest.mark.usefixtures("brokers")
def test_a_close_asks_no_commit_after_a_no_answer_or_once_its_time_is_up(
    orders: kafka_source.KafkaSource, caplog: pytest.LogCaptureFixture, answer: str
) -> None:
    """Before: close asked its own commit after the one in flight was answered with the
    client's no-answer (the coordinator silent: the commit would be held too, and the
    consumer's close would wait for it), and after a success that came as its time was
    up (nothing left to wait for the answer with)."""
    if answer.startswith("no answer"):
        Coordinator.error = confluent_kafka.KafkaError._WAIT_COORD  # answered in 3 s
    else:
        Coordinator.delay = orders.timeout_s  # answered as the close's time is up
    close_with_a_commit_in_flight(orders, caplog)
    assert "not committed" in caplog.text and "{'0': 6}" in caplog.text, caplog.text


class Counted(Closing):
    """A :class:`Closing` consumer that counts the consumers made."""

    made: ClassVar[int] = 0

    def __init__(self, config: dict[str, Any]) -> None:
        Counted.made += 1
        super().__init__(config)


class CountedAdmin(backoff.Admin):
    """The admin stand-in, counting the admin clients made."""

    made: ClassVar[int] = 0

    def __init__(self, config: dict[str, Any]) -> None:
        CountedAdmin.made += 1
        super().__init__(config)


@pytest.mark.usefixtures("brokers")
def test_a_closed_source_refuses_every_ask_and_makes_no_client(
    orders: kafka_source.KafkaSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: after close, upper, read, commit and find_topic_id each made a new consumer
    or admin client (the closed ones dropped) and asked the broker, and the new client was
    never closed."""
    monkeypatch.setattr(confluent_kafka, "Consumer", Counted)
    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", CountedAdmin)
    Counted.made = CountedAdmin.made = 0
    orders.upper()
    orders.commit({"0": 5})
    orders.close()
    made, asks = (Counted.made, CountedAdmin.made), list(Coordinator.asks)
    asked = {
        "upper": orders.upper,
        "commit": lambda: orders.commit({"0": 6}),
        "read": lambda: orders.read(None, {"0": 5}, {"0": 6}),
        "find_topic_id": orders.find_topic_id,
    }
    for what, ask in asked.items():
        with pytest.raises(InvalidUsage, match="'orders' is closed") as refused:
            ask()
        assert what in str(refused.value), refused.value
    assert (Counted.made, CountedAdmin.made) == made and Coordinator.asks == asks
    assert orders._client is None and orders._admin is None
    orders.close()  # still nothing to do
    assert (Counted.made, CountedAdmin.made) == made


@pytest.mark.usefixtures("brokers")
def test_a_close_asks_no_commit_with_too_little_of_its_time_left_for_an_answer(
    orders: kafka_source.KafkaSource, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: close asked its own commit once the one in flight was answered with 1 ms
    of its bound left: no answer could come in time, and the consumer's close then waited
    for the commit the client held, up to a whole timeout more."""
    Coordinator.delay = orders.timeout_s - 0.001  # answered with 1 ms of the close left
    close_with_a_commit_in_flight(orders, caplog)
    assert Closing.unanswered_at_close == [0]
    assert "{'0': 6}" in caplog.text and "not asked" in caplog.text, caplog.text
