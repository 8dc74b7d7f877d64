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
