"""Reads that write nothing to consensus: for read-only replicas and tools.

An :class:`UnleasedReader` registers no lease, so it holds back neither since
nor GC. It reads the head state and the parts it references; if a part has
meanwhile been compacted away and collected, it reads the new head and tries
again. A part that is missing or corrupt in the head state itself is reported
(PartError); it is never skipped.

Runs on the driver.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from timeshard.errors import InvalidUsage, PartError, SinceError
from timeshard.location.blob import Blob
from timeshard.persist._internal.blobio import read_part, retry_external
from timeshard.persist._internal.machine import Machine
from timeshard.persist._internal.parts import (
    TS,
    PartMeta,
    advance_times,
    check_part_bytes,
    consolidate,
    updates_schema,
)
from timeshard.persist._internal.state import ShardState, decode_schema
from timeshard.persist.config import PersistConfig
from timeshard.progress import Frontier, Timestamp, check_timestamp

_RETRIES = 8


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
    """Snapshots and change times of one shard, with no consensus writes."""

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
        for attempt in range(_RETRIES):
            state = self._machine.fetch()
            check_readable(state, as_of)
            try:
                tables = [
                    advance_times(read_part(self.blob, p, self.schema, self._config), as_of)
                    for p in parts_at(state, as_of)
                ]
            except PartError:
                if attempt + 1 < _RETRIES and self._machine.fetch().seqno != state.seqno:
                    continue  # compacted and collected meanwhile: read the new head
                raise
            if not tables:
                return updates_schema(self.schema).empty_table()
            return consolidate(pa.concat_tables(tables))
        raise AssertionError("unreachable")

    def snapshot_parts(self, as_of: Timestamp) -> list[PartMeta]:
        """The parts of the snapshot at ``as_of`` in the head state (for Spark reads)."""
        state = self._machine.fetch()
        check_readable(state, as_of)
        return parts_at(state, as_of)

    def change_times(self, lower: Timestamp, upper: Timestamp) -> list[Timestamp]:
        """The distinct times in ``[lower, upper)`` at which the shard has updates."""
        for attempt in range(_RETRIES):
            state = self._machine.fetch()
            times: set[int] = set()
            try:
                for b in state.batches:
                    if b.desc.upper.less_equal(lower) or not b.desc.lower.less_than(upper):
                        continue
                    for p in b.parts:
                        if p.ts_max is not None and p.ts_max < lower:
                            continue
                        if p.ts_min is not None and p.ts_min >= upper:
                            continue
                        times |= self._part_times(p, lower, upper)
            except PartError:
                if attempt + 1 < _RETRIES and self._machine.fetch().seqno != state.seqno:
                    continue
                raise
            return sorted(times)
        raise AssertionError("unreachable")

    def _part_times(self, part: PartMeta, lower: int, upper: int) -> set[int]:
        data = retry_external(
            self._config, f"reading part {part.key!r}", lambda: self.blob.get(part.key)
        )
        data = check_part_bytes(part, data)
        try:
            table = pq.read_table(
                pa.BufferReader(data), columns=[TS], page_checksum_verification=True
            )
            table.validate(full=True)
            ts = table.column(TS)
        except Exception as e:
            raise PartError(part.key, f"corrupt: {type(e).__name__}: {str(e)[:300]}") from e
        mask = pc.and_(pc.greater_equal(ts, lower), pc.less(ts, upper))
        return {int(t) for t in pc.unique(ts.filter(mask)).to_pylist()}


__all__ = ["UnleasedReader", "check_readable", "parts_at"]
