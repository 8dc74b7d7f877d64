"""A lost lease is LeaseExpired naming the handle that lost it, and what to do.

* A batch whose staging writer expired cannot be appended (GC may have
  deleted its parts): the error names that writer and says to stage the
  batch again; the appending handle is alive and stays usable. It told the
  appender to open a new write handle, which does not help.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from timeshard import Frontier, LeaseExpired
from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import Appended, PersistClient, PersistConfig

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])


class Clock:
    def __init__(self) -> None:
        self.now = 10_000

    def __call__(self) -> int:
        return self.now


def new_client(clock: Clock) -> PersistClient:
    config = PersistConfig(clock=clock, backoff_ms=0.0, reader_lease_ms=1000, writer_lease_ms=1000)
    return PersistClient(Location(MemoryBlob(), MemoryConsensus()), config)


def test_a_batch_whose_stager_expired_names_the_stager_not_the_appender() -> None:
    clock = Clock()
    client = new_client(clock)
    stager = client.open_writer("s", SCHEMA, writer_id="stager")
    batch = stager.batch([(("a", 1), 0, 1)], 0, 1)
    clock.now += 5000
    appender = client.open_writer("s", SCHEMA, writer_id="appender")
    client.gc("s")  # expires the stager, deletes its staged part
    with pytest.raises(LeaseExpired) as raised:
        appender.compare_and_append_batch([batch], 0, 1)
    said = str(raised.value)
    assert stager.writer_id in said and "stage" in said, said
    assert "open a new write handle" not in said, said
    assert batch.status == "staged" and client.state("s").upper == Frontier(0)
    # The appender is alive: staged again by a live writer, the updates append.
    again = appender.batch([(("a", 1), 0, 1)], 0, 1)
    assert isinstance(appender.compare_and_append_batch([again], 0, 1), Appended)
