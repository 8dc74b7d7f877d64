"""The columns of Avro logical types, and the logical types Java Avro ignores (no Spark).

What spark-avro 4.1 gives for each is checked against spark-avro itself in
``tests/integration/test_avro_logical_types.py``; these are the rules alone.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from timeshard.errors import InvalidUsage
from timeshard.storage.avro import avro_payload_schema, avro_schema_problem
from timeshard.storage.schema_registry import SchemaFiles, avro


def one_field(avro_type: Any, **attributes: Any) -> str:
    fields = [{"name": "v", "type": avro_type, **attributes}]
    return json.dumps({"type": "record", "name": "R", "fields": fields})


def column(avro_type: Any) -> pa.DataType:
    return avro_payload_schema(one_field(avro_type)).field("v").type


def decimal(**attributes: Any) -> dict[str, Any]:
    return {"type": "bytes", "logicalType": "decimal", **attributes}


def fixed(size: int, **attributes: Any) -> dict[str, Any]:
    return {"type": "fixed", "name": "F", "size": size, **attributes}


UTC = pa.timestamp("us", tz="UTC")
COLUMNS = [
    (decimal(precision=10, scale=2), pa.decimal128(10, 2)),
    (decimal(precision=5), pa.decimal128(5, 0)),
    (decimal(precision=38, scale=38), pa.decimal128(38, 38)),
    (fixed(5, logicalType="decimal", precision=11, scale=3), pa.decimal128(11, 3)),
    (fixed(16, logicalType="decimal", precision=38), pa.decimal128(38, 0)),
    ({"type": "int", "logicalType": "date"}, pa.date32()),
    ({"type": "long", "logicalType": "timestamp-millis"}, UTC),
    ({"type": "long", "logicalType": "timestamp-micros"}, UTC),
    ({"type": "long", "logicalType": "local-timestamp-millis"}, pa.timestamp("us")),
    ({"type": "long", "logicalType": "local-timestamp-micros"}, pa.timestamp("us")),
    (["null", {"type": "int", "logicalType": "date"}], pa.date32()),
    ({"type": "array", "items": ["null", decimal(precision=4)]}, pa.list_(pa.decimal128(4, 0))),
    (
        {"type": "map", "values": {"type": "int", "logicalType": "date"}},
        pa.map_(pa.string(), pa.date32()),
    ),
    # Read as the underlying type, as spark-avro reads them.
    ({"type": "string", "logicalType": "uuid"}, pa.string()),
    ({"type": "int", "logicalType": "time-millis"}, pa.int32()),
    ({"type": "long", "logicalType": "time-micros"}, pa.int64()),
    ({"type": "long", "logicalType": "timestamp-nanos"}, pa.int64()),
    ({"type": "long", "logicalType": "local-timestamp-nanos"}, pa.int64()),
    (fixed(12, logicalType="duration"), pa.binary()),
    (fixed(16, logicalType="uuid"), pa.binary()),
    (fixed(3), pa.binary()),
    ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, pa.string()),
    (
        {"type": "array", "items": {"type": "enum", "name": "E", "symbols": []}},
        pa.list_(pa.string()),
    ),
    ({"type": "long", "logicalType": "no-such-type"}, pa.int64()),
    ({"type": "long", "logicalType": {"not": "text"}}, pa.int64()),
    ({"type": "long", "logicalType": "date"}, pa.int64()),
    ({"type": "int", "logicalType": "timestamp-millis"}, pa.int32()),
    ({"type": "int", "logicalType": "decimal", "precision": 5}, pa.int32()),
    ({"type": "string", "logicalType": "decimal", "precision": 5}, pa.string()),
]


@pytest.mark.parametrize(("avro_type", "arrow"), COLUMNS)
def test_a_logical_type_is_the_column_spark_avro_makes_of_it(avro_type: Any, arrow: Any) -> None:
    assert column(avro_type) == arrow


#: Decimals whose attributes Java Avro finds invalid: it ignores the logical type.
IGNORED_DECIMALS = [
    decimal(precision=2, scale=3),
    decimal(precision=0, scale=0),
    decimal(precision=-1),
    decimal(precision=5, scale=-1),
    decimal(precision="5", scale=1),
    decimal(precision=5.0, scale=1),
    decimal(precision=True),
    decimal(precision=5, scale=None),
    decimal(precision=2**31),
    decimal(scale=0),
    fixed(2, logicalType="decimal", precision=5),
    fixed(5, logicalType="decimal", precision=12, scale=2),
    fixed(0, logicalType="decimal", precision=1),
]


@pytest.mark.parametrize("avro_type", IGNORED_DECIMALS)
def test_a_decimal_java_avro_ignores_is_read_as_its_bytes(avro_type: dict[str, Any]) -> None:
    assert column(avro_type) == pa.binary()
    text = one_field(avro_type)
    assert avro_schema_problem(json.loads(text)) is None
    assert avro(text)
    SchemaFiles({1: text})


def test_a_decimal_spark_cannot_hold_is_invalid_usage_naming_the_field() -> None:
    for avro_type in (decimal(precision=39), fixed(17, logicalType="decimal", precision=40)):
        with pytest.raises(InvalidUsage, match="field 'v' is a decimal of precision"):
            column(avro_type)
    nested = {"type": "array", "items": decimal(precision=39)}
    with pytest.raises(InvalidUsage, match=r"field 'v\.items' is a decimal of precision 39"):
        column(nested)
    # A writer schema may have one: decoded into a reader's columns, it is never a Spark type.
    assert avro(one_field(decimal(precision=39)))


@pytest.mark.parametrize(
    ("avro_type", "default"),
    [
        ({"type": "int", "logicalType": "date"}, 19782),
        ({"type": "long", "logicalType": "timestamp-micros"}, 0),
        (decimal(precision=4, scale=2), "\u0001"),
        (fixed(2, logicalType="decimal", precision=4), "\u0000\u0001"),
        (fixed(3), "abc"),
        ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, "B"),
    ],
)
def test_a_logical_type_takes_a_default_of_its_underlying_type(
    avro_type: Any, default: Any
) -> None:
    assert avro_payload_schema(one_field(avro_type, default=default)).names == ["v"]


@pytest.mark.parametrize(
    ("avro_type", "default"),
    [
        ({"type": "int", "logicalType": "date"}, "2024-01-01"),
        ({"type": "long", "logicalType": "timestamp-millis"}, "now"),
        (decimal(precision=4, scale=2), 1.5),
        (fixed(3), 5),
    ],
)
def test_a_default_not_of_the_underlying_type_is_refused(avro_type: Any, default: Any) -> None:
    with pytest.raises(InvalidUsage, match="field 'v' has default"):
        avro_payload_schema(one_field(avro_type, default=default))
    assert avro_schema_problem(json.loads(one_field(avro_type, default=default))) is not None


def test_an_enum_default_is_one_of_its_symbols_in_a_reader_schema() -> None:
    """Java Avro takes any string, then fails to resolve every datum written without the
    field; a writer schema's default is never used, and stays Java's to check."""
    enum = {"type": "enum", "name": "E", "symbols": ["A", "B"]}
    with pytest.raises(InvalidUsage, match="field 'v' has default \"C\""):
        avro_payload_schema(one_field(enum, default="C"))
    assert avro(one_field(enum, default="C"))


CATALYST = "spark.sql.catalyst.type"


@pytest.mark.parametrize(
    ("avro_type", "kept"),
    [
        ({"type": "long", CATALYST: "interval day to second"}, False),
        ({"type": "int", CATALYST: "interval year to month"}, False),
        (["null", {"type": "long", CATALYST: "decimal(10,2)"}], False),
        ({"type": "long", CATALYST: "bigint"}, True),
        ({"type": "int", CATALYST: "INT"}, True),
        ({"type": "int", "logicalType": "date", CATALYST: "interval year to month"}, True),
    ],
)
def test_a_spark_catalyst_type_property_is_refused_unless_it_is_the_avro_type(
    avro_type: Any, kept: bool
) -> None:
    """spark-avro reads an int or long carrying ``spark.sql.catalyst.type`` (what Spark's
    own to_avro writes for intervals) as the Spark type the property names, unless a date
    or timestamp logical type decides: the column would not be the declared one."""
    if kept:
        assert column(avro_type) in (pa.int32(), pa.int64(), pa.date32())
    else:
        with pytest.raises(InvalidUsage, match=r"field 'v'.*spark\.sql\.catalyst\.type"):
            column(avro_type)
