"""A blob in a local (or locally mounted shared) directory.

Keys map to paths under the root; a value is written to a temporary file in
the target directory, flushed, fsynced and renamed into place, so readers see
the whole value or none. Spark tasks write parts under the same root through
pyarrow, and any Parquet reader can read them there.

Invariants:

1. Every key resolves to a path inside the root; a key that would escape it
   raises InvalidUsage naming the key, before any file is touched.
2. Temporary files (``.tmp-*``) are never listed.
3. A failure before the rename is Determinate; a failure of the rename or
   the directory fsync is Indeterminate.
"""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

from timeshard.errors import Determinate, Indeterminate, InvalidUsage
from timeshard.location.blob import BlobMetadata, check_blob_key

TMP_PREFIX = ".tmp-"


class FileBlob:
    """A blob rooted at a directory, created if missing."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise Determinate(f"cannot create blob root {str(self.root)!r}: {e}") from e

    @property
    def root_uri(self) -> str | None:
        return self.root.as_uri()

    def path(self, key: str) -> Path:
        """The file of ``key``; InvalidUsage if ``key`` is unsafe or escapes the root."""
        check_blob_key(key)
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root):
            raise InvalidUsage(f"blob key {key!r} escapes the blob root {str(self.root)!r}")
        return path

    def get(self, key: str) -> bytes | None:
        path = self.path(key)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise Determinate(f"reading blob {key!r}: {e}") from e

    def set(self, key: str, value: bytes) -> None:
        path = self.path(key)
        tmp = path.with_name(f"{TMP_PREFIX}{uuid.uuid4().hex}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(value)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            _unlink_quietly(tmp)
            if e.errno == errno.ENOSPC:
                raise Determinate(f"writing blob {key!r}: no space left on device") from e
            raise Determinate(f"writing blob {key!r}: {e}") from e
        try:
            os.replace(tmp, path)
            _fsync_dir(path.parent)
        except OSError as e:
            _unlink_quietly(tmp)
            raise Indeterminate(f"publishing blob {key!r}: {e}") from e

    def delete(self, key: str) -> int | None:
        path = self.path(key)
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise Indeterminate(f"deleting blob {key!r}: {e}") from e
        return size

    def list_keys(self, prefix: str = "") -> Iterator[BlobMetadata]:
        try:
            found = []
            for dirpath, _dirs, files in os.walk(self.root):
                for name in files:
                    if name.startswith(TMP_PREFIX) or name.startswith("."):
                        continue
                    full = Path(dirpath) / name
                    key = full.relative_to(self.root).as_posix()
                    if key.startswith(prefix):
                        found.append(BlobMetadata(key, full.stat().st_size))
        except OSError as e:
            raise Determinate(f"listing blob root {str(self.root)!r}: {e}") from e
        return iter(found)


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["FileBlob"]
