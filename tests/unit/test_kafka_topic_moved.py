"""A KAFKA source whose topic has another id than the one it bound offsets of says why that
may be and what to do (no broker: the topic's id now is stood in for on the source).

Its ``bootstrap_servers`` may change between runs to brokers of the same cluster. A
source declared again with the brokers of another cluster finds a topic of its name with
another id, as it does when the topic was deleted and made again: its offsets bound are
the first topic's, so it is refused either way, and its message names both causes.
"""

from __future__ import annotations

import pytest

from timeshard.errors import SourceUnavailable
from timeshard.storage.kafka_source import KafkaSource
from timeshard.verify.replay import _retained


def moved(monkeypatch: pytest.MonkeyPatch) -> KafkaSource:
    """Source ``orders`` recorded with the id of its topic on cluster A, declared again with
    the brokers of cluster B, whose topic ``orders`` has its own id."""
    source = KafkaSource("orders", "cluster-b:9092", "orders", value_format="text")
    source.pin_recorded(
        {"bootstrap_servers": "cluster-a:9092", "topic": "orders", "topic_id": "id-on-a"}
    )
    monkeypatch.setattr(source, "_current_topic_id", lambda: "id-on-b")
    return source


def test_a_source_moved_to_another_cluster_is_refused_naming_both_causes_and_the_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: 'was deleted and made again' alone, which sent the user looking for a
    deletion that never happened, and said nothing of the cluster."""
    with pytest.raises(SourceUnavailable) as e:
        moved(monkeypatch)._check_same_topic()
    assert e.value.definite
    message = str(e.value)
    for said in (
        "another cluster",
        "deleted and made again",
        "id-on-a",
        "id-on-b",
        "cluster-b:9092",
        "a source of another name",
        "bootstrap_servers",
    ):
        assert said in message, (said, message)


def test_verify_notes_the_causes_and_the_ids_of_a_topic_with_another_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """verify notes the message up to its first ';': the causes and ids come first."""
    why = _retained(moved(monkeypatch), {"0": 5})
    assert why is not None
    for said in ("another cluster", "deleted and made again", "id-on-a", "id-on-b"):
        assert said in why, (said, why)
