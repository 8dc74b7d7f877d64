"""Reading a shard: snapshots at a time, and listens from a time on.

A :class:`ReadHandle` is a leased reader. Its since holds back compaction: the
shard's since is the meet of every reader's since, so every time at or beyond
a handle's since stays readable exactly. Its lease must be renewed
(``heartbeat``, or any read) before it runs out, or the handle is expired.

* ``snapshot(as_of)``: the collection at ``as_of`` -- every update at a time
  ``<= as_of``, with its time advanced to ``as_of``, consolidated.
* ``change_times(lower, upper)`` / ``has_updates(lower, upper)``: the times
  in ``[lower, upper)`` with updates, or whether there is one, from the
  parts' metadata (see :mod:`timeshard.persist.fetch`); no consensus write,
  and no part read when the parts record their times.
* ``listen(as_of)``: every update at a time ``> as_of`` as it becomes
  definite, in order of batches, each run followed by a ``Progress`` frontier:
  every update emitted before a ``Progress(f)`` is at a time ``< f``, every
  update after it at a time ``>= f``.

Everything here runs on the driver; ``timeshard.spark.snapshot`` reads the
same parts with Spark tasks.

Invariants:

1. It is an error to read at ``as_of`` unless ``since <= as_of``
   (:class:`SinceError`).
2. A snapshot at ``as_of`` needs ``as_of < upper``; otherwise it raises
   :class:`InvalidUsage`, or with ``wait`` blocks until the upper passes it.
3. A listen holds its own lease with since at one less than its frontier, so
   compaction never merges an emitted update into a time it has yet to emit.
4. The parts a snapshot returned stay readable (GC keeps them) until the
   handle's next ``snapshot``, ``downgrade_since`` or ``heartbeat``, or until
   its lease runs out.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from timeshard.errors import InvalidUsage, LeaseExpired, SinceError
from timeshard.location.blob import Blob
from timeshard.persist._internal import transitions as tr
from timeshard.persist._internal.blobio import read_part
from timeshard.persist._internal.machine import Machine
from timeshard.persist._internal.parts import (
    TS,
    PartMeta,
    advance_times,
    consolidate,
    updates_schema,
)
from timeshard.persist._internal.state import LeasedReaderState, ShardState, decode_schema
from timeshard.persist.config import PersistConfig
from timeshard.persist.fetch import change_times, has_updates, parts_at
from timeshard.persist.heartbeat import Heartbeats
from timeshard.progress import Frontier, Timestamp, check_timestamp, frontier


@dataclass(frozen=True, slots=True)
class Progress:
    """Every update at a time before ``frontier`` has been emitted."""

    frontier: Frontier


@dataclass(frozen=True, slots=True)
class Updates:
    """Updates (a part-schema table) at times in ``[lower, upper)``."""

    table: pa.Table
    lower: Frontier
    upper: Frontier


ListenEvent = Updates | Progress


class _LeasedReader:
    """The lease of a registered reader: renewal (background) and expiry."""

    _machine: Machine
    _config: PersistConfig
    _heartbeats: Heartbeats | None
    _last_heartbeat: int
    reader_id: str
    lease_lost: bool

    def renew_lease(self) -> None:
        """Renew the lease keeping the held state (the background heartbeat)."""
        now = self._config.now_ms()
        self._machine.apply(
            lambda s: tr.heartbeat_leased_reader(s, self.reader_id, now, False), fetch_first=True
        )
        self._last_heartbeat = now

    def last_renewal_ms(self) -> int:
        return self._last_heartbeat

    def _registered(self, state: ShardState) -> LeasedReaderState:
        """This reader in ``state``; LeaseExpired if it is gone.

        ``state`` is the machine's latest, which another thread's use of the
        machine (the background heartbeat, a fetch) may have moved past the
        state this reader's own last change committed: the reader may be
        gone from it even though that change found it registered.
        """
        reader = state.leased_readers.get(self.reader_id)
        if reader is None:
            raise LeaseExpired(
                f"reader {self.reader_id!r} of shard {state.shard_id!r} is not registered: "
                "its lease expired or it was expired; open a new read handle"
            )
        return reader

    def expire(self) -> None:
        """Deregister: this reader no longer holds back since or GC."""
        if self._heartbeats is not None:
            self._heartbeats.unregister(self)
        self._machine.apply(lambda s: tr.expire_leased_reader(s, self.reader_id))


class ReadHandle(_LeasedReader):
    """A leased reader of one shard. Runs on the driver."""

    def __init__(
        self,
        machine: Machine,
        blob: Blob,
        reader_id: str,
        config: PersistConfig,
        heartbeats: Heartbeats | None = None,
    ) -> None:
        self._machine = machine
        self._blob = blob
        self.reader_id = reader_id
        self._config = config
        self.schema: pa.Schema = decode_schema(machine.state.schema)
        self._last_heartbeat = config.now_ms()
        #: Set when the lease ran out: the handle is gone and must be opened anew.
        self.lease_lost = False
        self._heartbeats = heartbeats
        if heartbeats is not None:
            heartbeats.register(self)

    @property
    def shard_id(self) -> str:
        return self._machine.shard_id

    @property
    def blob(self) -> Blob:
        """The blob this shard's parts live in."""
        return self._blob

    @property
    def since(self) -> Frontier:
        """This reader's since, as last seen."""
        reader = self._machine.state.leased_readers.get(self.reader_id)
        return reader.since if reader is not None else self._machine.state.since

    def fetch_recent_upper(self) -> Frontier:
        return self._machine.fetch().upper

    def fetch_recent_state(self) -> ShardState:
        """The shard's state as consensus has it now (holds nothing against GC)."""
        return self._machine.fetch()

    def snapshot(self, as_of: Timestamp, *, wait: bool = False) -> pa.Table:
        """The collection at ``as_of`` (pyarrow path), consolidated.

        Columns are the data columns plus ``_ts`` (= ``as_of``), ``_diff`` and
        ``_err``. A missing or corrupt part raises PartError.
        """
        parts = self.snapshot_parts(as_of, wait=wait)
        tables = [
            advance_times(read_part(self._blob, p, self.schema, self._config), as_of) for p in parts
        ]
        if not tables:
            return updates_schema(self.schema).empty_table()
        return consolidate(pa.concat_tables(tables))

    def snapshot_parts(self, as_of: Timestamp, *, wait: bool = False) -> list[PartMeta]:
        """The parts whose updates make up the snapshot at ``as_of``.

        Holds the state they come from against GC, so they stay readable for
        the reader's lease.
        """
        check_timestamp(as_of, "as_of")
        state = self._hold_state()
        reader = self._registered(state)
        if not reader.since.less_equal(as_of) or not state.since.less_equal(as_of):
            since = reader.since.join(state.since)
            raise SinceError(as_of, since, shard_id=self.shard_id, upper=state.upper)
        if state.upper.less_equal(as_of):
            if not wait:
                raise InvalidUsage(
                    f"as_of {as_of} is not before the upper {state.upper} of shard "
                    f"{self.shard_id!r}; pass wait=True to wait for it"
                )
            self._wait_for_upper_past(as_of)
            return self.snapshot_parts(as_of)
        return parts_at(state, as_of)

    def change_times(self, lower: Timestamp, upper: Timestamp) -> list[Timestamp]:
        """The distinct times in ``[lower, upper)`` at which the shard has updates.

        Reads the head state without holding it (no consensus write); see
        :func:`timeshard.persist.fetch.change_times`.
        """
        return change_times(self._machine, self._blob, self._config, lower, upper)

    def has_updates(self, lower: Timestamp, upper: Timestamp) -> bool:
        """Whether the shard has an update at a time in ``[lower, upper)``.

        Reads the head state without holding it (no consensus write); see
        :func:`timeshard.persist.fetch.has_updates`.
        """
        return has_updates(self._machine, self._blob, self._config, lower, upper)

    def listen(self, as_of: Timestamp) -> Listen:
        """Every update at a time ``> as_of``, as it becomes definite."""
        check_timestamp(as_of, "as_of")
        state = self._hold_state()
        since = self._registered(state).since.join(state.since)
        if not since.less_equal(as_of):
            raise SinceError(as_of, since, shard_id=self.shard_id, upper=state.upper)
        child_id = f"r{uuid.uuid4().hex}"
        now = self._config.now_ms()
        self._machine.apply(
            lambda s: tr.register_leased_reader(s, child_id, now, self._config.reader_lease_ms)
        )
        return Listen(
            self._machine,
            self._blob,
            child_id,
            self._config,
            self.schema,
            as_of,
            self._heartbeats,
        )

    def downgrade_since(self, new_since: Frontier | Timestamp | None) -> Frontier:
        """Let compaction advance times up to ``new_since``; return the shard since."""
        target = frontier(new_since)
        now = self._config.now_ms()
        since = self._machine.apply(
            lambda s: tr.downgrade_since(s, self.reader_id, target, now), fetch_first=True
        )
        self._last_heartbeat = now
        assert isinstance(since, Frontier), since
        return since

    def heartbeat(self) -> None:
        """Renew the lease and release older states to GC.

        Raises LeaseExpired if the lease already ran out.
        """
        now = self._config.now_ms()
        self._machine.apply(lambda s: tr.heartbeat_leased_reader(s, self.reader_id, now, True))
        self._last_heartbeat = now

    def _hold_state(self) -> ShardState:
        """Fetch the head and make sure this reader holds it against GC.

        A reader holding an older state holds this one too (GC keeps every
        version from the least seqno a reader holds on), so its hold moves up
        only once it lags ``gc_interval_versions`` behind, or its lease is a
        quarter gone: not at every read (a compare-and-set each) while the
        shard's writer appends.
        """
        state = self._machine.fetch()
        reader = state.leased_readers.get(self.reader_id)
        now = self._config.now_ms()
        stale = now - self._last_heartbeat > self._config.reader_lease_ms // 4
        lagging = reader is not None and (
            state.seqno - reader.seqno >= max(self._config.gc_interval_versions, 1)
        )
        if reader is None or lagging or stale:
            self._machine.apply(lambda s: tr.heartbeat_leased_reader(s, self.reader_id, now, True))
            self._last_heartbeat = now
            state = self._machine.state
        return state

    def _wait_for_upper_past(self, t: Timestamp) -> None:
        delay = 0.005
        while self._machine.fetch().upper.less_equal(t):
            time.sleep(delay)
            delay = min(delay * 2, 0.25)


class Listen(_LeasedReader):
    """An iterator of :data:`ListenEvent` from ``as_of`` on. Runs on the driver."""

    def __init__(
        self,
        machine: Machine,
        blob: Blob,
        reader_id: str,
        config: PersistConfig,
        schema: pa.Schema,
        as_of: Timestamp,
        heartbeats: Heartbeats | None = None,
    ) -> None:
        self._machine = machine
        self._blob = blob
        self.reader_id = reader_id
        self._config = config
        self._schema = schema
        self.frontier = Frontier(as_of + 1)
        self._last_heartbeat = config.now_ms()
        self.lease_lost = False
        self._heartbeats = heartbeats
        if heartbeats is not None:
            heartbeats.register(self)

    def poll(self) -> list[ListenEvent]:
        """The events available now, without blocking (possibly none)."""
        state = self._machine.fetch()
        if not self.frontier < state.upper:
            return []
        now = self._config.now_ms()
        self._machine.apply(lambda s: tr.heartbeat_leased_reader(s, self.reader_id, now, True))
        state = self._machine.state
        held = self._registered(state).since
        assert self.frontier.time is not None
        if not held.less_equal(max(self.frontier.time - 1, 0)):
            # A writer declared the times this listen still has to emit unreadable
            # (``since_floor``): it cannot go on correctly.
            raise SinceError(self.frontier.time, held, shard_id=state.shard_id, upper=state.upper)
        events: list[ListenEvent] = []
        for b in state.batches:
            if not self.frontier < b.desc.upper or not b.parts:
                continue
            # Invariant 3: a batch straddling the frontier was compacted below it.
            assert b.desc.lower >= self.frontier or b.desc.since < self.frontier, (
                b.desc,
                self.frontier,
            )
            tables = [
                read_part(self._blob, p, self._schema, self._config)
                for p in b.parts
                if p.ts_max is None or self.frontier.less_equal(p.ts_max)
            ]
            if not tables:
                continue
            table = pa.concat_tables(tables)
            assert self.frontier.time is not None
            table = table.filter(pc.greater_equal(table.column(TS), self.frontier.time))
            table = consolidate(table)
            if table.num_rows:
                events.append(Updates(table, self.frontier.join(b.desc.lower), b.desc.upper))
        self.frontier = state.upper
        events.append(Progress(state.upper))
        self._downgrade()
        return events

    def next(self, timeout_s: float | None = None) -> list[ListenEvent]:
        """Block until there is progress (or ``timeout_s`` passes); return the events."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        delay = 0.005
        while True:
            events = self.poll()
            if events or (deadline is not None and time.monotonic() >= deadline):
                return events
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def __iter__(self) -> Iterator[ListenEvent]:
        while not self.frontier.is_empty():
            yield from self.next()

    def _downgrade(self) -> None:
        if self.frontier.time is None:
            target = Frontier.empty()
        else:
            target = Frontier(max(self.frontier.time - 1, 0))
        now = self._config.now_ms()
        self._machine.apply(lambda s: tr.downgrade_since(s, self.reader_id, target, now))
        self._last_heartbeat = now


__all__ = ["Listen", "ListenEvent", "Progress", "ReadHandle", "Updates"]
