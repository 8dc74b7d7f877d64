"""In-memory blob and consensus: test doubles shipped with the library.

Both are thread-safe and lose everything when the process exits. Named
instances (``memory://name`` in :func:`timeshard.location.open_location`) are
shared by every opener in the process.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from timeshard.errors import InvalidUsage
from timeshard.location.blob import BlobMetadata, check_blob_key
from timeshard.location.consensus import (
    CaSResult,
    SeqNo,
    VersionedData,
    check_consensus_key,
    check_new_version,
)


class MemoryBlob:
    """A blob in a dict."""

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._lock = threading.Lock()

    @property
    def root_uri(self) -> str | None:
        return None

    def get(self, key: str) -> bytes | None:
        check_blob_key(key)
        with self._lock:
            return self._data.get(key)

    def set(self, key: str, value: bytes) -> None:
        check_blob_key(key)
        with self._lock:
            self._data[key] = bytes(value)

    def delete(self, key: str) -> int | None:
        check_blob_key(key)
        with self._lock:
            value = self._data.pop(key, None)
        return None if value is None else len(value)

    def list_keys(self, prefix: str = "") -> Iterator[BlobMetadata]:
        with self._lock:
            items = [BlobMetadata(k, len(v)) for k, v in self._data.items() if k.startswith(prefix)]
        return iter(items)


class MemoryConsensus:
    """A consensus log per key in a dict of lists."""

    def __init__(self) -> None:
        self._data: dict[str, list[VersionedData]] = {}
        self._lock = threading.Lock()

    def head(self, key: str) -> VersionedData | None:
        check_consensus_key(key)
        with self._lock:
            versions = self._data.get(key)
            return versions[-1] if versions else None

    def compare_and_set(self, key: str, expected: SeqNo | None, new: VersionedData) -> CaSResult:
        check_consensus_key(key)
        check_new_version(expected, new)
        with self._lock:
            versions = self._data.get(key)
            current = versions[-1].seqno if versions else None
            if current != expected:
                return CaSResult.EXPECTATION_MISMATCH
            self._data.setdefault(key, []).append(new)
            return CaSResult.COMMITTED

    def scan(self, key: str, from_seqno: SeqNo, limit: int) -> list[VersionedData]:
        check_consensus_key(key)
        if limit <= 0:
            raise InvalidUsage(f"scan limit must be positive, got {limit}")
        with self._lock:
            return [v for v in self._data.get(key, []) if v.seqno >= from_seqno][:limit]

    def truncate(self, key: str, seqno: SeqNo) -> int:
        check_consensus_key(key)
        with self._lock:
            versions = self._data.get(key, [])
            if not versions or seqno > versions[-1].seqno:
                head = versions[-1].seqno if versions else None
                raise InvalidUsage(f"cannot truncate {key!r} at {seqno}: head seqno is {head}")
            kept = [v for v in versions if v.seqno >= seqno]
            self._data[key] = kept
            return len(versions) - len(kept)

    def list_keys(self) -> list[str]:
        with self._lock:
            return sorted(k for k, v in self._data.items() if v)


__all__ = ["MemoryBlob", "MemoryConsensus"]
