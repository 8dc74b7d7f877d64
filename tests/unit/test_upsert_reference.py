"""The Python feedback upsert keeps the Spark upsert's semantics (:mod:`~.upsert_spark`).

* Key columns anywhere in the schema: a row read back from the shard and the
  same row of a command compare equal (a key after a value column made them
  unequal, and an update to the same row wrote a retraction and an insertion
  that cancel out).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient, PersistConfig
from timeshard.storage import FeedbackUpsert, UpsertCommand

# The Spark model test's schema: the key columns are not the first ones.
SCHEMA = pa.schema([("k1", pa.string()), ("v", pa.int64()), ("k2", pa.int64()), ("w", pa.string())])
KEYS = ["k1", "k2"]


def new_client() -> PersistClient:
    return PersistClient(Location(MemoryBlob(), MemoryConsensus()), PersistConfig(backoff_ms=0.0))


def recording(upsert: FeedbackUpsert, monkeypatch: pytest.MonkeyPatch) -> list[pa.Table]:
    """The tables ``upsert`` appends from now on."""
    written: list[pa.Table] = []
    append = upsert._writer.compare_and_append

    def recorded(updates: pa.Table, lower: int, upper: int) -> Any:
        written.append(updates)
        return append(updates, lower, upper)

    monkeypatch.setattr(upsert._writer, "compare_and_append", recorded)
    return written


@pytest.mark.parametrize(
    ("schema", "keys"),
    [
        (pa.schema([("v", pa.int64()), ("k", pa.string())]), ["k"]),
        (SCHEMA, KEYS),
    ],
)
def test_an_unchanged_row_writes_nothing_wherever_the_key_columns_are(
    schema: pa.Schema, keys: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    values = [n for n in schema.names if n not in keys]
    key = ("a",) if len(keys) == 1 else ("a", 1)
    value = (1,) if len(values) == 1 else (1, "x")
    upsert = FeedbackUpsert(new_client(), "out", schema, keys)
    upsert.apply([UpsertCommand(key, value, 0, (0,))], 1)
    written = recording(upsert, monkeypatch)
    upsert.apply([UpsertCommand(key, value, 1, (1,))], 2)
    assert [t.to_pylist() for t in written] == [[]]
