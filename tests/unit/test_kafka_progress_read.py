"""A Kafka export's progress read ends its own dangling transaction, never a newer
version's (the broker's reads are stood in for: no broker)."""

from __future__ import annotations

import json
from typing import Any

import confluent_kafka
import pytest

from timeshard.storage import kafka_progress


class NoConsumer:
    def __init__(self, conf: Any) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("read", "aborts"), [(2, False), (1, True)], ids=["newer", "own"])
def test_an_open_transaction_is_aborted_only_when_no_newer_version_owns_the_export(
    monkeypatch: pytest.MonkeyPatch, read: int, aborts: bool
) -> None:
    """Any open transaction made the driver run init_transactions on the export's
    transactional id: a stale instance (version 1) aborted the transaction version 2 had
    in flight, whose task then failed fenced."""
    record = json.dumps({"frontier": 10, "version": read, "target": None}).encode()
    monkeypatch.setattr(confluent_kafka, "Consumer", NoConsumer)
    monkeypatch.setattr(kafka_progress, "_watermarks", lambda c, t, s: (0, 6))  # stable below high
    monkeypatch.setattr(kafka_progress, "_high_watermark", lambda c, conf, t, s: 9)
    monkeypatch.setattr(kafka_progress, "_settled", lambda c, t, h, s: (0, 10))
    monkeypatch.setattr(kafka_progress, "_scan", lambda c, t, e, lo, end, s: (5, record))
    ended: list[str] = []
    progress = kafka_progress.read_progress(
        {}, "progress", "e", 1.0, end_own=lambda: ended.append("init_transactions"), version=1
    )
    assert progress is not None and progress.version == read
    assert ended == (["init_transactions"] if aborts else [])
