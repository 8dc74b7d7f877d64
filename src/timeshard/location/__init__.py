"""Locations: a blob plus a consensus, named by URIs.

=====================================  ======================================
blob URI                               backend
=====================================  ======================================
``file:///abs/dir`` or a plain path    :class:`FileBlob` (the embedded default)
``s3a://``, ``s3://``, ``gs://``,      :class:`ArrowFsBlob` through pyarrow.fs
``hdfs://``, ``arrowfs+file://``
``memory://name``                      :class:`MemoryBlob`, shared per process
=====================================  ======================================

=====================================  ======================================
consensus URI                          backend
=====================================  ======================================
``sqlite:///abs/file.db``              :class:`SqliteConsensus` (default)
``postgresql://...``/``postgres://``   :class:`PostgresConsensus`
``memory://name``                      :class:`MemoryConsensus`, per process
=====================================  ======================================

``Location.embedded(dir)`` is ``dir/blob`` plus ``dir/consensus.sqlite``.
This package never imports PySpark.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from timeshard.errors import InvalidUsage
from timeshard.location.blob import Blob, BlobMetadata, check_blob_key
from timeshard.location.consensus import (
    CaSResult,
    Consensus,
    SeqNo,
    VersionedData,
    check_consensus_key,
)
from timeshard.location.file import FileBlob
from timeshard.location.memory import MemoryBlob, MemoryConsensus
from timeshard.location.sqlite import SqliteConsensus
from timeshard.location.unreliable import UnreliableBlob, UnreliableConsensus

_NAMED_LOCK = threading.Lock()
_NAMED_BLOBS: dict[str, MemoryBlob] = {}
_NAMED_CONSENSUS: dict[str, MemoryConsensus] = {}


@dataclass(frozen=True, slots=True)
class Location:
    """Where shards live: a blob for data and a consensus for state."""

    blob: Blob
    consensus: Consensus
    blob_uri: str | None = None
    consensus_uri: str | None = None

    @staticmethod
    def embedded(directory: str | Path) -> Location:
        """The embedded default: a blob directory and a SQLite file under ``directory``."""
        root = Path(directory).resolve()
        return open_location(
            root.joinpath("blob").as_uri(), f"sqlite://{root / 'consensus.sqlite'}"
        )

    def describe(self) -> str:
        return (
            f"blob {self.blob_uri or type(self.blob).__name__}, "
            f"consensus {self.consensus_uri or type(self.consensus).__name__}"
        )


def open_blob(uri: str) -> Blob:
    """The blob named by ``uri``; InvalidUsage naming it if it is not understood."""
    if not isinstance(uri, str) or not uri:
        raise InvalidUsage(f"invalid blob URI {uri!r}")
    parsed = urlparse(uri)
    if parsed.scheme == "memory":
        name = parsed.netloc + parsed.path
        with _NAMED_LOCK:
            return _NAMED_BLOBS.setdefault(name, MemoryBlob())
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise InvalidUsage(f"invalid blob URI {uri!r}: file URIs name no host")
        return FileBlob(_safe_path(unquote(parsed.path), uri))
    if parsed.scheme == "":
        return FileBlob(_safe_path(uri, uri))
    if parsed.scheme in ("s3", "s3a", "gs", "hdfs", "arrowfs+file"):
        _safe_path(unquote(parsed.path), uri)
        from timeshard.location.arrowfs import ArrowFsBlob

        return ArrowFsBlob(uri.removeprefix("arrowfs+"))
    raise InvalidUsage(
        f"unsupported blob URI {uri!r}: use file:///dir, a path, s3a://, gs://, hdfs:// "
        "or memory://name"
    )


def open_consensus(uri: str) -> Consensus:
    """The consensus named by ``uri``; InvalidUsage naming it if it is not understood."""
    if not isinstance(uri, str) or not uri:
        raise InvalidUsage(f"invalid consensus URI {uri!r}")
    parsed = urlparse(uri)
    if parsed.scheme == "memory":
        name = parsed.netloc + parsed.path
        with _NAMED_LOCK:
            return _NAMED_CONSENSUS.setdefault(name, MemoryConsensus())
    if parsed.scheme == "sqlite":
        path = unquote(parsed.netloc + parsed.path)
        if not path:
            raise InvalidUsage(f"invalid consensus URI {uri!r}: no database path")
        return SqliteConsensus(_safe_path(path, uri))
    if parsed.scheme in ("postgres", "postgresql"):
        from timeshard.location.postgres import PostgresConsensus

        return PostgresConsensus(uri)
    raise InvalidUsage(
        f"unsupported consensus URI {uri!r}: use sqlite:///file.db, postgresql://... "
        "or memory://name"
    )


def open_location(blob_uri: str, consensus_uri: str) -> Location:
    """The location of a blob URI and a consensus URI."""
    return Location(open_blob(blob_uri), open_consensus(consensus_uri), blob_uri, consensus_uri)


def _safe_path(path: str, uri: str) -> Path:
    if "\x00" in path:
        raise InvalidUsage(f"invalid path in URI {uri!r}: NUL byte")
    if any(part == ".." for part in Path(path).parts):
        raise InvalidUsage(f"invalid path in URI {uri!r}: '..' components are not allowed")
    return Path(path)


__all__ = [
    "Blob",
    "BlobMetadata",
    "CaSResult",
    "Consensus",
    "FileBlob",
    "Location",
    "MemoryBlob",
    "MemoryConsensus",
    "SeqNo",
    "SqliteConsensus",
    "UnreliableBlob",
    "UnreliableConsensus",
    "VersionedData",
    "check_blob_key",
    "check_consensus_key",
    "open_blob",
    "open_consensus",
    "open_location",
]
