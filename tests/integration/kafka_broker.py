"""The ``kafka_broker`` fixture: one real Kafka broker (KRaft) for the test session.

The broker's jars come from Maven Central the first time (``kafka_jars``). If
it cannot start, the tests that need it are skipped with the reason printed
-- except when ``CI`` is set: then they fail. conftest.py files import the
fixture from here, so the integration and fault tiers share one broker.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.unavailable import skip_or_fail

from timeshard.dev.kafka import KafkaBroker, KafkaUnavailable


def start_broker_or_skip(tmp_path_factory: pytest.TempPathFactory) -> KafkaBroker:
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"))
    try:
        broker.start()
    except KafkaUnavailable as e:
        skip_or_fail(f"Kafka broker cannot start: {e}", "Kafka")
    return broker


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    broker = start_broker_or_skip(tmp_path_factory)
    yield broker
    broker.stop()
