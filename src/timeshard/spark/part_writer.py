"""What a write task runs: its partition streamed into one part (executors).

:class:`PartWriter` is the function ``write_parts`` hands to ``mapInArrow``
(:mod:`timeshard.spark.parts`, "Writing"); the other plans that write parts
in their tasks call :func:`write_task_part`. A task conforms its batches to
the part schema with pyarrow, streams them into one Parquet file with page
checksums (:func:`write_part_file`) and yields one ``PART_META_DDL`` row
(:func:`part_meta_batch`), which the driver turns back into the part
(:func:`part_from_row`). A task whose partition is empty writes nothing and
yields no row. :class:`PartWriter` holds plain values only (the root URI, the
key prefix or None for the job's :data:`PREFIX_PROPERTY`, the data schema as
Arrow IPC bytes, the injected faults), so it pickles (by reference to this
module, which executors import).

Under a local root (``file://``) the part is written as a hidden ``.tmp-``
file, fsynced and hard-linked into place (:func:`_publish`), as
:class:`~timeshard.location.FileBlob` does: never over a file at the key
(other bytes there are CorruptState naming it), and never through a symbolic
link (CorruptState naming the key for a path the blob's ``set`` refuses,
before the task writes). Other roots get the whole part in one write.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from timeshard.errors import CorruptState, Determinate, InvalidUsage
from timeshard.location.blob import check_blob_key
from timeshard.location.file import check_key_path
from timeshard.location.unreliable import KeyedFaults
from timeshard.persist._internal.parts import (
    DIFF,
    TS,
    PartMeta,
    conform,
    distinct_times,
    err_row_count,
    updates_schema,
)
from timeshard.spark.part_faults import task_attempt
from timeshard.spark.part_paths import filesystem_of

PART_META_DDL = (
    "key string, size long, rows long, ts_min long, ts_max long, times array<long>, "
    "err_rows long, sha256 string"
)

_PART_META_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("size", pa.int64()),
        ("rows", pa.int64()),
        ("ts_min", pa.int64()),
        ("ts_max", pa.int64()),
        ("times", pa.list_(pa.int64())),
        ("err_rows", pa.int64()),
        ("sha256", pa.string()),
    ]
)

#: The Spark local property that gives a write's tasks its key prefix
#: (:func:`~timeshard.spark.parts.write_parts`): the driver sets it on the thread that
#: runs the write's job.
PREFIX_PROPERTY = "timeshard.parts.prefix"

_TMP_PREFIX = ".tmp-"

#: Errors of ``os.link`` on a filesystem without hard links (as ``FileBlob``'s).
_NO_HARD_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP)

_LINK_ATTEMPTS = 10


def part_meta_batch(parts: list[PartMeta]) -> pa.RecordBatch:
    """``parts`` as ``PART_META_DDL`` rows, for a task to yield (executors)."""
    rows = [
        {
            "key": p.key,
            "size": p.size_in_bytes,
            "rows": p.num_rows,
            "ts_min": p.ts_min,
            "ts_max": p.ts_max,
            "times": None if p.times is None else list(p.times),
            "err_rows": p.err_rows,
            "sha256": p.sha256,
        }
        for p in parts
    ]
    return pa.RecordBatch.from_pylist(rows, schema=_PART_META_SCHEMA)


def part_from_row(row: Any) -> PartMeta:
    """The part a collected ``PART_META_DDL`` row describes (driver).

    ``row`` is a Spark Row or a mapping with those fields.
    """
    times = row["times"]
    return PartMeta(
        row["key"],
        row["size"],
        row["rows"],
        row["ts_min"],
        row["ts_max"],
        row["sha256"],
        times=None if times is None else tuple(times),
        err_rows=row["err_rows"],
    )


@dataclass(frozen=True, slots=True)
class PartWriter:
    """What every write task runs (executors): its partition as one part.

    Called by ``mapInArrow`` with the partition's Arrow batches, whose columns
    are the part schema's in order (under positional names); yields one
    ``PART_META_DDL`` row for the part written, or nothing for an empty
    partition. Holds plain values only, so it pickles. With ``faults``, the
    task draws once and may fail before or after writing (module doc).
    """

    root_uri: str
    #: None: the job's (:data:`PREFIX_PROPERTY`, which
    #: :func:`~timeshard.spark.parts.write_parts` sets).
    key_prefix: str | None
    schema_ipc: bytes
    faults: KeyedFaults | None = None

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        data_schema = pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))
        schema = updates_schema(data_schema)
        prefix = self.key_prefix
        if prefix is None:
            from pyspark import TaskContext

            context = TaskContext.get()
            prefix = None if context is None else context.getLocalProperty(PREFIX_PROPERTY)
            if not prefix:
                raise InvalidUsage(f"a part write's job has no {PREFIX_PROPERTY!r}")
            check_blob_key(prefix)
        tables = (_conformed(b, schema, data_schema) for b in batches if b.num_rows)
        _, _, part = write_task_part(self.root_uri, prefix, schema, tables, self.faults)
        if part is not None:
            yield part_meta_batch([part])


def write_task_part(
    root_uri: str,
    key_prefix: str,
    schema: pa.Schema,
    tables: Iterable[pa.Table],
    faults: KeyedFaults | None,
) -> tuple[int, int, PartMeta | None]:
    """Write this task's ``tables`` as its part under ``key_prefix`` (executors).

    Returns the task's partition, attempt number and part (None if no rows).
    With ``faults`` the task draws once and may fail before writing, or after
    (the part exists, the task still fails), as the module doc says.
    """
    partition, attempt = task_attempt()
    key = f"{key_prefix}/part-{partition:05d}-{uuid.uuid4().hex[:12]}.parquet"
    fault = "ok" if faults is None else faults.draw(f"write:{partition}:{attempt}")
    if faults is not None and fault == "determinate":
        faults.fail("task_write.determinate", f"the write of part {key!r}")
    part = write_part_file(root_uri, key, schema, tables)
    if faults is not None and fault == "indeterminate":
        faults.fail("task_write.indeterminate", f"the write of part {key!r} (written)")
    return partition, attempt, part


def _conformed(batch: pa.RecordBatch, schema: pa.Schema, data_schema: pa.Schema) -> pa.Table:
    """A batch of the positional DataFrame as a part-schema table (executors)."""
    table = pa.Table.from_batches([batch]).rename_columns(schema.names)
    for name in (TS, DIFF):
        nulls = table.column(name).null_count
        if nulls:
            raise InvalidUsage(f"every update needs a {name}: {nulls} rows have none")
    return conform(table, data_schema)


def write_part_file(
    root_uri: str, key: str, schema: pa.Schema, tables: Iterable[pa.Table]
) -> PartMeta | None:
    """Stream ``tables`` (conformed to ``schema``) into one part at ``key``.

    Returns None and writes nothing if ``tables`` holds no rows; else the
    part with its time bounds, its SHA-256 and, when they are at most
    ``MAX_PART_TIMES``, its distinct times. The part carries page checksums.
    On failure no file is left at ``key`` under a local root (a partial object
    may be left under a remote one; it is never referenced, and GC deletes it).
    """
    fs, base = filesystem_of(root_uri)
    path = f"{base}/{key}"
    local = isinstance(fs, pafs.LocalFileSystem)
    if local:  # the blob's keys pass through no link (FileBlob invariant 1)
        check_key_path(base, key)
    tmp = f"{path.rpartition('/')[0]}/{_TMP_PREFIX}{uuid.uuid4().hex}"
    sink: pa.NativeFile | None = None
    writer: pq.ParquetWriter | None = None
    rows, errs, lo, hi = 0, 0, None, None
    times: tuple[int, ...] | None = ()
    try:
        for table in tables:
            if writer is None:
                if local:
                    os.makedirs(os.path.dirname(tmp), exist_ok=True)
                    sink = pa.OSFile(tmp, "wb")
                else:
                    sink = pa.BufferOutputStream()
                writer = pq.ParquetWriter(
                    sink, schema, compression="zstd", write_page_checksum=True
                )
            writer.write_table(table)
            bounds = pc.min_max(table.column(TS))
            t_lo, t_hi = bounds["min"].as_py(), bounds["max"].as_py()
            lo = t_lo if lo is None else min(lo, t_lo)
            hi = t_hi if hi is None else max(hi, t_hi)
            times = distinct_times(table.column(TS), times)
            rows += table.num_rows
            errs += err_row_count(table)
        if writer is None or sink is None:
            return None
        writer.close()
        if local:
            sink.close()
            size, digest = _commit_local(tmp, base, key)
        else:
            assert isinstance(sink, pa.BufferOutputStream), sink
            data = sink.getvalue()
            with fs.open_output_stream(path) as out:
                out.write(data)
            size, digest = data.size, hashlib.sha256(data).hexdigest()
    except BaseException:
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.close()
        if local:
            with contextlib.suppress(Exception):
                if sink is not None:
                    sink.close()
                os.unlink(tmp)
        raise
    return PartMeta(key, size, rows, lo, hi, digest, times, errs)


def _commit_local(tmp: str, base: str, key: str) -> tuple[int, str]:
    """Fsync ``tmp``, publish it as ``key`` under ``base`` (:func:`_publish`), fsync the
    directories up to ``base``.

    Returns the part's size and SHA-256, read back from ``tmp`` before it is published.
    """
    digest = hashlib.sha256()
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
        size = os.fstat(f.fileno()).st_size
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    path = f"{base}/{key}"
    _publish(tmp, path, key, digest.hexdigest())
    directory = os.path.dirname(path)
    while True:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        if len(directory) <= len(base) or directory == os.path.dirname(directory):
            return size, digest.hexdigest()
        directory = os.path.dirname(directory)


def _publish(tmp: str, path: str, key: str, sha256: str) -> None:
    """Give the written ``tmp`` the name ``path`` with ``os.link``, which (unlike a rename)
    fails if the name exists, then remove the name ``tmp``, as ``FileBlob.set`` publishes.

    A file already at ``path`` is never replaced: part keys carry a fresh id, so it is a
    retry with the part's bytes, else another writer's bytes (CorruptState naming ``key``).
    On a filesystem without hard links it renames after checking that the name is free.
    """
    for _ in range(_LINK_ATTEMPTS):
        try:
            os.link(tmp, path)
        except FileExistsError:
            if not _holds(path, key, sha256):
                continue  # deleted since: link again
        except OSError as e:
            if e.errno not in _NO_HARD_LINKS:
                raise
            if not (os.path.lexists(path) and _holds(path, key, sha256)):
                os.replace(tmp, path)
                return
        with contextlib.suppress(OSError):  # a temporary left is deleted with the others
            os.unlink(tmp)
        return
    raise Determinate(
        f"writing part {key!r}: it was deleted and written again {_LINK_ATTEMPTS} times "
        "while this write linked it"
    )


def _holds(path: str, key: str, sha256: str) -> bool:
    """Whether the file at ``path`` (of part ``key``) has the SHA-256 ``sha256``, False if
    there is none; CorruptState naming ``key`` if it holds other bytes or is no file."""
    digest = hashlib.sha256()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return False
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise CorruptState(
                f"part {key!r} became a symbolic link while it was written: a writer would "
                "replace it"
            ) from e
        raise
    try:
        f = open(fd, "rb")  # noqa: SIM115 (a failed open leaves fd open: closed here)
    except IsADirectoryError:
        os.close(fd)
        raise CorruptState(f"part {key!r} is a directory: a part is a file") from None
    except BaseException:
        os.close(fd)
        raise
    with f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    if digest.hexdigest() != sha256:
        raise CorruptState(
            f"part {key!r} already holds other bytes: part keys are fresh and written once, "
            "so another writer wrote there; they are left as they are"
        )
    return True


__all__ = [
    "PART_META_DDL",
    "PREFIX_PROPERTY",
    "PartWriter",
    "part_from_row",
    "part_meta_batch",
    "write_part_file",
    "write_task_part",
]
