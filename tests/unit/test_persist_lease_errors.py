"""A lost lease is LeaseExpired naming the handle that lost it, and what to do.

* A batch whose staging writer expired cannot be appended (GC may have
  deleted its parts): the error names that writer and says to stage the
  batch again; the appending handle is alive and stays usable. It told the
  appender to open a new write handle, which does not help.
* A leased reader whose lease another thread's state change removed between
  its heartbeat and its read of the state raises LeaseExpired, not KeyError.
  The other thread is played deterministically: the reader's machine, right
  after the heartbeat's compare-and-set, sees a newer head without the reader
  (as the background heartbeat's or a listen's fetch makes it see).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from tests.unit.test_persist_handles import SCHEMA, Clock

from timeshard import Frontier, LeaseExpired
from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import Appended, PersistClient, PersistConfig
from timeshard.persist._internal import transitions as tr
from timeshard.persist._internal.machine import Machine


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


def expired_after_next_apply(machine: Machine, reader_id: str) -> None:
    """Right after ``machine``'s next apply commits, another handle expires ``reader_id``
    and ``machine`` sees the newer head (another thread's fetch on it)."""
    real: Callable[..., Any] = machine.apply

    def apply(transition: Any) -> Any:
        del machine.apply  # the real method again
        result = real(transition)
        other = Machine(machine.shard_id, machine.consensus, machine.config)
        other.apply(lambda s: tr.expire_leased_reader(s, reader_id))
        machine.fetch()
        return result

    machine.apply = apply  # type: ignore[method-assign]


@pytest.mark.parametrize("read", ["snapshot", "listen"])
def test_a_reader_expired_between_its_heartbeat_and_its_read_raises_lease_expired(
    read: str,
) -> None:
    clock = Clock()
    client = new_client(clock)
    writer, reader = client.open("s", SCHEMA)
    writer.append([(("a", 1), 0, 1)], 0, 1)
    clock.now += 400  # the read renews the lease first
    expired_after_next_apply(reader._machine, reader.reader_id)
    with pytest.raises(LeaseExpired, match=re.escape(reader.reader_id)):
        reader.snapshot(0) if read == "snapshot" else reader.listen(0)


def test_a_listen_expired_between_its_heartbeat_and_its_read_raises_lease_expired() -> None:
    clock = Clock()
    client = new_client(clock)
    writer, reader = client.open("s", SCHEMA)
    listen = reader.listen(0)
    writer.append([(("a", 1), 1, 1)], 0, 2)
    expired_after_next_apply(listen._machine, listen.reader_id)
    with pytest.raises(LeaseExpired, match=re.escape(listen.reader_id)):
        listen.poll()
