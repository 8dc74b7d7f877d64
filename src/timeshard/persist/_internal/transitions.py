"""Pure state transitions: ``state -> (new_state | None, result)``.

Every change to a shard is one of these functions, applied by the machine's
compare-and-set retry loop. ``None`` in place of a new state means "nothing to
write"; the result is returned without touching consensus.

Invariants:

1. A transition never performs I/O and never reads a clock; ``now_ms`` is an
   argument.
2. Re-applying a transition to a state that already contains its effect is a
   no-op that returns the same result. The machine relies on this after an
   indeterminate compare-and-set: it re-reads the head and applies the
   transition again. ``compare_and_append`` is made so by the writer's
   idempotency token, ``apply_merge`` by looking for its own output.
3. Transitions raise only :class:`LeaseExpired` (the handle is gone from the
   state) and :class:`Fenced` (a critical reader's token is not the expected
   one, or the reader is gone), and never leave a state that breaks
   ``ShardState.check_invariants``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from timeshard.errors import Fenced, LeaseExpired, UpperMismatch
from timeshard.persist._internal.parts import PartMeta
from timeshard.persist._internal.state import (
    CriticalReaderState,
    HollowBatch,
    LeasedReaderState,
    ShardState,
    WriterState,
)
from timeshard.progress import Description, Frontier

Transition = tuple[ShardState | None, object]


@dataclass(frozen=True, slots=True)
class Appended:
    """A successful ``compare_and_append``: the shard upper is now ``upper``."""

    upper: Frontier
    seqno: int


def register_writer(
    state: ShardState, writer_id: str, now_ms: int, lease_ms: int
) -> tuple[ShardState | None, WriterState]:
    if writer_id in state.writers:
        return None, state.writers[writer_id]
    writer = WriterState(now_ms, lease_ms, None, state.upper)
    return replace(state, writers={**state.writers, writer_id: writer}), writer


def register_leased_reader(
    state: ShardState, reader_id: str, now_ms: int, lease_ms: int
) -> tuple[ShardState | None, LeasedReaderState]:
    if reader_id in state.leased_readers:
        return None, state.leased_readers[reader_id]
    reader = LeasedReaderState(state.since, state.seqno + 1, now_ms, lease_ms)
    return replace(state, leased_readers={**state.leased_readers, reader_id: reader}), reader


def register_critical_reader(
    state: ShardState, reader_id: str, opaque: str
) -> tuple[ShardState | None, CriticalReaderState]:
    if reader_id in state.critical_readers:
        return None, state.critical_readers[reader_id]
    reader = CriticalReaderState(state.since, opaque)
    return replace(state, critical_readers={**state.critical_readers, reader_id: reader}), reader


def _writer(state: ShardState, writer_id: str) -> WriterState:
    writer = state.writers.get(writer_id)
    if writer is None:
        raise LeaseExpired(
            f"writer {writer_id!r} of shard {state.shard_id!r} is not registered: "
            "its lease expired or it was expired; open a new write handle"
        )
    return writer


def _leased(state: ShardState, reader_id: str) -> LeasedReaderState:
    reader = state.leased_readers.get(reader_id)
    if reader is None:
        raise LeaseExpired(
            f"reader {reader_id!r} of shard {state.shard_id!r} is not registered: "
            "its lease expired or it was expired; open a new read handle"
        )
    return reader


def compare_and_append(
    state: ShardState,
    *,
    writer_id: str,
    owners: tuple[str, ...],
    parts: tuple[PartMeta, ...],
    expected_upper: Frontier,
    new_upper: Frontier,
    token: str,
    now_ms: int,
    since_floor: Frontier | None = None,
    fence: tuple[str, str] | None = None,
    fence_since: Frontier | None = None,
) -> Transition:
    """Append ``parts`` as the batch ``[expected_upper, new_upper)``.

    ``owners`` are the writers that staged the parts; each must still be
    registered, or GC may already have deleted their staged parts.

    ``fence`` ``(reader_id, opaque)`` makes the append conditional on the
    critical reader ``reader_id`` holding the token ``opaque``: if it holds
    another (a newer deploy generation took the shard over) or is gone, nothing
    is appended and :class:`Fenced` is raised. An append that already landed
    is still ``Appended`` (re-applied after an indeterminate attempt).

    ``since_floor`` (before ``new_upper``) raises the shard's since and every
    reader's to at least it in the same step: the writer declares that the
    shard's content before it is not what it should be (a view whose inputs
    compacted past its upper writes its content at the floor; times before it
    must not be read).

    ``fence_since`` (with ``fence``) advances the fencing critical reader's since
    to it (never back) in the same step: a sink's hold on its own shard follows
    its appends without a compare-and-set of its own.
    """
    known = state.writers.get(writer_id)
    if known is not None and known.most_recent_token == token:
        return None, Appended(known.most_recent_upper, state.seqno)
    landed = _landed(state, parts)
    if landed is not None:  # an earlier, indeterminate attempt committed it
        return None, landed
    writer = _writer(state, writer_id)
    for owner in owners:
        if owner not in state.writers:
            raise LeaseExpired(
                f"a batch staged by writer {owner!r} cannot be appended to shard "
                f"{state.shard_id!r} by writer {writer_id!r}: the staging writer is not "
                "registered (its lease expired or it was expired), so GC may have deleted "
                "the batch's parts; stage its updates again with a live write handle"
            )
    if fence is not None:
        _check_fence(state, *fence)
    if state.upper != expected_upper:
        return None, UpperMismatch(expected_upper, state.upper)
    batches = list(state.batches)
    if not parts and batches and not batches[-1].parts:
        last = batches[-1]
        batches[-1] = HollowBatch(Description(last.desc.lower, new_upper, last.desc.since))
    elif expected_upper != new_upper or parts:
        batches.append(HollowBatch(Description(expected_upper, new_upper), parts))
    writers = {
        **state.writers,
        writer_id: WriterState(now_ms, writer.lease_duration_ms, token, new_upper),
    }
    new = replace(state, batches=tuple(batches), upper=new_upper, writers=writers)
    if since_floor is not None:
        new = _raise_since(new, since_floor)
    if fence is not None and fence_since is not None:
        reader = new.critical_readers[fence[0]]
        since = reader.since.join(fence_since)
        if since != reader.since:
            readers = {**new.critical_readers, fence[0]: replace(reader, since=since)}
            new = replace(new, critical_readers=readers).with_since_recomputed()
    return new, Appended(new_upper, state.seqno + 1)


def _check_fence(state: ShardState, reader_id: str, opaque: str) -> None:
    reader = state.critical_readers.get(reader_id)
    if reader is None:
        raise Fenced(f"critical reader {reader_id!r} of shard {state.shard_id!r} is gone")
    if reader.opaque != opaque:
        raise Fenced(
            f"shard {state.shard_id!r} is fenced: critical reader {reader_id!r} has token "
            f"{reader.opaque!r}, the append expected {opaque!r}"
        )


def _landed(state: ShardState, parts: tuple[PartMeta, ...]) -> Appended | None:
    """``Appended`` if a batch of ``state`` already holds exactly ``parts``.

    Part keys are unique per staged batch, so finding them means this append
    committed before (its writer may have lost its lease since).
    """
    if not parts:
        return None
    keys = {p.key for p in parts}
    for b in state.batches:
        if {p.key for p in b.parts} == keys:
            return Appended(b.desc.upper, state.seqno)
    return None


def _raise_since(state: ShardState, floor: Frontier) -> ShardState:
    leased = {k: replace(r, since=r.since.join(floor)) for k, r in state.leased_readers.items()}
    critical = {k: replace(r, since=r.since.join(floor)) for k, r in state.critical_readers.items()}
    return replace(
        state,
        since=state.since.join(floor),
        leased_readers=leased,
        critical_readers=critical,
    )


def heartbeat_writer(state: ShardState, writer_id: str, now_ms: int) -> Transition:
    writer = _writer(state, writer_id)
    if writer.last_heartbeat_ms >= now_ms:
        return None, None
    writers = {**state.writers, writer_id: replace(writer, last_heartbeat_ms=now_ms)}
    return replace(state, writers=writers), None


def heartbeat_leased_reader(
    state: ShardState, reader_id: str, now_ms: int, hold_seqno: bool
) -> Transition:
    """Renew a reader's lease; with ``hold_seqno``, hold the parts of the next state."""
    reader = _leased(state, reader_id)
    seqno = state.seqno + 1 if hold_seqno else reader.seqno
    if reader.last_heartbeat_ms >= now_ms and seqno == reader.seqno:
        return None, reader.seqno
    new_reader = replace(
        reader, last_heartbeat_ms=max(now_ms, reader.last_heartbeat_ms), seqno=seqno
    )
    readers = {**state.leased_readers, reader_id: new_reader}
    return replace(state, leased_readers=readers), seqno


def downgrade_since(
    state: ShardState, reader_id: str, new_since: Frontier, now_ms: int
) -> Transition:
    """Advance a leased reader's since (a since never regresses); return the shard since."""
    reader = _leased(state, reader_id)
    since = reader.since.join(new_since)
    new_reader = replace(
        reader,
        since=since,
        seqno=state.seqno + 1,
        last_heartbeat_ms=max(now_ms, reader.last_heartbeat_ms),
    )
    if replace(new_reader, seqno=reader.seqno) == reader:
        return None, state.since
    new = replace(state, leased_readers={**state.leased_readers, reader_id: new_reader})
    new = new.with_since_recomputed()
    return new, new.since


@dataclass(frozen=True, slots=True)
class OpaqueMismatch:
    """A critical since downgrade whose expected token was not the current one."""

    current: str


def compare_and_downgrade_since(
    state: ShardState, reader_id: str, expected: str, new_opaque: str, new_since: Frontier
) -> Transition:
    reader = state.critical_readers.get(reader_id)
    if reader is None:
        raise Fenced(f"critical reader {reader_id!r} of shard {state.shard_id!r} is gone")
    if reader.opaque == new_opaque and reader.since == reader.since.join(new_since):
        return None, reader.since
    if reader.opaque != expected:
        return None, OpaqueMismatch(reader.opaque)
    new_reader = CriticalReaderState(reader.since.join(new_since), new_opaque)
    new = replace(state, critical_readers={**state.critical_readers, reader_id: new_reader})
    new = new.with_since_recomputed()
    return new, new_reader.since


def expire_writer(state: ShardState, writer_id: str) -> Transition:
    if writer_id not in state.writers:
        return None, False
    writers = {k: v for k, v in state.writers.items() if k != writer_id}
    return replace(state, writers=writers), True


def expire_leased_reader(state: ShardState, reader_id: str) -> Transition:
    if reader_id not in state.leased_readers:
        return None, False
    readers = {k: v for k, v in state.leased_readers.items() if k != reader_id}
    return replace(state, leased_readers=readers).with_since_recomputed(), True


def expire_critical_reader(state: ShardState, reader_id: str) -> Transition:
    """Remove a critical since hold (a dropped view's hold on an input, say)."""
    if reader_id not in state.critical_readers:
        return None, False
    readers = {k: v for k, v in state.critical_readers.items() if k != reader_id}
    return replace(state, critical_readers=readers).with_since_recomputed(), True


def expire_leases(state: ShardState, now_ms: int) -> Transition:
    """Remove every writer and leased reader whose lease ran out before ``now_ms``."""
    writers = {k: v for k, v in state.writers.items() if not v.expired(now_ms)}
    readers = {k: v for k, v in state.leased_readers.items() if not v.expired(now_ms)}
    gone = sorted(set(state.writers) - set(writers)) + sorted(
        set(state.leased_readers) - set(readers)
    )
    if not gone:
        return None, []
    new = replace(state, writers=writers, leased_readers=readers).with_since_recomputed()
    return new, gone


def apply_merge(
    state: ShardState, inputs: tuple[HollowBatch, ...], output: HollowBatch, writer_id: str
) -> Transition:
    """Replace the contiguous run ``inputs`` by ``output`` if it is still present.

    Returns True when ``output`` is in the new state (also when a previous,
    indeterminate attempt already put it there), False otherwise.
    """
    out_keys = set(output.keys())
    if out_keys and any(set(b.keys()) == out_keys for b in state.batches):
        return None, True
    if writer_id not in state.writers:
        return None, False
    batches = list(state.batches)
    n = len(inputs)
    for i in range(len(batches) - n + 1):
        if tuple(batches[i : i + n]) == inputs:
            batches[i : i + n] = [output]
            return replace(state, batches=tuple(batches)), True
    return None, False


__all__ = [
    "Appended",
    "OpaqueMismatch",
    "apply_merge",
    "compare_and_append",
    "compare_and_downgrade_since",
    "downgrade_since",
    "expire_critical_reader",
    "expire_leased_reader",
    "expire_leases",
    "expire_writer",
    "heartbeat_leased_reader",
    "heartbeat_writer",
    "register_critical_reader",
    "register_leased_reader",
    "register_writer",
]
