"""The Python feedback upsert compares keys and rows as Spark does: every NaN is one value,
-0.0 is 0.0, at any depth of structs and lists.

Arrow and Python keep them apart (``nan != nan``; ``pc.is_in`` compares bits), so a key's
previous row was not found and the key gained a second row, where the Spark upsert
(:mod:`timeshard.storage.upsert_spark`) keeps one row per key.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient
from timeshard.storage import FeedbackUpsert, UpsertCommand

NAN = float("nan")


def applied(schema: pa.Schema, keys: list[Any], values: list[Any]) -> list[dict[str, Any]]:
    """The output at the last time after one command per time: ``keys[t]``, ``values[t]``."""
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    hold = client.open_leased_reader("out", schema)
    upsert = FeedbackUpsert(client, "out", schema, ["k"])
    for t, (key, value) in enumerate(zip(keys, values, strict=True)):
        upsert.apply([UpsertCommand((key,), (value,), t, (t,))], t + 1)
    rows: list[dict[str, Any]] = hold.snapshot(len(keys) - 1).to_pylist()
    return rows


@pytest.mark.parametrize(
    ("key_type", "first", "second"),
    [
        (pa.float64(), float("nan"), float("nan")),
        (pa.float64(), 0.0, -0.0),
        (pa.float32(), -0.0, 0.0),
        (pa.struct([("x", pa.float64())]), {"x": float("nan")}, {"x": float("nan")}),
        (pa.struct([("x", pa.float64())]), {"x": 0.0}, {"x": -0.0}),
        (pa.list_(pa.float64()), [float("nan"), 0.0], [float("nan"), -0.0]),
    ],
)
def test_a_float_key_keeps_one_row(key_type: pa.DataType, first: Any, second: Any) -> None:
    schema = pa.schema([("k", key_type), ("v", pa.int64())])
    rows = applied(schema, [first, second, second], [1, 2, 3])
    assert [(r["v"], r["_diff"]) for r in rows] == [(3, 1)], rows


def test_an_unchanged_nan_value_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A NaN value written again is no change: no retraction and insertion of it."""
    schema = pa.schema([("k", pa.string()), ("v", pa.float64())])
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    upsert = FeedbackUpsert(client, "out", schema, ["k"])
    upsert.apply([UpsertCommand(("a",), (float("nan"),), 0, (0,))], 1)
    written: list[pa.Table] = []
    append = upsert._writer.compare_and_append

    def recorded(updates: pa.Table, lower: int, upper: int) -> Any:
        written.append(updates)
        return append(updates, lower, upper)

    monkeypatch.setattr(upsert._writer, "compare_and_append", recorded)
    upsert.apply([UpsertCommand(("a",), (float("nan"),), 1, (1,))], 2)
    assert [t.num_rows for t in written] == [0], [t.to_pylist() for t in written]


@pytest.mark.parametrize(("key_type", "key"), [(pa.string(), "a"), (pa.float64(), NAN)])
def test_one_nan_command_twice_in_an_apply_is_no_conflict(key_type: pa.DataType, key: Any) -> None:
    """The same record delivered twice (two NaN objects) is one command, not two different
    commands at one position, nor two keys."""
    schema = pa.schema([("k", key_type), ("v", pa.float64())])
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    upsert = FeedbackUpsert(client, "out", schema, ["k"])
    twice = [UpsertCommand((key,), (float("nan"),), 0, (7,)) for _ in range(2)]
    upsert.apply(twice, 1)
    rows = client.open_leased_reader("out", schema).snapshot(0).to_pylist()
    assert len(rows) == 1 and rows[0]["_diff"] == 1, rows
