"""Choosing the time to read shards at (``persist.as_of``)."""

from __future__ import annotations

import pyarrow as pa

from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient, PersistConfig
from timeshard.persist.as_of import common_as_of

SCHEMA = pa.schema([("k", pa.string())])


def test_a_closed_shard_with_older_history_is_read_at_its_last_time() -> None:
    """A dropped object's shard keeps the since of its last hold (RETAIN HISTORY, say):
    without AS OF it is read with every update, not as it was at that since."""
    config = PersistConfig(backoff_ms=0.0, heartbeat_interval_ms=0)
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()), config)
    writer = client.open_writer("s", SCHEMA)
    writer.append([(("a",), 0, 1)], 0, 1)
    writer.append([(("b",), 5, 1)], 1, 6)
    retain = client.open_critical_since("s", "retain", "5", SCHEMA)
    retain.downgrade_since(0)
    writer.expire()
    client.close_shard("s")
    client.drop_critical_since("s", "retain")
    reader = client.open_leased_reader("s")
    as_of = common_as_of({"s": reader}, None)
    assert as_of is not None
    assert sorted(r["k"] for r in reader.snapshot(as_of).to_pylist()) == ["a", "b"]
