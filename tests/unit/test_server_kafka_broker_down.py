"""serve's CREATE SOURCE of a KAFKA source does not ask the broker for its topic's id at
the build: its first read learns the id and records it before it binds an offset (no
Spark, no broker: the admin, the consumer and the SparkSession are stand-ins).

A broker that is down made a CREATE SOURCE wait the admin's timeout (about 10 s) for the
id, then the first read's wait for the topic's partitions. The broker's silence is stood
in for by the answers of ``test_kafka_start_broker_down``: each wait is counted, not timed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.unit.test_kafka_start_broker_down import (  # silent_broker: a fixture, by name
    TOPIC_ID,
    Broker,
    recorded_topic_id,
    silent_broker,  # noqa: F401
)
from tests.unit.test_server_sources import session

from timeshard.catalog import read_catalog
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.server.engine import Engine
from timeshard.server.statements import SqlError, parse
from timeshard.spark.session import spark_kafka_package

KAFKA = "CREATE SOURCE k FROM KAFKA (BROKER '127.0.0.1:1', TOPIC 't') FORMAT TEXT"


def serve(tmp_path: Path) -> tuple[PersistClient, Engine]:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    return client, Engine(session(spark_kafka_package()), client, follow_s=3600)


@pytest.mark.usefixtures("silent_broker")
def test_a_kafka_create_source_with_the_broker_down_waits_once_for_its_first_read(
    tmp_path: Path,
) -> None:
    """Before: two waits, one for the topic's id at the build and one for the first read."""
    client, engine = serve(tmp_path)
    try:
        with pytest.raises(SqlError, match="its first read failed") as failed:
            engine.execute(parse(KAFKA))
        assert failed.value.sqlstate == "58000"
        assert Broker.waits == 1
        assert engine.objects == {}
        assert not [e for e in read_catalog(client) if e.kind == "statement"]
    finally:
        engine.close()


@pytest.mark.usefixtures("silent_broker")
def test_a_kafka_create_source_records_its_topic_id_learned_by_its_first_read(
    tmp_path: Path,
) -> None:
    Broker.up = True
    client, engine = serve(tmp_path)
    try:
        engine.execute(parse(KAFKA))
        assert set(engine.objects) == {"k"}
        assert recorded_topic_id(client, "k") == TOPIC_ID
        assert client.state("k.remap").upper.time  # a binding, minted after the record
    finally:
        engine.close()
