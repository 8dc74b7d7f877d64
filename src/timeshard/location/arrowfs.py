"""A blob on any filesystem pyarrow reaches: ``s3://``/``s3a://``, ``gs://``, ``hdfs://``.

Spark tasks and the driver both reach such a blob through ``pyarrow.fs``; Spark
itself reads the parts under the Hadoop URI (``s3a://`` needs the user to add
hadoop-aws to ``spark.jars.packages``). Values are written to a temporary key
and moved into place where the filesystem supports an atomic move (HDFS); on
object stores a single PUT is atomic already. A local root (``arrowfs+file://``)
is served by :class:`~timeshard.location.FileBlob` on the same directory:
pyarrow's ``move`` replaces a file a racing writer moved there first, writes
nothing to disk before it returns, and follows symbolic links anywhere.

A write checks that its key is free and then moves (or PUTs) its value: on
HDFS and object stores two writers of *other* bytes racing between the check
and the move may both return, the later value replacing the earlier (pyarrow
offers no move or PUT that fails if the key exists). Keys name their writer and
batch, so only a caller bug writes other bytes to one key.

Invariants:

1. Keys are checked with ``check_blob_key`` (prefixes with
   ``check_blob_prefix``) before any call; a key is written once: ``set`` of
   the same bytes again is a no-op, of other bytes InvalidUsage.
2. A URI pyarrow does not understand raises InvalidUsage naming it; every
   other pyarrow error is reported as Determinate for reads (and for opening)
   and Indeterminate for writes and deletes.
3. On an object store a key reads as absent (``get`` None, not listed,
   ``delete`` None) only if the root's bucket exists; a missing bucket (a
   typo, deleted, not yet created) raises Determinate naming it, so that no
   part reads as lost and no listing as empty because of it.
4. A listing names only keys ``get`` and ``delete`` accept: temporary and hidden
   files, files in hidden directories and paths no valid key spells are never listed.
   The temporaries a write left behind (``<directory>/.tmp-<hex>``, killed before its
   move) are listed by :meth:`ArrowFsBlob.list_temporaries` and deleted by
   :meth:`ArrowFsBlob.delete_temporary` only, which take nothing else.
5. A local root behaves as a FileBlob on its directory, symbolic links included
   (CorruptState for a link out of the root, through a directory, or in a loop);
   HDFS (where links are disabled by default) and object stores have none.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.fs as pafs

from timeshard.errors import Determinate, Indeterminate, InvalidUsage
from timeshard.location._masking import masked
from timeshard.location.blob import (
    BlobMetadata,
    check_blob_key,
    check_blob_prefix,
    check_blob_value,
)
from timeshard.location.file import (
    TMP_PREFIX,
    FileBlob,
    check_temporary_key,
    spells_a_key,
    spells_a_temporary,
)

#: How long a bucket seen to exist is taken to (seconds): an absent key then asks again.
_BUCKET_SEEN_S = 60.0


class ArrowFsBlob:
    """A blob rooted at a filesystem URI pyarrow understands."""

    def __init__(self, uri: str) -> None:
        self.uri = uri.rstrip("/")
        arrow_uri = "s3://" + self.uri[len("s3a://") :] if self.uri.startswith("s3a://") else uri
        try:
            self.fs, base = pafs.FileSystem.from_uri(arrow_uri)
        except pa.ArrowInvalid as e:  # pyarrow does not understand the URI
            raise InvalidUsage(masked(f"invalid blob URI {uri!r}: {e}")) from None
        except Exception as e:
            raise Determinate(masked(f"opening blob {uri!r}: {e}")) from e
        self.base = base.rstrip("/")
        self._object_store = isinstance(self.fs, pafs.S3FileSystem | pafs.GcsFileSystem)
        #: When the root's bucket was last seen to exist (monotonic seconds): a write checks
        #: that its key is absent, and an absent key asks for the bucket at most this often.
        self._bucket_seen_at: float | None = None
        #: The blob of a local root (see the module doc), which serves every call.
        self._local = FileBlob(base) if isinstance(self.fs, pafs.LocalFileSystem) else None

    @property
    def root_uri(self) -> str | None:
        return self.uri

    def _path(self, key: str) -> str:
        return f"{self.base}/{check_blob_key(key)}"

    def get(self, key: str) -> bytes | None:
        if self._local is not None:
            return self._local.get(key)
        path = self._path(key)
        try:
            if self.fs.get_file_info(path).type == pafs.FileType.File:
                with self.fs.open_input_stream(path) as f:
                    return bytes(f.read())
        except FileNotFoundError:
            pass
        except Exception as e:
            raise Determinate(f"reading blob {key!r}: {e}") from e
        self._check_bucket(f"reading blob {key!r}")
        return None

    def _check_bucket(self, what: str) -> None:
        """Determinate if this is an object store whose root's bucket is known not to exist
        (asked at most every :data:`_BUCKET_SEEN_S` once it was seen to exist).

        Credentials that may use objects but not look at the bucket itself (an S3
        policy granting a prefix, GCS's objectAdmin) get an error here, not NotFound:
        the answer that prompted the check stands then (the bucket answered it).
        """
        if not self._object_store:
            return
        seen = self._bucket_seen_at
        if seen is not None and time.monotonic() - seen < _BUCKET_SEEN_S:
            return
        bucket = self.base.split("/", 1)[0]
        try:
            kind = self.fs.get_file_info(bucket).type
        except Exception:
            return
        if kind == pafs.FileType.NotFound:
            raise Determinate(f"{what}: bucket {bucket!r} does not exist")
        self._bucket_seen_at = time.monotonic()

    def set(self, key: str, value: bytes) -> None:
        if self._local is not None:
            return self._local.set(key, value)
        path = self._path(key)
        value = check_blob_value(value)
        existing = self.get(key)
        if existing is not None:
            if existing == value:
                return
            raise InvalidUsage(
                f"blob key {key!r} already holds {len(existing)} other bytes; keys are written once"
            )
        try:
            kind = self.fs.get_file_info(path).type
        except Exception as e:  # nothing written yet
            raise Determinate(f"writing blob {key!r}: {e}") from e
        if kind == pafs.FileType.Directory:
            raise InvalidUsage(f"blob key {key!r} is a directory of other keys")
        parent = path.rsplit("/", 1)[0]
        target = path if self._object_store else f"{parent}/{TMP_PREFIX}{uuid.uuid4().hex}"
        try:
            self.fs.create_dir(parent, recursive=True)
            with self.fs.open_output_stream(target) as f:
                f.write(value)
            if target != path:
                self.fs.move(target, path)
        except Exception as e:
            if target != path:  # a temporary file left by a failed write or move
                with contextlib.suppress(Exception):
                    self.fs.delete_file(target)
                self._check_no_key_above(key)
            raise Indeterminate(f"writing blob {key!r}: {e}") from e

    def _check_no_key_above(self, key: str) -> None:
        """InvalidUsage if a key above ``key`` holds a value on a filesystem with
        directories, where no write of ``key`` can succeed (asked after one failed)."""
        parts = key.split("/")
        for i in range(1, len(parts)):
            above = "/".join(parts[:i])
            try:
                kind = self.fs.get_file_info(f"{self.base}/{above}").type
            except Exception:
                return  # the failure that prompted this stands
            if kind == pafs.FileType.File:
                raise InvalidUsage(
                    f"blob key {key!r} is below the key {above!r}, which holds a value: "
                    "a filesystem blob cannot hold both"
                )

    def delete(self, key: str) -> int | None:
        if self._local is not None:
            return self._local.delete(key)
        path = self._path(key)
        try:
            info = self.fs.get_file_info(path)
        except Exception as e:  # nothing deleted yet
            raise Determinate(f"deleting blob {key!r}: {e}") from e
        if info.type != pafs.FileType.File:
            self._check_bucket(f"deleting blob {key!r}")
            return None
        try:
            self.fs.delete_file(path)
        except Exception as e:
            raise Indeterminate(f"deleting blob {key!r}: {e}") from e
        return int(info.size or 0)

    def list_keys(self, prefix: str = "") -> Iterator[BlobMetadata]:
        if self._local is not None:
            return self._local.list_keys(prefix)
        found = self._listed(prefix, spells_a_key)
        if not found:
            self._check_bucket(masked(f"listing blob {self.uri!r}"))
        return iter(found)

    def list_temporaries(self, prefix: str = "") -> Iterator[BlobMetadata]:
        if self._local is not None:
            return self._local.list_temporaries(prefix)
        return iter(self._listed(prefix, spells_a_temporary))

    def _listed(self, prefix: str, wanted: Callable[[str], object]) -> list[BlobMetadata]:
        """Every file whose key starts with ``prefix`` and is ``wanted``: one
        listing of the deepest directory ``prefix`` names (not of the whole root: on an
        object store, a write's listing of its own batch costs that batch's keys)."""
        check_blob_prefix(prefix)
        directory = prefix.rpartition("/")[0]
        root = f"{self.base}/{directory}" if directory else self.base
        selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
        try:
            infos = self.fs.get_file_info(selector)
        except Exception as e:
            raise Determinate(masked(f"listing blob {self.uri!r}: {e}")) from e
        found = []
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            key = info.path[len(self.base) + 1 :]
            if not key.startswith(prefix) or not wanted(key):
                continue
            found.append(BlobMetadata(key, int(info.size or 0)))
        return found

    def delete_temporary(self, key: str) -> int | None:
        if self._local is not None:
            return self._local.delete_temporary(key)
        directory, _, name = check_temporary_key(key).rpartition("/")
        path = f"{self._path(directory)}/{name}"
        try:
            info = self.fs.get_file_info(path)
        except Exception as e:  # nothing deleted yet
            raise Determinate(f"deleting temporary {key!r}: {e}") from e
        if info.type != pafs.FileType.File:
            return None
        try:
            self.fs.delete_file(path)
        except FileNotFoundError:
            return None
        except Exception as e:
            raise Indeterminate(f"deleting temporary {key!r}: {e}") from e
        return int(info.size or 0)


__all__ = ["ArrowFsBlob"]
