"""A KAFKA source held to the topic id the catalog recorded, without a broker.

The broker's answers (the topic's id now, its retained offsets) are stood in
for on the source itself; the broker-backed tests are in
``tests/integration/test_kafka_topic_identity.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from timeshard.errors import SourceUnavailable
from timeshard.storage.kafka_source import KafkaSource
from timeshard.verify.replay import _retained, kafka_source


def options(topic: str, topic_id: str | None) -> dict[str, Any]:
    return {
        "name": "orders",
        "bootstrap_servers": "127.0.0.1:1",
        "topic": topic,
        "value_format": "text",
        "group_id": "timeshard-orders",
        "topic_id": topic_id,
    }


def test_a_source_redeclared_on_another_topic_is_not_held_to_the_old_topic_s_id() -> None:
    """(A source whose topic was corrected before it bound any offset, as check_redeclared
    allows, was pinned to the first topic's id: the new topic was taken for the old one
    made again, and refused for good.)"""
    source = KafkaSource("orders", "127.0.0.1:1", "orders.v2", value_format="text")
    source.pin_recorded(options("orders", "id-of-orders"))
    assert source.topic_id is None
    source.pin_recorded(options("orders.v2", "id-of-v2"))
    assert source.topic_id == "id-of-v2"


def test_verify_notes_a_topic_made_again_instead_of_comparing_its_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """(verify read the new topic at the old offsets and reported the export as differing
    from its source's records: a false finding against the export.)"""
    source = kafka_source(options("orders", "id-of-the-old-topic"))
    monkeypatch.setattr(source, "_current_topic_id", lambda: "id-of-the-new-topic")
    monkeypatch.setattr(source, "_check_retained", lambda ranges: None)
    why = _retained(source, {"0": 5})
    assert why is not None and "deleted and made again" in why, why
    monkeypatch.setattr(source, "_current_topic_id", lambda: "id-of-the-old-topic")
    assert _retained(source, {"0": 5}) is None


def test_a_source_held_to_its_recorded_id_refuses_another_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = KafkaSource("orders", "127.0.0.1:1", "orders", value_format="text")
    source.pin_recorded(options("orders", "recorded"))
    monkeypatch.setattr(source, "_current_topic_id", lambda: "another")
    with pytest.raises(SourceUnavailable, match="deleted and made again") as e:
        source._check_same_topic()
    assert e.value.definite
