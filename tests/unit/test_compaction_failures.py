"""Compaction over failing consensus: a merge that surely did not land leaves no parts."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from timeshard import Determinate
from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient, PersistConfig

SCHEMA = pa.schema([("k", pa.string())])


class RefusingConsensus(MemoryConsensus):
    refuse = False

    def compare_and_set(self, key: str, expected: Any, new: Any) -> Any:
        if self.refuse:
            raise Determinate("injected: the database is locked")
        return super().compare_and_set(key, expected, new)


def test_a_merge_whose_swap_surely_failed_deletes_its_output() -> None:
    """The compactor's writer lives as long as its process: left behind, the output
    parts of every failed merge would stay in blob until then (GC keeps a live
    writer's unreferenced parts)."""
    consensus = RefusingConsensus()
    blob = MemoryBlob()
    config = PersistConfig(backoff_ms=0.0, max_backoff_ms=0.0, max_attempts=3)
    client = PersistClient(Location(blob, consensus), config)
    writer = client.open_writer("s", SCHEMA)
    writer.append([(("a",), 0, 1)], 0, 1)
    writer.append([(("b",), 1, 1)], 1, 2)
    before = {m.key for m in blob.list_keys("s/")}
    consensus.refuse = True
    with pytest.raises(Determinate):
        writer.compact()
    consensus.refuse = False
    assert {m.key for m in blob.list_keys("s/")} == before
