"""A KAFKA source's close with a real client whose broker stops answering after the last
tick (no broker runs: ``127.0.0.1:1`` refuses): the client holds the commit in flight for
want of a coordinator for ``session.timeout.ms``, and the consumer's close waits for it,
so that setting, not librdkafka's 45 s default, bounds the close.
"""

from __future__ import annotations

import threading
import time
from typing import Any, ClassVar

import confluent_kafka
import pytest

from timeshard.storage import kafka_source


class Recorded(confluent_kafka.Consumer):  # type: ignore[misc]
    """The real consumer, its configuration recorded."""

    configs: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, config: dict[str, Any]) -> None:
        Recorded.configs.append(dict(config))
        super().__init__(config)


def test_a_close_whose_coordinator_went_silent_is_bounded_by_the_sources_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: the consumer's close waited for the commit held for want of a coordinator
    until librdkafka's default ``session.timeout.ms`` (45 s) had passed, whatever the
    source's ``timeout_s``; Pipeline.close paid it once per source, in series."""
    monkeypatch.setattr(confluent_kafka, "Consumer", Recorded)
    Recorded.configs = []
    source = kafka_source.KafkaSource(
        "orders", "127.0.0.1:1", "orders", value_format="text", timeout_s=1.0
    )
    source.commit({"0": 5})  # asked: the client holds it, no coordinator known
    closing = threading.Thread(target=source.close, daemon=True)
    closing.start()
    deadline = time.monotonic() + 30.0  # generous: the bound is about 2 s, the old 45 s
    while closing.is_alive() and time.monotonic() < deadline:
        closing.join(0.1)
    assert [c.get("session.timeout.ms") for c in Recorded.configs] == [1000]
    assert not closing.is_alive(), "close still waiting for the held commit after 30 s"
