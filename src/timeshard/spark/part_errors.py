"""Spark failures told apart: a missing or corrupt part, a fault, a timeshard error (driver).

Spark reports a failure in its tasks as its own exception. :func:`typed_errors`,
around a Spark action, re-raises the timeshard error behind one
(:func:`typed_error`): an InvalidUsage, Determinate, CorruptState or PartError
raised in a Python task, or a part Spark's reader failed on or found no file
for. Such a part is judged by its bytes, read again on the driver
(:func:`check_part_file`): not the recorded ones is PartError, unreadable is
Determinate (a fault), the recorded ones Determinate too (the part is sound, the
read failed), a symbolic link the blob's ``get`` refuses CorruptState. For that
``read_parts`` records the parts it plans (:func:`_plan`). What is caught and
what is not: :mod:`timeshard.spark.parts`, "Errors" and "Footers".
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import pyarrow.fs as pafs

from timeshard.errors import CorruptState, Determinate, InvalidUsage, PartError, TimeshardError
from timeshard.location.file import open_served
from timeshard.persist._internal.parts import PartMeta
from timeshard.spark.part_paths import filesystem_of


def check_part_file(root_uri: str, key: str, size: int, sha256: str | None) -> None:
    """Read the part ``key`` under ``root_uri`` whole; PartError unless it has ``size`` bytes
    whose SHA-256 is ``sha256`` (any, if None), Determinate if reading it fails.

    Under a local root the part is opened as the blob's ``get`` opens it
    (:func:`~timeshard.location.file.open_served`: each component below the previous one's
    descriptor, following no link but one at the key to a file inside the root): a symbolic
    link on its path out of the root, to a directory on the way, or a loop raises
    CorruptState naming the key, also one made while it is opened, and a key ``get`` serves
    no file for (a dangling link, a directory) is a missing part."""
    digest = hashlib.sha256()
    read = 0
    try:  # read to the end: the stat size may lie
        with _open_part(root_uri, key) as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
                read += len(chunk)
    except FileNotFoundError:
        raise PartError(key, "missing") from None
    except OSError as e:
        raise Determinate(f"reading part {key!r}: {e}") from e
    if read != size:
        raise PartError(key, f"corrupt: it has {read} bytes, the state says {size}")
    if sha256 is not None and digest.hexdigest() != sha256:
        raise PartError(key, "corrupt: its SHA-256 differs from the one the state recorded")


def _open_part(root_uri: str, key: str) -> Any:
    """The part ``key`` under ``root_uri``, open for reading (:func:`check_part_file`);
    under a local root the file ``get`` serves, FileNotFoundError where it serves none."""
    fs, base = filesystem_of(root_uri)
    if not isinstance(fs, pafs.LocalFileSystem):
        return fs.open_input_stream(f"{base}/{key}")
    fd = open_served(base, key)
    if fd is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), f"{base}/{key}")
    try:  # a regular file: open_served serves no other
        return open(fd, "rb")  # the caller closes it; a failed open closes fd here
    except BaseException:
        os.close(fd)
        raise


#: The parts of the latest Spark reads (key -> blob root, part), so that a failed read of
#: one is told apart by its bytes: not the recorded ones (corrupt), or unreadable (a fault).
_planned: OrderedDict[str, tuple[str, PartMeta]] = OrderedDict()

_planned_lock = threading.Lock()

_PLANNED_MAX = 100_000


def _plan(root_uri: str, parts: list[PartMeta]) -> None:
    with _planned_lock:
        for part in parts:
            _planned[part.key] = (root_uri, part)
            _planned.move_to_end(part.key)
        while len(_planned) > _PLANNED_MAX:
            _planned.popitem(last=False)


def _planned_part(key: str) -> tuple[str, PartMeta] | None:
    with _planned_lock:
        return _planned.get(key)


_PYTHON_ERROR = re.compile(
    r"timeshard\.errors\.(PartError|InvalidUsage|Determinate|CorruptState): ([^\n]*)"
)

_PART_ERROR = re.compile(r"part '([^']+)' is (.*)")

# File paths in Spark's messages are decoded: they may hold spaces.
_FAILED_READ = re.compile(r"\[FAILED_READ_FILE\.(\w+)\][^\n]*? reading file ([^\n]+?\.parquet)")

_NOT_FOUND = re.compile(
    r"FileNotFoundException: ([^\n]+?\.parquet)"
    r"|\[PATH_NOT_FOUND\] Path does not exist: ([^\n]+?\.parquet)"
)

_CAUSE = re.compile(r"^Caused by: ([^\n]*)", re.MULTILINE)

#: How Java's file streams (Hadoop's local reader) say a file may not be opened (EACCES),
#: which Hadoop reports as a FileNotFoundException.
_DENIED = re.compile(r"FileNotFoundException: [^\n]*\(Permission denied\)$")

#: The exceptions of I/O that failed, not of bytes that did not decode: a plain IOException
#: (parquet's own for bad bytes have a deeper cause, or are its own types), a timeout, the
#: network, an object store's client.
_IO_CAUSE = re.compile(
    r"(java\.io\.(IOException|InterruptedIOException)|java\.net\.\w+|javax\.net\.ssl\.\w+"
    r"|java\.util\.concurrent\.TimeoutException|java\.nio\.channels\.\w+"
    r"|org\.apache\.hadoop\.fs\.s3a\.(?!RemoteFileChanged)\w+|org\.apache\.hadoop\.(ipc|net)\.\w+"
    r"|software\.amazon\.awssdk\.[\w.]+|com\.amazonaws\.[\w.]+)(:|$)"
)


@contextlib.contextmanager
def typed_errors() -> Iterator[None]:
    """Re-raise a Spark failure caused by timeshard as the timeshard error.

    Runs on the driver, around a Spark action::

        with typed_errors():
            snapshot_df(spark, reader, as_of).collect()

    Converts a failure to read a part (missing, or corrupted in place) into
    PartError naming the part, and a PartError or InvalidUsage raised in a
    Python task or data source (which Spark reports as its own exception) into
    that error. Anything else propagates unchanged.
    """
    try:
        yield
    except TimeshardError:
        raise
    except Exception as e:
        typed = typed_error(e)
        if typed is None:
            raise
        raise typed from e


def typed_error(error: BaseException) -> TimeshardError | None:
    """The timeshard error behind a Spark exception, or None if there is none."""
    text = str(error)
    python = _PYTHON_ERROR.search(text)
    if python is not None:
        kind, message = python.groups()
        if kind == "InvalidUsage":
            return InvalidUsage(message)
        if kind == "Determinate":
            return Determinate(message)
        if kind == "CorruptState":
            return CorruptState(message)
        part = _PART_ERROR.match(message)
        if part is not None:
            return PartError(part.group(1), part.group(2))
    failed = _FAILED_READ.search(text)
    not_found = _NOT_FOUND.search(text)
    if failed is not None:
        key = _key_of(failed.group(2))
        causes = _CAUSE.findall(text)
        cause = causes[-1] if causes else failed.group(0)
        if failed.group(1) == "FILE_NOT_EXIST":
            return _not_found(key, cause)
        return _failed_read(key, cause)
    if not_found is not None:
        line_end = text.find("\n", not_found.end())
        line = text[not_found.start() : None if line_end < 0 else line_end]
        return _not_found(_key_of(not_found.group(1) or not_found.group(2)), line)
    return None


def _not_found(key: str, cause: str) -> TimeshardError:
    """Why Spark found no file at the part ``key`` (``cause``: its deepest exception).

    Hadoop's local reader says so for a file it may not open too (EACCES:
    ``FileNotFoundException: <path> (Permission denied)``), which is a fault, not a missing
    part. The part is read again here (:func:`check_part_file`), as for :func:`_failed_read`:
    gone is PartError "missing", unreadable Determinate, the recorded bytes Determinate too
    (the part is sound, Spark's read failed). A part no read of this process planned is
    missing unless ``cause`` says permission was denied.
    """
    planned = _planned_part(key)
    if planned is None:
        if _DENIED.search(cause):
            return Determinate(f"reading part {key!r}: {cause}")
        return PartError(key, "missing")
    return _read_again(
        key,
        planned,
        f"Spark's reader found no part {key!r}, yet it holds the bytes the state recorded: {cause}",
    )


def _failed_read(key: str, cause: str) -> TimeshardError:
    """Why Spark failed to read the part ``key`` (``cause``: its deepest exception).

    The part's bytes decide, read again here: not the recorded ones is PartError
    (corrupt), unreadable is Determinate (a fault: I/O, a timeout), the recorded ones is
    Determinate too (the read failed, the part is sound), a symbolic link the blob's ``get``
    refuses CorruptState (:func:`check_part_file`). A part no read of this process
    planned, or with no recorded digest, is judged by ``cause``: an I/O or network
    exception is Determinate, anything else PartError.
    """
    planned = _planned_part(key)
    if planned is None or planned[1].sha256 is None:
        if _IO_CAUSE.match(cause):
            return Determinate(f"reading part {key!r}: {cause}")
        return PartError(key, f"corrupt: {cause}")
    return _read_again(
        key,
        planned,
        f"reading part {key!r} failed, yet its bytes are the ones the state recorded: {cause}",
    )


def _read_again(key: str, planned: tuple[str, PartMeta], sound: str) -> TimeshardError:
    """What the driver's re-read of the planned part ``key`` (its blob root, its metadata)
    finds after Spark's read of it failed (:func:`check_part_file`): PartError,
    Determinate or CorruptState; Determinate ``sound`` if it holds the recorded bytes."""
    root, part = planned
    try:
        check_part_file(root, key, part.size_in_bytes, part.sha256)
    except (PartError, Determinate, CorruptState) as e:
        return e
    return Determinate(sound)


def _key_of(uri: str) -> str:
    """The part key of a file URI: its last four path components (invariant 1)."""
    return "/".join(uri.split("/")[-4:])


__all__ = ["check_part_file", "typed_error", "typed_errors"]
