"""A KAFKA export whose broker does not answer is not asked again on every tick: the
pipeline's other objects keep their freshness, and nothing is written while it is down
(no Spark, no broker: the admin, the consumer and the producer are stand-ins).

Two stand-in brokers: ``127.0.0.1:1`` (down until a test brings it back; the export's)
and ``127.0.0.1:2`` (always up; a KAFKA source's, whose shard the export reads). The
up broker keeps the progress topic's records in a list, committed per transaction.
Each wait on the silence of a broker is recorded with the timeout the caller gave,
rather than timed; the monotonic clock of the silence's pauses is moved by hand.
"""

from __future__ import annotations

import itertools
import weakref
from pathlib import Path
from typing import Any, ClassVar

import confluent_kafka
import confluent_kafka.admin
import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from tests.unit import test_kafka_down_broker_backoff as backoff
from tests.unit.test_kafka_down_broker_backoff import CLOCKS, Clock, upper
from tests.unit.test_kafka_start_broker_down import Uuid

from timeshard.controller import Pipeline
from timeshard.persist import PersistClient
from timeshard.spec import ExportSpec, RunSpec, SourceSpec
from timeshard.storage import kafka_export, kafka_progress, kafka_source, kafka_topics
from timeshard.storage.health import latest_health
from timeshard.storage.kafka_export import PROGRESS_TOPIC

#: The modules of a KAFKA export that read the clock (``time``), for a test's fake clock.
EXPORT_CLOCKS = (kafka_export, kafka_progress, kafka_topics)

DOWN, UP = "127.0.0.1:1", "127.0.0.1:2"

SPEC = RunSpec(
    source=[
        SourceSpec(
            name="prices",
            kind="kafka",
            options={"bootstrap_servers": UP, "topic": "prices", "value_format": "text"},
        )
    ],
    export=[
        ExportSpec(
            name="out",
            kind="kafka",
            input="prices",
            envelope="debezium",
            options={"bootstrap_servers": DOWN, "topic": "out"},
        )
    ],
)


class Brokers:
    """Which stand-in brokers answer, each wait on a silent one (its timeout, in s), the
    progress topic's committed records, and the transactions committed."""

    up: ClassVar[set[str]] = {UP}
    waits: ClassVar[list[float]] = []
    log: ClassVar[list[tuple[bytes, bytes]]] = []
    commits: ClassVar[int] = 0

    @classmethod
    def silent(cls, servers: str, timeout: float, code: int = KafkaError._TRANSPORT) -> None:
        if servers not in cls.up:
            cls.waits.append(timeout)
            raise KafkaException(KafkaError(code))


class Future:
    def __init__(self, servers: str, value: Any) -> None:
        self.servers, self.value = servers, value

    def result(self, timeout: float | None = None) -> Any:
        if self.servers not in Brokers.up:
            Brokers.waits.append(timeout or 0.0)
            raise TimeoutError()
        return self.value


class Entry:
    def __init__(self, value: str) -> None:
        self.value = value


def metadata(*topics: str) -> Any:
    meta = {t: type("Topic", (), {"error": None, "partitions": {}})() for t in topics}
    return type("Metadata", (), {"topics": meta})()


class Admin:
    def __init__(self, config: dict[str, Any]) -> None:
        self.servers = config["bootstrap.servers"]

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        Brokers.silent(self.servers, timeout)
        return metadata(PROGRESS_TOPIC, "out")

    def describe_topics(self, topics: Any, request_timeout: float) -> dict[str, Future]:
        described = type("Described", (), {"topic_id": Uuid()})()
        return {name: Future(self.servers, described) for name in topics.topic_names}

    def describe_configs(self, resources: Any, request_timeout: float) -> dict[Any, Future]:
        config = {"cleanup.policy": Entry("compact"), "max.message.bytes": Entry("1048588")}
        return {r: Future(self.servers, config) for r in resources}


class Message:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def error(self) -> None:
        return None

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return Brokers.log[self._offset][0]

    def value(self) -> bytes:
        return Brokers.log[self._offset][1]


class Consumer:
    """A consumer of the progress topic's partition 0 (and of a source's empty topic)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.servers = config["bootstrap.servers"]
        self.at = 0

    def list_topics(self, topic: str, timeout: float) -> Any:
        Brokers.silent(self.servers, timeout)
        return metadata(topic)

    def get_watermark_offsets(self, tp: Any, timeout: float = -1, cached: bool = False) -> Any:
        Brokers.silent(self.servers, timeout, KafkaError._TIMED_OUT)
        return 0, len(Brokers.log)

    def assign(self, tps: list[TopicPartition]) -> None:
        self.at = tps[0].offset

    def poll(self, timeout: float) -> Message | None:
        if self.at >= len(Brokers.log):
            return None
        self.at += 1
        return Message(self.at - 1)

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tps[0].topic, 0, self.at)]

    def commit(self, offsets: Any, asynchronous: bool) -> None:
        pass

    def close(self) -> None:
        pass


class Producer:
    """A transactional producer: the progress records of a committed transaction land in
    the log."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.servers = config["bootstrap.servers"]
        self.pending: list[tuple[bytes, bytes]] = []

    def init_transactions(self, timeout: float) -> None:
        Brokers.silent(self.servers, timeout)

    def begin_transaction(self) -> None:
        self.pending = []

    def produce(self, topic: str, key: bytes, value: bytes, **kwargs: Any) -> None:
        if topic == PROGRESS_TOPIC:
            self.pending.append((key, value))

    def poll(self, timeout: float) -> None:
        pass

    def commit_transaction(self, timeout: float) -> None:
        Brokers.silent(self.servers, timeout)
        Brokers.log.extend(self.pending)
        Brokers.commits += 1

    def abort_transaction(self, timeout: float) -> None:
        self.pending = []

    def close(self) -> None:
        pass


@pytest.fixture
def brokers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", Admin)
    monkeypatch.setattr(confluent_kafka, "Consumer", Consumer)
    monkeypatch.setattr(confluent_kafka, "Producer", Producer)
    for module in CLOCKS:
        monkeypatch.setattr(module, "monotonic", Clock.monotonic)
    # No cluster record of another test's objects, left alive by its failure.
    monkeypatch.setattr(kafka_source.BrokerSilence, "_clusters", weakref.WeakValueDictionary())
    Brokers.up, Brokers.waits, Brokers.log, Brokers.commits = {UP}, [], [], 0
    Clock.now = 1000.0


def pipeline(tmp_path: Path) -> tuple[PersistClient, Pipeline]:
    return backoff.pipeline(tmp_path, SPEC)


@pytest.mark.usefixtures("brokers")
def test_ten_ticks_with_the_exports_broker_down_wait_on_it_its_full_timeout_once(
    tmp_path: Path,
) -> None:
    """Before: every tick read the export's progress from the down broker again and
    waited its whole timeout (30 s), holding up every other object's tick."""
    client, run = pipeline(tmp_path)
    fault = run.step()["out"]
    assert Brokers.waits == [30.0]  # the first tick's ask, in full
    for _ in range(10):
        before = upper(client, "prices")
        assert run.step() == {"out": fault}  # stalled with the fault, unchanged
        assert upper(client, "prices") > before  # the healthy source advances every tick
    assert Brokers.waits == [30.0, 1.0]  # the clock did not move: one short probe
    assert fault.startswith("BrokerSilent: Kafka at 127.0.0.1:1 is unreachable")
    health = latest_health(client)["out"]
    assert (health["status"], health["error"]) == ("stalled", fault)
    assert (Brokers.log, Brokers.commits) == ([], 0)  # nothing written while down
    run.close()


@pytest.mark.usefixtures("brokers")
def test_the_exports_broker_is_probed_after_pauses_that_double_up_to_a_cap(
    tmp_path: Path,
) -> None:
    _, run = pipeline(tmp_path)
    run.step()  # the ask in full
    run.step()  # the first probe, at once
    probes = []
    for _ in range(1000):  # one tick every 0.5 s, 500 s
        Clock.now += 0.5
        waits = len(Brokers.waits)
        run.step()
        if len(Brokers.waits) > waits:
            probes.append(Clock.now)
    pauses = [b - a for a, b in itertools.pairwise([1000.0, *probes])]
    assert pauses[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert set(pauses[5:]) == {30.0}
    probed = Brokers.waits[1:]  # as a KAFKA source's: the cap's tenth probe waits in full
    assert [i for i, w in enumerate(probed) if w == 30.0] == [5 + 9]
    assert all(w <= 1.0 for i, w in enumerate(probed) if i != 5 + 9)
    run.close()


@pytest.mark.usefixtures("brokers")
def test_an_export_whose_broker_comes_back_commits_its_progress_once(tmp_path: Path) -> None:
    client, run = pipeline(tmp_path)
    run.step()
    Brokers.up.add(DOWN)
    Clock.now += 1.0
    assert run.step() == {}
    assert latest_health(client)["out"]["status"] == "running"
    assert Brokers.commits == 1 and len(Brokers.log) == 1
    Brokers.up.discard(DOWN)  # down while the export runs: its progress read waits once
    waits = len(Brokers.waits)
    fault = run.step()["out"]
    assert Brokers.waits[waits:] == [30.0]
    assert run.step() == {"out": fault}  # then probed at once (a silence starts anew) ...
    assert Brokers.waits[waits:] == [30.0, 1.0]
    assert run.step() == {"out": fault}  # ... and not asked again until its pause passed
    assert Brokers.waits[waits:] == [30.0, 1.0]
    assert "partition 0: offsets unavailable" in fault
    Brokers.up.add(DOWN)
    Clock.now += 1.0
    assert run.step() == {}  # it goes on from the progress it recorded
    assert Brokers.commits == 2 and len(Brokers.log) == 2
    run.close()


class ControllerDown(Admin):
    """An admin whose cluster's controller, asked for the topics' configuration, answers
    only while ``up`` (the progress topic's leader answers all along)."""

    up: ClassVar[bool] = True

    def describe_configs(self, resources: Any, request_timeout: float) -> dict[Any, Future]:
        if ControllerDown.up:
            return super().describe_configs(resources, request_timeout)
        return {r: Future(DOWN + "-controller", None) for r in resources}


@pytest.mark.usefixtures("brokers")
def test_an_export_whose_configuration_read_is_silent_is_not_asked_every_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The silence started anew once the progress read answered, before the target
    topic's configuration was asked again (after a silence): with the controller down,
    every tick waited 30 s again."""
    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", ControllerDown)
    Brokers.up.add(DOWN)
    ControllerDown.up = True
    _, run = pipeline(tmp_path)
    assert run.step() == {}
    Brokers.up.discard(DOWN)  # a silence: the topic's limit is read again after it
    assert "out" in run.step()
    Brokers.up.add(DOWN)
    ControllerDown.up = False
    waits = len(Brokers.waits)
    for _ in range(120):  # one tick every 0.5 s, 60 s
        Clock.now += 0.5
        run.step()
    full = [w for w in Brokers.waits[waits:] if w == 30.0]
    assert 1 <= len(full) <= 8  # one per probe that answers (pauses 1, 2, .. 30 s)
    run.close()


class NamingAdmin(Admin):
    """An admin that records, for each metadata request naming a topic, whether it may
    make the broker create the topic (librdkafka's ``allow.auto.create.topics``, on by
    default for an admin client)."""

    named: ClassVar[list[tuple[str, bool]]] = []

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.creates = config.get("allow.auto.create.topics", True) is not False

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        if topic is not None:
            NamingAdmin.named.append((topic, self.creates))
        return super().list_topics(topic, timeout)


@pytest.mark.usefixtures("brokers")
def test_no_metadata_request_lets_the_broker_create_the_topic_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An admin client's metadata request for a named topic lets the broker create it with
    its default cleanup policy (auto.create.topics.enable): the probe named the progress
    topic, so a first start with the broker down could leave it uncompacted for good."""
    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", NamingAdmin)
    NamingAdmin.named = []
    _, run = pipeline(tmp_path)
    for _ in range(10):
        Clock.now += 0.5
        run.step()
    assert NamingAdmin.named  # the probes ask for the progress topic ...
    assert not [topic for topic, creates in NamingAdmin.named if creates]  # ... never making it
    run.close()
