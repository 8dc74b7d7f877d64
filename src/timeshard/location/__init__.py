"""Locations: a blob plus a consensus, named by URIs.

=====================================  ==========================================
blob URI                               backend
=====================================  ==========================================
``file:///abs/dir`` or a plain path    :class:`FileBlob` (the embedded default)
``memory://name``                      :class:`MemoryBlob`, one per name and process
``s3a://``, ``s3://``, ``gs://``,      ``ArrowFsBlob`` through ``pyarrow.fs``
``hdfs://``, ``arrowfs+<uri>``
=====================================  ==========================================

=====================================  ==========================================
consensus URI                          backend
=====================================  ==========================================
``sqlite:///abs/file.db``              :class:`SqliteConsensus` (the default)
``sqlite:relative/file.db``            the same, relative to the working directory
``postgresql://...``/``postgres://``   :class:`PostgresConsensus` (any libpq URI)
``memory://name``                      :class:`MemoryConsensus`, one per name and process
=====================================  ==========================================

``Location.embedded(dir)`` is ``FileBlob(dir/blob)`` plus
``SqliteConsensus(dir/consensus.sqlite)``. Two opens of the same
``memory://name`` in one process share their data. ``Location.blob_uri`` and
``Location.consensus_uri`` reopen the same backends elsewhere (a Spark
executor, a child process).

Invariants:

1. A URI that is not understood raises InvalidUsage naming it: an unknown
   scheme, a URI that does not parse, a host in a ``file:`` or ``sqlite:``
   URI, a control character (``urlsplit`` would drop a newline or a tab and
   open another file), a path (of any scheme, percent-decoded) with a ``..``
   component or a control character, an empty memory name. Nothing is opened
   or created then.
2. Neither :meth:`Location.describe` nor an error message shows a password
   or another secret of a URI, however malformed the URI.
3. This package never imports PySpark; psycopg is imported only when
   :class:`PostgresConsensus` is first used.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, unquote, urlsplit

from timeshard.errors import InvalidUsage
from timeshard.location._masking import masked
from timeshard.location.blob import (
    Blob,
    BlobMetadata,
    Temporaries,
    check_blob_key,
    check_blob_prefix,
)
from timeshard.location.consensus import (
    CaSResult,
    Consensus,
    SeqNo,
    VersionedData,
    check_consensus_key,
    check_new_version,
)
from timeshard.location.file import FileBlob
from timeshard.location.memory import MemoryBlob, MemoryConsensus
from timeshard.location.sqlite import SqliteConsensus
from timeshard.location.unreliable import UnreliableBlob, UnreliableConsensus

if TYPE_CHECKING:
    from timeshard.location.postgres import PostgresConsensus

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_MEMORY_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.=/-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

_ARROW_SCHEMES = ("s3", "s3a", "gs", "hdfs")

_NAMED_LOCK = threading.Lock()
_NAMED_BLOBS: dict[str, MemoryBlob] = {}
_NAMED_CONSENSUS: dict[str, MemoryConsensus] = {}


@dataclass(frozen=True, slots=True)
class Location:
    """Where shards live: a blob for data and a consensus for state."""

    blob: Blob
    consensus: Consensus

    @staticmethod
    def embedded(directory: str | Path) -> Location:
        """The embedded default: ``directory/blob`` and ``directory/consensus.sqlite``."""
        root = Path(directory).resolve()
        return Location(FileBlob(root / "blob"), SqliteConsensus(root / "consensus.sqlite"))

    @property
    def blob_uri(self) -> str | None:
        """A URI that reopens the blob (in another process too), or None if it has none."""
        return _uri(self.blob)

    @property
    def consensus_uri(self) -> str | None:
        """A URI that reopens the consensus, or None if it has none (an anonymous memory one)."""
        return _uri(self.consensus)

    def describe(self) -> str:
        """``blob <uri>, consensus <uri>`` for display, passwords masked."""
        return f"blob {_display(self.blob)}, consensus {_display(self.consensus)}"


def open_location(blob_uri: str, consensus_uri: str) -> Location:
    """The location of a blob URI and a consensus URI (see the module doc)."""
    return Location(open_blob(blob_uri), open_consensus(consensus_uri))


def open_blob(uri: str) -> Blob:
    """The blob named by ``uri``; InvalidUsage naming it if it is not understood."""
    if not isinstance(uri, str) or not uri:
        raise InvalidUsage(
            f"invalid blob URI {_shown(uri)}: use file:///dir, a path or memory://name"
        )
    _check_no_control(uri, "blob")
    if not _SCHEME.match(uri):
        return FileBlob(_checked_path(uri, uri))
    parts = _split(uri, "blob")
    scheme = parts.scheme.lower()
    if scheme == "memory":
        name = _memory_name(uri)
        with _NAMED_LOCK:
            return _NAMED_BLOBS.setdefault(name, MemoryBlob(name))
    if scheme == "file":
        if parts.netloc not in ("", "localhost") or parts.query or parts.fragment:
            raise InvalidUsage(f"invalid blob URI {_shown(uri)}: use file:///absolute/dir")
        path = unquote(parts.path)
        if not path.startswith("/"):
            raise InvalidUsage(f"invalid blob URI {_shown(uri)}: a file URI needs an absolute path")
        return FileBlob(_checked_path(path, uri))
    if scheme.startswith("arrowfs+") or scheme in _ARROW_SCHEMES:
        from timeshard.location.arrowfs import ArrowFsBlob

        inner = uri[len("arrowfs+") :] if scheme.startswith("arrowfs+") else uri
        _checked_path(unquote(_split(inner, "blob").path), uri)
        return ArrowFsBlob(inner)
    raise InvalidUsage(
        f"unsupported blob URI {_shown(uri)}: use file:///dir, a path, memory://name, "
        "s3a://bucket/dir, gs://bucket/dir, hdfs://host/dir or arrowfs+<pyarrow URI>"
    )


def open_consensus(uri: str) -> Consensus:
    """The consensus named by ``uri``; InvalidUsage naming it if it is not understood."""
    if not isinstance(uri, str) or not _SCHEME.match(uri):
        raise InvalidUsage(
            f"invalid consensus URI {_shown(uri)}: use sqlite:///file.db, postgresql://... "
            "or memory://name"
        )
    _check_no_control(uri, "consensus")
    parts = _split(uri, "consensus")
    scheme = parts.scheme.lower()
    if scheme == "memory":
        name = _memory_name(uri)
        with _NAMED_LOCK:
            return _NAMED_CONSENSUS.setdefault(name, MemoryConsensus(name))
    if scheme == "sqlite":
        if parts.netloc not in ("", "localhost") or parts.query or parts.fragment:
            raise InvalidUsage(
                f"invalid consensus URI {_shown(uri)}: "
                "use sqlite:///absolute.db or sqlite:relative.db"
            )
        path = unquote(parts.path)
        if path.startswith("//"):
            path = "/" + path.lstrip("/")
        if not path or path.startswith(":") or path.endswith("/"):
            raise InvalidUsage(f"invalid consensus URI {_shown(uri)}: it names no database file")
        return SqliteConsensus(_checked_path(path, uri))
    if scheme in ("postgres", "postgresql"):
        from timeshard.location.postgres import PostgresConsensus

        try:
            return PostgresConsensus(uri)
        except InvalidUsage as e:
            raise InvalidUsage(f"invalid consensus URI {_shown(uri)}: {masked(str(e))}") from None
    raise InvalidUsage(
        f"unsupported consensus URI {_shown(uri)}: use sqlite:///file.db, postgresql://... "
        "or memory://name"
    )


def _check_no_control(uri: str, kind: str) -> None:
    """InvalidUsage if ``uri`` has a control character (``urlsplit`` drops some silently)."""
    control = _CONTROL.search(uri)
    if control is not None:
        raise InvalidUsage(
            f"invalid {kind} URI {_shown(uri)}: control character {control.group()!r} "
            f"at position {control.start()}"
        )


def _split(uri: str, kind: str) -> SplitResult:
    """``urlsplit(uri)``; InvalidUsage naming the (masked) URI if it does not parse."""
    try:
        parts = urlsplit(uri)
    except ValueError as e:
        raise InvalidUsage(f"invalid {kind} URI {_shown(uri)}: {masked(str(e))}") from None
    return parts


def _memory_name(uri: str) -> str:
    parts = urlsplit(uri)
    name = parts.netloc + parts.path
    if not _MEMORY_NAME.fullmatch(name) or parts.query or parts.fragment:
        raise InvalidUsage(
            f"invalid memory URI {_shown(uri)}: use memory://name with [A-Za-z0-9_.=/-] in the name"
        )
    return name


def _checked_path(path: str, uri: str) -> Path:
    control = _CONTROL.search(path)
    if control is not None:
        raise InvalidUsage(
            f"invalid path in URI {_shown(uri)}: control character {control.group()!r} "
            "(percent-decoded)"
        )
    if any(part == ".." for part in Path(path).parts):
        raise InvalidUsage(f"invalid path in URI {_shown(uri)}: '..' components are not allowed")
    return Path(path)


def _uri(backend: object) -> str | None:
    if isinstance(backend, UnreliableBlob | UnreliableConsensus):
        return None
    uri = getattr(backend, "uri", None)
    return uri if isinstance(uri, str) else None


def _display(backend: object) -> str:
    if isinstance(backend, UnreliableBlob | UnreliableConsensus):
        return f"unreliable({_display(backend.inner)})"
    uri = _uri(backend)
    return f"{type(backend).__name__} (anonymous)" if uri is None else masked(uri)


def _shown(uri: object) -> str:
    """``repr(uri)``, its secrets masked: how a message names a URI."""
    return repr(masked(uri)) if isinstance(uri, str) else repr(uri)


def __getattr__(name: str) -> Any:
    if name == "PostgresConsensus":
        from timeshard.location.postgres import PostgresConsensus

        return PostgresConsensus
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Blob",
    "BlobMetadata",
    "CaSResult",
    "Consensus",
    "FileBlob",
    "Location",
    "MemoryBlob",
    "MemoryConsensus",
    "PostgresConsensus",
    "SeqNo",
    "SqliteConsensus",
    "Temporaries",
    "UnreliableBlob",
    "UnreliableConsensus",
    "VersionedData",
    "check_blob_key",
    "check_blob_prefix",
    "check_consensus_key",
    "check_new_version",
    "open_blob",
    "open_consensus",
    "open_location",
]
