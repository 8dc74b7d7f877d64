"""Compaction over failing consensus: a merge that surely did not land leaves no parts."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from timeshard import Determinate, Indeterminate
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


class CommitThenTimeout(MemoryConsensus):
    """Arm it with a hook: the next compare-and-set commits, runs the hook, then raises
    Indeterminate (its answer lost)."""

    hook: Any = None

    def compare_and_set(self, key: str, expected: Any, new: Any) -> Any:
        outcome = super().compare_and_set(key, expected, new)
        hook, self.hook = self.hook, None
        if hook is None:
            return outcome
        hook()
        raise Indeterminate("injected: the swap committed, its answer was lost")


def test_a_merge_swapped_in_then_merged_away_keeps_its_output_for_gc() -> None:
    """The swap's compare-and-set committed and reported a timeout; before the retry
    read the head, another compactor merged the output away. The retry found neither
    the inputs nor the output and deleted the output's parts, which the state after the
    swap references: a reader holding that state lost them (PartError)."""
    consensus = CommitThenTimeout()
    blob = MemoryBlob()
    config = PersistConfig(backoff_ms=0.0, max_backoff_ms=0.0, max_attempts=3)
    client = PersistClient(Location(blob, consensus), config)
    writer = client.open_writer("s", SCHEMA)
    for t, k in enumerate("abc"):
        writer.append([((k,), t, 1)], t, t + 1)
    other = client.open_writer("s", SCHEMA)
    swapped: list[str] = []

    def merged_away() -> None:
        state = client.state("s")
        swapped.extend(state.batches[0].keys())  # the merge of a and b, swapped in
        assert other.compact() == 1  # merges it with c

    consensus.hook = merged_away
    writer.compact()
    assert swapped
    assert set(swapped) <= {m.key for m in blob.list_keys("s/")}


class LostBeforeCommit(MemoryConsensus):
    """Arm it with a hook: the next compare-and-set runs the hook, then raises Indeterminate
    without committing (its request never reached the database)."""

    hook: Any = None

    def compare_and_set(self, key: str, expected: Any, new: Any) -> Any:
        hook, self.hook = self.hook, None
        if hook is None:
            return super().compare_and_set(key, expected, new)
        hook()
        raise Indeterminate("injected: a timeout, the request never reached the database")


def test_a_merge_whose_indeterminate_swap_never_landed_deletes_its_output() -> None:
    """The swap timed out without committing while another compactor merged the same
    inputs: no state ever named the output, and its writer lives on, so GC kept it for
    the writer's life; it is deleted, as a swap that surely failed deletes it."""
    consensus = LostBeforeCommit()
    blob = MemoryBlob()
    config = PersistConfig(backoff_ms=0.0, max_backoff_ms=0.0, max_attempts=3)
    client = PersistClient(Location(blob, consensus), config)
    writer = client.open_writer("s", SCHEMA, background_compaction=False)
    for t, k in enumerate("ab"):
        writer.append([((k,), t, 1)], t, t + 1)
    other = client.open_writer("s", SCHEMA, background_compaction=False)
    consensus.hook = other.compact
    assert writer.compact() == 0
    client.gc("s")  # the inputs, merged away
    referenced = set(client.state("s").referenced_keys())
    assert {m.key for m in blob.list_keys("s/")} == referenced
