"""The self-correcting materialized-view sink: mint, write, append.

```
            desired frontier ─┐        ┌── persist upper (upper watch)
                              v        v
   desired ──────────>  [mint] ── description (lower, upper) ──┐
   (view over inputs)                                           v
        │                                                    [write] ── staged batch ──> [append]
        └─ desired snapshots at change times ─────────────────>  ^                          │
                                                                 │   compare_and_append ────┘
   persist (the view's own shard, read back) ── snapshot at lower-1
```

The sink makes a shard equal to a *desired* collection at every time at or
beyond its ``as_of``. It never trusts its own memory of what it wrote: every
batch it writes is ``desired - persist``, computed against the shard's
content just before the batch's lower bound. So several replicas of one view
can write into one shard, crash at any moment and restart, and the shard
still converges to desired: whoever wins a compare-and-append wrote the
difference it observed, and the losers discard their batches.

**mint** emits descriptions ``[lower, upper)``: ``lower`` is the shard upper
as a write handle observes it (not the read-back stream), ``upper`` the
desired frontier. It mints only when not read-only, when desired is ahead of
persist, and when persist moved past the previous ``lower``, so ``lower``s
strictly increase.

**write** holds desired snapshots at the change times not yet written (the
correction buffer: what the shard still has to become), evaluated as soon as
desired is definite, so this Spark work overlaps the previous commit. For a
description it computes, at each change time ``t`` in ``[lower, upper)``, the
updates that turn the previous content into desired at ``t``, starting from
the shard's own snapshot at ``lower - 1`` -- read back from the shard, unless
this sink's own append is what put the upper at ``lower`` (then that content
is the desired snapshot it last wrote, and no read is needed). Updates at times ``>= upper`` wait
for a later description. If the shard already holds desired, the batch is
empty and no part is written.

**append** appends the staged batch with ``compare_and_append_batch``. On
``UpperMismatch`` another replica won: the batch is deleted and the next tick
mints from the new upper. If the shard upper is below ``as_of`` (the view's
inputs compacted past it while no one held them), the batch carries desired
at ``as_of`` and raises the shard's since to ``as_of`` in the same append, so
no time before ``as_of`` -- whose content no query produced -- stays readable.

Holds. Once writing, the sink holds each input durably (a critical since
handle ``view.<name>``, see :mod:`timeshard.persist.holds`) at its upper - 1,
the time it reads its inputs at after a restart, never later; its own shard
keeps ``upper - 1`` readable through the deploy handle, or further back with
``retain_history_ms``.

Faults. A step never stops the sink for good: any failure (storage, Spark,
a lost lease) is recorded in ``last_error``, everything in memory that may
be stale is dropped (buffer, the last written snapshot, the minted lower),
handles whose lease ran out are opened anew, and the next step starts again
from persist. Only query errors that follow from the data (SQLSTATE class
22 and a few others, see :func:`timeshard.compute.view.is_data_error`)
become err rows.

Read-only mode mints nothing and writes nothing to consensus (not even a
registration); it keeps the buffer pruned to times beyond the shard upper and
capped in size. ``promote`` registers the handles, fences older deploy
generations through the critical since handle ``deploy`` (opaque token = the
generation) and starts writing. Every append is conditional on that token in
its own compare-and-set (``fence``): a generation cannot append once a newer
one took over, even if the takeover lands just before its append. Promoting
is refused once the view's shard is closed (the view was dropped), also when
the close lands while it registers (a dropped view's holds it registered go; a
complete view's stay as they were), and once a drop marked the ``deploy`` hold
(:func:`mark_dropped`). A drop's mark also fences the writing generation, and a
read-only sink sees it in the state its upper watch reads (``dropped_seen``),
also on a shard still open (a drop cut short before its close).

I/O runs on an :class:`IoWorker`: one thread fed by one FIFO queue. Ordering
invariants, after seed 002's "channel ordering requirements":

1. mint: the upper watch is the only producer of persist-upper observations;
   the worker publishes the upper after each append, in append order, and the
   tick loop reads it before minting. Nothing else moves the observed upper.
2. write: the tick loop hands the worker one command per description that
   carries every correction computed for it; the worker stages the batch
   before it appends, so an append never sees a batch missing updates the
   tick loop already observed.
3. append: a description's append is issued only after its batch is staged,
   and descriptions are appended in the order they were minted; a command is
   never reordered behind a later one.
4. the worker touches only the writer and the batch it was handed; what the
   sink remembers of an append (the written snapshot, stats) is updated on the
   tick thread when it collects the command's result.

Everything here runs on the driver; Spark jobs run on the cluster.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa

from timeshard.compute.view import is_data_error
from timeshard.errors import Fenced, InvalidUsage, LeaseExpired, UpperMismatch
from timeshard.persist import (
    Appended,
    OpaqueMismatch,
    PersistClient,
    ReadHandle,
    ShardState,
    SinceHandle,
    WriteHandle,
    expire_all,
)
from timeshard.persist.fetch import UnleasedReader
from timeshard.persist.holds import (
    DurableHold,
    RetainedHistory,
    release_view_holds,
    view_hold_id,
)
from timeshard.persist.write import not_appended
from timeshard.progress import MAX_TIMESTAMP, Description, Frontier, Timestamp

log = logging.getLogger(__name__)

DEPLOY_READER = "deploy"
#: The ``deploy`` hold's token from the moment a drop of the view begins: no generation's
#: (theirs are digits), so it fences every generation, and it tells a dropped view's
#: closed shard from a complete one's, which keeps its generation (:func:`drop_view`).
DROPPED_OPAQUE = "dropped"


class Desired(Protocol):
    """The collection a sink must make its shard equal to."""

    def frontier(self) -> Frontier: ...

    def change_times(self, lower: Timestamp, upper: Timestamp) -> list[Timestamp]: ...

    def snapshot(self, t: Timestamp) -> Any: ...

    def error_snapshot(self, t: Timestamp, error: BaseException) -> Any: ...


@runtime_checkable
class IncrementalDesired(Desired, Protocol):
    """A desired collection that may also give its changes over an interval.

    ``delta(lower, upper)`` is desired's updates at times in ``[lower, upper)``
    (None: it does not change there), valid while ``incremental`` holds;
    ``prepare(lower)`` builds what the delta starting at ``lower`` reads;
    ``written()`` says that the last delta has been written (its write job may
    have filled state the delta keeps: see :mod:`timeshard.compute.aggregate`).
    """

    @property
    def incremental(self) -> bool: ...

    def delta(self, lower: Timestamp, upper: Timestamp) -> Any | None: ...

    def prepare(self, lower: Timestamp) -> None: ...

    def written(self) -> None: ...


@runtime_checkable
class LeasedDesired(Desired, Protocol):
    """A desired collection that reads its inputs through leases: ``lease_inputs()`` opens
    new ones (by input), for a reader on another thread than the ticks' (which the caller
    expires), and ``snapshot_through(t, leases)`` is ``snapshot(t)`` read through them."""

    def lease_inputs(self) -> dict[str, ReadHandle]: ...

    def snapshot_through(self, t: Timestamp, leases: Mapping[str, ReadHandle]) -> Any: ...


@dataclass
class SinkStats:
    """Counters a sink keeps; read them through ``MvSink.stats``."""

    ticks: int = 0
    minted: int = 0
    appended: int = 0
    mismatches: int = 0
    rows_written: int = 0
    parts_written: int = 0
    empty_appends: int = 0
    query_errors: int = 0
    failures: int = 0
    #: Batches written as desired's delta, and full checks run off the tick path
    #: (``checks``), those that found a difference (``heals``) and failed ones.
    deltas: int = 0
    checks: int = 0
    heals: int = 0
    check_failures: int = 0
    consensus_writes: int = 0
    last_tick_s: float = 0.0
    history: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class SinkFrontiers:
    """Where a sink is: desired frontier, the shard upper, and the lag between them."""

    as_of: Timestamp
    desired: Frontier
    persist: Frontier
    read_only: bool
    generation: int

    @property
    def lag_ms(self) -> int | None:
        if self.desired.time is None or self.persist.time is None:
            return None if self.persist.time is not None else 0
        return max(self.desired.time - self.persist.time, 0)


class Mint:
    """Emits batch descriptions; see the module docstring."""

    def __init__(self) -> None:
        self.last_lower: Frontier | None = None

    def mint(self, read_only: bool, desired: Frontier, persist: Frontier) -> Description | None:
        if read_only or not persist < desired:
            return None
        if self.last_lower is not None and not self.last_lower < persist:
            return None
        self.last_lower = persist
        return Description(persist, desired)

    def failed(self) -> None:
        """The last description was not appended by anyone: allow minting it again."""
        self.last_lower = None


class IoWorker:
    """One thread, one FIFO queue: commands run one at a time, in the order sent.

    A ``ThreadPoolExecutor`` with a single worker takes its work items from
    one FIFO queue, which is exactly the ordering the invariants need.
    """

    def __init__(self, name: str) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    def submit(self, command: Callable[[], Any]) -> Future[Any]:
        return self._pool.submit(command)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


class _DeltaFailed(Exception):
    """Planning desired's delta failed on the data (the message); nothing was written."""


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What the I/O worker did for one description (read on the tick thread)."""

    result: Appended | UpperMismatch | None
    upper: Frontier
    rows: int = 0
    parts: int = 0
    #: The delta's Spark job failed on the data (the message): nothing was appended.
    delta_failed: str | None = None
    #: A newer generation took the shard over: nothing was appended (the tick thread
    #: turns the sink read-only: the worker touches only the writer and the batch).
    fenced: bool = False


@dataclass(frozen=True, slots=True)
class _Inflight:
    """A description being appended, and what the sink learns if it lands."""

    desc: Description
    #: Desired at the batch's end as a snapshot, if the batch computed one.
    last: Any
    #: Whether the shard is desired at the batch's end once it lands.
    ends_desired: bool
    #: Whether the batch is desired's delta alone (it continues a chain).
    is_delta: bool


def release_view(client: PersistClient, view: str, inputs: Iterable[str]) -> None:
    """Release every durable hold of the view ``view``: its holds on ``inputs``, its
    retained history and its deploy reader (a dropped view's; idempotent)."""
    release_view_holds(client, view, inputs)
    RetainedHistory.configure(client, view, None)
    client.drop_critical_since(view, DEPLOY_READER)


def mark_dropped(client: PersistClient, view: str) -> None:
    """Record durably that the view ``view`` is being dropped: its ``deploy`` hold's token
    becomes :data:`DROPPED_OPAQUE` (the hold is registered with it if there is none).

    A drop marks the view before its shard closes, so that a drop cut short at any later
    point is a drop to whoever reads the shard's state (:func:`view_dropped`), and no
    generation is promoted in between. Idempotent: a view whose shard is closed and whose
    hold is gone (a drop that got past its release: run again) registers none again,
    and a hold released meanwhile (another drop of it) is registered again, marked."""
    if view_dropped(client.state(view)):
        return
    while True:
        deploy = client.open_critical_since(view, DEPLOY_READER, DROPPED_OPAQUE)
        current = deploy.opaque
        try:
            while current != DROPPED_OPAQUE:  # a generation promoting meanwhile moves it on
                result = deploy.compare_and_downgrade_since(
                    current, DROPPED_OPAQUE, Frontier.minimum()
                )
                current = result.current if isinstance(result, OpaqueMismatch) else DROPPED_OPAQUE
            return
        except Fenced:  # the hold is gone (another drop released it)
            if view_dropped(client.state(view)):
                return


def view_dropped(state: ShardState) -> bool:
    """Whether the state of a view's shard says the view was dropped: its ``deploy`` hold
    is marked (:func:`mark_dropped`), the shard open or closed, or the shard is closed and
    the hold is gone. A complete view (every input closed) has a closed shard too, whose
    hold keeps its generation.

    A marked hold on an open shard is a drop cut short between its mark and its close: no
    generation is promoted over the mark, so the view never runs again, and running the
    drop again finishes it."""
    deploy = state.critical_readers.get(DEPLOY_READER)
    if deploy is not None:
        return deploy.opaque == DROPPED_OPAQUE
    return state.upper.is_empty()


def drop_view(client: PersistClient, view: str, inputs: Iterable[str]) -> None:
    """Drop the view ``view`` from the location: mark it dropped, close its shard (no
    replica writes it again), then release its holds on ``inputs`` and its own. A drop cut
    short at any step is a drop to a standby (:func:`view_dropped`), and running it again
    finishes it. Idempotent."""
    mark_dropped(client, view)
    client.close_shard(view)
    release_view(client, view, inputs)


class MvSink:
    """Keeps the shard ``shard_id`` equal to ``desired`` at every time ``>= as_of``."""

    def __init__(
        self,
        client: PersistClient,
        shard_id: str,
        data_schema: pa.Schema,
        desired: Desired,
        engine: Any,
        as_of: Timestamp,
        *,
        read_only: bool = False,
        generation: int = 0,
        input_shards: tuple[str, ...] = (),
        background_io: bool = True,
        max_buffered_times: int = 64,
        stage: Callable[[WriteHandle, Any, Description], Any] | None = None,
        retain_history_ms: int | None = None,
        check_every_s: float | None = 300.0,
        hold_interval_s: float = 5.0,
    ) -> None:
        if generation < 0:
            raise InvalidUsage(f"generation must be non-negative, got {generation}")
        self.client = client
        self.shard_id = shard_id
        self.data_schema = data_schema
        self.desired = desired
        self.engine = engine
        self.as_of = as_of
        self.read_only = True
        self.generation = generation
        self.input_shards = input_shards
        self.max_buffered_times = max_buffered_times
        self.retain_history_ms = retain_history_ms
        #: How often an incremental sink writes one tick from snapshots (the full check).
        self.check_every_s = check_every_s
        #: How often the holds on the inputs and the shard move up (each is a CaS).
        self.hold_interval_s = hold_interval_s
        self._holds_moved_at: float | None = None
        self._hold_target: Frontier | None = None
        #: Where the last append left the deploy hold (it moves with each append).
        self._deploy_held: Timestamp | None = None
        self.stats = SinkStats()
        #: The last failure of a step (None once a step went through), for health.
        self.last_error: str | None = None
        self._stage = stage or (lambda w, updates, d: w.batch(updates, d.lower, d.upper))
        self._mint = Mint()
        self._buffer: dict[Timestamp, Any] = {}
        self._written: tuple[Frontier, Any] | None = None
        #: The shard upper after this sink's own append, when the shard's content just
        #: below it is known to be desired there: the next batch may be a delta.
        self._chain: Frontier | None = None
        #: Bumped whenever a chain of deltas starts anew: a check's finding is about its own.
        self._epoch = 0
        self._last_check = time.monotonic()
        #: The full check in flight: its future, and the chain's epoch.
        self._check: tuple[Future[Any], int] | None = None
        self._checker: IoWorker | None = None
        #: A delta failed on the data: the next batch is evaluated time by time.
        self._per_time = False
        self._error_times: set[Timestamp] = set()
        self._writer: WriteHandle | None = None
        self._deploy: SinceHandle | None = None
        self._input_holds: list[DurableHold] = []
        self._retain: RetainedHistory | None = None
        self._inflight: tuple[Future[_Outcome], _Inflight] | None = None
        self._io = IoWorker(f"mv-sink-io-{shard_id}") if background_io else None
        if shard_id not in client.list_shards():
            raise InvalidUsage(f"unknown shard id {shard_id!r}: create the view's shard first")
        self._readback: UnleasedReader = client.open_unleased_reader(shard_id)
        self._persist_upper = self._readback.upper()
        #: Whether the shard's state, as this sink last read it whole, says the view was
        #: dropped (:func:`view_dropped`).
        self._dropped_seen = False
        if not read_only:
            self.promote()

    # -- lifecycle ---------------------------------------------------------------------------

    def promote(self) -> None:
        """Leave read-only mode: register handles, fence older generations, start writing."""
        if not self.read_only:
            return
        self._refuse_if_closed()
        gen = str(self.generation).zfill(12)
        deploy = self.client.open_critical_since(self.shard_id, DEPLOY_READER, gen)
        current = deploy.current_opaque()
        self._refuse_if_dropped(current)
        if current > gen:
            raise Fenced(
                f"view shard {self.shard_id!r} belongs to generation {int(current)}; "
                f"generation {self.generation} cannot take over"
            )
        if current < gen:
            result = deploy.compare_and_downgrade_since(current, gen, Frontier.minimum())
            if isinstance(result, OpaqueMismatch):
                self._refuse_if_dropped(result.current)
                raise Fenced(
                    f"view shard {self.shard_id!r} was taken over by generation "
                    f"{int(result.current)} while generation {self.generation} "
                    "was promoting"
                )
        deploy.opaque = gen
        try:  # the view was dropped, or completed, while it registered the deploy hold
            self._refuse_if_closed()
        except InvalidUsage:
            self._release_handles(deploy, current, inputs_untouched=True)
            raise
        self._deploy = deploy
        self._deploy_held = None
        self._open_handles(retain=False)
        try:
            self._refuse_if_closed()  # ... or while it opened the other handles
        except InvalidUsage:
            self._release_handles(deploy, current, inputs_untouched=False)
            raise
        # Its RETAIN HISTORY replaces the view's only once the promotion stands: a refused
        # one (the view completed meanwhile) leaves the complete view's as it was.
        self._retain = RetainedHistory.configure(self.client, self.shard_id, self.retain_history_ms)
        self.read_only = False

    def _refuse_if_closed(self) -> None:
        """InvalidUsage if the view's shard is closed: no sink writes it again, and holds
        registered for one would never move (the view's inputs could not compact)."""
        if self._readback.upper().is_empty():
            raise InvalidUsage(
                f"view shard {self.shard_id!r} is closed (the view was dropped, or every "
                f"input closed and it is complete): generation {self.generation} cannot "
                "take it over"
            )

    def _refuse_if_dropped(self, deploy_opaque: str) -> None:
        """InvalidUsage if the ``deploy`` hold's token says a drop of the view began (its
        shard is about to close: :func:`mark_dropped`)."""
        if deploy_opaque == DROPPED_OPAQUE:
            raise InvalidUsage(
                f"view {self.shard_id!r} was dropped (its drop began): generation "
                f"{self.generation} cannot take it over"
            )

    def _release_handles(
        self, deploy: SinceHandle, previous: str, *, inputs_untouched: bool
    ) -> None:
        """Undo :meth:`promote` on a shard that closed while it registered; ``deploy`` is the
        ``deploy`` hold it took over from the token ``previous`` (its own if equal), and
        ``inputs_untouched`` says that it registered no hold on the inputs yet.

        A dropped view's: what it registered is released as :meth:`drop` would (no one
        else does once the view's drop has released its own). A complete view's (every
        input closed, and a generation's last append closed its shard) keeps its holds,
        which are the view's, and its ``deploy`` token goes back to ``previous``, the
        generation that completed it: released, it would take the view for dropped
        (:func:`view_dropped`)."""
        self._deploy = None
        with contextlib.suppress(Exception):
            expire_all([self._writer])
        self._writer = None
        self._input_holds = []
        self._retain = None
        if self._completed(previous, inputs_untouched=inputs_untouched):
            if previous != deploy.opaque:  # this promotion moved the token: it goes back
                with contextlib.suppress(Fenced):
                    deploy.compare_and_downgrade_since(deploy.opaque, previous, Frontier.minimum())
            return
        release_view_holds(self.client, self.shard_id, self.input_shards)
        RetainedHistory.configure(self.client, self.shard_id, None)
        self.client.drop_critical_since(self.shard_id, DEPLOY_READER)

    def _completed(self, previous: str, *, inputs_untouched: bool) -> bool:
        """Whether the view's closed shard is a complete view's, not a dropped one's, for
        :meth:`_release_handles`.

        Dropped: its ``deploy`` hold is marked or gone (:func:`view_dropped`); or its
        drop released the hold before :meth:`promote` registered it anew with this
        generation's token, unmarked. A drop releases the view's input holds before that
        hold, so with the token unchanged (``previous``) and no input hold of this
        promotion's yet, an input without its ``view.<name>`` hold tells that drop. Once
        the promotion registered its input holds the shard was still open, so a
        registration anew then was on an open shard, and a drop of it since marks it."""
        state = self.client.state(self.shard_id)
        if view_dropped(state):
            return False
        gen = str(self.generation).zfill(12)
        if not inputs_untouched or previous != gen:  # the hold was there: it moved from it
            return True
        hold = view_hold_id(self.shard_id)
        return all(hold in self.client.state(s).critical_readers for s in self.input_shards)

    def _open_handles(self, *, retain: bool = True) -> None:
        """The writer, the durable input holds and (``retain``) the retained history."""
        self._writer = self.client.open_writer(self.shard_id, background_compaction=True)
        hold = view_hold_id(self.shard_id)
        self._input_holds = [DurableHold(self.client, s, hold) for s in self.input_shards]
        if retain:
            self._retain = RetainedHistory.configure(
                self.client, self.shard_id, self.retain_history_ms
            )

    def inputs_since(self) -> Frontier:
        """The join of the sinces this sink holds on its inputs (minimum if it holds none)."""
        since = Frontier.minimum()
        for hold in self._input_holds:
            since = since.join(hold.since)
        return since

    def close(self) -> None:
        """Wait for in-flight I/O, stop the worker and expire the writer.

        The durable input holds stay (a stopped view still needs its inputs
        readable where it will resume); :meth:`drop` releases them.
        """
        with contextlib.suppress(Exception):
            self._collect_inflight()
        with contextlib.suppress(Exception):
            self._move_holds()
        if self._io is not None:
            self._io.close()
        if self._checker is not None:
            self._checker.close()
            self._checker = None
            self._diverged()
        self._forget()
        if self._writer is not None:
            expire_all([self._writer])
            self._writer = None

    def drop(self) -> None:
        """Close, then release every durable hold this view has (inputs, history).

        The holds are the view's, whichever sink opened them: a sink that never
        wrote (read-only, or started after the writer stopped) releases them too.
        """
        self.close()
        release_view(self.client, self.shard_id, self.input_shards)
        self._input_holds = []

    @property
    def persist_upper(self) -> Frontier:
        """The view shard's upper as this sink last observed it (no read)."""
        return self._persist_upper

    @property
    def dropped_seen(self) -> bool:
        """Whether this sink last saw the view dropped (:func:`view_dropped`; no read).

        A read-only sink's upper watch reads the shard's state whole (one read, as its
        upper alone was), so it sees a drop's mark on a shard still open; a writing sink
        sees the mark when it fences it (it then turns read-only)."""
        return self._dropped_seen

    def frontiers(self) -> SinkFrontiers:
        return SinkFrontiers(
            self.as_of,
            self.desired.frontier(),
            self._persist_upper,
            self.read_only,
            self.generation,
        )

    # -- one tick ----------------------------------------------------------------------------

    def step(self) -> Description | None:
        """One tick: buffer desired, maybe mint, write and (maybe in the background) append.

        A failure is recorded in ``last_error`` and recovered from (see the
        module docstring); it is not raised.
        """
        t0 = time.monotonic()
        self.stats.ticks += 1
        try:
            desc = self._step()
        except Exception as e:
            self._recover(e)
            desc = None
        self.stats.last_tick_s = time.monotonic() - t0
        return desc

    def _step(self) -> Description | None:
        if self._inflight is not None and self._inflight[0].done():
            self._collect_inflight()
        self._observe_upper()
        if self._inflight is None and self._diverged():
            self._resync()
        self._maybe_start_check()
        desired_upper = self.desired.frontier()
        if not self._delta_ready(self._persist_upper):
            self._fill_buffer(desired_upper)
        desc = None
        if self._inflight is None:
            if Frontier(self.as_of) < desired_upper:  # nothing to write before as_of
                desc = self._mint.mint(self.read_only, desired_upper, self._persist_upper)
            if desc is not None:
                self.stats.minted += 1
                self._write_and_append(desc)
        if self._inflight is None:
            self.last_error = None
        return desc

    @property
    def incremental(self) -> bool:
        """Whether desired offers deltas (the view is in the incremental class)."""
        return isinstance(self.desired, IncrementalDesired) and self.desired.incremental

    def _delta_ready(self, lower: Frontier) -> bool:
        """Whether the batch starting at ``lower`` may be desired's delta alone.

        It may when this sink's own last append ended at ``lower`` and left
        desired there, and no delta failed on the data since.
        """
        return self.incremental and not self._per_time and self._chain == lower

    # -- the full check, off the tick path ---------------------------------------------------

    def _maybe_start_check(self) -> None:
        """Every ``check_every_s``, compare desired with the shard at upper - 1 in the background.

        The check runs on its own thread (Spark pool ``check``) while ticks go
        on, and reads the shard and the inputs at its time through leased
        readers of its own, opened here while the holds are still at or before
        that time. The ticks' handles would not do: the ticks move their holds
        on (and other replicas theirs), and each read through a handle releases
        the parts its previous read listed, so the shard and the inputs would be
        compacted and collected under a check slower than the ticks. If desired
        and the shard differ there, the deltas are not to be trusted from then
        on (:meth:`_resync`).
        """
        if (
            self.check_every_s is None
            or self.read_only
            or not self.incremental
            or self._check is not None
            or self._inflight is not None
            or self._chain is None
            or self._chain != self._persist_upper
            or time.monotonic() - self._last_check < self.check_every_s
        ):
            return
        assert self._chain.time is not None
        t = self._chain.time - 1
        if t < self.as_of:
            return
        self._last_check = time.monotonic()
        inputs = self.desired.lease_inputs() if isinstance(self.desired, LeasedDesired) else None
        try:
            shard = self.client.open_leased_reader(self.shard_id)
        except BaseException:
            with contextlib.suppress(Exception):
                expire_all((inputs or {}).values())
            raise
        if self._checker is None:
            self._checker = IoWorker(f"mv-sink-check-{self.shard_id}")
        check = lambda: self._full_check(t, shard, inputs)  # noqa: E731
        self._check = (self._checker.submit(check), self._epoch)

    def _full_check(
        self, t: Timestamp, shard: ReadHandle, inputs: dict[str, ReadHandle] | None
    ) -> Any | None:
        """Desired minus the shard at ``t`` (checker thread), or None if they are equal:
        read through ``shard`` and ``inputs`` (the view's own leases if None), which it
        expires once it is done.

        A query failing on the data at ``t`` skips the check: the error
        snapshot is compared by the tick path, time by time.
        """
        spark = getattr(self.engine, "spark", None)
        if spark is not None:
            spark.sparkContext.setLocalProperty("spark.scheduler.pool", "check")
        try:
            if inputs is not None and isinstance(self.desired, LeasedDesired):
                desired = self.desired.snapshot_through(t, inputs)
            else:
                desired = self.desired.snapshot(t)
            content = self.engine.snapshot(shard, t)
            heal = self.engine.materialize(
                self.engine.diff_at(desired, content, t, self.data_schema)
            )
        except Exception as e:
            if is_data_error(e):
                return None
            raise
        finally:
            with contextlib.suppress(Exception):
                expire_all([shard, *(inputs or {}).values()])
        if self.engine.is_empty(heal):
            self.engine.release(heal)
            return None
        return heal

    def _diverged(self) -> bool:
        """Whether a finished check found the shard differing from desired on the current
        chain of deltas (its difference is dropped: :meth:`_resync` writes the heal)."""
        if self._check is None or not self._check[0].done():
            return False
        (future, epoch), self._check = self._check, None
        try:
            difference = future.result()
        except Exception as e:
            self.stats.check_failures += 1
            log.warning("sink %s: the full check failed (retried later): %s", self.shard_id, e)
            return False
        self.stats.checks += 1
        if difference is None:
            return False
        self.engine.release(difference)
        if epoch != self._epoch:  # the chain broke: the batch after it was written from snapshots
            return False
        self.stats.heals += 1
        log.warning("sink %s: the full check found the shard differing from desired", self.shard_id)
        return True

    def _resync(self) -> None:
        """The shard differs from desired: end the chain of deltas, and drop what they keep.

        The difference cannot simply be added to the next delta: it most
        likely comes from what the deltas keep (a GROUP BY's per-group state,
        an arrangement), and every delta after the check's time, computed from
        that, moved the shard further from desired in ways the difference at
        the check's time does not show. So the next batch is written as a
        restart's is: desired at its first time, from the inputs' snapshots,
        against the shard's own content there (the *heal*), and the deltas after
        it start from what is rebuilt from the inputs.
        """
        self._forget()
        forget = getattr(self.desired, "forget_arrangements", None)
        if forget is not None:
            forget()

    def run_until(self, frontier: Frontier, timeout_s: float = 300.0) -> None:
        """Step until the shard upper is at least ``frontier`` (or time runs out)."""
        deadline = time.monotonic() + timeout_s
        while self._persist_upper < frontier:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"sink {self.shard_id!r} at {self._persist_upper}, wanted {frontier}; "
                    f"last error: {self.last_error}"
                )
            if self.step() is None and self._inflight is None:
                time.sleep(0.05)
            appending = self._inflight is not None
            try:
                self._collect_inflight()
                self._observe_upper()  # an append just done ends the loop now, not a step later
            except Exception as e:
                self._recover(e)
            else:
                if appending:  # as a step after it would have
                    self.last_error = None

    def _recover(self, error: BaseException) -> None:
        """After a failure: forget what may be stale, reopen lost handles, go on next tick."""
        first_line = (str(error).splitlines() or [""])[0]
        self.last_error = f"{type(error).__name__}: {first_line[:500]}"
        log.warning("sink %s: step failed, retrying on the next tick: %s", self.shard_id, error)
        self.stats.failures += 1
        if self._inflight is not None:
            with contextlib.suppress(Exception):
                self._inflight[0].result()  # let the worker finish before anything reopens
            self._inflight = None
        self._mint.failed()
        self._forget()
        if isinstance(error, Fenced):
            self._fenced()
        elif not self.read_only and (isinstance(error, LeaseExpired) or self._lease_lost()):
            with contextlib.suppress(Exception):
                expire_all([self._writer])
            with contextlib.suppress(Exception):
                self._open_handles()
            reopen = getattr(self.desired, "reopen_leases", None)  # its reads' leases
            if reopen is not None:
                with contextlib.suppress(Exception):
                    reopen()

    def _lease_lost(self) -> bool:
        return self._writer is not None and self._writer.lease_lost

    def _forget(self) -> None:
        """Drop the buffer and the remembered last write (persist is read again)."""
        written, self._written = self._written, None
        for snap in self._buffer.values():
            self.engine.release(snap)
        if written is not None and not any(written[1] is b for b in self._buffer.values()):
            self.engine.release(written[1])
        self._buffer.clear()
        self._error_times.clear()
        self._chain = None
        self._epoch += 1

    # -- operators ---------------------------------------------------------------------------

    def _observe_upper(self) -> None:
        """The upper watch: the shard upper, after any in-flight append finished."""
        if self._inflight is not None:
            return
        if self._writer is None or self.read_only:
            state = self._readback.state()
            upper = state.upper
            self._dropped_seen = view_dropped(state)
        else:
            upper = self._writer.fetch_recent_upper()
        assert self._persist_upper <= upper, (self._persist_upper, upper)
        self._persist_upper = upper
        self._error_times = {t for t in self._error_times if upper.less_equal(t)}
        for t in [t for t in self._buffer if not upper.less_equal(t)]:
            snap = self._buffer.pop(t)
            if self._written is None or snap is not self._written[1]:
                self.engine.release(snap)
        self._check_fenced()

    def _check_fenced(self) -> None:
        if self._superseded():
            self._fenced()

    def _superseded(self) -> bool:
        """Whether a newer generation took the shard over (a read of consensus; no change)."""
        if self._deploy is None or self.read_only:
            return False
        current = self._deploy.current_opaque()
        if current == self._deploy.opaque:
            return False
        self._dropped_seen = current == DROPPED_OPAQUE
        log.warning(
            "sink %s: generation %s fenced by %s; now read-only",
            self.shard_id,
            self.generation,
            current,
        )
        return True

    def _fenced(self) -> None:
        """A newer generation took the shard over: read-only from now on. Its reads of the
        inputs no longer hold their history (it reads them unleased, like a replica that
        never wrote); the durable holds are the new generation's to move."""
        self.read_only = True
        release = getattr(self.desired, "release_leases", None)
        if release is not None:
            with contextlib.suppress(Exception):
                release()

    def _fill_buffer(self, desired_upper: Frontier) -> None:
        """Evaluate desired at the change times in [persist upper, desired upper).

        An incremental sink needs a snapshot at the first time only: the rest
        of the batch is a delta.
        """
        lower = max(self._persist_upper.time or 0, self.as_of)
        if self._persist_upper.is_empty() or not Frontier(lower) < desired_upper:
            return
        upper = self._end(lower, desired_upper.time)
        times = [lower]
        if not self.incremental or self._per_time:
            times += [t for t in self.desired.change_times(lower, upper) if t > lower]
        for t in times:
            if t not in self._buffer and len(self._buffer) < self.max_buffered_times:
                self._buffer[t] = self._evaluate(t)

    def _end(self, first: Timestamp, upper: Timestamp | None) -> Timestamp:
        """Where the updates of a batch from ``first`` to ``upper`` end: ``upper``, or with
        closed inputs (``None``) just past their last change time, after which desired
        stays as it is for ever."""
        if upper is not None:
            return upper
        return max(self.desired.change_times(first, MAX_TIMESTAMP), default=first) + 1

    def _evaluate(self, t: Timestamp) -> Any:
        """Desired at ``t``, evaluated now.

        A query error that follows from the data is the view's content at
        ``t`` (the error snapshot); anything else is a fault and is raised.
        """
        try:
            return self.engine.materialize(self.desired.snapshot(t))
        except Exception as e:
            if not is_data_error(e):
                raise
            self.stats.query_errors += 1
            self._error_times.add(t)
            return self.engine.materialize(self.desired.error_snapshot(t, e))

    def _corrections(self, desc: Description) -> tuple[Any | None, Any, bool]:
        """The updates that make the shard desired in ``desc``.

        Returns the updates (None: there are none, and no Spark job ran), desired
        at the batch's end when it is known as a snapshot (else None), and
        whether the shard is desired at the end by this batch (so that the next
        one may be a delta).

        Three ways, cheapest first: desired's delta alone (:meth:`_delta_ready`);
        desired at the first time against the shard's own content, then the
        delta for the rest (a restart, another replica's append, the full
        check); or desired at every change time (views outside the incremental
        class, and after a delta failed on the data). Below ``as_of`` nothing is
        known: the first update time is then ``as_of`` (and the append raises
        the since to it).
        """
        lower, upper = desc.lower.time, desc.upper.time
        assert lower is not None
        first = max(lower, self.as_of)
        end = self._end(first, upper)
        if self._delta_ready(desc.lower):
            return self._planned(lambda: self._incremental.delta(first, end)), None, True
        if self._written is not None and self._written[0] == desc.lower:
            previous = self._written[1]  # what this sink's own last append left there
        elif lower > 0:
            previous = self.engine.snapshot(self._readback, lower - 1)
        else:
            previous = self.engine.empty(self.data_schema)
        snap = self._snapshot_at(first)
        updates = [self.engine.diff_at(snap, previous, first, self.data_schema)]
        if self.incremental and not self._per_time and first not in self._error_times:
            if first + 1 < end:
                rest = self._planned(lambda: self._incremental.delta(first + 1, end))
            else:  # build what the next batch's delta reads (a GROUP BY's state) now
                rest = self._planned(lambda: self._incremental.prepare(end))
            if rest is not None:
                updates.append(rest)
            last = None if rest is not None else snap
            return self.engine.union(updates, self.data_schema), last, True
        previous = snap
        for t in [t for t in self.desired.change_times(first, end) if t > first]:
            snap = self._snapshot_at(t)
            updates.append(self.engine.diff_at(snap, previous, t, self.data_schema))
            previous = snap
        ends_desired = self.incremental and not any(first <= t < end for t in self._error_times)
        return self.engine.union(updates, self.data_schema), previous, ends_desired

    @property
    def _incremental(self) -> IncrementalDesired:
        desired = self.desired
        assert isinstance(desired, IncrementalDesired), desired
        return desired

    @staticmethod
    def _planned(plan: Callable[[], Any]) -> Any:
        """``plan()``, a step of planning desired's delta; a query error on the data there is
        :class:`_DeltaFailed`.

        Planning may run Spark jobs (a GROUP BY state's tick or rebuild), so
        the data can fail it before the write does.
        """
        try:
            return plan()
        except Exception as e:
            if is_data_error(e):
                raise _DeltaFailed(str(e)) from e
            raise

    def _snapshot_at(self, t: Timestamp) -> Any:
        snap = self._buffer.get(t)
        if snap is None:
            snap = self._buffer[t] = self._evaluate(t)
        return snap

    def _write_and_append(self, desc: Description) -> None:
        try:
            corrections, last, ends_desired = self._corrections(desc)
        except _DeltaFailed as e:
            self._go_time_by_time(str(e))
            return
        has_delta = last is None  # part of the batch is desired's delta
        writer = self._writer
        assert writer is not None and self._deploy is not None
        assert desc.lower.time is not None
        floor = self.as_of if desc.lower.time < self.as_of else None
        fence = (DEPLOY_READER, self._deploy.opaque)  # this generation's token
        # The deploy hold follows the append in its compare-and-set: the sink reads its
        # shard at upper - 1 after a restart (the same target as _move_holds').
        held = None if desc.upper.time is None else max(desc.upper.time - 1, 0)

        def command() -> _Outcome:
            if corrections is None:  # the view did not change: no part, no Spark job
                batches = []
            else:
                try:
                    batches = [self._stage(writer, corrections, desc)]
                except Exception as e:
                    if has_delta and is_data_error(e):
                        return _Outcome(None, writer.fetch_recent_upper(), delta_failed=str(e))
                    raise
                if has_delta:  # between ticks, not at the start of the next one
                    self._incremental.written()
            if self.read_only:
                for batch in batches:
                    batch.delete()
                return _Outcome(None, writer.fetch_recent_upper())
            try:  # appends only while the deploy token is this generation's, atomically
                result = writer.compare_and_append_batch(
                    batches,
                    desc.lower,
                    desc.upper,
                    since_floor=floor,
                    fence=fence,
                    fence_since=held,
                )
            except BaseException as e:
                if not_appended(e):  # else the batch may be in the shard: its parts stay
                    for batch in batches:
                        batch.delete()
                if isinstance(e, Fenced):
                    log.warning(
                        "sink %s: generation %s fenced: %s", self.shard_id, self.generation, e
                    )
                    return _Outcome(None, writer.fetch_recent_upper(), fenced=True)
                raise
            if isinstance(result, UpperMismatch):
                for batch in batches:
                    batch.delete()
            rows = sum(b.num_rows for b in batches)
            parts = sum(len(b.parts) for b in batches)
            return _Outcome(result, writer.fetch_recent_upper(), rows, parts)

        inflight = _Inflight(desc, last, ends_desired, is_delta=self._delta_ready(desc.lower))
        if self._io is None:
            self._inflight = (_done(command), inflight)
            self._collect_inflight()
        else:
            self._inflight = (self._io.submit(command), inflight)

    def _collect_inflight(self) -> None:
        """Take the in-flight append's outcome (waiting for it); raise what it raised."""
        inflight, self._inflight = self._inflight, None
        if inflight is None:
            return
        future, written = inflight
        desc = written.desc
        try:
            outcome = future.result()
        except BaseException:
            self._mint.failed()
            self._chain = None
            self._epoch += 1
            self._remember_written(None)
            raise
        if outcome.delta_failed is not None:
            self._go_time_by_time(outcome.delta_failed)
        elif outcome.result is None:  # fenced, or turned read-only while staging
            if outcome.fenced:
                self._fenced()
            self._mint.failed()
            self._chain = None
            self._epoch += 1
        elif isinstance(outcome.result, UpperMismatch):
            self.stats.mismatches += 1
            self._chain = None
            self._epoch += 1
            self._remember_written(None)
        else:
            if desc.upper.time is not None:
                self._deploy_held = max(desc.upper.time - 1, 0)
            self._remember_written(None if written.last is None else (desc.upper, written.last))
            if not written.is_delta:
                self._epoch += 1  # a new chain (or none) starts from a comparison with persist
            self._chain = desc.upper if written.ends_desired else None
            self.stats.deltas += written.is_delta
            self._per_time = False
            self.stats.appended += 1
            self.stats.parts_written += outcome.parts
            self.stats.rows_written += outcome.rows
            if not outcome.parts:
                self.stats.empty_appends += 1
            self.stats.history.append(
                {
                    "lower": desc.lower.time,
                    "upper": desc.upper.time,
                    "rows": outcome.rows,
                    "parts": outcome.parts,
                }
            )
        self._after_append(outcome.upper)

    def _go_time_by_time(self, message: str) -> None:
        """A delta failed on the data: evaluate the next batch time by time (nothing appended)."""
        log.info("sink %s: delta failed on the data: %s", self.shard_id, message)
        self.stats.query_errors += 1
        self._per_time = True
        self._mint.failed()
        self._chain = None
        self._epoch += 1

    def _remember_written(self, written: tuple[Frontier, Any] | None) -> None:
        old, self._written = self._written, written
        if old is None or (written is not None and old[1] is written[1]):
            return
        if not any(old[1] is b for b in self._buffer.values()):
            self.engine.release(old[1])

    def _after_append(self, upper: Frontier) -> None:
        """Let the view shard and the inputs compact up to what the sink still needs.

        After a restart the sink reads its inputs at its upper - 1 (and before
        its first write at ``as_of``): the holds stay there. The hold on the
        view's own shard (the deploy token's) moves with each append, in its
        compare-and-set. Moving the others costs a compare-and-set per hold, so
        they move at most every ``hold_interval_s`` (and on close); in between
        they lag behind, which only keeps more history readable.
        """
        if upper.time is None or upper.time == 0 or self.read_only:
            return
        self._hold_target = upper
        now = time.monotonic()
        if self._holds_moved_at is not None and now - self._holds_moved_at < self.hold_interval_s:
            return
        self._holds_moved_at = now
        self._move_holds()

    def _move_holds(self) -> None:
        upper = self._hold_target
        if upper is None or upper.time is None or self.read_only:
            return
        self._hold_target = None
        still_reads = upper.time - 1  # >= as_of: every append ends beyond as_of
        moved = self._deploy_held is not None and self._deploy_held >= still_reads
        if self._deploy is not None and not moved:  # another replica's append moved upper
            try:
                self._deploy.downgrade_since(max(still_reads, 0))
            except Fenced:
                self._fenced()
                return
        if self._retain is not None:
            self._retain.advance(upper)
        for hold in self._input_holds:
            hold.hold_at(still_reads)
        hold_reads = getattr(self.desired, "hold_reads_at", None)  # leased Spark reads
        if hold_reads is not None:
            hold_reads(still_reads)


def _done(command: Callable[[], _Outcome]) -> Future[_Outcome]:
    """``command`` run now, as a finished future (the sink without an I/O worker)."""
    future: Future[_Outcome] = Future()
    try:
        future.set_result(command())
    except BaseException as e:
        future.set_exception(e)
    return future


__all__ = [
    "DEPLOY_READER",
    "DROPPED_OPAQUE",
    "Desired",
    "IncrementalDesired",
    "IoWorker",
    "Mint",
    "MvSink",
    "SinkFrontiers",
    "SinkStats",
]
