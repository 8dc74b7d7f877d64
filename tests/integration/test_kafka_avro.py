"""KAFKA sources in format ``avro``, against a real broker, decoded by spark-avro.

Records are written with fastavro (``schemaless_writer``: bare Avro binary
datums), an implementation of the Avro spec independent of the one that
decodes them (spark-avro's, on the JVM). The Confluent wire format is built
as its spec says: magic byte 0, the schema id as a big-endian int32, the
datum. No Confluent-compatible schema registry can be started from the
registries these tests may use, so the wire-format tests take their writer
schemas from a fixed map of ids (``avro_schemas``), and the registry client
is checked against a port where nothing listens (a fault, never err rows).

Each test has a topic of its own on the tier's broker and reads with the
tier's session, which carries both the Kafka connector and spark-avro.
"""

from __future__ import annotations

import io
import itertools
import json
import socket
import struct
import uuid
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession
from tests.integration.test_kafka_source import upsert_ingestion

from timeshard.errors import SourceUnavailable
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark.jobs import JobCounter
from timeshard.storage.health import STATUS_SHARD
from timeshard.storage.ingest import Ingestion
from timeshard.storage.kafka_source import KafkaSource

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

V1: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "status", "type": "string"},
        {"name": "qty", "type": "int"},
    ],
}
#: V1 evolved: a field added with a default; ``qty`` still an int.
V2: dict[str, Any] = {
    **V1,
    "fields": [*V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}],
}
#: The declared columns: V2's fields, ``qty`` widened to long (Avro promotes int to long).
READER: dict[str, Any] = {
    **V2,
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "status", "type": "string"},
        {"name": "qty", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
#: Not resolvable into READER: ``status`` is a long.
CLASH: dict[str, Any] = {
    **V1,
    "fields": [{"name": "id", "type": "long"}, {"name": "status", "type": "long"}],
}
KEY: dict[str, Any] = {
    "type": "record",
    "name": "OrderKey",
    "fields": [{"name": "order_id", "type": "long"}],
}


def _datum(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def _wire(schema_id: int, schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    return b"\x00" + struct.pack(">i", schema_id) + _datum(schema, record)


def _topic(bootstrap: str, partitions: int) -> str:
    from timeshard.dev.kafka import create_topic

    name = f"avro-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, name, partitions=partitions)
    return name


def _produce(
    bootstrap: str, topic: str, records: list[tuple[int, bytes | None, bytes | None]]
) -> dict[int, int]:
    """``(partition, key, value)`` records, acknowledged; returns how many went to each."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, key, value in records:
        producer.produce(topic, value=value, key=key, partition=partition)
    assert producer.flush(30) == 0
    counts: dict[int, int] = {}
    for partition, _, _ in records:
        counts[partition] = counts.get(partition, 0) + 1
    return counts


def _read(spark: SparkSession, source: KafkaSource) -> dict[tuple[str, int], dict[str, Any]]:
    return _read_counting(spark, source)[0]


def _read_counting(
    spark: SparkSession, source: KafkaSource
) -> tuple[dict[tuple[str, int], dict[str, Any]], int, int]:
    """The rows of the whole topic, the jobs ``read`` ran (planning), and the jobs to collect."""
    end = source.upper()
    with JobCounter(spark) as planned:
        df = source.read(spark, {}, end)
    with JobCounter(spark) as run:
        rows = df.collect()
    return {(r["_partition"], r["_offset"]): r.asDict() for r in rows}, planned.count, run.count


def test_value_avro_with_the_writer_schema_given(
    spark_kafka: SparkSession, kafka_broker: Any
) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap, 2)
    good = [{"id": i, "status": f"s{i}", "qty": i * 10} for i in range(6)]
    records: list[tuple[int, bytes | None, bytes | None]] = [
        (i % 2, None, _datum(V1, r)) for i, r in enumerate(good)
    ]
    whole = _datum(V1, {"id": 7, "status": "long string here", "qty": 1})
    records += [
        (0, None, whole[:-3]),  # truncated: partition 0 offset 3
        (1, None, whole + b"\x02"),  # a byte left over: partition 1 offset 3
        (0, None, None),  # a null value: no columns, no error: partition 0 offset 4
        (1, None, _datum(V1, {"id": 8, "status": "", "qty": 0})),  # partition 1 offset 4
    ]
    _produce(bootstrap, topic, records)
    source = KafkaSource(
        "orders",
        bootstrap,
        topic,
        value_format="avro",
        value_avro_schema=json.dumps(V1),
        metadata=["offset"],
    )
    assert source.schema == pa.schema(
        [("id", pa.int64()), ("status", pa.string()), ("qty", pa.int32()), ("offset", pa.int64())]
    )
    rows, planned, run = _read_counting(spark_kafka, source)
    assert (planned, run) == (0, 1)  # decoded in the job that fetches the records
    assert len(rows) == 10
    for i, r in enumerate(good):
        row = rows[(str(i % 2), i // 2)]
        assert (row["id"], row["status"], row["qty"], row["_err"]) == (*r.values(), None)
        assert row["offset"] == i // 2
    for where in (("0", 3), ("1", 3)):
        row = rows[where]
        assert (row["id"], row["status"], row["qty"]) == (None, None, None)
        assert row["_err"].startswith(f"{topic}/{where[0]}@{where[1]}: AvroDecodeError: value: ")
        assert "does not decode with the declared avro schema" in row["_err"]
    assert rows[("0", 4)] == {**rows[("0", 4)], "id": None, "status": None, "_err": None}
    assert rows[("1", 4)]["id"] == 8 and rows[("1", 4)]["_err"] is None
    # Deterministic: the same range reads the same rows.
    assert _read(spark_kafka, source) == rows


def test_key_and_value_avro_and_mixed_formats(spark_kafka: SparkSession, kafka_broker: Any) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap, 1)
    _produce(
        bootstrap,
        topic,
        [
            (0, _datum(KEY, {"order_id": 1}), _datum(V1, {"id": 1, "status": "a", "qty": 2})),
            (0, b"\x80", _datum(V1, {"id": 2, "status": "b", "qty": 3})),  # truncated key
            (0, _datum(KEY, {"order_id": 3}), b"\xff"),  # bad value
            (0, _datum(KEY, {"order_id": 4}), None),  # a tombstone
        ],
    )
    both = KafkaSource(
        "both",
        bootstrap,
        topic,
        key_format="avro",
        key_avro_schema=json.dumps(KEY),
        value_format="avro",
        value_avro_schema=json.dumps(V1),
    )
    assert both.key_columns == ["order_id"]
    rows = _read(spark_kafka, both)
    cols = ("order_id", "id", "status", "qty", "_err")
    assert tuple(rows[("0", 0)][c] for c in cols) == (1, 1, "a", 2, None)
    assert tuple(rows[("0", 1)][c] for c in cols[:4]) == (None,) * 4
    assert rows[("0", 1)]["_err"].startswith(f"{topic}/0@1: AvroDecodeError: key: ")
    # A value that does not decode keeps its key: with UPSERT, that key's error.
    assert tuple(rows[("0", 2)][c] for c in cols[:4]) == (3, None, None, None)
    assert rows[("0", 2)]["_err"].startswith(f"{topic}/0@2: AvroDecodeError: value: ")
    assert tuple(rows[("0", 3)][c] for c in cols) == (4, None, None, None, None)
    # A text key with an Avro value: the key is decoded in Python, the value on the JVM.
    mixed = KafkaSource(
        "mixed",
        bootstrap,
        topic,
        key_format="bytes",
        value_format="avro",
        value_avro_schema=json.dumps(V1),
    )
    rows = _read(spark_kafka, mixed)
    assert rows[("0", 0)]["key"] == _datum(KEY, {"order_id": 1})
    assert (rows[("0", 0)]["id"], rows[("0", 0)]["_err"]) == (1, None)
    assert rows[("0", 1)]["key"] == b"\x80" and rows[("0", 1)]["status"] == "b"
    assert rows[("0", 2)]["key"] == _datum(KEY, {"order_id": 3})
    assert rows[("0", 2)]["id"] is None and rows[("0", 2)]["_err"] is not None
    json_key = KafkaSource(
        "jsonkey",
        bootstrap,
        topic,
        key_format="json",
        key_schema=pa.schema([("k", pa.int64())]),
        value_format="avro",
        value_avro_schema=json.dumps(V1),
    )
    rows = _read(spark_kafka, json_key)  # no key is JSON: every record is an err row
    assert all(r["_err"] is not None and r["id"] is None for r in rows.values())
    assert all("AvroDecodeError" not in r["_err"] for r in rows.values())


def test_wire_format_with_several_writer_schemas(
    spark_kafka: SparkSession, kafka_broker: Any
) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap, 2)
    v1 = [{"id": i, "status": "v1", "qty": i} for i in range(4)]
    v2 = [{"id": 10 + i, "status": "v2", "qty": -i, "note": f"n{i}"} for i in range(4)]
    v2[0]["note"] = None
    good = [(1, V1, r) for r in v1] + [(2, V2, r) for r in v2]
    records: list[tuple[int, bytes | None, bytes | None]] = [
        (i % 2, None, _wire(sid, s, r)) for i, (sid, s, r) in enumerate(good)
    ]
    datum = _datum(V1, {"id": 99, "status": "x", "qty": 1})
    bad = {
        ("0", 4): b"\x01" + struct.pack(">i", 1) + datum,  # wrong magic byte
        ("1", 4): b"\x00\x00\x01",  # too short for a header
        ("0", 5): _wire(3, V1, {"id": 1, "status": "x", "qty": 1}),  # id 3 is nobody's
        ("1", 5): b"\x00" + struct.pack(">i", 1) + datum[:-2],  # truncated datum
        ("0", 6): _wire(4, CLASH, {"id": 1, "status": 5}),  # does not resolve into READER
    }
    records += [(int(p), None, raw) for (p, _), raw in bad.items()]
    _produce(bootstrap, topic, records)
    source = KafkaSource(
        "wire",
        bootstrap,
        topic,
        value_format="avro",
        value_avro_schema=json.dumps(READER),
        avro_schemas={1: json.dumps(V1), 2: json.dumps(V2), 4: json.dumps(CLASH)},
    )
    assert source.schema.types == [pa.int64(), pa.string(), pa.int64(), pa.string()]
    rows, planned, run = _read_counting(spark_kafka, source)
    assert (planned, run) == (0, 1)  # the ids are known in advance: no job to find them
    assert len(rows) == len(good) + len(bad)
    for i, (_, _, r) in enumerate(good):
        row = rows[(str(i % 2), i // 2)]
        want = (r["id"], r["status"], r["qty"], r.get("note"), None)
        assert (row["id"], row["status"], row["qty"], row["note"], row["_err"]) == want
    causes = {
        ("0", 4): "not in the Confluent wire format",
        ("1", 4): "not in the Confluent wire format",
        ("0", 5): "schema id 3 is unknown to the declared schemas (ids [1, 2, 4])",
        ("1", 5): "does not decode with writer schema id 1 into the declared columns",
        ("0", 6): "does not decode with writer schema id 4 into the declared columns",
    }
    for (p, o), cause in causes.items():
        row = rows[(p, o)]
        assert row["id"] is None and row["status"] is None, row
        assert row["_err"].startswith(f"{topic}/{p}@{o}: AvroDecodeError: value: "), row
        assert cause in row["_err"], row


def test_upsert_with_an_avro_key_and_tombstones(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap, 2)
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    clock = itertools.count(1)

    def ingestion() -> Ingestion:
        source = KafkaSource(
            "orders",
            bootstrap,
            topic,
            key_format="avro",
            key_avro_schema=json.dumps(KEY),
            value_format="avro",
            value_avro_schema=json.dumps(READER),
            avro_schemas={1: json.dumps(V1), 2: json.dumps(V2), 5: json.dumps(KEY)},
        )
        return upsert_ingestion(spark_kafka, client, source, clock)

    model: dict[int, tuple[str, int, str | None]] = {}

    def put(records: list[tuple[int, tuple[str, int, str | None] | None]]) -> None:
        batch: list[tuple[int, bytes | None, bytes | None]] = []
        for k, v in records:
            key = _wire(5, KEY, {"order_id": k})  # ids are the registry's, key and value alike
            if v is None:
                batch.append((k % 2, key, None))
                model.pop(k, None)
                continue
            status, qty, note = v
            value = (
                _wire(1, V1, {"id": k, "status": status, "qty": qty})
                if note is None
                else _wire(2, V2, {"id": k, "status": status, "qty": qty, "note": note})
            )
            batch.append((k % 2, key, value))
            model[k] = v
        _produce(bootstrap, topic, batch)

    def live() -> dict[int, tuple[str, int, str | None]]:
        upper = client.state("orders").upper.time
        assert upper is not None
        reader = client.open_leased_reader("orders")
        try:
            rows = reader.snapshot(upper - 1).to_pylist()
        finally:
            reader.expire()
        assert all(r["_diff"] == 1 and r["_err"] is None for r in rows), rows
        return {r["order_id"]: (r["status"], r["qty"], r["note"]) for r in rows}

    ing = ingestion()
    put([(k, ("new", k, None if k % 2 else f"n{k}")) for k in range(10)])
    ing.step()
    assert live() == model
    put([(3, None), (4, ("paid", 40, "evolved")), (5, None), (5, ("back", 5, None))])
    ing.close()
    ing = ingestion()  # a restart: resumes from the remap
    ing.step()
    assert live() == model
    ing.close()


def test_an_unreachable_schema_registry_is_a_fault(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap, 1)
    _produce(bootstrap, topic, [(0, None, _wire(1, V1, {"id": 1, "status": "a", "qty": 1}))])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    source = KafkaSource(
        "reg",
        bootstrap,
        topic,
        value_format="avro",
        value_avro_schema=json.dumps(V1),
        schema_registry_url=f"http://127.0.0.1:{port}",
        timeout_s=2,
    )
    with pytest.raises(SourceUnavailable, match=f"schema registry at http://127.0.0.1:{port}"):
        source.read(spark_kafka, {}, source.upper())
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    ing = Ingestion(spark_kafka, client, source, clock=lambda: 5)
    with pytest.raises(SourceUnavailable) as e:
        ing.step()
    assert "\n" not in str(e.value) and "schema id 1" in str(e.value)
    assert client.state("reg").upper.time == 0  # nothing written: no err rows
    upper = client.state(STATUS_SHARD).upper.time
    assert upper is not None
    reader = client.open_leased_reader(STATUS_SHARD)
    try:
        rows = reader.snapshot(upper - 1).to_pylist()
    finally:
        reader.expire()
    assert next(r["status"] for r in rows if r["object"] == "reg") == "stalled"
    ing.close()


class _Lookups:
    """A :class:`~timeshard.storage.schema_registry.WriterSchemas` that knows no ids in advance.

    It answers from a dict, as a registry answers ``GET /schemas/ids/{id}``
    (None for a 404), and records each id asked for: the registry's lookup
    path (distinct ids first, then one lookup per id) without its HTTP.
    """

    def __init__(self, schemas: dict[int, str]) -> None:
        self.schemas = schemas
        self.asked: list[int] = []

    def schema(self, schema_id: int) -> str | None:
        self.asked.append(schema_id)
        return self.schemas.get(schema_id)

    def known(self) -> None:
        return None

    def describe(self) -> str:
        return "the lookups"


def test_ids_are_looked_up_once_per_distinct_id_of_the_range(
    spark_kafka: SparkSession, kafka_broker: Any
) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap, 2)
    records: list[tuple[int, bytes | None, bytes | None]] = [
        (i % 2, None, _wire(1 + i % 2, V1 if i % 2 == 0 else V2, r))
        for i, r in enumerate([{"id": i, "status": "s", "qty": i, "note": "n"} for i in range(8)])
    ]
    records += [
        (0, None, _wire(9, V1, {"id": 9, "status": "s", "qty": 9})),  # 404: an err row
        (1, None, b"\x07garbage"),  # not the wire format: no id to look up
        (1, None, None),  # a null value: nothing to look up, no error
    ]
    _produce(bootstrap, topic, records)
    source = KafkaSource(
        "ids",
        bootstrap,
        topic,
        value_format="avro",
        value_avro_schema=json.dumps(READER),
        schema_registry_url="http://127.0.0.1:9",  # replaced below: no registry can run here
    )
    lookups = _Lookups({1: json.dumps(V1), 2: json.dumps(V2)})
    source.writer_schemas = lookups
    rows, planned, run = _read_counting(spark_kafka, source)
    assert (planned, run) == (1, 1)  # one small job finds the ids, one decodes
    assert sorted(lookups.asked) == [1, 2, 9]
    assert len(rows) == 11
    ok = [r for r in rows.values() if r["_err"] is None and r["id"] is not None]
    assert sorted(r["id"] for r in ok) == list(range(8))
    assert all(r["note"] == ("n" if r["id"] % 2 else None) for r in ok)
    assert "schema id 9 is unknown to the lookups" in rows[("0", 4)]["_err"]
    assert "not in the Confluent wire format" in rows[("1", 4)]["_err"]
    assert rows[("1", 5)]["_err"] is None and rows[("1", 5)]["id"] is None
