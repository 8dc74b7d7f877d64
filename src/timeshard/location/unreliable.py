"""Seeded fault injection for blob and consensus, for tests and the nemesis.

Each call first draws one number from a ``random.Random(seed)`` stream:

* below ``fail_rate``: raise :class:`Determinate` *without* calling the
  wrapped backend (the request never left);
* below ``fail_rate + timeout_rate``: for a write (``set``, ``delete``,
  ``compare_and_set``, ``truncate``) call the backend and then raise
  :class:`Indeterminate`, as a timeout after the request was sent would; for a
  read (``get``, ``list_keys``, ``head``, ``scan``) raise Indeterminate
  without calling it (a read has no effect to lose);
* otherwise: call the backend and return its answer.

A call that the backend itself rejects (InvalidUsage) is passed through
unchanged, also on the timeout path.

Invariants:

1. The same seed and the same sequence of calls inject the same faults (for
   one thread; with several threads the draws interleave in their order).
2. ``enabled = False`` turns injection off at runtime; draws continue, so
   turning it back on resumes the same stream.
3. ``injected`` counts injected faults by kind: ``"determinate"`` and
   ``"indeterminate"``; ``calls`` counts every call.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import TypeVar

from timeshard.errors import Determinate, Indeterminate, InvalidUsage
from timeshard.location.blob import Blob, BlobMetadata
from timeshard.location.consensus import CaSResult, Consensus, SeqNo, VersionedData

R = TypeVar("R")


class Faults:
    """The seeded fault stream shared by both wrappers."""

    def __init__(self, seed: int, fail_rate: float, timeout_rate: float) -> None:
        for name, rate in (("fail_rate", fail_rate), ("timeout_rate", timeout_rate)):
            if not 0.0 <= rate <= 1.0:
                raise InvalidUsage(f"{name} must be in [0, 1], got {rate!r}")
        if fail_rate + timeout_rate > 1.0:
            raise InvalidUsage(
                f"fail_rate + timeout_rate must be at most 1, got {fail_rate} + {timeout_rate}"
            )
        self.seed = seed
        self.fail_rate = fail_rate
        self.timeout_rate = timeout_rate
        self.enabled = True
        self.injected: Counter[str] = Counter()
        self.calls = 0
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def _draw(self) -> str:
        """``"ok"``, ``"determinate"`` or ``"indeterminate"`` for the next call."""
        with self._lock:
            roll = self._rng.random()
            self.calls += 1
            if not self.enabled or roll >= self.fail_rate + self.timeout_rate:
                return "ok"
            kind = "determinate" if roll < self.fail_rate else "indeterminate"
            self.injected[kind] += 1
            return kind

    def read(self, what: str, op: Callable[[], R]) -> R:
        kind = self._draw()
        if kind == "determinate":
            raise Determinate(f"injected failure of {what}")
        if kind == "indeterminate":
            raise Indeterminate(f"injected timeout of {what}")
        return op()

    def write(self, what: str, op: Callable[[], R]) -> R:
        kind = self._draw()
        if kind == "determinate":
            raise Determinate(f"injected failure of {what}")
        result = op()
        if kind == "indeterminate":
            raise Indeterminate(f"injected timeout of {what} (it was applied)")
        return result


class UnreliableBlob(Faults):
    """A blob whose calls fail or time out at the given rates."""

    def __init__(
        self, inner: Blob, seed: int, fail_rate: float = 0.05, timeout_rate: float = 0.05
    ) -> None:
        super().__init__(seed, fail_rate, timeout_rate)
        self.inner = inner

    @property
    def root_uri(self) -> str | None:
        return self.inner.root_uri

    def get(self, key: str) -> bytes | None:
        return self.read(f"get {key!r}", lambda: self.inner.get(key))

    def set(self, key: str, value: bytes) -> None:
        self.write(f"set {key!r}", lambda: self.inner.set(key, value))

    def delete(self, key: str) -> int | None:
        return self.write(f"delete {key!r}", lambda: self.inner.delete(key))

    def list_keys(self, prefix: str = "") -> Iterator[BlobMetadata]:
        return iter(self.read(f"list {prefix!r}", lambda: list(self.inner.list_keys(prefix))))


class UnreliableConsensus(Faults):
    """A consensus whose calls fail or time out at the given rates."""

    def __init__(
        self, inner: Consensus, seed: int, fail_rate: float = 0.05, timeout_rate: float = 0.05
    ) -> None:
        super().__init__(seed, fail_rate, timeout_rate)
        self.inner = inner

    def head(self, key: str) -> VersionedData | None:
        return self.read(f"head {key!r}", lambda: self.inner.head(key))

    def compare_and_set(self, key: str, expected: SeqNo | None, new: VersionedData) -> CaSResult:
        return self.write(
            f"compare_and_set {key!r}", lambda: self.inner.compare_and_set(key, expected, new)
        )

    def scan(self, key: str, from_seqno: SeqNo, limit: int) -> list[VersionedData]:
        return self.read(f"scan {key!r}", lambda: self.inner.scan(key, from_seqno, limit))

    def truncate(self, key: str, seqno: SeqNo) -> int:
        return self.write(f"truncate {key!r}", lambda: self.inner.truncate(key, seqno))

    def list_keys(self) -> list[str]:
        return self.read("list_keys", self.inner.list_keys)


__all__ = ["Faults", "UnreliableBlob", "UnreliableConsensus"]
