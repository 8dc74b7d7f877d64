"""Schema ids of Confluent wire-format records, read on Spark as the signed int32 they are."""

from __future__ import annotations

import json
from typing import Any

import pytest

from timeshard.storage.kafka_source import KafkaSource, _schema_id

pytestmark = pytest.mark.spark

ORDER = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]})


def test_wire_ids_are_signed_int32(spark: Any) -> None:
    from pyspark.sql import functions as F

    heads = [
        b"\x00\x00\x00\x00\x07\x02",
        b"\x00\x7f\xff\xff\xff",
        b"\x00\x80\x00\x00\x00",
        b"\x00\xff\xff\xff\xff\x02",
        b"\x01\x00\x00\x00\x07",
        b"\x00\x00\x00\x07",
    ]
    df = spark.createDataFrame([(i, h) for i, h in enumerate(heads)], "i int, v binary")
    ids = [r["id"] for r in df.orderBy("i").select(_schema_id(F.col("v")).alias("id")).collect()]
    assert ids == [7, 2**31 - 1, -(2**31), -1, None, None]


def test_a_registry_source_asks_for_no_id_outside_int32(spark: Any) -> None:
    asked: list[int] = []

    class Answers:
        def get_schema(self, schema_id: int) -> Any:
            from confluent_kafka.schema_registry import Schema

            asked.append(schema_id)
            return Schema(ORDER, "AVRO")

    source = KafkaSource(
        "k",
        "127.0.0.1:9",
        "t",
        value_format="avro",
        value_avro_schema=ORDER,
        schema_registry_url="http://127.0.0.1:9",
    )
    assert source.writer_schemas is not None
    source.writer_schemas._client = Answers()  # type: ignore[attr-defined]
    records = spark.createDataFrame(
        [(b"\x00\xff\xff\xff\xff\x02",), (b"\x00\x00\x00\x00\x01\x02",)], "value binary"
    )
    assert source._writers(records) == {-1: None, 1: ORDER}
    assert asked == [1]
