"""The KAFKA sources and exports of one Kafka cluster share what they know of its silence:
an outage's first tick waits on the cluster once, not once per object (no Spark, no broker:
the stand-in admin, consumer and producer of the export's down-broker test).

``127.0.0.1:1`` is down until a test brings it back; ``127.0.0.1:2`` always answers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.unit import test_kafka_down_broker_backoff as backoff
from tests.unit.test_kafka_down_broker_backoff import Clock
from tests.unit.test_kafka_export_down_broker import Brokers, brokers  # noqa: F401

from timeshard.controller import Pipeline
from timeshard.persist import PersistClient
from timeshard.spec import ExportSpec, RunSpec, SourceSpec
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
    failures = run.step()
    assert sorted(failures) == ["orders", "out", "payments"]
    # The first ask in full, then (the pause is none at first) one short probe, by the
    # second object; the third raises the remembered fault without asking.
    assert Brokers.waits == [10.0, 1.0]
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
    first = BrokerSilence.of("Host-A:9092,host-b:9092")
    assert BrokerSilence.of(" host-b:9092 , host-a:9092,") is first
    assert BrokerSilence.of("host-a:9092") is not first
