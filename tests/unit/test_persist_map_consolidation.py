"""Persist's own consolidation (pyarrow, no Spark) groups maps as Spark does: by their
entries in any order, with -0.0 and 0.0 (and every NaN) one value inside them too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.persist._internal.parts import consolidate

MAP = pa.map_(pa.string(), pa.int64())


def snapshot_after(
    tmp_path: Path, schema: pa.Schema, batches: list[list[tuple[Any, int, int]]]
) -> list[dict[str, Any]]:
    """The shard's rows at its last time after appending ``batches`` one time each."""
    client = PersistClient(Location.embedded(tmp_path))
    writer = client.open_writer("s", schema)
    for t, updates in enumerate(batches):
        writer.append(updates, t, t + 1)
    reader = client.open_leased_reader("s")
    try:
        return list(reader.snapshot(len(batches) - 1).to_pylist())
    finally:
        reader.expire()
        writer.expire()


def test_a_retraction_of_a_map_with_its_entries_in_another_order_cancels(tmp_path: Path) -> None:
    schema = pa.schema([("m", MAP)])
    rows = snapshot_after(
        tmp_path,
        schema,
        [[(([("b", 2), ("a", 1)],), 0, 1)], [(([("a", 1), ("b", 2)],), 1, -1)]],
    )
    assert rows == []


@pytest.mark.parametrize(
    "nested",
    [
        pa.struct([("m", MAP), ("x", pa.int64())]),
        pa.list_(MAP),
        pa.map_(pa.string(), MAP),
    ],
    ids=["in-a-struct", "in-a-list", "in-a-map"],
)
def test_maps_nested_anywhere_group_by_their_entries(nested: pa.DataType) -> None:
    def value(entries: list[tuple[str, int]]) -> Any:
        if pa.types.is_struct(nested):
            return {"m": entries, "x": 1}
        if pa.types.is_list(nested):
            return [entries, entries]
        return [("k", entries)]

    table = pa.table(
        {
            "v": pa.array([value([("b", 2), ("a", 1)]), value([("a", 1), ("b", 2)])], nested),
            "_ts": pa.array([0, 0], pa.int64()),
            "_diff": pa.array([1, 1], pa.int64()),
            "_err": pa.array([None, None], pa.string()),
        }
    )
    out = consolidate(table)
    assert out.num_rows == 1 and out.column("_diff").to_pylist() == [2]


def test_signed_zeros_and_nans_in_map_values_are_one_value(tmp_path: Path) -> None:
    schema = pa.schema([("m", pa.map_(pa.string(), pa.float64()))])
    rows = snapshot_after(
        tmp_path,
        schema,
        [
            [
                (([("a", 0.0)],), 0, 1),
                (([("a", -0.0)],), 0, -1),
                (([("n", float("nan"))],), 0, 1),
                (([("n", -float("nan"))],), 0, 1),
            ]
        ],
    )
    assert len(rows) == 1 and rows[0]["_diff"] == 2


def test_maps_that_differ_stay_apart() -> None:
    table = pa.table(
        {
            "m": pa.array([[("a", 1)], [("a", 2)], [("a", 1), ("b", 1)], [], None], MAP),
            "_ts": pa.array([0] * 5, pa.int64()),
            "_diff": pa.array([1] * 5, pa.int64()),
            "_err": pa.array([None] * 5, pa.string()),
        }
    )
    assert consolidate(table).num_rows == 5
