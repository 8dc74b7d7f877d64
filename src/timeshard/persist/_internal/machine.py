"""The machine: one compare-and-set retry loop that applies pure transitions.

```
  fetch head ──> transition(state) ──> None ───────────────> result
       ^               │
       │               └─> new state ──> CaS(seqno, seqno + 1)
       │                                   │ committed ─────> result
       └──── mismatch / Determinate / Indeterminate (backoff) ┘
```

Invariants:

1. Every committed state has seqno ``previous + 1`` and was computed from the
   previous state by one transition.
2. A transition that changes nothing or fails (LeaseExpired, Fenced) is
   decided on a freshly fetched head, never only on a cached state.
3. After an indeterminate compare-and-set the machine re-reads the head and
   applies the transition again; transitions are idempotent on re-application
   (see ``transitions``), so an effect is never applied twice.
4. The machine (``apply`` and ``create`` alike) gives up after
   ``PersistConfig.max_attempts`` failed storage calls if none of them may
   have committed, raising :class:`Determinate`.
   Once one may have (an indeterminate compare-and-set), it goes on until the
   outcome is known -- the transition, re-applied to a fetched head, finds its
   own effect or decides on a state it surely is not in -- for up to
   ``PersistConfig.indeterminate_timeout_ms``, and only then raises
   :class:`Indeterminate`. Mismatches because of other writers are not
   failures and are retried without limit.
5. A transition that finds its handle gone (LeaseExpired) after an attempt
   that may have committed raises :class:`Indeterminate`: the effect may be
   there even though the handle is not.
6. Nothing is written that does not decode: a new state is checked by the
   decoder (``state.check_decodes``, on what the transition changed) before
   its compare-and-set, and one that fails raises :class:`InvalidUsage` (an
   argument of the wrong type reached the state). A state no handle could
   read is never built upon.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from timeshard.errors import (
    CorruptState,
    Determinate,
    ExternalError,
    Fenced,
    Indeterminate,
    InvalidUsage,
    LeaseExpired,
)
from timeshard.location.consensus import CaSResult, Consensus, VersionedData
from timeshard.persist._internal.blobio import retry_external
from timeshard.persist._internal.state import (
    ShardState,
    check_decodes,
    decode_state,
    encode_state,
)
from timeshard.persist.config import PersistConfig

log = logging.getLogger(__name__)

R = TypeVar("R")


class Machine:
    """Applies transitions to one shard's state through consensus."""

    def __init__(self, shard_id: str, consensus: Consensus, config: PersistConfig) -> None:
        self.shard_id = shard_id
        self.consensus = consensus
        self.config = config
        self._state: ShardState | None = None
        self._rng = random.Random()
        self.cas_calls = 0

    @property
    def state(self) -> ShardState:
        """The most recently seen state (fetched if none was seen yet)."""
        if self._state is None:
            return self.fetch()
        return self._state

    def fetch(self) -> ShardState:
        """Read the head of consensus, retrying storage failures."""
        head = self._retry(lambda: self.consensus.head(self.shard_id))
        if head is None:
            raise InvalidUsage(f"unknown shard id {self.shard_id!r}: no such shard")
        state = decode_state(self.shard_id, head.seqno, head.data)
        if self._state is None or state.seqno >= self._state.seqno:
            self._state = state
        return state

    def create(self, initial: ShardState) -> ShardState:
        """Write the initial state if the shard does not exist yet; return the head."""
        head = self._retry(lambda: self.consensus.head(self.shard_id))
        attempts = _Attempts()
        while head is None:
            data = self._encode(initial, None)
            try:
                self.cas_calls += 1
                self.consensus.compare_and_set(self.shard_id, None, VersionedData(0, data))
            except ExternalError as e:
                self._failed(attempts, e)
                log.debug("create of %s failed (%s); re-reading", self.shard_id, e)
            head = self._after(
                attempts.maybe_applied,
                lambda: self._retry(lambda: self.consensus.head(self.shard_id)),
            )
        state = decode_state(self.shard_id, head.seqno, head.data)
        self._state = state
        return state

    def apply(
        self,
        transition: Callable[[ShardState], tuple[ShardState | None, R]],
        *,
        fetch_first: bool = False,
    ) -> R:
        """Apply ``transition`` to the latest state; see the module invariants.

        ``fetch_first``: decide on the head of consensus, read first, rather than on
        the state this machine saw last. For a handle whose shard others write (a
        reader's or a hold's, on a shard its writer appends to), the state seen last
        is stale more often than not, and a compare-and-set on it fails and is tried
        again: a read is cheaper than that failed write.
        """
        return self.apply_telling(transition, fetch_first=fetch_first)[0]

    def apply_telling(
        self,
        transition: Callable[[ShardState], tuple[ShardState | None, R]],
        *,
        fetch_first: bool = False,
    ) -> tuple[R, bool]:
        """:meth:`apply`, and whether an attempt before the one that decided may have
        committed (an indeterminate compare-and-set): then the state the result was
        decided on may come after that attempt's effect, and after others' changes to it."""
        fresh = fetch_first or self._state is None
        state = self.fetch() if fetch_first else self.state
        attempts = _Attempts()
        while True:
            try:
                new, result = transition(state)
            except (LeaseExpired, Fenced) as e:
                if fresh and attempts.maybe_applied and isinstance(e, LeaseExpired):
                    raise Indeterminate(
                        f"shard {self.shard_id!r}: an attempt may have committed, and then "
                        f"the handle was gone: {e}"
                    ) from e
                if fresh:
                    raise
                state, fresh = self._fetch_after(attempts.maybe_applied), True
                continue
            if new is None:
                if fresh:
                    return result, attempts.maybe_applied
                # A no-op decided on a cached state may be stale (an upper
                # mismatch, say): decide again on the head.
                state, fresh = self._fetch_after(attempts.maybe_applied), True
                continue
            new = replace(new, seqno=state.seqno + 1, walltime_ms=self.config.now_ms())
            data = self._encode(new, state)
            try:
                self.cas_calls += 1
                outcome = self.consensus.compare_and_set(
                    self.shard_id, state.seqno, VersionedData(new.seqno, data)
                )
            except ExternalError as e:
                self._failed(attempts, e)
                state, fresh = self._refetch(attempts), True
                continue
            if outcome is CaSResult.COMMITTED:
                if self._state is None or new.seqno > self._state.seqno:
                    self._state = new  # a concurrent apply may have seen a newer one
                return result, attempts.maybe_applied
            state, fresh = self._fetch_after(attempts.maybe_applied), True

    def _encode(self, new: ShardState, previous: ShardState | None) -> bytes:
        """``new``'s bytes; InvalidUsage if they would not decode (invariant 6)."""
        try:
            check_decodes(new, previous)
            return encode_state(new)
        except (CorruptState, TypeError, ValueError) as e:
            raise InvalidUsage(
                f"shard {self.shard_id!r}: the state at seqno {new.seqno} does not decode, "
                f"so it is not written (an argument of the wrong type?): {e}"
            ) from e

    def _fetch_after(self, maybe_applied: bool) -> ShardState:
        """The head state (:meth:`_after`)."""
        return self._after(maybe_applied, self.fetch)

    def _after(self, maybe_applied: bool, read: Callable[[], R]) -> R:
        """``read()`` of the head; if an earlier attempt may have committed, a head that
        cannot be read leaves the outcome unknown: Indeterminate, never Determinate."""
        try:
            return read()
        except Determinate as e:
            if not maybe_applied:
                raise
            raise Indeterminate(
                f"shard {self.shard_id!r}: an attempt may have committed, and the head "
                f"cannot be read to tell: {e}"
            ) from e

    def _out_of_attempts(self, failures: int, deadline: float | None) -> bool:
        if deadline is None:
            return failures >= self.config.max_attempts
        return time.monotonic() >= deadline

    def _failed(self, attempts: _Attempts, error: ExternalError) -> None:
        """Count a failed compare-and-set in ``attempts``, then back off; give up (raise)
        past the attempts, or once one may have committed, past the deadline (invariant 4)."""
        attempts.failures += 1
        attempts.maybe_applied = attempts.maybe_applied or isinstance(error, Indeterminate)
        if attempts.maybe_applied and attempts.deadline is None:
            attempts.deadline = time.monotonic() + self.config.indeterminate_timeout_ms / 1000
        if self._out_of_attempts(attempts.failures, attempts.deadline):
            raise self._give_up(error, attempts.maybe_applied) from error
        self._backoff(attempts.failures)

    def _refetch(self, attempts: _Attempts) -> ShardState:
        """The head, re-read until it can be (an indeterminate outcome must be resolved)."""
        failures = attempts.failures
        while True:
            try:
                return self.fetch()
            except ExternalError as e:
                failures += 1
                if self._out_of_attempts(failures, attempts.deadline):
                    raise self._give_up(e, attempts.maybe_applied) from e
                self._backoff(failures)

    def _give_up(self, error: ExternalError, maybe_applied: bool) -> ExternalError:
        kind = Indeterminate if maybe_applied or isinstance(error, Indeterminate) else Determinate
        return kind(
            f"shard {self.shard_id!r}: gave up after {self.config.max_attempts} failed "
            f"storage calls; last: {error}"
        )

    def _retry(self, call: Callable[[], R]) -> R:
        return retry_external(
            self.config, f"shard {self.shard_id!r}: reading consensus", call, reads=True
        )

    def _backoff(self, failures: int) -> None:
        self.config.backoff(failures, self._rng)


@dataclass
class _Attempts:
    """One operation's failed storage calls so far (module invariant 4)."""

    failures: int = 0
    #: Whether one of them may have committed (an indeterminate compare-and-set).
    maybe_applied: bool = False
    #: Once one may have: when to give up (monotonic seconds).
    deadline: float | None = None


__all__ = ["Machine"]
