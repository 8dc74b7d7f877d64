"""In-memory blob and consensus: test doubles shipped with the library.

Both keep the exact semantics of the durable backends (they pass the same
conformance suite) but lose everything when the process exits. They are
thread-safe: every operation holds one lock for its whole duration, so each is
trivially linearizable. Named instances (``memory://name`` in
:func:`timeshard.location.open_location`) are shared by every opener in the
process; an instance made directly is anonymous.

Invariants:

1. ``MemoryBlob.set`` of a key holding other bytes raises InvalidUsage and
   keeps the old value (keys are written once).
2. ``MemoryConsensus`` keeps each key's versions in a list sorted by seqno; the
   last element is the head and ``truncate`` never removes it.
3. Neither ever raises Determinate or Indeterminate: wrap them in
   :mod:`timeshard.location.unreliable` to inject storage failures.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from timeshard.errors import InvalidUsage
from timeshard.location.blob import (
    BlobMetadata,
    check_blob_key,
    check_blob_prefix,
    check_blob_value,
)
from timeshard.location.consensus import (
    CaSResult,
    SeqNo,
    VersionedData,
    check_consensus_key,
    check_new_version,
    check_scan,
    check_seqno_bound,
)


class MemoryBlob:
    """A blob in a dict; ``root_uri`` is None, so Spark cannot write parts into it."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self._data: dict[str, bytes] = {}
        self._lock = threading.Lock()

    @property
    def root_uri(self) -> str | None:
        return None

    @property
    def uri(self) -> str | None:
        """``memory://name`` for a named instance, None for an anonymous one."""
        return None if self.name is None else f"memory://{self.name}"

    def get(self, key: str) -> bytes | None:
        check_blob_key(key)
        with self._lock:
            return self._data.get(key)

    def set(self, key: str, value: bytes) -> None:
        check_blob_key(key)
        value = check_blob_value(value)
        with self._lock:
            old = self._data.get(key)
            if old is not None and old != value:
                raise InvalidUsage(
                    f"blob key {key!r} already holds {len(old)} other bytes; keys are written once"
                )
            self._data[key] = value

    def delete(self, key: str) -> int | None:
        check_blob_key(key)
        with self._lock:
            value = self._data.pop(key, None)
        return None if value is None else len(value)

    def list_keys(self, prefix: str = "") -> Iterator[BlobMetadata]:
        check_blob_prefix(prefix)
        with self._lock:
            found = [BlobMetadata(k, len(v)) for k, v in self._data.items() if k.startswith(prefix)]
        return iter(found)


class MemoryConsensus:
    """A consensus log per key, in a dict of lists."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self._data: dict[str, list[VersionedData]] = {}
        self._lock = threading.Lock()

    @property
    def uri(self) -> str | None:
        """``memory://name`` for a named instance, None for an anonymous one."""
        return None if self.name is None else f"memory://{self.name}"

    def head(self, key: str) -> VersionedData | None:
        check_consensus_key(key)
        with self._lock:
            versions = self._data.get(key)
            return versions[-1] if versions else None

    def compare_and_set(self, key: str, expected: SeqNo | None, new: VersionedData) -> CaSResult:
        check_consensus_key(key)
        check_new_version(expected, new)
        with self._lock:
            versions = self._data.setdefault(key, [])
            current = versions[-1].seqno if versions else None
            if current != expected:
                return CaSResult.EXPECTATION_MISMATCH
            versions.append(VersionedData(new.seqno, bytes(new.data)))
            return CaSResult.COMMITTED

    def scan(self, key: str, from_seqno: SeqNo, limit: int) -> list[VersionedData]:
        check_consensus_key(key)
        check_scan(from_seqno, limit)
        with self._lock:
            return [v for v in self._data.get(key, []) if v.seqno >= from_seqno][:limit]

    def truncate(self, key: str, seqno: SeqNo) -> int:
        check_consensus_key(key)
        check_seqno_bound(seqno, "truncation seqno")
        with self._lock:
            versions = self._data.get(key, [])
            head = versions[-1].seqno if versions else None
            if head is None or seqno > head:
                raise InvalidUsage(f"cannot truncate {key!r} at {seqno}: head seqno is {head}")
            kept = [v for v in versions if v.seqno >= seqno]
            self._data[key] = kept
            return len(versions) - len(kept)

    def list_keys(self) -> list[str]:
        with self._lock:
            return sorted(k for k, v in self._data.items() if v)


__all__ = ["MemoryBlob", "MemoryConsensus"]
