"""KafkaSource's arguments (no broker, no Spark): a bad one raises InvalidUsage naming it."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from timeshard.errors import InvalidUsage
from timeshard.spec import SourceSpec, build_source
from timeshard.storage.kafka_source import KafkaSource, decode_record

VALUE = pa.schema([("id", pa.int64()), ("name", pa.string())])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"topic": "a b"}, "topic must be"),
        ({"topic": ".."}, "topic must be"),
        ({"value_format": "xml"}, "value_format must be one of"),
        ({"value_format": "json"}, "needs a value_schema"),
        ({"key_format": "text", "key_schema": VALUE}, "has one column 'key'"),
        ({"key_schema": VALUE}, "key_schema goes with a key_format"),
        ({"metadata": ["offset", "offset"]}, "metadata must be distinct"),
        ({"metadata": ["lag"]}, "metadata must be distinct names"),
        (
            {
                "key_format": "text",
                "metadata": ["partition"],
                "value_schema": pa.schema([("key", pa.int64())]),
            },
            "repeat",
        ),
        ({"value_schema": pa.schema([("_ts", pa.int64())])}, "reserved"),
        ({"bootstrap_servers": " "}, "bootstrap_servers"),
        ({"timeout_s": 0}, "timeout_s"),
        # librdkafka refuses a socket.timeout.ms past 300000 at the first ask: it was taken for
        # the broker's silence, shared with the cluster's other objects.
        ({"timeout_s": 600}, r"seconds from 0.01 to 300 \(.*\), got 600"),
        ({"timeout_s": True}, "got True"),
        ({"from_earliest": "no"}, "from_earliest must be true or false, got 'no'"),
    ],
)
def test_bad_arguments_name_the_value(kwargs: dict[str, Any], match: str) -> None:
    args: dict[str, Any] = {
        "bootstrap_servers": "127.0.0.1:9",
        "topic": "t",
        "value_format": "text",
    }
    args.update(kwargs)
    if args.get("value_format") == "json" and "value_schema" in kwargs:
        pass
    elif "value_schema" in kwargs:
        args["value_format"] = "json"
    with pytest.raises(InvalidUsage, match=match):
        KafkaSource("bad", **args)


def test_columns_are_key_value_then_metadata() -> None:
    source = KafkaSource(
        "k",
        "127.0.0.1:9",
        "t",
        key_format="json",
        key_schema=pa.schema([("id", pa.int64())]),
        value_schema=VALUE.remove(0).append(pa.field("total", pa.float64())),
        metadata=["offset", "headers"],
    )
    assert source.key_columns == ["id"]
    assert source.payload_schema().names == ["id", "name", "total", "offset", "headers"]
    assert source.group_id == "timeshard-k"


def test_records_decode_or_raise() -> None:
    assert decode_record(b'{"id": 1, "name": "a", "x": 2}', "json", "value", VALUE) == {
        "id": 1,
        "name": "a",
    }
    assert decode_record(None, "json", "value", VALUE) == {"id": None, "name": None}
    assert decode_record(b"caf\xc3\xa9", "text", "value", pa.schema([("value", pa.string())])) == {
        "value": "café"
    }
    assert decode_record(b"\xff", "bytes", "key", pa.schema([("key", pa.binary())])) == {
        "key": b"\xff"
    }
    with pytest.raises(UnicodeDecodeError):
        decode_record(b"\xff", "text", "value", pa.schema([("value", pa.string())]))
    with pytest.raises(ValueError, match="expected a JSON object"):
        decode_record(b"[1]", "json", "value", VALUE)


def test_a_declared_kafka_source() -> None:
    spec = SourceSpec(
        name="orders",
        kind="kafka",
        envelope="upsert",
        key_columns=["id"],
        options={
            "bootstrap_servers": "127.0.0.1:9092",
            "topic": "orders",
            "key_format": "json",
            "key_schema": {"id": "int64"},
            "metadata": ["timestamp"],
        },
        columns={"status": "string"},
    )
    source = build_source(spec)
    assert isinstance(source, KafkaSource)
    assert source.payload_schema().names == ["id", "status", "timestamp"]
    bad = spec.model_copy(update={"options": {**spec.options, "key_schema": {"id": "decimal"}}})
    with pytest.raises(InvalidUsage, match="key_schema must map columns"):
        build_source(bad)
    with pytest.raises(InvalidUsage, match="bad options"):
        build_source(spec.model_copy(update={"options": {"topic": "orders"}}))
