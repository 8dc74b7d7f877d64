"""A KAFKA source's pause after a silence, and its asks during one, when the broker's
answers are errors or the source only reports its progress upstream (no Spark, no broker:
the stand-in admin and consumer of the source's down-broker test).

``127.0.0.1:1`` is down until a test brings it back; ``127.0.0.1:2`` always answers.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
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
    """A consumer whose group commits are recorded. A silent broker answers a commit
    with the client's timeout 10 s later: a synchronous commit waits for it on the
    clock (each such wait recorded), an asynchronous one is answered by the first
    ``poll`` after it."""

    committed: ClassVar[list[dict[str, int]]] = []

    def _answer(self, offsets: Any) -> tuple[float, int | None]:
        """How long the commit of ``offsets`` takes its answer (s), and its error."""
        if self.servers not in Brokers.up:
            return 10.0, KafkaError._TIMED_OUT
        Group.committed.append({str(tp.partition): tp.offset for tp in offsets})
        return 0.0, None

    def commit(self, offsets: Any, asynchronous: bool) -> None:
        wait, code = self._answer(offsets)
        error = None if code is None else KafkaError(code)
        if asynchronous:
            self.answers.append((Clock.now + wait, error, offsets))
            return
        if wait:
            Brokers.waits.append(wait)
            Clock.now += wait
        if error is not None:
            raise confluent_kafka.KafkaException(error)


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
    """A consumer whose reads answer and whose group's coordinator (of ``timeshard-orders``
    only) does not while :attr:`silent` (and its commits only, while
    :attr:`commits_silent`): each ask of it waits its timeout on the clock, as a real
    one does; or answers with :attr:`error`."""

    silent: ClassVar[bool] = True
    commits_silent: ClassVar[bool] = False
    error: ClassVar[int | None] = None
    #: How long (s) the coordinator takes to answer a commit it answers.
    delay: ClassVar[float] = 0.0

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.group = config["group.id"]

    #: The error the coordinator answers the probe (its committed offsets) with.
    probe_error: ClassVar[int | None] = None

    def _coordinator(self, timeout: float, error: int | None) -> None:
        if self.group != "timeshard-orders":
            return
        if Coordinator.silent:
            Brokers.waits.append(timeout)
            Clock.now += timeout
            raise confluent_kafka.KafkaException(KafkaError(KafkaError._TIMED_OUT))
        if error is not None:
            raise confluent_kafka.KafkaException(KafkaError(error))

    def committed(self, partitions: Any, timeout: float) -> Any:
        self._coordinator(timeout, Coordinator.probe_error)
        return partitions

    #: When (the clock) each commit of ``timeshard-orders`` was asked.
    asks: ClassVar[list[float]] = []

    def _answer(self, offsets: Any) -> tuple[float, int | None]:
        if self.group == "timeshard-orders":
            Coordinator.asks.append(Clock.now)
            if Coordinator.silent or Coordinator.commits_silent:
                return 10.0, KafkaError._TIMED_OUT
            if Coordinator.error is not None:
                return Coordinator.delay, Coordinator.error
        Group.committed.append({str(tp.partition): tp.offset for tp in offsets})
        return Coordinator.delay, None


def coordinator_ticks(n: int, *sources: kafka_source.KafkaSource) -> list[str]:
    """``n`` ticks one second apart: each source's upper, then its commit of the tick's
    offset; the faults of the commits."""
    faults = []
    for _ in range(n):
        Clock.now += 1.0
        for source in sources:
            assert source.upper() == {}
            try:
                source.commit({"0": int(Clock.now)})
            except kafka_source.SourceUnavailable as e:
                faults.append(str(e))
    return faults


@pytest.fixture
def orders(monkeypatch: pytest.MonkeyPatch) -> Iterator[kafka_source.KafkaSource]:
    """Source ``orders`` on the answering cluster, whose group's coordinator is silent
    (:class:`Coordinator`, reset), closed after the test (after ``brokers``, which the
    tests ask for first)."""
    monkeypatch.setattr(confluent_kafka, "Consumer", Coordinator)
    Group.committed, Coordinator.silent, Coordinator.error = [], True, None
    Coordinator.probe_error, Coordinator.commits_silent, Coordinator.delay = None, False, 0.0
    source = kafka_source.KafkaSource("orders", backoff.UP, "orders", value_format="text")
    yield source
    Coordinator.probe_error = None
    source.close()


@pytest.mark.usefixtures("brokers")
def test_a_silent_group_coordinator_is_probed_and_pauses_that_groups_commits_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: a commit without an answer was the source's silence, which its next upper
    (answered) ended at once, so every tick's commit waited its whole timeout again; it
    marked the cluster, so the cluster's other sources skipped their own groups' commits;
    and, paused, a commit asked again with a full wait."""
    monkeypatch.setattr(confluent_kafka, "Consumer", Coordinator)
    Group.committed, Coordinator.silent, Coordinator.error = [], True, None
    Coordinator.probe_error, Coordinator.commits_silent = None, False
    orders = kafka_source.KafkaSource("orders", backoff.UP, "orders", value_format="text")
    prices = kafka_source.KafkaSource("prices", backoff.UP, "prices", value_format="text")
    start = Clock.now
    faults = coordinator_ticks(600, orders, prices)
    # Waited on the silent coordinator: a full ask, then short probes (a full one every
    # tenth at the longest pause), not a whole timeout on every tick.
    assert sum(Brokers.waits) <= 0.1 * (Clock.now - start), Brokers.waits
    assert faults and not [f for f in faults if "timeshard-prices" in f]
    assert len({f for f in faults if "not asked" not in f}) <= 2, set(faults)
    prices_commits = [c for c in Group.committed if c]
    assert len(prices_commits) == 600  # the other group's every tick, none skipped
    Coordinator.silent = False
    Clock.now += 31.0
    with pytest.raises(kafka_source.SourceUnavailable):  # asked: silent until answered
        orders.commit({"0": 10**6})
    assert Group.committed[-1] == {"0": 10**6}
    Clock.now += 1.0
    orders.commit({"0": 10**6 + 1})  # the answer read: the silence is over
    assert Group.committed[-1] == {"0": 10**6 + 1}
    orders.close()
    prices.close()


@pytest.mark.usefixtures("brokers")
def test_an_error_the_coordinator_answers_starts_the_commit_pause_anew(
    orders: kafka_source.KafkaSource,
) -> None:
    coordinator_ticks(200, orders)  # the pause at its longest
    Coordinator.silent, Coordinator.error = False, KafkaError.NOT_COORDINATOR
    Clock.now += 31.0
    # The silence's last commit times out; the pause after it passes; then every tick's
    # commit is asked and answered with the error.
    faults = coordinator_ticks(40, orders)
    assert all("NOT_COORDINATOR" in f for f in faults[-3:]), faults
    Coordinator.silent = True  # a later silence: asked at once, then in flight
    asks = len(Coordinator.asks)
    coordinator_ticks(3, orders)
    assert len(Coordinator.asks) - asks == 1  # one commit in flight: no other asked
    # Judged silent after its timeout (10 s), with no pause left from the earlier
    # silence: the error answered reset it, so the next tick asks again.
    coordinator_ticks(9, orders)
    assert len(Coordinator.asks) - asks == 2
    assert Brokers.waits == []  # no commit waited on the coordinator


@pytest.mark.usefixtures("brokers")
def test_a_probe_the_coordinator_answers_with_an_error_lets_the_commit_decide(
    orders: kafka_source.KafkaSource,
) -> None:
    """An error answered to the probe (an OffsetFetch the group may not be allowed) is an
    answer: the commit is asked, and its own answer ends the silence (a probe's error
    that kept the silence kept the offsets from ever being committed). The commit is now
    its own probe: the group's committed offsets are not asked at all."""
    coordinator_ticks(11, orders)  # the commit's silence: asked, no answer in its timeout
    Coordinator.probe_error = KafkaError.GROUP_AUTHORIZATION_FAILED
    Coordinator.silent = False
    Clock.now += 31.0
    faults = coordinator_ticks(60, orders)  # the first asks, silent until answered
    assert len(faults) == 1 and "_TIMED_OUT" in faults[0], faults
    assert Group.committed[-1] == {"0": int(Clock.now)}
    assert Brokers.waits == []  # the commit is its own probe, and waits for nothing


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


@pytest.mark.usefixtures("brokers")
def test_a_coordinator_that_never_answers_a_commit_holds_no_tick_up(
    orders: kafka_source.KafkaSource,
) -> None:
    """Before: the commit waited for its answer, so a coordinator that answered the probe
    (the group's committed offsets) but never a commit made a tick wait the commit's
    whole timeout (10 s) at the end of every pause. The commit is now asynchronous, and
    one not answered within its timeout is the group's silence, as a commit without an
    answer was; the offsets are kept and committed once the coordinator answers."""
    Coordinator.silent, Coordinator.commits_silent = False, True
    faults = coordinator_ticks(600, orders)
    assert Brokers.waits == []  # no tick waited on the coordinator
    # Silent from the first commit's timeout (10 s) on, in flight or paused.
    assert len(faults) == 590 and len(set(faults)) == 1, set(faults)
    assert "_TIMED_OUT" in faults[0]
    assert faults[0].endswith(kafka_source.KafkaSource.COMMIT_THEN)
    assert Group.committed == []
    Coordinator.commits_silent = False
    coordinator_ticks(65, orders)  # the pause at its longest passes, twice
    assert Group.committed[-1] == {"0": int(Clock.now)}
    assert coordinator_ticks(1, orders) == []  # the answer read: no silence
    assert orders._uncommitted == {"0": int(Clock.now)}  # the tick's own, not answered yet
    assert Brokers.waits == []


@pytest.mark.usefixtures("brokers")
def test_a_slow_coordinator_is_not_a_silent_one(orders: kafka_source.KafkaSource) -> None:
    """A commit not answered by the next tick was the group's silence: a coordinator that
    answered every commit in 3 s, with ticks 1 s apart, raised a fault at every other
    tick and paused the group's commits. One commit is in flight at a time, judged
    silent only once its timeout (10 s) has passed."""
    Coordinator.silent, Coordinator.delay = False, 3.0
    asks = len(Coordinator.asks)
    assert coordinator_ticks(40, orders) == []
    assert 10 <= len(Coordinator.asks) - asks <= 15  # one in flight (3 s) at a time
    assert Group.committed[-1]["0"] >= int(Clock.now) - 4  # the latest offsets go out
    assert Brokers.waits == []


@pytest.mark.usefixtures("brokers")
def test_a_commit_the_client_held_for_want_of_a_coordinator_is_no_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the coordinator gone, the client holds a commit until its session timeout
    (45 s) and answers ``_WAIT_COORD``, which was taken for the coordinator's answer: with
    a timeout of 60 s the group's silence was never reported, and the ticks after each
    such answer showed no fault while the next commit was in flight."""
    monkeypatch.setattr(confluent_kafka, "Consumer", Coordinator)
    Group.committed, Coordinator.silent, Coordinator.commits_silent = [], False, False
    Coordinator.probe_error, Coordinator.error = None, KafkaError._WAIT_COORD
    Coordinator.delay = 45.0
    orders = kafka_source.KafkaSource(
        "orders", backoff.UP, "orders", value_format="text", timeout_s=60.0
    )
    try:
        faults = coordinator_ticks(300, orders)
    finally:
        orders.close()
        Coordinator.error, Coordinator.delay = None, 0.0
    assert len(faults) >= 300 - 46, len(faults)  # every tick from the first answer on
    assert "_WAIT_COORD" in faults[0] and faults[0].endswith(orders.COMMIT_THEN)


@pytest.mark.usefixtures("brokers")
def test_no_commit_is_asked_while_one_judged_silent_is_unanswered(
    orders: kafka_source.KafkaSource,
) -> None:
    """A coordinator slower than the timeout (15 s against 10 s), offsets unchanged: the
    late answer of a commit judged silent was taken for the newer commit's, so a second
    commit was asked while one was in flight. Each answer is now the one commit's."""
    Coordinator.silent, Coordinator.delay = False, 15.0
    asks = len(Coordinator.asks)
    for _ in range(120):
        Clock.now += 1.0
        with contextlib.suppress(kafka_source.SourceUnavailable):
            orders.commit({"0": 7})
        assert orders._commits_asked - orders._commits_answered <= 1
    gaps = [b - a for a, b in itertools.pairwise(Coordinator.asks[asks:])]
    assert gaps and min(gaps) >= 15.0, gaps


@pytest.mark.usefixtures("brokers", "orders")
def test_a_commit_is_forgotten_only_once_the_client_can_no_longer_answer_it() -> None:
    """Before: a commit unanswered for the timeout and 120 s more was forgotten, a bound
    sized to librdkafka's 45 s hold of a commit for want of a coordinator. The client
    sends it three times, each waiting socket.timeout.ms (the source's timeout), holds it
    once for its session.timeout.ms (the timeout too) when a round fails for want of a
    coordinator, then sends it three times more: with a timeout of 100 s, a commit the
    client could still answer at 700 s and more was forgotten at 220 s, and a second one
    asked beside it."""
    Coordinator.silent, Coordinator.delay = False, 1e9  # the client never answers
    source = kafka_source.KafkaSource(
        "orders", backoff.UP, "orders", value_format="text", timeout_s=100.0
    )
    asks = len(Coordinator.asks)
    source.commit({"0": 5})
    for _ in range(2000):
        Clock.now += 1.0
        with contextlib.suppress(kafka_source.SourceUnavailable):
            source.commit({"0": 6})
        if len(Coordinator.asks) > asks + 1:
            break
    first, again = Coordinator.asks[asks:]
    assert 7 * 100.0 + 3.0 < again - first <= 7 * 100.0 + source.COMMIT_LOST_AFTER_S + 1.0
    source.close()


@pytest.mark.usefixtures("brokers")
def test_a_groups_commit_silence_is_its_sources_own_and_marks_no_shared_record(
    orders: kafka_source.KafkaSource,
) -> None:
    """Before: each source's commit silence also wrote a record shared by the sources of
    its group (``group <id>`` on the cluster), which nothing read since the commits pause
    on their own silence alone. Another source of the group still commits at its own
    pace, and the cluster's objects still hear of no silence."""
    coordinator_ticks(11, orders)  # the commit's silence: asked, no answer in its timeout
    assert orders._commit_silence.fault is not None
    again = kafka_source.KafkaSource(
        "again", backoff.UP, "orders", value_format="text", group_id="timeshard-orders"
    )
    asks = len(Coordinator.asks)
    assert coordinator_ticks(1, again) == []  # asked: not paused by the other's silence
    assert len(Coordinator.asks) == asks + 1
    faults = coordinator_ticks(10, again)  # its own silence, after its own timeout
    assert len(faults) == 1 and "_TIMED_OUT" in faults[0], faults
    assert kafka_source.BrokerSilence(backoff.UP).known() is None
    assert all("group" not in key for key in kafka_source.BrokerSilence._clusters), list(
        kafka_source.BrokerSilence._clusters
    )
    again.close()
