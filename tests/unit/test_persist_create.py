"""Creating a shard: the first compare-and-set of its state, over failing consensus."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from timeshard import Determinate, Frontier, Indeterminate
from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient, PersistConfig

SCHEMA = pa.schema([("k", pa.int64())])


class Runaway(BaseException):
    """Raised by the test double when a loop went on far past any retry bound."""


class WritesFail(MemoryConsensus):
    """Reads work; every compare-and-set fails (a locked or full database), ``kind`` of it."""

    def __init__(self, kind: type[Exception], commit: bool = False) -> None:
        super().__init__()
        self.kind = kind
        self.commit = commit
        self.attempts = 0

    def compare_and_set(self, key: str, expected: Any, new: Any) -> Any:
        self.attempts += 1
        if self.attempts > 1000:
            raise Runaway(f"{self.attempts} compare-and-sets")
        if self.commit:
            super().compare_and_set(key, expected, new)
        raise self.kind("injected: the database is locked")


def test_creating_a_shard_on_consensus_that_refuses_every_write_gives_up_determinately() -> None:
    consensus = WritesFail(Determinate)
    config = PersistConfig(backoff_ms=0.0, max_backoff_ms=0.0, max_attempts=5)
    client = PersistClient(Location(MemoryBlob(), consensus), config)
    with pytest.raises(Determinate, match="'s'"):
        client.open_writer("s", SCHEMA)
    assert consensus.attempts == 5


def test_creating_a_shard_whose_write_timed_out_but_committed_goes_on() -> None:
    consensus = WritesFail(Indeterminate, commit=True)
    config = PersistConfig(backoff_ms=0.0, max_backoff_ms=0.0, max_attempts=5)
    client = PersistClient(Location(MemoryBlob(), consensus), config)
    reader = client.open_leased_reader("s", SCHEMA)
    assert reader.fetch_recent_upper() == Frontier(0)


def test_creating_a_shard_whose_writes_time_out_is_indeterminate_once_the_time_is_up() -> None:
    consensus = WritesFail(Indeterminate)
    config = PersistConfig(backoff_ms=0.0, max_backoff_ms=0.0, indeterminate_timeout_ms=0)
    client = PersistClient(Location(MemoryBlob(), consensus), config)
    with pytest.raises(Indeterminate, match="'s'"):
        client.open_writer("s", SCHEMA)
    assert consensus.attempts == 1
