"""Durable since holds: what an object still needs to read, kept without a lease.

A lease runs out when its process stops; a hold that must outlive the process
-- a view's hold on its inputs, an object's retained history -- is a critical
since handle instead (:mod:`timeshard.persist.critical`), named by what holds:

* ``view.<view>`` on each input of a view: the inputs stay readable at the
  time the view will read them after a restart (its upper - 1);
* ``retain`` on a shard whose object keeps history: the shard stays readable
  at ``upper - 1 - retain`` and later. Its opaque token is the retained
  duration in milliseconds, so that tools can show it.

Invariants:

1. A hold only moves forward, and never past the last time its holder still
   reads (the caller says which; :meth:`DurableHold.hold_at` never regresses).
2. A hold exists until it is released (:func:`release_view_holds` when the
   view is dropped, by whichever process drops it; :meth:`RetainedHistory.configure`
   when the object stops keeping history); closing a process keeps it.

Runs on the driver; no Spark.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from timeshard.errors import InvalidUsage
from timeshard.persist.critical import OpaqueMismatch
from timeshard.progress import Frontier, Timestamp

if TYPE_CHECKING:
    from timeshard.persist.client import PersistClient

RETAIN_READER = "retain"


def view_hold_id(view: str) -> str:
    """The critical reader a view holds each of its inputs with."""
    return f"view.{view}"


def release_view_holds(client: PersistClient, view: str, inputs: Iterable[str]) -> None:
    """Remove ``view``'s holds on its inputs: they may compact as if it never was."""
    for shard in inputs:
        client.drop_critical_since(shard, view_hold_id(view))


class DurableHold:
    """A critical since hold on one shard, with a token that says what it is."""

    def __init__(
        self, client: PersistClient, shard_id: str, reader_id: str, opaque: str = ""
    ) -> None:
        self.client = client
        self.shard_id = shard_id
        self.reader_id = reader_id
        handle = client.open_critical_since(shard_id, reader_id, opaque)
        current = handle.current_opaque()
        if current != opaque:  # a new setting (another retention, say): swap the token
            result = handle.compare_and_downgrade_since(current, opaque, Frontier.minimum())
            if isinstance(result, OpaqueMismatch):  # someone swapped it meanwhile: take theirs
                handle.opaque = result.current
        self._handle = handle
        self._held: Timestamp | None = None

    @property
    def since(self) -> Frontier:
        return self._handle.since

    def hold_at(self, t: Timestamp) -> None:
        """Let the shard compact up to ``t`` (never back)."""
        if self._held is not None and t <= self._held:
            return
        self._handle.downgrade_since(t)
        self._held = t


class RetainedHistory:
    """Keeps a shard readable ``retain_ms`` back from its upper (RETAIN HISTORY)."""

    def __init__(self, client: PersistClient, shard_id: str, retain_ms: int) -> None:
        if isinstance(retain_ms, bool) or not isinstance(retain_ms, int) or retain_ms < 0:
            raise InvalidUsage(f"retain_history must be a non-negative duration, got {retain_ms!r}")
        self.retain_ms = retain_ms
        self._hold = DurableHold(client, shard_id, RETAIN_READER, str(retain_ms))

    @staticmethod
    def configure(
        client: PersistClient, shard_id: str, retain_ms: int | None
    ) -> RetainedHistory | None:
        """The shard's retention as declared now: none drops an earlier one."""
        if retain_ms is None:
            if RETAIN_READER in client.state(shard_id).critical_readers:
                client.drop_critical_since(shard_id, RETAIN_READER)
            return None
        return RetainedHistory(client, shard_id, retain_ms)

    def advance(self, upper: Frontier) -> None:
        """The shard's upper moved to ``upper``: forget history older than the retention."""
        if upper.time is None or upper.time == 0:
            return
        self._hold.hold_at(max(upper.time - 1 - self.retain_ms, 0))


def retained_ms(client: PersistClient, shard_id: str) -> int | None:
    """The history a shard retains, in milliseconds (None if it keeps none)."""
    reader = client.state(shard_id).critical_readers.get(RETAIN_READER)
    if reader is None or not reader.opaque.isdigit():
        return None
    return int(reader.opaque)


__all__ = [
    "RETAIN_READER",
    "DurableHold",
    "RetainedHistory",
    "release_view_holds",
    "retained_ms",
    "view_hold_id",
]
