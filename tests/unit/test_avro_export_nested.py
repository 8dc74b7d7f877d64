"""The KAFKA export's Avro schema of nested columns (no Spark).

Lists are arrays, structs records, maps with string keys maps, to any depth,
each item, value and field a union with ``null``; a nested record is named
after its path. The rows a task writes (Arrow's Python values, maps as dicts by
:func:`~timeshard.storage.export.json_value`) are encoded by fastavro with the
schema and decoded back by fastavro, nulls at every depth included.
"""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from timeshard.errors import InvalidUsage
from timeshard.storage.avro import avro_record_schema
from timeshard.storage.export import json_value

POINT = pa.struct([("x", pa.float64()), ("tags", pa.list_(pa.string()))])
NESTED = pa.schema(
    [
        ("id", pa.int64()),
        ("ints", pa.list_(pa.int32())),
        ("point", POINT),
        ("points", pa.large_list(POINT)),
        ("attrs", pa.map_(pa.string(), pa.map_(pa.string(), POINT))),
        ("grid", pa.list_(pa.list_(pa.int64()))),
    ]
)
ROWS: list[dict[str, Any]] = [
    {
        "id": 1,
        "ints": [1, None, -3],
        "point": {"x": 0.5, "tags": ["a", None]},
        "points": [None, {"x": None, "tags": None}, {"x": 2.0, "tags": []}],
        "attrs": [("k", [("in", {"x": 1.0, "tags": ["t"]}), ("none", None)]), ("z", None)],
        "grid": [[1, 2], None, [], [None]],
    },
    {"id": 2, "ints": [], "point": None, "points": [], "attrs": [], "grid": []},
    {"id": None, "ints": None, "point": None, "points": None, "attrs": None, "grid": None},
]


def named(schema: Any) -> list[str]:
    """The names of the records in ``schema``, depth first."""
    if isinstance(schema, list):
        return [n for branch in schema for n in named(branch)]
    if not isinstance(schema, dict):
        return []
    kind = schema["type"]
    if kind == "record":
        return [schema["name"], *(n for f in schema["fields"] for n in named(f["type"]))]
    if kind == "array":
        return named(schema["items"])
    if kind == "map":
        return named(schema["values"])
    return []


def test_nested_columns_have_avro_types() -> None:
    schema = avro_record_schema("t_value", NESTED)
    types = {f["name"]: f["type"] for f in schema["fields"]}
    assert types["ints"] == ["null", {"type": "array", "items": ["null", "int"]}]
    point = {
        "type": "record",
        "name": "t_value.point",
        "fields": [
            {"name": "x", "type": ["null", "double"], "default": None},
            {
                "name": "tags",
                "type": ["null", {"type": "array", "items": ["null", "string"]}],
                "default": None,
            },
        ],
    }
    assert types["point"] == ["null", point]
    assert types["attrs"][1]["type"] == "map"
    assert types["attrs"][1]["values"][1]["type"] == "map"
    assert named(schema) == [
        "t_value",
        "t_value.point",
        "t_value.points.items",
        "t_value.attrs.values.values",
    ]
    assert avro_record_schema("t_value", NESTED) == schema  # a pure function of the columns


def test_record_names_are_unique_where_paths_read_alike() -> None:
    """``a_b`` and ``a.b`` join to one name with ``_``; with ``.`` every path is its own."""
    inner = pa.struct([("c", pa.int64())])
    columns = pa.schema([("a", pa.struct([("b", inner)])), ("a_b", inner)])
    schema = avro_record_schema("v", columns)
    names = named(schema)
    assert len(set(names)) == len(names) == 4
    fastavro.parse_schema(schema)


def encoded_and_decoded(columns: pa.Schema, rows: list[dict[str, Any]]) -> list[Any]:
    parsed = fastavro.parse_schema(avro_record_schema("t_value", columns))
    out = []
    for row in pa.Table.from_pylist(rows, schema=columns).to_pylist():
        datum = {c: json_value(row[c], columns.field(c).type) for c in columns.names}
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, datum)
        out.append(fastavro.schemaless_reader(io.BytesIO(buffer.getvalue()), parsed, None))
    return out


def test_nested_values_round_trip_through_fastavro() -> None:
    got = encoded_and_decoded(NESTED, ROWS)
    first = {
        **ROWS[0],
        "attrs": {"k": {"in": {"x": 1.0, "tags": ["t"]}, "none": None}, "z": None},
    }
    assert got == [first, {**ROWS[1], "attrs": {}}, ROWS[2]]


def test_the_debezium_envelope_of_nested_columns_parses() -> None:
    row = {**avro_record_schema("t_value", NESTED), "name": "t_row"}
    envelope = {
        "type": "record",
        "name": "t_envelope",
        "fields": [
            {"name": "before", "type": ["null", row], "default": None},
            {"name": "after", "type": ["null", "t_row"], "default": None},
        ],
    }
    fastavro.parse_schema(json.loads(json.dumps(envelope)))


@pytest.mark.parametrize(
    ("columns", "match"),
    [
        (
            pa.schema([("m", pa.map_(pa.int64(), pa.string()))]),
            "column 'm' holds a map with keys of type int64 at m: an Avro map's keys are strings",
        ),
        (
            pa.schema([("l", pa.list_(pa.struct([("m", pa.map_(pa.int32(), pa.int8()))])))]),
            "column 'l' holds a map with keys of type int32 at l.items.m",
        ),
        (
            pa.schema([("s", pa.struct([("bad-name", pa.int64())]))]),
            "column 's' has field 'bad-name' at s, which is not an Avro name",
        ),
        (
            pa.schema([("s", pa.struct([("a", pa.int64()), ("a", pa.string())]))]),
            "column 's' has field 'a' at s, which is not an Avro name .* unique",
        ),
        (
            pa.schema([("l", pa.list_(pa.duration("s")))]),
            r"column 'l' of type duration\[s\] at l.items has no Avro form here",
        ),
        (
            pa.schema([("d", pa.duration("s"))]),
            r"column 'd' of type duration\[s\] has no Avro form here",
        ),
    ],
)
def test_nested_columns_without_an_avro_form(columns: pa.Schema, match: str) -> None:
    with pytest.raises(InvalidUsage, match=match):
        avro_record_schema("t_value", columns)


LEAVES = [pa.int64(), pa.int8(), pa.uint32(), pa.string(), pa.float64(), pa.bool_(), pa.binary()]
FIELD_NAMES = st.sampled_from(["a", "b", "items", "values", "int", "c_d"])
TYPES = st.recursive(
    st.sampled_from(LEAVES),
    lambda inner: st.one_of(
        inner.map(pa.list_),
        inner.map(pa.large_list),
        inner.map(lambda t: pa.map_(pa.string(), t)),
        st.lists(
            st.tuples(FIELD_NAMES, inner), min_size=1, max_size=3, unique_by=lambda p: p[0]
        ).map(pa.struct),
    ),
    max_leaves=6,
)
LEAF_VALUES: dict[pa.DataType, st.SearchStrategy[Any]] = {
    pa.int64(): st.integers(-(2**63), 2**63 - 1),
    pa.int8(): st.integers(-128, 127),
    pa.uint32(): st.integers(0, 2**32 - 1),
    pa.string(): st.text(max_size=3),
    pa.float64(): st.floats(allow_nan=False),
    pa.bool_(): st.booleans(),
    pa.binary(): st.binary(max_size=3),
}


def values_of(arrow: pa.DataType) -> st.SearchStrategy[Any]:
    """Python values of ``arrow`` as Arrow takes them (a map as pairs), or None."""
    t = pa.types
    inner: st.SearchStrategy[Any]
    if t.is_list(arrow) or t.is_large_list(arrow):
        inner = st.lists(values_of(arrow.value_type), max_size=3)
    elif t.is_map(arrow):
        entries = st.dictionaries(st.text(max_size=2), values_of(arrow.item_type), max_size=3)
        inner = entries.map(lambda d: list(d.items()))
    elif t.is_struct(arrow):
        inner = st.fixed_dictionaries({f.name: values_of(f.type) for f in arrow})
    else:
        inner = LEAF_VALUES[arrow]
    return st.one_of(st.none(), inner)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_nested_columns_round_trip_through_fastavro(data: st.DataObject) -> None:
    """Any nesting of lists, structs and string-keyed maps: the datum fastavro reads back
    is the row the task encodes (maps as dicts), nulls at every depth included."""
    types = data.draw(st.lists(TYPES, min_size=1, max_size=3))
    columns = pa.schema([(f"c{i}", typ) for i, typ in enumerate(types)])
    row_values = st.fixed_dictionaries({f.name: values_of(f.type) for f in columns})
    rows = data.draw(st.lists(row_values, min_size=1, max_size=3))
    want = [
        {c: json_value(row[c], columns.field(c).type) for c in columns.names}
        for row in pa.Table.from_pylist(rows, schema=columns).to_pylist()
    ]
    assert encoded_and_decoded(columns, rows) == want
