"""Seeded fault injection for blob and consensus, for tests and the nemesis.

Each call with valid arguments first draws one number from a
``random.Random(seed)`` stream:

* below ``fail_rate``: raise :class:`Determinate` *without* calling the
  wrapped backend (the request never left);
* below ``fail_rate + timeout_rate``: for a write (``set``, ``delete``,
  ``delete_temporary``, ``compare_and_set``, ``truncate``) call the backend and
  then raise :class:`Indeterminate`, as a timeout after the request was sent
  would; for a read (``get``, ``list_keys``, ``list_temporaries``, ``head``,
  ``scan``) raise Indeterminate without calling it (a read has no effect to
  lose);
* otherwise: call the backend and return its answer.

The blob passes on the temporaries of a wrapped blob that has them
(:class:`~timeshard.location.blob.Temporaries`), so GC collects them through it;
over one that has none it lists none and deletes none, drawing nothing.

A call with an argument every backend refuses (a key, prefix or temporary key
that is not safe, a blob value that is not bytes, a shard id, seqno, version
or scan limit that is not valid) raises the backend's InvalidUsage before
anything is drawn: it takes no fault and no number from the stream, so the
valid calls get the faults they would get without it. A call that the backend
itself rejects otherwise (a key that holds other bytes, one that escapes a file
blob's root) is passed through unchanged, also on the timeout path.

Invariants:

1. The same seed and the same sequence of calls inject the same faults (for
   one thread; with several threads the draws interleave in their order).
2. ``enabled = False`` turns injection off at runtime; draws continue, so
   turning it back on resumes the same stream.
3. ``injected`` counts injected faults by kind: ``"determinate"`` and
   ``"indeterminate"``; ``calls`` counts every call that drew. ``on_inject``, if set, is
   called with the kind of every injected fault, before it takes effect.

Code that runs in many processes at once -- Spark tasks in Python workers --
cannot share one stream. :class:`KeyedFaults` draws each fault as a pure
function of ``(seed, key)`` instead (the caller names the operation in the
key, e.g. ``"write:<partition>:<attempt>"``); it is a plain frozen value, so it
pickles into a task. The driver seeds one per job from its own seeded stream.

A :class:`FaultJournal` is an append-only file with one JSON line per
injected fault, written where the fault is injected (any process; one
``O_APPEND`` write per line), so counts survive a process that is killed.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from timeshard.errors import Determinate, Indeterminate, InvalidUsage
from timeshard.location.blob import (
    Blob,
    BlobMetadata,
    Temporaries,
    check_blob_key,
    check_blob_prefix,
    check_blob_value,
)
from timeshard.location.consensus import (
    CaSResult,
    Consensus,
    SeqNo,
    VersionedData,
    check_consensus_key,
    check_new_version,
    check_scan,
    check_seqno_bound,
)
from timeshard.location.file import check_temporary_key

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
        self.on_inject: Callable[[str], None] | None = None
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
        if self.on_inject is not None:
            self.on_inject(kind)
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
        check_blob_key(key)
        return self.read(f"get {key!r}", lambda: self.inner.get(key))

    def set(self, key: str, value: bytes) -> None:
        check_blob_key(key)
        check_blob_value(value)
        self.write(f"set {key!r}", lambda: self.inner.set(key, value))

    def delete(self, key: str) -> int | None:
        check_blob_key(key)
        return self.write(f"delete {key!r}", lambda: self.inner.delete(key))

    def list_keys(self, prefix: str = "") -> Iterator[BlobMetadata]:
        check_blob_prefix(prefix)
        return iter(self.read(f"list {prefix!r}", lambda: list(self.inner.list_keys(prefix))))

    def list_temporaries(self, prefix: str = "") -> Iterator[BlobMetadata]:
        check_blob_prefix(prefix)
        inner = self.inner
        if not isinstance(inner, Temporaries):
            return iter(())
        what = f"list temporaries {prefix!r}"
        return iter(self.read(what, lambda: list(inner.list_temporaries(prefix))))

    def delete_temporary(self, key: str) -> int | None:
        check_temporary_key(key)
        inner = self.inner
        if not isinstance(inner, Temporaries):
            return None
        return self.write(f"delete temporary {key!r}", lambda: inner.delete_temporary(key))


class UnreliableConsensus(Faults):
    """A consensus whose calls fail or time out at the given rates."""

    def __init__(
        self, inner: Consensus, seed: int, fail_rate: float = 0.05, timeout_rate: float = 0.05
    ) -> None:
        super().__init__(seed, fail_rate, timeout_rate)
        self.inner = inner

    def head(self, key: str) -> VersionedData | None:
        check_consensus_key(key)
        return self.read(f"head {key!r}", lambda: self.inner.head(key))

    def compare_and_set(self, key: str, expected: SeqNo | None, new: VersionedData) -> CaSResult:
        check_consensus_key(key)
        check_new_version(expected, new)
        return self.write(
            f"compare_and_set {key!r}", lambda: self.inner.compare_and_set(key, expected, new)
        )

    def scan(self, key: str, from_seqno: SeqNo, limit: int) -> list[VersionedData]:
        check_consensus_key(key)
        check_scan(from_seqno, limit)
        return self.read(f"scan {key!r}", lambda: self.inner.scan(key, from_seqno, limit))

    def truncate(self, key: str, seqno: SeqNo) -> int:
        check_consensus_key(key)
        check_seqno_bound(seqno, "truncation seqno")
        return self.write(f"truncate {key!r}", lambda: self.inner.truncate(key, seqno))

    def list_keys(self) -> list[str]:
        return self.read("list_keys", self.inner.list_keys)


@dataclass(frozen=True, slots=True)
class FaultJournal:
    """An append-only file of injected faults, one JSON line each, shared by processes.

    Each line is ``{"kind": ..., "how": ..., **labels}``. ``record`` writes it
    with one ``write`` to a file opened ``O_APPEND``, so lines of concurrent
    writers do not interleave and a line, once recorded, survives its writer
    being killed. A frozen value of plain fields: it pickles into Spark tasks.
    """

    path: str
    labels: tuple[tuple[str, str | int], ...] = ()

    def record(self, kind: str, how: str) -> None:
        line = json.dumps({"kind": kind, "how": how, **dict(self.labels)}) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    @staticmethod
    def read(path: str | Path) -> list[dict[str, Any]]:
        """Every complete line of the journal at ``path`` (none if there is no file)."""
        try:
            text = Path(path).read_text(errors="replace")
        except FileNotFoundError:
            return []
        entries = []
        for line in text.splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if isinstance(entry, dict) and "kind" in entry and "how" in entry:
                    entries.append(entry)
        return entries

    @staticmethod
    def counts(path: str | Path, by: str = "kind") -> Counter[str]:
        """How many lines of the journal have each value of field ``by``."""
        return Counter(str(e[by]) for e in FaultJournal.read(path) if by in e)


NEVER_MS = 2**63 - 1


@dataclass(frozen=True, slots=True)
class KeyedFaults:
    """Faults drawn as a pure function of ``(seed, key)``, for code in many processes.

    ``draw(key)`` is ``"ok"`` unless the wall clock is before ``until_ms`` and
    the key's roll (SHA-256 of ``seed`` and ``key``, as a fraction of 2**64) is
    below ``rate``: then ``"determinate"`` for the lower half of ``rate``,
    ``"indeterminate"`` for the upper half (for a write: it fails after the
    effect). ``fail`` records the fault in ``journal`` as ``kind`` and raises
    a retriable ``OSError(EIO)``. Plain values only: it pickles.
    """

    seed: int
    rate: float
    until_ms: int = NEVER_MS
    journal: FaultJournal | None = None
    kind: str = "unreliable"

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise InvalidUsage(f"rate must be in [0, 1], got {self.rate!r}")

    def roll(self, key: str) -> float:
        digest = hashlib.sha256(f"{self.seed}:{key}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def draw(self, key: str) -> str:
        if time.time_ns() // 1_000_000 >= self.until_ms:
            return "ok"
        roll = self.roll(key)
        if roll >= self.rate:
            return "ok"
        return "determinate" if roll < self.rate / 2 else "indeterminate"

    def fail(self, how: str, what: str) -> NoReturn:
        """Record an injected fault ``how`` and raise it as an I/O error about ``what``."""
        if self.journal is not None:
            self.journal.record(self.kind, how)
        raise OSError(errno.EIO, f"injected {how} failure of {what}")


__all__ = [
    "NEVER_MS",
    "FaultJournal",
    "Faults",
    "KeyedFaults",
    "UnreliableBlob",
    "UnreliableConsensus",
]
