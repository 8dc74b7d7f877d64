"""The Kafka broker's configuration and jar cache (no broker, no network)."""

from __future__ import annotations

from pathlib import Path

import pytest

from timeshard.dev import kafka
from timeshard.dev.kafka import KafkaUnavailable, kafka_jars, server_properties


def test_server_properties_listen_on_loopback_only(tmp_path: Path) -> None:
    props = dict(
        line.split("=", 1) for line in server_properties(tmp_path, 9092, 9093).splitlines() if line
    )
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert props["process.roles"] == "broker,controller"
    assert props["log.dirs"] == str(tmp_path)
    assert props["transaction.state.log.replication.factor"] == "1"
    assert props["auto.create.topics.enable"] == "false"


def test_a_complete_cache_is_used_without_maven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kafka.shutil, "which", lambda name: None)  # no mvn
    done = tmp_path / "kafka" / "9.9.9"
    done.mkdir(parents=True)
    (done / ".complete").touch()
    assert kafka_jars("9.9.9", cache=tmp_path) == done
    # A half-written directory (no marker) is never used: it needs Maven again.
    (tmp_path / "kafka" / "9.9.8").mkdir()
    with pytest.raises(KafkaUnavailable, match="Maven"):
        kafka_jars("9.9.8", cache=tmp_path)


def test_a_cluster_id_never_reads_as_an_option(monkeypatch: pytest.MonkeyPatch) -> None:
    """An id starting with ``-`` made ``kafka-storage format -t ID`` fail (one start in 64)."""
    import uuid

    dash = uuid.UUID(bytes=b"\xfb" + bytes(15))  # base64url "-w..."
    plain = uuid.UUID(bytes=bytes(16))
    draws = iter([dash, dash, plain])
    monkeypatch.setattr(kafka.uuid, "uuid4", lambda: next(draws))
    cluster_id = kafka._cluster_id()
    assert cluster_id == "A" * 22
    assert next(draws, None) is None  # both dashed ids were drawn and refused


def test_the_broker_fetch_keeps_maven_s_downloads_out_of_the_user_s_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Maven leaves the pom alone of a version it mediated away (slf4j-api 2.0.17 for the
    broker) in its local repository; Spark's Ivy, looking there first, then failed every
    session loading the Kafka or Avro connector ("download failed: slf4j-api.jar") on a
    machine whose first broker fetch wrote ``~/.m2``. The fetch uses a repository of its own."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    mvn = tmp_path / "mvn"
    # A fake mvn: writes where Maven would (its -Dmaven.repo.local, else ~/.m2), and the jar.
    mvn.write_text(
        "#!/bin/sh\n"
        'repo="$HOME/.m2/repository"; out=""\n'
        "for a; do case $a in\n"
        '  -Dmaven.repo.local=*) repo="${a#-Dmaven.repo.local=}";;\n'
        '  -DoutputDirectory=*) out="${a#-DoutputDirectory=}";;\n'
        "esac; done\n"
        'mkdir -p "$repo/org/slf4j" "$out" && touch "$repo/org/slf4j/slf4j-api-2.0.17.pom"\n'
        'touch "$out/kafka_2.13-9.9.9.jar"\n'
    )
    mvn.chmod(0o755)
    monkeypatch.setattr(kafka.shutil, "which", lambda name: str(mvn))
    cache = tmp_path / "cache"
    jars = kafka_jars("9.9.9", cache=cache)
    assert (jars / "kafka_2.13-9.9.9.jar").exists()
    assert not (home / ".m2").exists()
    assert (cache / "maven" / "org" / "slf4j" / "slf4j-api-2.0.17.pom").exists()
