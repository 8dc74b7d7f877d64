"""The PostgreSQL type of each Arrow type a PostgreSQL export writes, and its JSON values."""

from __future__ import annotations

import datetime
import json

import pyarrow as pa
import pytest

from timeshard.storage.export import to_json
from timeshard.storage.postgres_export import _json_of, pg_type

MAP = pa.map_(pa.int32(), pa.struct([("d", pa.date32()), ("b", pa.binary())]))


@pytest.mark.parametrize(
    ("arrow", "pg"),
    [
        (pa.int8(), "smallint"),
        (pa.list_(pa.int8()), "smallint[]"),
        (pa.large_list(pa.string()), "text[]"),
        (pa.list_(pa.decimal128(10, 2)), "numeric(10, 2)[]"),
        (pa.list_(pa.timestamp("us", tz="UTC")), "timestamptz[]"),
        (pa.struct([("x", pa.int64())]), "jsonb"),
        (pa.map_(pa.string(), pa.int64()), "jsonb"),
        (pa.list_(pa.list_(pa.int64())), "jsonb"),  # a PostgreSQL array is rectangular
        (pa.list_(pa.struct([("x", pa.int64())])), "jsonb"),
        (pa.list_(pa.uint64()), None),  # an element type PostgreSQL has not
    ],
)
def test_pg_type(arrow: pa.DataType, pg: str | None) -> None:
    assert pg_type(arrow) == pg


def test_a_map_is_a_json_object_of_its_entries_at_any_depth() -> None:
    """Arrow gives a map as a list of pairs: as JSON it is an object, keys as text."""
    arrow = pa.list_(MAP)
    [value] = pa.array([[[(1, {"d": datetime.date(2024, 1, 2), "b": b"\x00"})], None]], arrow)
    assert json.loads(to_json(_json_of(value.as_py(), arrow))) == [
        {"1": {"d": "2024-01-02", "b": "AA=="}},
        None,
    ]
