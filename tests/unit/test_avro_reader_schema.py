"""A reader ``avro_schema`` is checked as Avro when it is declared (no Spark).

spark-avro parses it with Avro's Java parser in every read: a name that parser
refuses failed every read at planning (a fault, the source stalled for good),
and a default that is not a value of its field's type failed the whole job at
the first record whose writer lacked the field. The verdicts below are Java
Avro 1.12's (tests/integration/test_avro_schema_java.py checks them against it).
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from timeshard.errors import InvalidUsage
from timeshard.storage.avro import avro_payload_schema
from timeshard.storage.kafka_source import KafkaSource
from timeshard.storage.schema_registry import SchemaFiles, avro


def record(fields: list[dict[str, Any]] | None = None, **attributes: Any) -> dict[str, Any]:
    return {
        "type": "record",
        "name": "R",
        **attributes,
        "fields": fields or [{"name": "a", "type": "long"}],
    }


def field(avro_type: Any, **attributes: Any) -> list[dict[str, Any]]:
    return [{"name": "a", "type": avro_type, **attributes}]


REFUSED = [
    (record(name="my-rec"), "'my-rec' is not an Avro name"),
    (record(name="a.1b"), "'a.1b' is not an Avro name"),
    (record(namespace="1bad ns"), "namespace '1bad ns'"),
    (record(namespace="a..b"), "namespace 'a..b'"),
    (record(name="TimeshardDatumEnd"), "redefined named type"),
    (record(field("long", default="x")), 'default "x"'),
    (record(field({"type": "long"}, default="x")), 'default "x"'),
    (record(field("int", default=2**40)), f"default {2**40}"),
    (record(field("int", default=1.0)), "default 1.0"),
    (record(field("long", default=2**63)), f"default {2**63}"),
    (record(field("float", default=True)), "default true"),
    (record(field("double", default=None)), "default null"),
    (record(field("string", default=1)), "default 1"),
    (record(field(["null", "long"], default="x")), 'default "x"'),
    (record(field(["null", "int"], default=2**40)), f"default {2**40}"),
    (record(field("long", order="bogus")), "order 'bogus'"),
    (record(field({"type": "array", "items": "long"}, default=[1, "x"])), 'default [1, "x"]'),
    (record(field({"type": "map", "values": "int"}, default=[])), "default []"),
    (record(field({"type": "map", "values": "int"}, default={"k": 2**40})), "default {"),
    (record(field(record(name="S"), default={})), "default {}"),  # field 'a' has none
    (record(field(record(name="S"), default={"a": "x"})), 'default {"a": "x"}'),
    (record(field(record(field("long", default="x"), name="S"))), "field a.a has default"),
    (record(field(record(field("long", name="b-c"), name="S"))), "not a field with an Avro name"),
    (record(field(record(name="S-1"))), "'S-1' is not an Avro name"),
    (record(field(record(name="R"))), "redefined named type"),
]

ACCEPTED = [
    record(field(["null", "long"], default=0)),  # any branch, as Java Avro takes it
    record(field(["long", "null"], default=None)),
    record(namespace=""),
    record(namespace="com.acme"),
    record(name="com.acme.R"),
    record(name="Été"),
    record(name="long"),  # in the frame's namespace: timeshard.avro.long
    record(field("int", default=-(2**31))),
    record(field("long", default=2**63 - 1)),
    record(field("float", default="NaN")),
    record(field("double", default=1)),
    record(field("bytes", default="\u00ff")),
    record(field("long", order="DESCENDING")),
    record(field({"type": "array", "items": ["null", "long"]}, default=[1, None])),
    record(field({"type": "map", "values": {"type": "array", "items": "int"}}, default={})),
    record(field(["null", record(name="S")], default={"a": 1})),  # any branch
    record(field(record(field("long", default=3), name="S"), default={})),
    record(field(record(field({"type": "map", "values": "string"}), name="S"))),
]


@pytest.mark.parametrize(("schema", "match"), REFUSED)
def test_a_reader_schema_java_avro_refuses_is_invalid_usage_naming_the_problem(
    schema: dict[str, Any], match: str
) -> None:
    text = json.dumps(schema)
    with pytest.raises(InvalidUsage) as e:
        avro_payload_schema(text)
    assert match in str(e.value)
    with pytest.raises(InvalidUsage, match="avro_schema"):
        KafkaSource("k", "127.0.0.1:9", "t", value_format="avro", value_avro_schema=text)


@pytest.mark.parametrize("schema", ACCEPTED)
def test_a_reader_schema_java_avro_takes_is_accepted(schema: dict[str, Any]) -> None:
    assert avro_payload_schema(json.dumps(schema)).names == ["a"]


def test_writer_schemas_with_names_java_avro_refuses_are_not_avro() -> None:
    """A schema file naming a type or field so was refused by no one, and failed every
    read; a registry's is a data error of the records naming it."""
    enum = {"type": "enum", "name": "my-enum", "symbols": ["A"]}
    nested = record([{"name": "a", "type": ["null", enum]}])
    bad_field = record([{"name": "a-b", "type": "long"}])
    for schema in (nested, bad_field, record(namespace="1x")):
        assert not avro(json.dumps(schema))
        with pytest.raises(InvalidUsage, match="schema id 3 is not a valid Avro schema: "):
            SchemaFiles({3: json.dumps(schema)})
    assert avro(json.dumps(record([{"name": "a", "type": ["null", {**enum, "name": "E"}]}])))


def test_nested_reader_types_give_nested_columns() -> None:
    inner = record(
        [
            {"name": "x", "type": ["null", "double"]},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
        ],
        name="S",
    )
    schema = record(
        [
            {"name": "l", "type": ["null", {"type": "array", "items": ["null", "long"]}]},
            {"name": "s", "type": inner},
            {"name": "m", "type": {"type": "map", "values": ["null", {**inner, "name": "T"}]}},
        ]
    )
    point = pa.struct([("x", pa.float64()), ("tags", pa.list_(pa.string()))])
    assert avro_payload_schema(json.dumps(schema)) == pa.schema(
        [("l", pa.list_(pa.int64())), ("s", point), ("m", pa.map_(pa.string(), point))]
    )


@pytest.mark.parametrize(
    "avro_type",
    [
        {"type": "array", "items": ["long", "string"]},
        {"type": "map", "values": ["int", "string"]},
        {"type": "record", "name": "S", "fields": [{"name": "b", "type": "R"}]},  # by name
        {"type": "array", "items": "R"},  # a reference
    ],
)
def test_nested_reader_types_without_a_column_form(avro_type: Any) -> None:
    with pytest.raises(InvalidUsage, match="field 'a' has type"):
        avro_payload_schema(json.dumps(record(field(avro_type))))


def test_a_nested_record_without_fields_is_refused() -> None:
    """Java Avro takes it, but no Parquet part holds a struct without fields: every write
    of the source failed."""
    empty = {"type": "array", "items": {"type": "record", "name": "E", "fields": []}}
    with pytest.raises(InvalidUsage, match=r"record at 'a\.items' needs a non-empty fields list"):
        avro_payload_schema(json.dumps(record(field(empty))))


def writer(avro_type: Any, **attributes: Any) -> dict[str, Any]:
    return record(field(avro_type, **attributes), name="W")


#: Writer schemas fastavro parses and Java Avro refuses (a registry's, or a schema file's):
#: each failed every read of the source at planning, a fault, for good.
WRITER_REFUSED = [
    (writer(["null", "null"]), "two branches of type 'null'"),
    (writer(["long", {"type": "long", "logicalType": "timestamp-millis"}]), "type 'long'"),
    (writer([{"type": "map", "values": "long"}, {"type": "map", "values": "string"}]), "'map'"),
    (writer(["long", ["null", "string"]]), "holds a union"),
    (writer({"type": "fixed", "name": "F", "size": -1}), "size -1"),
    (writer({"type": "fixed", "name": "F", "size": "4"}), "size '4'"),
    (record([{"name": "a", "type": "long"}, {"name": "a", "type": "int"}]), "'a' is repeated"),
    (writer({"type": "array", "items": "long"}, default=["x"]), 'default ["x"]'),
    (writer(record(name="S"), default={"a": "x"}), 'default {"a": "x"}'),
    (
        writer(record(field({"type": "map", "values": "int"}, default={"k": "x"}), name="S")),
        'default {"k": "x"}',
    ),
    (record(aliases=["1x"]), "alias '1x'"),
    (writer(["null", record(name="S"), "S"]), "type 'S'"),
    (record(field(["null", record(name="S"), "x.S"]), namespace="x"), "type 'x.S'"),
    (record(field([record(name="a.S"), "S"]), name="W", namespace="a"), "type 'a.S'"),
]
#: ... and writer schemas both take (Java Avro does not check these).
WRITER_ACCEPTED = [
    writer(["null", record(name="S"), record(name="T")]),
    writer({"type": "enum", "name": "E", "symbols": ["A"]}, default="B"),
    writer({"type": "fixed", "name": "F", "size": 2}, default="abc"),
    writer("long", aliases=["1x"]),
    writer({"type": "long", "logicalType": "timestamp-millis"}, default=0),
    record(doc=5),
    writer(["null", record(name="S"), record(name="S", namespace="x")]),
    writer([record(name="S"), record(name="x.S")]),
]


@pytest.mark.parametrize(("schema", "match"), WRITER_REFUSED)
def test_a_writer_schema_java_avro_refuses_is_not_avro(schema: dict[str, Any], match: str) -> None:
    assert not avro(json.dumps(schema))
    with pytest.raises(InvalidUsage, match="schema id 3 is not a valid Avro schema: ") as e:
        SchemaFiles({3: json.dumps(schema)})
    assert match in str(e.value)


@pytest.mark.parametrize("schema", WRITER_ACCEPTED)
def test_a_writer_schema_java_avro_takes_is_avro(schema: dict[str, Any]) -> None:
    assert avro(json.dumps(schema))
