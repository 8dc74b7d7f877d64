"""The ``kafka_broker`` fixture: one real Kafka broker (KRaft) for the test session.

The broker's jars come from Maven Central the first time (``kafka_jars``). If
it cannot start, the tests that need it are skipped with the reason printed
-- except when ``CI`` is set: then they fail. conftest.py files import the
fixture from here, so the integration and fault tiers share one broker.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from timeshard.dev.kafka import KafkaBroker, KafkaUnavailable


def start_broker_or_skip(tmp_path_factory: pytest.TempPathFactory) -> KafkaBroker:
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"))
    try:
        broker.start()
    except KafkaUnavailable as e:
        reason = f"Kafka broker cannot start: {e}"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI must run the Kafka tests)")
        print(reason, file=sys.stderr)
        pytest.skip(reason)
    return broker


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    broker = start_broker_or_skip(tmp_path_factory)
    yield broker
    broker.stop()
