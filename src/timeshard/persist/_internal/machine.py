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
4. The machine gives up after ``PersistConfig.max_attempts`` failed storage
   calls; it raises :class:`Indeterminate` if any compare-and-set of this
   ``apply`` may have committed, else :class:`Determinate`. Mismatches
   because of other writers are not failures and are retried without limit.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from timeshard.errors import (
    Determinate,
    ExternalError,
    Fenced,
    Indeterminate,
    InvalidUsage,
    LeaseExpired,
)
from timeshard.location.consensus import CaSResult, Consensus, VersionedData
from timeshard.persist._internal.blobio import retry_external
from timeshard.persist._internal.state import ShardState, decode_state, encode_state
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
        while head is None:
            data = encode_state(initial)
            try:
                self.cas_calls += 1
                self.consensus.compare_and_set(self.shard_id, None, VersionedData(0, data))
            except ExternalError as e:
                log.debug("create of %s failed (%s); re-reading", self.shard_id, e)
                self._backoff(1)
            head = self._retry(lambda: self.consensus.head(self.shard_id))
        state = decode_state(self.shard_id, head.seqno, head.data)
        self._state = state
        return state

    def apply(self, transition: Callable[[ShardState], tuple[ShardState | None, R]]) -> R:
        """Apply ``transition`` to the latest state; see the module invariants."""
        state = self.state
        failures = 0
        maybe_applied = False
        fresh = self._state is None
        while True:
            try:
                new, result = transition(state)
            except (LeaseExpired, Fenced):
                if fresh:
                    raise
                state, fresh = self.fetch(), True
                continue
            if new is None:
                if fresh:
                    return result
                # A no-op decided on a cached state may be stale (an upper
                # mismatch, say): decide again on the head.
                state, fresh = self.fetch(), True
                continue
            new = replace(new, seqno=state.seqno + 1, walltime_ms=self.config.now_ms())
            data = encode_state(new)
            try:
                self.cas_calls += 1
                outcome = self.consensus.compare_and_set(
                    self.shard_id, state.seqno, VersionedData(new.seqno, data)
                )
            except ExternalError as e:
                failures += 1
                maybe_applied = maybe_applied or isinstance(e, Indeterminate)
                if failures >= self.config.max_attempts:
                    raise self._give_up(e, maybe_applied) from e
                self._backoff(failures)
                try:
                    state, fresh = self.fetch(), True
                except ExternalError as fetch_error:
                    raise self._give_up(fetch_error, maybe_applied) from fetch_error
                continue
            if outcome is CaSResult.COMMITTED:
                self._state = new
                return result
            state, fresh = self.fetch(), True

    def _give_up(self, error: ExternalError, maybe_applied: bool) -> ExternalError:
        kind = Indeterminate if maybe_applied or isinstance(error, Indeterminate) else Determinate
        return kind(
            f"shard {self.shard_id!r}: gave up after {self.config.max_attempts} failed "
            f"storage calls; last: {error}"
        )

    def _retry(self, call: Callable[[], R]) -> R:
        return retry_external(self.config, f"shard {self.shard_id!r}: reading consensus", call)

    def _backoff(self, failures: int) -> None:
        self.config.backoff(failures, self._rng)


__all__ = ["Machine"]
