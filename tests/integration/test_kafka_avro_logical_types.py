"""A KAFKA Avro export of decimals, dates and timestamps, ingested again by a KAFKA source.

The export writes them with Avro logical types (``decimal``, ``date``,
``timestamp-*`` and ``local-timestamp-*``); the source reads the Confluent
wire format with the export's own schemas as the registry's (the subjects'
schemas, by id) and its value schema as the reader schema, UPSERT on the Avro
key. The shard it makes holds the exported rows, value for value.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession
from tests.integration.test_kafka_export_avro import ingested_again

from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.kafka_export import KafkaExport
from timeshard.storage.schema_registry import avro

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

TIMES = pa.schema(
    [
        ("id", pa.int64()),
        ("amount", pa.decimal128(12, 3)),
        ("day", pa.date32()),
        ("at", pa.timestamp("us", tz="UTC")),
        ("at_ms", pa.timestamp("ms", tz="UTC")),
        ("local", pa.timestamp("us")),
        ("local_ms", pa.timestamp("ms")),
        ("days", pa.list_(pa.date32())),
        ("price", pa.struct([("p", pa.decimal128(6, 2))])),
    ]
)
T0 = dt.datetime(2026, 11, 26, 12, 0, 0, 123456)


def row(i: int) -> tuple[Any, ...]:
    """Row ``i``: values before 1970 and before 1582 too, and a null in every column of 0."""
    if i == 0:
        return (0, None, None, None, None, None, None, None, None)
    at = T0 + dt.timedelta(days=-40_000 * (i % 3), microseconds=i)
    return (
        i,
        Decimal(f"{(-1) ** i * i * 1000.125:.3f}"),
        dt.date(1 + 600 * i, 1 + i % 12, 28),
        at.replace(tzinfo=dt.UTC),
        at.replace(microsecond=(i * 1000) % 1_000_000, tzinfo=dt.UTC),
        at,
        at.replace(microsecond=(i * 2000) % 1_000_000),
        [dt.date(1970, 1, 1), None, dt.date(2000, 2, 29)] if i % 2 else [],
        {"p": Decimal("-0.01") * i} if i % 2 else {"p": None},
    )


def test_decimals_dates_and_timestamps_exported_and_ingested_again(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    from timeshard.dev.kafka import create_topic

    bootstrap = kafka_broker.bootstrap
    rows = [row(i) for i in range(6)]
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    client.open_writer("times", TIMES).append([(r, 5, 1) for r in rows], 0, 6)
    topic = f"lt-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, partitions=1)
    export = KafkaExport(
        spark_kafka,
        client,
        "times",
        bootstrap,
        topic,
        key_columns=["id"],
        format="avro",
        key_schema_id=21,
        value_schema_id=22,
    )
    assert export.step().status == "committed"
    schemas = export.avro_schemas()
    for schema in schemas.values():  # what a registry would keep under the subjects
        assert avro(json.dumps(schema))
    # A record of another writer schema id, and a datum cut short: err rows, never a fault.
    producer = Producer({"bootstrap.servers": bootstrap})
    key_id, value_id = b"\x00\x00\x00\x00\x15", b"\x00\x00\x00\x00\x16"
    producer.produce(topic, key=key_id + b"\x02\x0e", value=b"\x00\x00\x00\x00\x17\x00")
    producer.produce(topic, key=key_id + b"\x02\x10", value=value_id + b"\x02")
    assert producer.flush(30) == 0

    source, got = ingested_again(spark_kafka, client, bootstrap, topic, export, (21, 22))
    utc, local = pa.timestamp("us", tz="UTC"), pa.timestamp("us")
    assert [source.schema.field(c).type for c in ("amount", "day", "at_ms", "local_ms")] == [
        pa.decimal128(12, 3),
        pa.date32(),
        utc,
        local,
    ]
    export.close()
    ok = sorted(tuple(r[c] for c in TIMES.names) for r in got if r["_err"] is None)
    # Row 0 has every value column null: UPSERT reads it as a delete, as documented.
    assert ok == [r for r in rows if r[0] != 0]
    errs = [r["_err"] for r in got if r["_err"] is not None]
    assert len(errs) == 2, got
    assert any("schema id 23" in e for e in errs), errs
