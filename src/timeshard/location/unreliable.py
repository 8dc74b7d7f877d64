"""Seeded fault injection for blob and consensus, for tests and the nemesis.

Each call first draws from a seeded random stream. With probability
``fail_rate`` it raises :class:`Determinate` without calling the wrapped
backend; with probability ``timeout_rate`` it calls the backend and then
raises :class:`Indeterminate`, as a timeout after the request was sent would.
The same seed and the same sequence of calls inject the same faults.
``enabled = False`` turns injection off; ``injected`` counts faults by kind.
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


class _Faults:
    def __init__(self, seed: int, fail_rate: float, timeout_rate: float) -> None:
        for name, rate in (("fail_rate", fail_rate), ("timeout_rate", timeout_rate)):
            if not 0.0 <= rate <= 1.0:
                raise InvalidUsage(f"{name} must be in [0, 1], got {rate!r}")
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.fail_rate = fail_rate
        self.timeout_rate = timeout_rate
        self.enabled = True
        self.injected: Counter[str] = Counter()

    def call(self, what: str, op: Callable[[], R]) -> R:
        with self._lock:
            roll = self._rng.random()
        if not self.enabled:
            return op()
        if roll < self.fail_rate:
            self.injected["determinate"] += 1
            raise Determinate(f"injected failure of {what}")
        if roll < self.fail_rate + self.timeout_rate:
            self.injected["indeterminate"] += 1
            op()
            raise Indeterminate(f"injected timeout of {what}")
        return op()


class UnreliableBlob(_Faults):
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
        return self.call(f"get {key!r}", lambda: self.inner.get(key))

    def set(self, key: str, value: bytes) -> None:
        self.call(f"set {key!r}", lambda: self.inner.set(key, value))

    def delete(self, key: str) -> int | None:
        return self.call(f"delete {key!r}", lambda: self.inner.delete(key))

    def list_keys(self, prefix: str = "") -> Iterator[BlobMetadata]:
        return iter(self.call(f"list {prefix!r}", lambda: list(self.inner.list_keys(prefix))))


class UnreliableConsensus(_Faults):
    """A consensus whose calls fail or time out at the given rates."""

    def __init__(
        self, inner: Consensus, seed: int, fail_rate: float = 0.05, timeout_rate: float = 0.05
    ) -> None:
        super().__init__(seed, fail_rate, timeout_rate)
        self.inner = inner

    def head(self, key: str) -> VersionedData | None:
        return self.call(f"head {key!r}", lambda: self.inner.head(key))

    def compare_and_set(self, key: str, expected: SeqNo | None, new: VersionedData) -> CaSResult:
        return self.call(
            f"compare_and_set {key!r}", lambda: self.inner.compare_and_set(key, expected, new)
        )

    def scan(self, key: str, from_seqno: SeqNo, limit: int) -> list[VersionedData]:
        return self.call(f"scan {key!r}", lambda: self.inner.scan(key, from_seqno, limit))

    def truncate(self, key: str, seqno: SeqNo) -> int:
        return self.call(f"truncate {key!r}", lambda: self.inner.truncate(key, seqno))

    def list_keys(self) -> list[str]:
        return self.call("list_keys", self.inner.list_keys)


__all__ = ["UnreliableBlob", "UnreliableConsensus"]
