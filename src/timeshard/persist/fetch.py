"""Reads that write nothing to consensus: for read-only replicas and tools.

An :class:`UnleasedReader` registers no lease, so it holds back neither since
nor GC. It reads the head state and the parts it references; if a part has
meanwhile been compacted away and collected, it reads the new head and tries
again. A part that is missing or corrupt in the head state itself is reported
(PartError); it is never skipped.

Change times. ``change_times(lower, upper)`` and ``has_updates(lower, upper)``
answer from the parts' metadata (their time bounds and recorded times, see
:class:`~timeshard.persist._internal.parts.PartMeta`): when every part they
need has its times recorded, they read no part. Only a part whose metadata
cannot tell (from an older state, or with more distinct times than
``MAX_PART_TIMES``) is fetched, and only its ``_ts`` column decoded. The
functions :func:`change_times` and :func:`has_updates` serve
:class:`~timeshard.persist.read.ReadHandle` too. "Updates" are the rows as
stored: updates at one time that cancel each other still count, and a time
below the shard's since may have been advanced to it by compaction.

Runs on the driver.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from timeshard.errors import InvalidUsage, PartError, SinceError
from timeshard.location.blob import Blob
from timeshard.persist._internal.blobio import read_part, read_part_times
from timeshard.persist._internal.machine import Machine
from timeshard.persist._internal.parts import (
    PartMeta,
    advance_times,
    consolidate,
    updates_schema,
)
from timeshard.persist._internal.state import ShardState, decode_schema
from timeshard.persist.config import PersistConfig
from timeshard.progress import Frontier, Timestamp, check_timestamp

_RETRIES = 8
R = TypeVar("R")


def parts_at(state: ShardState, as_of: Timestamp) -> list[PartMeta]:
    """The parts of ``state`` holding updates at times ``<= as_of``."""
    return [
        p
        for b in state.batches
        if b.desc.lower.less_equal(as_of)
        for p in b.parts
        if p.ts_min is None or p.ts_min <= as_of
    ]


def check_readable(state: ShardState, as_of: Timestamp) -> None:
    """Raise unless ``since <= as_of < upper``."""
    check_timestamp(as_of, "as_of")
    if not state.since.less_equal(as_of):
        raise SinceError(as_of, state.since, shard_id=state.shard_id, upper=state.upper)
    if state.upper.less_equal(as_of):
        raise InvalidUsage(
            f"as_of {as_of} is not before the upper {state.upper} of shard {state.shard_id!r}"
        )


class UnleasedReader:
    """Snapshots, change times and updates of one shard, with no consensus writes."""

    def __init__(self, machine: Machine, blob: Blob, config: PersistConfig) -> None:
        self._machine = machine
        self.blob = blob
        self._config = config
        self.schema: pa.Schema = decode_schema(machine.state.schema)

    @property
    def shard_id(self) -> str:
        return self._machine.shard_id

    def state(self) -> ShardState:
        return self._machine.fetch()

    def upper(self) -> Frontier:
        return self._machine.fetch().upper

    def since(self) -> Frontier:
        return self._machine.fetch().since

    def snapshot(self, as_of: Timestamp) -> pa.Table:
        """The collection at ``as_of``, consolidated (pyarrow path)."""

        def read(state: ShardState) -> pa.Table:
            check_readable(state, as_of)
            tables = [
                advance_times(read_part(self.blob, p, self.schema, self._config), as_of)
                for p in parts_at(state, as_of)
            ]
            if not tables:
                return updates_schema(self.schema).empty_table()
            return consolidate(pa.concat_tables(tables))

        return _on_head(self._machine, read)

    def snapshot_parts(self, as_of: Timestamp) -> list[PartMeta]:
        """The parts of the snapshot at ``as_of`` in the head state (for Spark reads)."""
        state = self._machine.fetch()
        check_readable(state, as_of)
        return parts_at(state, as_of)

    def change_times(self, lower: Timestamp, upper: Timestamp) -> list[Timestamp]:
        """The distinct times in ``[lower, upper)`` at which the shard has updates (module doc)."""
        return change_times(self._machine, self.blob, self._config, lower, upper)

    def has_updates(self, lower: Timestamp, upper: Timestamp) -> bool:
        """Whether the shard has an update at a time in ``[lower, upper)`` (module doc)."""
        return has_updates(self._machine, self.blob, self._config, lower, upper)


def parts_in(state: ShardState, lower: Timestamp, upper: Timestamp) -> list[PartMeta]:
    """The parts of ``state`` that may hold updates at times in ``[lower, upper)``.

    Leaves out every part whose metadata shows it has none. A batch starting
    at or beyond ``upper`` has none: compaction only ever advances times.
    """
    return [
        p
        for b in state.batches
        if b.desc.lower.less_than(upper)
        for p in b.parts
        if p.has_update_in(lower, upper) is not False
    ]


def change_times(
    machine: Machine, blob: Blob, config: PersistConfig, lower: Timestamp, upper: Timestamp
) -> list[Timestamp]:
    """The distinct times in ``[lower, upper)`` at which the head state has updates.

    Reads a part's ``_ts`` only when its metadata cannot tell (module doc).
    """
    _check_interval(lower, upper)

    def read(state: ShardState) -> list[Timestamp]:
        times: set[int] = set()
        for part in parts_in(state, lower, upper):
            known = part.times_in(lower, upper)
            times.update(_read_times(blob, part, config, lower, upper) if known is None else known)
        return sorted(times)

    return _on_head(machine, read)


def has_updates(
    machine: Machine, blob: Blob, config: PersistConfig, lower: Timestamp, upper: Timestamp
) -> bool:
    """Whether the head state has an update at a time in ``[lower, upper)``.

    Answers from metadata when any part settles it; reads the ``_ts`` of the
    parts whose metadata cannot tell only when none does (module doc).
    """
    _check_interval(lower, upper)

    def read(state: ShardState) -> bool:
        parts = parts_in(state, lower, upper)
        if any(p.has_update_in(lower, upper) for p in parts):
            return True
        return any(_read_times(blob, p, config, lower, upper) for p in parts)

    return _on_head(machine, read)


def _check_interval(lower: Timestamp, upper: Timestamp) -> None:
    """Raise InvalidUsage unless both are timestamps; ``lower >= upper`` is an empty interval."""
    check_timestamp(lower, "lower")
    check_timestamp(upper, "upper")


def _read_times(
    blob: Blob, part: PartMeta, config: PersistConfig, lower: int, upper: int
) -> set[int]:
    ts = read_part_times(blob, part, config)
    mask = pc.and_(pc.greater_equal(ts, lower), pc.less(ts, upper))
    return {int(t) for t in pc.unique(ts.filter(mask)).to_pylist()}


def _on_head(machine: Machine, read: Callable[[ShardState], R]) -> R:
    """``read(head state)``; again on the new head if a part it read failed because it
    was compacted away and collected meanwhile. A part that fails in the head is
    reported (PartError)."""
    for attempt in range(_RETRIES):
        state = machine.fetch()
        try:
            return read(state)
        except PartError:
            if attempt + 1 < _RETRIES and machine.fetch().seqno != state.seqno:
                continue
            raise
    raise AssertionError("unreachable")


__all__ = [
    "UnleasedReader",
    "change_times",
    "check_readable",
    "has_updates",
    "parts_at",
    "parts_in",
]
