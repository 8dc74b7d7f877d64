"""The KAFKA sources and exports of one Kafka cluster share what they know of its silence:
an outage's first tick waits on the cluster once, not once per object (no Spark, no broker:
the stand-in admin, consumer and producer of the export's down-broker test).

``127.0.0.1:1`` is down until a test brings it back; ``127.0.0.1:2`` always answers.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from tests.unit import test_kafka_down_broker_backoff as backoff
from tests.unit.test_kafka_down_broker_backoff import Brokers as Waits
from tests.unit.test_kafka_down_broker_backoff import Clock
from tests.unit.test_kafka_export_down_broker import Brokers, brokers  # noqa: F401

from timeshard.controller import Pipeline
from timeshard.persist import PersistClient
from timeshard.spec import ExportSpec, RunSpec, SourceSpec
from timeshard.storage import kafka_silence
from timeshard.storage.health import latest_health
from timeshard.storage.kafka_source import BrokerSilence

DOWN, UP = "127.0.0.1:1", "127.0.0.1:2"


def kafka(name: str, servers: str) -> SourceSpec:
    options = {"bootstrap_servers": servers, "topic": name, "value_format": "text"}
    return SourceSpec(name=name, kind="kafka", options=options)


#: Two sources and an export on the down cluster, and the source the export reads, on the
#: cluster that answers.
SPEC = RunSpec(
    source=[kafka("orders", DOWN), kafka("payments", DOWN), kafka("prices", UP)],
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


def pipeline(tmp_path: Path) -> tuple[PersistClient, Pipeline]:
    return backoff.pipeline(tmp_path, SPEC)


@pytest.mark.usefixtures("brokers")
def test_an_outages_first_tick_waits_on_a_silent_cluster_once_for_all_its_objects(
    tmp_path: Path,
) -> None:
    """Before: each object on the down cluster asked it in full, one after another: the
    first tick waited 10 s + 10 s + 30 s."""
    client, run = pipeline(tmp_path)
    # The sources' first tick (the pipeline's start): orders' ask in full, then payments'
    # short probe of the cluster orders found silent, which makes the silence its own.
    assert Brokers.waits == [10.0, 1.0]
    failures = run.step()
    assert sorted(failures) == ["orders", "out", "payments"]
    # The next tick, at once: each source probes again (its own first pause is none); the
    # export, whose cluster's probe met the silence within the shared pause, is not asked.
    assert Brokers.waits == [10.0, 1.0, 1.0, 1.0]
    assert failures["orders"].startswith("SourceUnavailable: Kafka at 127.0.0.1:1 is unreachable")
    health = latest_health(client)
    for name in ("payments", "out"):  # their lines say they were not asked, and why
        assert health[name]["status"] == "stalled"
        assert "not asked" in health[name]["error"], health[name]["error"]
        assert "127.0.0.1:1" in health[name]["error"]
    assert health["prices"]["status"] == "running"
    assert (Brokers.log, Brokers.commits) == ([], 0)  # nothing written while down
    run.close()


@pytest.mark.usefixtures("brokers")
def test_a_whole_answer_of_one_object_starts_the_clusters_pause_anew_for_all(
    tmp_path: Path,
) -> None:
    client, run = pipeline(tmp_path)
    run.step()
    for _ in range(60):  # the shared pause grows: 1, 2, 4, 8, 16 s
        Clock.now += 0.5
        run.step()
    Brokers.up.add(DOWN)
    Clock.now += 30.0
    assert run.step() == {}
    assert {latest_health(client)[n]["status"] for n in ("orders", "payments", "out")} == {
        "running"
    }
    Brokers.up.discard(DOWN)  # down again: one ask in full, then probed at once, no more
    waits = len(Brokers.waits)
    assert sorted(run.step()) == ["orders", "out", "payments"]
    assert Brokers.waits[waits:] == [10.0, 1.0]
    run.close()


def test_the_silence_of_a_cluster_is_shared_by_its_spellings_only() -> None:
    first = BrokerSilence("Host-A:9092,host-b:9092")
    assert BrokerSilence(" host-b:9092 , host-a:9092,").cluster is first.cluster
    assert BrokerSilence("host-a:9092").cluster is not first.cluster


class OneLeaderDown(backoff.LeaderlessConsumer):
    """Metadata answers; ``orders``' partition's offsets never do (its leader is down);
    ``payments`` answers in full (a topic of no partitions: nothing to read)."""

    def list_topics(self, topic: str, timeout: float) -> Any:
        if topic == "orders":
            return super().list_topics(topic, timeout)
        meta = type("Topic", (), {"error": None, "partitions": {}})()
        return type("Metadata", (), {"topics": {topic: meta}})()


@pytest.mark.usefixtures("brokers")
def test_an_object_that_answers_does_not_end_the_silence_of_another_whose_leader_is_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: ``payments``' whole answers ended the cluster's one silence, so ``orders``,
    whose partition's leader was down, asked it in full (10 s) at every tick."""
    monkeypatch.setattr(confluent_kafka, "Consumer", OneLeaderDown)
    Brokers.up.add(DOWN)  # every admin and metadata answer comes
    monkeypatch.setattr(Waits, "waits", [])  # the offsets' waits (LeaderlessConsumer's)
    spec = RunSpec(source=[kafka("orders", DOWN), kafka("payments", DOWN)])
    client, run = backoff.pipeline(tmp_path, spec)
    for _ in range(120):  # one tick every 0.5 s, 60 s
        Clock.now += 0.5
        failures = run.step()
        assert sorted(failures) == ["orders"], failures  # payments is read at every tick
    full = [w for w in Waits.waits if w == 10.0]
    # orders' first ask, then one per own probe (pauses 1, 2, .. 30 s): as if it were alone.
    assert 1 <= len(full) <= 8, len(full)
    assert latest_health(client)["payments"]["status"] == "running"
    run.close()


def test_objects_of_a_cluster_slower_than_a_probe_are_read_again_after_a_silence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: an object whose cluster another object found silent probed it only for 1 s,
    and pushed the shared pause on at each probe, so with a cluster that answers in 2 s
    neither object read it again (0 reads in 30 min). A probe that gets no answer now makes
    the silence the object's own, whose probes at the cap wait the whole timeout."""
    monkeypatch.setattr(kafka_silence, "monotonic", Clock.monotonic)
    monkeypatch.setattr(BrokerSilence, "_clusters", weakref.WeakValueDictionary())
    Clock.now = 1000.0
    latency = 2.0  # the cluster answers, slower than a probe waits

    def ask(timeout: float) -> None:
        Clock.now += min(timeout, latency)
        if latency > timeout:
            raise confluent_kafka.KafkaException(
                confluent_kafka.KafkaError(confluent_kafka.KafkaError._TIMED_OUT)
            )

    a, b = BrokerSilence("h:1"), BrokerSilence("h:1")
    b.silent("h:1: b's partition leader did not answer")  # a blip: b's ask went unanswered
    reads = {"a": 0, "b": 0}
    end = Clock.now + 1800
    while Clock.now < end:
        for name, silence in (("a", a), ("b", b)):
            if silence.probe(ask, 10.0) is None:
                ask(10.0)  # the ask in full answers (2 s)
                silence.answered()
                reads[name] += 1
        Clock.now += 0.5
    assert min(reads.values()) >= 10, reads


class Misconfigured(backoff.Consumer):
    """A consumer whose every request fails with the client's refusal of its settings."""

    def list_topics(self, topic: str, timeout: float) -> Any:
        raise confluent_kafka.KafkaException(
            confluent_kafka.KafkaError(confluent_kafka.KafkaError._INVALID_ARG, "bad setting")
        )


@pytest.mark.usefixtures("brokers")
def test_an_error_of_the_clients_settings_is_no_silence_of_the_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: every error of the metadata request was taken for the broker's silence,
    remembered, and shared with the cluster's other objects, which were then not asked."""
    monkeypatch.setattr(confluent_kafka, "Consumer", Misconfigured)
    spec = RunSpec(source=[kafka("orders", DOWN)])
    _, run = backoff.pipeline(tmp_path, spec)
    failures = run.step()
    assert "bad setting" in failures["orders"] and "unreachable" not in failures["orders"]
    assert BrokerSilence(DOWN).cluster.fault is None
    run.close()


def test_objects_whose_own_asks_keep_timing_out_do_not_keep_another_from_asking(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: each silence of the objects whose timeout is shorter than the cluster answers
    in pushed the shared pause on, so the object with a long enough timeout, which had no
    silence of its own, was never let ask (0 reads in 30 min)."""
    monkeypatch.setattr(kafka_silence, "monotonic", Clock.monotonic)
    monkeypatch.setattr(BrokerSilence, "_clusters", weakref.WeakValueDictionary())
    Clock.now = 1000.0
    latency = 0.8  # the cluster answers, in 0.8 s

    def ask(timeout: float) -> None:
        Clock.now += min(timeout, latency)
        if latency > timeout:
            raise confluent_kafka.KafkaException(
                confluent_kafka.KafkaError(confluent_kafka.KafkaError._TIMED_OUT)
            )

    short = [(BrokerSilence("h:1"), 0.5), (BrokerSilence("h:1"), 0.5)]
    long = BrokerSilence("h:1")
    reads = 0
    end = Clock.now + 1800
    while Clock.now < end:
        for silence, timeout in [*short, (long, 10.0)]:
            if silence.probe(ask, timeout) is not None:
                continue
            try:
                ask(timeout)
            except confluent_kafka.KafkaException:
                silence.silent("h:1 did not answer in time")
                continue
            silence.answered()
            reads += silence is long
        Clock.now += 0.5
    assert reads >= 20, reads
