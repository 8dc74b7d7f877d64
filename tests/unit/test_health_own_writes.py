"""A reporter's own report does not make it read the status shard's rows to repeat its
other objects' statuses (no Spark).

A repeated report writes nothing while the object's stored row is still this reporter's:
one consensus read while the status shard's upper is where the reporter knew it. Its
own append of another object's status moved that upper on, and the next repeat of every
other object read the shard's rows (a snapshot: its parts' bytes) to tell whether
another reporter wrote meanwhile; an append that landed right at the upper it knew
tells it that no one did.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from timeshard.location import Location
from timeshard.location.memory import MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient
from timeshard.persist.fetch import UnleasedReader
from timeshard.storage.health import Health, latest_health

OBJECTS = ("a", "b", "c")


def counting(client: PersistClient, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count consensus head reads and snapshots of a shard from now on, made by this thread
    (the reports'): a lease's heartbeat reads consensus too, from a thread of its own, at
    times a loaded machine moves (a full run counted one more, 4 == 3)."""
    counts = {"head": 0, "snapshot": 0}
    consensus: Any = client.location.consensus
    head = consensus.head
    reporting = threading.current_thread()

    def counted_head(key: str) -> Any:
        if threading.current_thread() is reporting:
            counts["head"] += 1
        return head(key)

    snapshot = UnleasedReader.snapshot

    def counted_snapshot(self: UnleasedReader, *args: Any, **kw: Any) -> Any:
        counts["snapshot"] += 1
        return snapshot(self, *args, **kw)

    monkeypatch.setattr(consensus, "head", counted_head)
    monkeypatch.setattr(UnleasedReader, "snapshot", counted_snapshot)
    return counts


def test_repeats_after_this_reporters_own_reports_read_no_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: a repeat after this reporter's own report of another object read the
    shard's rows (a snapshot of its parts, and one more head read)."""
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    health = Health(client)
    for obj in OBJECTS:
        health.report(obj, "running")
    health.report("a", "running")  # the reader is open
    counts = counting(client, monkeypatch)
    for obj in OBJECTS:
        health.report(obj, "running")
    assert counts == {"head": 3, "snapshot": 0}  # one read per object, as in a steady state

    health.report("b", "stalled", "boom")  # a change, then repeats again
    for key in counts:
        counts[key] = 0
    for obj in OBJECTS:
        health.report(obj, "stalled" if obj == "b" else "running", "boom" if obj == "b" else None)
    assert counts == {"head": 3, "snapshot": 0}
    health.close()


def test_another_reporters_row_is_still_overwritten_after_an_own_report() -> None:
    """The rule above holds only for an append right at the upper this reporter knew: a
    row another reporter wrote before it is still found, and overwritten."""
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    mine, other = Health(client), Health(client)
    mine.report("a", "running")
    other.report("a", "stalled", "it exited")
    mine.report("b", "running")  # lands after the other's row
    mine.report("a", "running")
    assert latest_health(client)["a"]["status"] == "running"
    mine.close()
    other.close()
