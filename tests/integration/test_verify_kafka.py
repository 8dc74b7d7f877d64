"""``timeshard verify`` against the upstream of a KAFKA source: the topic's records, read again.

A NONE and an UPSERT ingestion of one topic (keys spread over two
partitions, bad records among them) are verified from the catalog alone:
verify rebuilds the source from its recorded options, reads the topic over
``[0, binding)``, reclocks with the remap shard and compares every sampled
time. Then each shard gets one wrong row, which verify must find at its time.
"""

from __future__ import annotations

import itertools
import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from timeshard.catalog import read_catalog
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.ingest import Ingestion
from timeshard.storage.kafka_source import KafkaSource
from timeshard.storage.reclock import Remap
from timeshard.verify import VerifyReport, verify_location

pytestmark = [pytest.mark.spark, pytest.mark.kafka]
KEY = pa.schema([("id", pa.int64())])
VALUE = pa.schema([("name", pa.string()), ("n", pa.int64())])


def _produce(bootstrap: str, topic: str, records: list[tuple[int, int, bytes | None]]) -> None:
    """``(partition, key id, value)`` records, acknowledged before returning."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, key, value in records:
        producer.produce(
            topic, key=json.dumps({"id": key}).encode(), value=value, partition=partition
        )
    assert producer.flush(30) == 0


def _value(name: str, n: int) -> bytes:
    return json.dumps({"name": name, "n": n}).encode()


def _found(report: VerifyReport) -> list[tuple[str, str, int | None]]:
    return sorted((f.object, f.check, f.time) for f in report.findings)


def test_verify_reads_a_kafka_topic_again_for_none_and_upsert(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    from timeshard.dev.kafka import create_topic

    bootstrap = kafka_broker.bootstrap
    topic = f"v-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, partitions=2)
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    clock = itertools.count(100, 10)

    def source(name: str) -> KafkaSource:
        return KafkaSource(
            name, bootstrap, topic, key_format="json", key_schema=KEY, value_schema=VALUE
        )

    plain = Ingestion(spark_kafka, client, source("all"), clock=lambda: next(clock))
    latest = Ingestion(
        spark_kafka,
        client,
        source("latest"),
        envelope="upsert",
        key_columns=["id"],
        clock=lambda: next(clock),
    )
    holds = [client.open_leased_reader(s) for s in ("all", "all.remap", "latest", "latest.remap")]
    rounds = [
        [(0, 1, _value("a", 1)), (1, 2, _value("b", 2)), (0, 3, _value("c", 3))],
        [(0, 1, _value("A", 10)), (1, 2, None), (1, 4, b"{not json"), (0, 5, _value("e", 5))],
        [(1, 2, _value("B", 20)), (0, 3, None), (0, 1, _value("AA", 100))],
    ]
    for batch in rounds:
        _produce(bootstrap, topic, batch)
        plain.step()
        latest.step()

    kinds = {e.name: e.definition.get("source_kind") for e in read_catalog(client)}
    assert kinds["all"] == kinds["latest"] == "kafka"
    asked: list[list[str]] = []

    def spark_for(packages: list[str]) -> Any:
        asked.append(packages)
        return spark_kafka

    report = verify_location(client, spark=spark_for, samples=20, seed=3)
    assert report.ok, [f.describe() for f in report.findings]
    assert len(asked) == 1 and any("spark-sql-kafka" in p for p in asked[0])
    everything, last = report.objects["all"], report.objects["latest"]
    assert (everything.kind, last.kind) == ("export", "upsert export")
    assert not everything.notes and not last.notes
    assert len(everything.times["records"]) >= 3 and len(last.times["upsert"]) >= 3

    # One wrong row in each shard, at a time its remap has bound.
    wrong = {}
    for name, rows in (
        ("all", [((7, "z", 7), "t", 1)]),
        ("latest", [((5, "e", 5), "t", -1), ((5, "E", 5), "t", 1)]),
    ):
        upper = client.state(name).upper.time
        assert upper is not None
        Remap(client, f"{name}.remap").mint(upper + 5, {})
        data = [(row, upper, diff) for row, _, diff in rows]
        client.open_writer(name).append(data, upper, upper + 1)
        wrong[name] = upper
    report = verify_location(client, spark=spark_for, samples=20, seed=3)
    assert _found(report) == [
        ("all", "records", wrong["all"]),
        ("latest", "upsert", wrong["latest"]),
    ]
    by_object = {f.object: f for f in report.findings}
    assert by_object["all"].extra_total == 1 and by_object["all"].missing_total == 0
    assert by_object["latest"].missing == (
        {"id": 5, "name": "e", "n": 5, "_err": None, "_diff": 1},
    )
    for hold in holds:
        hold.expire()
    plain.close()
    latest.close()
