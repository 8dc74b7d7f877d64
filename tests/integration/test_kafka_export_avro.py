"""KAFKA exports in Avro against a real broker: datums decoded with the export's own schemas,
the Confluent wire format, and a round trip back through a KAFKA source.

The shard holds decimals, timestamps, dates, bytes and NULLs; every record of
the topic is read back with a ``read_committed`` consumer and decoded with
fastavro and the schemas :meth:`KafkaExport.avro_schemas` gives, and must
equal the shard's changes time by time. The round trip ingests the exported
topic again with the KAFKA source (``value_format="avro"``, UPSERT on the
Avro key) and must give the exported shard back.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import struct
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from tests.integration.one_step import rows_after_one_step
from tests.integration.test_kafka_export import read_records

from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.kafka_export import KafkaExport
from timeshard.storage.kafka_source import KafkaSource

pytestmark = [pytest.mark.spark, pytest.mark.kafka]
RICH = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("amount", pa.decimal128(10, 2)),
        ("at", pa.timestamp("us", tz="UTC")),
        ("day", pa.date32()),
        ("raw", pa.binary()),
        ("n", pa.int32()),
    ]
)
T0 = dt.datetime(2026, 11, 26, 12, 0, 0, 123456, tzinfo=dt.UTC)


def _topic(bootstrap: str) -> str:
    from timeshard.dev.kafka import create_topic

    name = f"xa-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, name, partitions=1)
    return name


def _decode(data: bytes | None, schema: dict[str, Any], schema_id: int | None = None) -> Any:
    if data is None:
        return None
    if schema_id is not None:
        assert data[:5] == b"\x00" + struct.pack(">i", schema_id)
        data = data[5:]
    return fastavro.schemaless_reader(io.BytesIO(data), fastavro.parse_schema(schema), None)


def row(i: int, name: str | None, amount: str | None) -> tuple[Any, ...]:
    return (
        i,
        name,
        None if amount is None else Decimal(amount),
        T0 + dt.timedelta(seconds=i),
        dt.date(2026, 1, i),
        bytes([i, 0, 255]),
        None if i % 2 else -i,
    )


def as_dict(values: tuple[Any, ...]) -> dict[str, Any]:
    return dict(zip(RICH.names, values, strict=True))


def test_upsert_and_debezium_exports_in_avro(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("rich", RICH)
    a1, b1, a2 = row(1, "a", "1.50"), row(2, None, None), row(1, "A", "-0.01")
    writer.append([(a1, 10, 1), (b1, 10, 1)], 0, 11)
    writer.append([(a1, 20, -1), (a2, 20, 1), (b1, 25, -1)], 11, 30)

    upsert_topic, debezium_topic = _topic(bootstrap), _topic(bootstrap)
    upsert = KafkaExport(
        spark_kafka,
        client,
        "rich",
        bootstrap,
        upsert_topic,
        key_columns=["id"],
        format="avro",
        key_schema_id=7,
        value_schema_id=8,
    )
    debezium = KafkaExport(
        spark_kafka,
        client,
        "rich",
        bootstrap,
        debezium_topic,
        envelope="debezium",
        key_columns=["id"],
        format="avro",
    )
    for export in (upsert, debezium):
        assert export.step().status == "committed"
    schemas = upsert.avro_schemas()
    assert schemas["key"]["fields"] == [{"name": "id", "type": ["null", "long"], "default": None}]
    got = [
        (t, _decode(k, schemas["key"], 7), _decode(v, schemas["value"], 8))
        for t, k, v in read_records(bootstrap, upsert_topic)
    ]
    assert got == [
        (10, {"id": 1}, as_dict(a1)),
        (10, {"id": 2}, as_dict(b1)),
        (20, {"id": 1}, as_dict(a2)),
        (25, {"id": 2}, None),  # a tombstone
    ]
    schemas = debezium.avro_schemas()
    got = [
        (t, _decode(k, schemas["key"]), _decode(v, schemas["value"]))
        for t, k, v in read_records(bootstrap, debezium_topic)
    ]
    assert got == [
        (10, {"id": 1}, {"before": None, "after": as_dict(a1)}),
        (10, {"id": 2}, {"before": None, "after": as_dict(b1)}),
        (20, {"id": 1}, {"before": as_dict(a1), "after": as_dict(a2)}),
        (25, {"id": 2}, {"before": as_dict(b1), "after": None}),
    ]
    upsert.close()
    debezium.close()


def test_an_avro_export_ingested_again_by_a_kafka_source(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    """Export -> topic -> KAFKA source (Avro key and value, UPSERT): the same rows back."""
    bootstrap = kafka_broker.bootstrap
    plain = pa.schema([("id", pa.int64()), ("name", pa.string()), ("x", pa.float64())])
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("plain", plain)
    writer.append([((i, f"n{i}", i / 4), 5, 1) for i in range(50)], 0, 6)
    writer.append(
        [((3, "n3", 0.75), 8, -1), ((3, None, None), 8, 1), ((4, "n4", 1.0), 9, -1)], 6, 10
    )
    topic = _topic(bootstrap)
    export = KafkaExport(
        spark_kafka,
        client,
        "plain",
        bootstrap,
        topic,
        key_columns=["id"],
        format="avro",
        key_schema_id=7,
        value_schema_id=8,
    )
    assert export.step().status == "committed"
    _source, rows = ingested_again(spark_kafka, client, bootstrap, topic, export, (7, 8))
    got = sorted((r["id"], r["name"], r["x"], r["_diff"]) for r in rows)
    want = [(i, f"n{i}", i / 4, 1) for i in range(50) if i not in (3, 4)]
    # (3, None, None) has every value column null: UPSERT reads it as a delete, as documented.
    assert got == want
    export.close()


def test_avro_export_arguments(spark: SparkSession, tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    client.open_writer("s", pa.schema([("k", pa.string()), ("bad-name", pa.int64())])).expire()
    client.open_writer(
        "t", pa.schema([("k", pa.string()), ("m", pa.map_(pa.int64(), pa.int64()))])
    ).expire()
    with pytest.raises(InvalidUsage, match="format must be one of"):
        KafkaExport(spark, client, "s", "127.0.0.1:9", "x", key_columns=["k"], format="xml")
    with pytest.raises(InvalidUsage, match="value_schema_id goes with format 'avro'"):
        KafkaExport(spark, client, "s", "127.0.0.1:9", "x", key_columns=["k"], value_schema_id=3)
    with pytest.raises(InvalidUsage, match="'bad-name' is not an Avro name"):
        KafkaExport(spark, client, "s", "127.0.0.1:9", "x", key_columns=["k"], format="avro")
    with pytest.raises(InvalidUsage, match="column 'm' holds a map with keys of type int64"):
        KafkaExport(spark, client, "t", "127.0.0.1:9", "x", key_columns=["k"], format="avro")


POINT = pa.struct([("x", pa.float64()), ("at", pa.timestamp("us", tz="UTC"))])
NESTED = pa.schema(
    [
        ("id", pa.int64()),
        ("tags", pa.list_(pa.string())),
        ("point", POINT),
        ("path", pa.list_(POINT)),
        ("attrs", pa.map_(pa.string(), pa.struct([("n", pa.decimal128(6, 2))]))),
        ("deep", pa.map_(pa.string(), pa.list_(pa.list_(pa.int32())))),
    ]
)


def nested_row(i: int) -> tuple[Any, ...]:
    """A row with a null at every depth of every nested column, and without."""
    at = T0 + dt.timedelta(seconds=i)
    return (
        i,
        [f"t{i}", None],
        {"x": i / 2, "at": None},
        [None, {"x": None, "at": at}, {"x": -1.0, "at": at}],
        [("a", {"n": Decimal("1.25")}), ("b", {"n": None}), ("c", None)],
        [("p", [[i, None], None, []]), ("q", None)],
    )


EMPTY = (7, [], {"x": None, "at": None}, [], [], [])
NULLS = (8, None, None, None, None, None)


def as_avro(values: tuple[Any, ...]) -> dict[str, Any]:
    """A row as fastavro reads it back: a map a dict."""
    out = dict(zip(NESTED.names, values, strict=True))
    for c in ("attrs", "deep"):
        out[c] = None if out[c] is None else dict(out[c])
    return out


def test_nested_columns_exported_in_avro(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    """Lists, structs and maps, nested, with nulls at every depth: the datums fastavro reads
    back with the export's schemas are the shard's rows, and Java Avro parses the schemas."""
    bootstrap = kafka_broker.bootstrap
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("nested", NESTED)
    r1, r2 = nested_row(1), nested_row(2)
    writer.append([(r1, 10, 1), (r2, 10, 1), (EMPTY, 10, 1), (NULLS, 10, 1)], 0, 11)
    writer.append([(r2, 20, -1)], 11, 21)
    upsert_topic, debezium_topic = _topic(bootstrap), _topic(bootstrap)
    upsert = KafkaExport(
        spark_kafka,
        client,
        "nested",
        bootstrap,
        upsert_topic,
        key_columns=["id"],
        format="avro",
        value_schema_id=9,
    )
    debezium = KafkaExport(
        spark_kafka, client, "nested", bootstrap, debezium_topic, envelope="debezium", format="avro"
    )
    for export in (upsert, debezium):
        assert export.step().status == "committed"
    schemas = upsert.avro_schemas()
    parser = spark_kafka._jvm.org.apache.avro.Schema.Parser
    for schema in (*schemas.values(), debezium.avro_schemas()["value"]):
        parser().parse(json.dumps(schema))
    got = sorted(
        (
            (t, _decode(k, schemas["key"]), _decode(v, schemas["value"], 9))
            for t, k, v in read_records(bootstrap, upsert_topic)
        ),
        key=lambda r: (r[0], r[1]["id"]),
    )
    assert got == [
        (10, {"id": i}, as_avro(r)) for i, r in ((1, r1), (2, r2), (7, EMPTY), (8, NULLS))
    ] + [(20, {"id": 2}, None)]
    envelope = debezium.avro_schemas()["value"]
    got_changes = sorted(
        ((t, _decode(v, envelope)) for t, _, v in read_records(bootstrap, debezium_topic)),
        key=lambda r: (r[0], repr(r[1])),
    )
    want = [(10, {"before": None, "after": as_avro(r)}) for r in (r1, r2, EMPTY, NULLS)]
    want.append((20, {"before": as_avro(r2), "after": None}))
    assert got_changes == sorted(want, key=lambda r: (r[0], repr(r[1])))
    upsert.close()
    debezium.close()


def test_nested_columns_exported_and_ingested_again(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    """Export -> topic -> KAFKA source with the export's own nested schema as the reader
    schema (spark-avro decodes it): the same rows back, nulls at every depth included."""
    bootstrap = kafka_broker.bootstrap
    point = pa.struct([("x", pa.float64()), ("tags", pa.list_(pa.string()))])
    nested = pa.schema(
        [
            ("id", pa.int64()),
            ("point", point),
            ("path", pa.list_(point)),
            ("attrs", pa.map_(pa.string(), pa.list_(pa.int32()))),
        ]
    )
    rows = [
        (1, {"x": 0.5, "tags": ["a", None]}, [None, {"x": None, "tags": []}], [("k", [1, None])]),
        (2, {"x": None, "tags": None}, [], [("k", None), ("l", [])]),
        (3, None, None, None),
        (4, {"x": 1.0, "tags": []}, None, []),
    ]
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    client.open_writer("nested", nested).append([(r, 5, 1) for r in rows], 0, 6)
    topic = _topic(bootstrap)
    export = KafkaExport(
        spark_kafka, client, "nested", bootstrap, topic, key_columns=["id"], format="avro"
    )
    assert export.step().status == "committed"
    schemas = export.avro_schemas()
    source = KafkaSource(
        "again",
        bootstrap,
        topic,
        value_format="avro",
        value_avro_schema=json.dumps(schemas["value"]),
    )
    assert source.schema.field("attrs").type == pa.map_(pa.string(), pa.list_(pa.int32()))
    ingested = rows_after_one_step(spark_kafka, client, source, first_time=100)
    got = sorted((tuple(r[c] for c in nested.names) for r in ingested), key=lambda r: r[0])
    assert got == rows
    export.close()


def ingested_again(
    spark: SparkSession,
    client: PersistClient,
    bootstrap: str,
    topic: str,
    export: KafkaExport,
    ids: tuple[int, int],
) -> tuple[KafkaSource, list[dict[str, Any]]]:
    """The topic ``export`` wrote (in the wire format, its key and value schemas under
    ``ids``), ingested again by a KAFKA source (UPSERT on the Avro key, shard ``again``):
    the source, and the shard's rows after one step (ok and err)."""
    schemas = export.avro_schemas()
    # The source's columns: the key's, then the value's but the key (Avro resolution skips it).
    reader = {
        **schemas["value"],
        "fields": [f for f in schemas["value"]["fields"] if f["name"] != "id"],
    }
    key_id, value_id = ids
    source = KafkaSource(
        "again",
        bootstrap,
        topic,
        key_format="avro",
        key_avro_schema=json.dumps(schemas["key"]),
        value_format="avro",
        value_avro_schema=json.dumps(reader),
        avro_schemas={key_id: json.dumps(schemas["key"]), value_id: json.dumps(schemas["value"])},
    )
    rows = rows_after_one_step(
        spark, client, source, first_time=100, envelope="upsert", key_columns=["id"]
    )
    return source, rows
