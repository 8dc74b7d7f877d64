"""A KAFKA source whose broker does not answer is not asked again on every tick: the
pipeline's other objects keep their freshness (no Spark, no broker: the admin and the
consumer are stand-ins).

Two stand-in brokers: ``127.0.0.1:1`` (down until a test brings it back) and
``127.0.0.1:2`` (always up). Each wait on the silence of a broker is recorded with the
timeout the caller gave, rather than timed; the source's monotonic clock is a stand-in
that a test moves by hand.
"""

from __future__ import annotations

import itertools
import weakref
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, ClassVar

import confluent_kafka
import confluent_kafka.admin
import pytest
from tests.unit.test_kafka_start_broker_down import Uuid

from timeshard.controller import Pipeline
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spec import RunSpec, SourceSpec
from timeshard.storage import kafka_commit, kafka_silence, kafka_source
from timeshard.storage.health import latest_health

#: The modules of a KAFKA source that read the clock (``monotonic``): the silences' pauses,
#: the group commits' ages and the close's bound.
CLOCKS = (kafka_silence, kafka_commit)

DOWN, UP = "127.0.0.1:1", "127.0.0.1:2"


def kafka(name: str, servers: str) -> SourceSpec:
    options = {"bootstrap_servers": servers, "topic": name, "value_format": "text"}
    return SourceSpec(name=name, kind="kafka", options=options)


SPEC = RunSpec(source=[kafka("orders", DOWN), kafka("prices", UP)])


class Brokers:
    """Which stand-in brokers answer, and each wait on a silent one (its timeout, in s)."""

    up: ClassVar[set[str]] = {UP}
    waits: ClassVar[list[float]] = []


class Clock:
    """The source's monotonic clock, in seconds, moved by the test."""

    now: ClassVar[float] = 1000.0

    @classmethod
    def monotonic(cls) -> float:
        return cls.now


class SleepingClock(Clock):
    """A ``time`` for the code under test: :class:`Clock`'s, whose ``sleep`` moves it (a
    subclass with a ``now`` of its own keeps its time apart)."""

    @classmethod
    def sleep(cls, seconds: float) -> None:
        cls.now += seconds


class Answer:
    def __init__(self, servers: str) -> None:
        self.servers = servers

    def result(self, timeout: float | None = None) -> Any:
        if self.servers not in Brokers.up:
            Brokers.waits.append(timeout or 0.0)
            raise FutureTimeout()
        return type("Described", (), {"topic_id": Uuid()})()


class Admin:
    def __init__(self, config: dict[str, Any]) -> None:
        self.servers = config["bootstrap.servers"]

    def describe_topics(self, topics: Any, request_timeout: float) -> dict[str, Answer]:
        return {name: Answer(self.servers) for name in topics.topic_names}


class Consumer:
    """A consumer whose metadata waits its whole timeout on a silent broker."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.servers = config["bootstrap.servers"]
        self.on_commit = config.get("on_commit")
        #: The answers to the commits asked, each (when it comes, error, offsets).
        self.answers: list[tuple[float, Any, Any]] = []

    def list_topics(self, topic: str, timeout: float) -> Any:
        if self.servers not in Brokers.up:
            Brokers.waits.append(timeout)
            raise confluent_kafka.KafkaException(
                confluent_kafka.KafkaError(confluent_kafka.KafkaError._TRANSPORT)
            )
        meta = type("Topic", (), {"error": None, "partitions": {}})()  # no records to read
        return type("Metadata", (), {"topics": {topic: meta}})()

    def commit(self, offsets: Any, asynchronous: bool) -> None:
        self.answers.append((Clock.now, None, offsets))  # answered at once

    def poll(self, timeout: float) -> None:
        """Run ``on_commit`` for the answers come by now (the client's callbacks); with a
        ``timeout``, first wait on the clock for the next answer, at most ``timeout``."""
        if timeout > 0:
            next_at = min((a[0] for a in self.answers), default=Clock.now + timeout)
            Clock.now = max(Clock.now, min(next_at, Clock.now + timeout))
        come = [a for a in self.answers if a[0] <= Clock.now]
        self.answers = [a for a in self.answers if a[0] > Clock.now]
        for _, error, offsets in come:
            self.on_commit(error, offsets)

    def close(self) -> None:
        pass


@pytest.fixture
def brokers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", Admin)
    monkeypatch.setattr(confluent_kafka, "Consumer", Consumer)
    for module in CLOCKS:
        monkeypatch.setattr(module, "monotonic", Clock.monotonic)
    # No cluster record of another test's objects, left alive by its failure.
    monkeypatch.setattr(kafka_source.BrokerSilence, "_clusters", weakref.WeakValueDictionary())
    Brokers.up, Brokers.waits, Clock.now = {UP}, [], 1000.0


def pipeline(tmp_path: Path, spec: RunSpec = SPEC) -> tuple[PersistClient, Pipeline]:
    """A pipeline of ``spec`` over a new location, its clock a second a reading."""
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    ms = itertools.count(1_000, 1_000)
    return client, Pipeline(None, client, spec, clock=lambda: next(ms))


def upper(client: PersistClient, shard: str) -> int:
    time = client.state(shard).upper.time
    assert time is not None
    return time


@pytest.mark.usefixtures("brokers")
def test_ten_ticks_with_a_down_broker_wait_on_it_its_full_timeout_once(tmp_path: Path) -> None:
    """Before: every tick asked the down broker again and waited its whole timeout
    (10 s), holding up every other object's tick; eleven waits of 10 s for eleven ticks."""
    client, run = pipeline(tmp_path)
    assert sorted(run.first_failures) == ["orders"]
    fault = run.first_failures["orders"]
    assert "Kafka at 127.0.0.1:1 is unreachable" in fault
    # The line says how the broker is asked during the silence, not only the first ask.
    assert fault.endswith(kafka_source.BrokerSilence.THEN)
    assert "a probe of at most 1 s" in fault
    assert Brokers.waits == [10.0]  # the first tick's ask, in full
    for _ in range(10):
        before = upper(client, "prices")
        assert run.step() == {"orders": fault}  # stalled with the fault, unchanged
        assert upper(client, "prices") > before  # the healthy source advances every tick
    assert max(Brokers.waits[1:]) <= 1.0  # then short probes of the broker only
    assert len(Brokers.waits) == 2  # the clock did not move: one probe
    health = latest_health(client)["orders"]
    assert (health["status"], health["error"]) == ("stalled", fault)
    run.close()


@pytest.mark.usefixtures("brokers")
def test_a_down_broker_is_probed_after_pauses_that_double_up_to_a_cap(tmp_path: Path) -> None:
    _, run = pipeline(tmp_path)
    run.step()  # the first probe, at once
    probes = []
    for _ in range(200):  # one tick every 0.5 s, 100 s
        Clock.now += 0.5
        waits = len(Brokers.waits)
        run.step()
        if len(Brokers.waits) > waits:
            probes.append(Clock.now)
    assert max(Brokers.waits[1:]) <= 1.0  # each a short probe
    pauses = [b - a for a, b in itertools.pairwise([1000.0, *probes])]
    assert pauses[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert set(pauses[5:]) == {30.0}  # the cap: a broker back is read within 30 s
    run.close()


@pytest.mark.usefixtures("brokers")
def test_a_broker_that_comes_back_is_read_again_at_the_next_probe(tmp_path: Path) -> None:
    client, run = pipeline(tmp_path)
    run.step()
    run.step()  # the first probe's pause (1 s) has not passed: not asked
    Brokers.up.add(DOWN)
    Clock.now += 1.0
    before = upper(client, "orders")
    assert run.step() == {}
    assert upper(client, "orders") > before
    assert latest_health(client)["orders"]["status"] == "running"
    Brokers.up.discard(DOWN)  # down again: one ask in full, then probes from a 0 s pause
    waits = len(Brokers.waits)
    assert "orders" in run.step()
    assert Brokers.waits[waits:] == [10.0]
    run.close()


@pytest.mark.usefixtures("brokers")
def test_at_the_cap_every_tenth_probe_waits_the_whole_timeout(tmp_path: Path) -> None:
    """A broker that answers, but slower than a 1 s probe, was taken for down for good
    (every probe waited 1 s, none the source's timeout): now one probe in ten at the cap
    waits the whole timeout, and a slow broker is read again within about 5 minutes."""
    _, run = pipeline(tmp_path)
    run.step()
    for _ in range(1000):  # one tick every 0.5 s, 500 s: 5 probes to the cap, then 15
        Clock.now += 0.5
        run.step()
    probes = Brokers.waits[1:]
    assert probes.count(10.0) == 1 and probes[5 + 9] == 10.0  # the cap's tenth probe
    assert all(w <= 1.0 for i, w in enumerate(probes) if i != 5 + 9)
    run.close()


class LeaderlessConsumer(Consumer):
    """Metadata answers (the bootstrap broker is up), a partition's offsets never do (its
    leader is the broker that is down)."""

    def list_topics(self, topic: str, timeout: float) -> Any:
        meta = type("Topic", (), {"error": None, "partitions": {0: None}})()
        return type("Metadata", (), {"topics": {topic: meta}})()

    def get_watermark_offsets(self, partition: Any, timeout: float, cached: bool) -> Any:
        Brokers.waits.append(timeout)
        raise confluent_kafka.KafkaException(
            confluent_kafka.KafkaError(confluent_kafka.KafkaError._TIMED_OUT)
        )


@pytest.mark.usefixtures("brokers")
def test_a_partition_whose_offsets_do_not_answer_is_not_asked_every_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pause started anew once the metadata answered, before the offsets were asked:
    with a partition's leader down, every tick waited the whole timeout again."""
    monkeypatch.setattr(confluent_kafka, "Consumer", LeaderlessConsumer)
    Brokers.up.add(DOWN)  # every admin and metadata answer comes
    _, run = pipeline(tmp_path)
    for _ in range(120):  # one tick every 0.5 s, 60 s
        Clock.now += 0.5
        run.step()
    full = [w for w in Brokers.waits if w == 10.0]
    # Both sources: each the outage's first ask, then one per probe (pauses 1, 2, .. 30 s).
    assert 2 <= len(full) <= 2 * 8
    run.close()
