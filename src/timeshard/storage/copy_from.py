"""COPY FROM: load CSV, JSON or Parquet files into an existing collection at one time.

```
 driver   plan_copy: check the arguments, list the files, read the collection's schema
            │          (no Spark; every mistake is InvalidUsage, nothing is written)
            v
 driver   run_copy: t = the collection's upper (or the given ``at``)
            │
 executors  one Spark job: the files, sorted, split over tasks (a large uncompressed CSV
            │  or JSON file in pieces, after one small job counts the pieces' newlines);
            │  each task reads its files (pyarrow), decodes each row or makes it a bad row,
            │  writes ONE Parquet part with every row at ``_ts = t``, ``_diff = 1``,
            │  and yields one small row: the part, its bad-row count, its first bad rows
            v
 driver   bad rows and on_error "fail": delete the parts, raise CopyError (nothing written)
          else compare-and-append the parts as the batch [upper, t + 1)
```

Input. ``path`` is a file, a directory (its files, recursively, skipping any
name below it that starts with ``.`` or ``_``, as Spark does: ``_SUCCESS``,
``.crc`` files) or a glob (``*``, ``?`` and ``[...]`` match within one path
component; a directory that matches is taken whole; a component that names an
existing file or directory as written, such as ``data[1].csv``, is that name).
A local path, or a URI that pyarrow opens (``s3a://`` is read as ``s3://``,
``hdfs://``). Spark tasks
open the files through pyarrow's filesystems, as they write parts; not
through Spark's CSV and JSON readers, which cannot say which line a record
came from. CSV and JSON files compressed by extension (``.gz``, ``.bz2``,
``.zst``, ...) are decompressed.

Formats, checked against the collection's schema (its data columns):

* ``csv``: one record per line (a quoted field cannot span lines), parsed
  strictly; an empty field is null, other fields are parsed by Arrow as the
  column's type (``"1.5"`` is not an int64). With ``header`` (the default)
  line 1 of every file names the columns, in any order, and must name
  exactly the collection's columns; without it the fields are in the
  collection's column order.
* ``json``: one object per line (JSON lines). A missing key is null, a key
  that is not a column makes the row bad; values are not coerced (as the
  FILE source decodes JSON: :func:`~timeshard.storage.file_source.decode_payload`).
* ``parquet``: every file must have exactly the collection's columns, in any
  order, each of the column's type or one that widens to it exactly (an
  integer to a wider integer, a decimal with room for it or, up to 32 bits,
  a double; float to double; string and binary to their large forms).

In CSV and JSON files, empty lines are skipped (a line of spaces or tabs is
not empty: a CSV value, or a bad row), a UTF-8 byte order mark at the start
of a file is ignored, and a trailing carriage return is dropped.

Bad rows: a line that does not parse, a line longer than ``max_line_bytes``
(64 MiB by default, newline excluded: measured, never held, so a file that is
not line-framed costs no more memory than a line may; a CSV header that long
is InvalidUsage), a value of the wrong type or out of
range, a wrong number of CSV fields, an unknown JSON key, a null in a column
of ``not_null``. A bad row is located as ``<file>:<n>``: ``n`` is its line in
the file (CSV, JSON; 1-based, a CSV header is line 1) or its row (Parquet,
1-based). With ``on_error="fail"`` (the default) the COPY raises
:class:`CopyError` naming the first :data:`REPORTED_ROWS` bad rows in
``(file, n)`` order, and writes nothing; a task stops reading at its
:data:`REPORTED_ROWS`-th bad row, so the count it gives may be a lower bound.
With ``on_error="err_rows"`` bad rows are loaded as err rows (the err-row
convention of every collection): data columns null, ``_err`` reading
``<file>:<n>: <error type>: <message>``.

Time. A COPY writes every row at one time ``t`` with one compare-and-append
of the batch ``[lower, t + 1)``, ``lower`` being the collection's upper:

* without ``at``, ``t`` is the upper when the Spark job starts. If another
  writer moves the upper meanwhile, the batch is deleted and the COPY runs
  again at the new upper (the files are read again, one job per attempt), up
  to ``attempts`` times; then it raises the last :class:`UpperMismatch`.
* with ``at``, ``t = at`` (at or beyond the upper; InvalidUsage if not). If
  another writer moves the upper but not beyond ``at``, the same parts are
  appended at the new upper (no new job); if beyond ``at``, the batch is
  deleted and the COPY raises :class:`UpperMismatch`.

Exactly once: a COPY appends at most one batch, and each attempt's batch is
either the one appended or deleted before the next begins. A COPY that
returned (or raised CopyError, InvalidUsage or UpperMismatch) is done or did
nothing; one that raised :class:`~timeshard.errors.Indeterminate` may have
been appended: look at the collection's upper before running it again.
Running a COPY again loads the files again.

Usage errors (InvalidUsage, before any Spark job): an unknown format or
on_error, ``header`` with a format other than csv, a path that does not exist
or matches no file, an unknown collection or one COPY must not write (a
view's shard, a source's output, a remap, catalog or status shard: their
writers keep them equal to something else), ``not_null`` naming a column the
collection lacks, ``at`` below the upper or not below ``MAX_TIMESTAMP`` (the
batch ends at ``at + 1``), a blob without a filesystem root.
During the job (nothing is written): a CSV header or Parquet columns that do
not match the collection, naming the file.

What runs where: :func:`plan_copy` and :func:`run_copy` run on the driver,
which holds only file names and one result row per task.
:class:`~timeshard.storage.copy_task.CopyTask` runs in executors; it
pickles (plain values only) and needs ``pyarrow`` and ``timeshard``
importable there, with the files and the blob root reachable under the same
paths.

Invariants:

1. Every row a COPY writes is at its time ``t``, in one batch ``[lower, t + 1)``
   that holds nothing else: the collection's snapshot at ``t`` is its snapshot
   at ``lower - 1`` plus the files' rows (err rows included).
2. A COPY that does not return wrote nothing: not on bad rows (``fail``), a
   failed job or an upper mismatch it does not recover from. Its parts are
   deleted.
3. No row passes through the driver.
4. A task writes at most one part; a file, or a piece of one, is read by one
   task, in order. A file larger than ``split_bytes`` (128 MiB by default;
   neither compressed nor Parquet) is read in pieces of about that size: a
   piece reads the lines that *start* in its byte range, and a first job
   counts each range's newlines so that every line keeps its number.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from timeshard.errors import InvalidUsage, TimeshardError, UpperMismatch
from timeshard.persist import (
    Appended,
    Batch,
    PersistClient,
    ShardState,
    WriteHandle,
    expire_all,
)
from timeshard.persist._internal.parts import PartMeta
from timeshard.persist._internal.state import encode_schema
from timeshard.persist.client import check_shard_id
from timeshard.persist.write import not_appended
from timeshard.progress import MAX_TIMESTAMP, Description, frontier
from timeshard.storage.copy_task import (
    PIECE_DDL,
    REPORTED_ROWS,
    RESULT_DDL,
    BadRow,
    CopyTask,
    Piece,
    count_newlines,
    file_system,
)
from timeshard.storage.file_source import DEFAULT_MAX_LINE_BYTES, hidden

FORMATS = ("csv", "json", "parquet")
ON_ERROR = ("fail", "err_rows")
DEFAULT_ATTEMPTS = 3
#: At most this many tasks per core of the session (a task writes one part).
TASKS_PER_CORE = 4
#: An uncompressed CSV or JSON file larger than this is split over tasks.
SPLIT_BYTES = 128 << 20
_GLOB = re.compile(r"[*?\[]")


class CopyError(TimeshardError):
    """Bad rows failed a COPY (``on_error="fail"``); nothing was written.

    ``rows`` are the first bad rows in ``(file, line)`` order; ``count`` is how
    many were seen, all of them if ``exact``, else a lower bound.
    """

    def __init__(self, into: str, rows: Sequence[BadRow], count: int, exact: bool) -> None:
        how_many = f"{count} bad rows" if exact else f"at least {count} bad rows"
        shown = "; ".join(" ".join(str(r).split()) for r in rows)
        super().__init__(
            f"COPY into {into!r} wrote nothing: {how_many} (on_error 'fail'); "
            f"the first {len(rows)}: {shown}"
        )
        self.into = into
        self.rows = tuple(rows)
        self.count = count
        self.exact = exact


@dataclass(frozen=True, slots=True)
class CopyPlan:
    """A checked COPY: the files to load and how (from :func:`plan_copy`)."""

    into: str
    files: tuple[str, ...]
    format: str
    schema: pa.Schema
    header: bool
    on_error: str
    not_null: tuple[str, ...]
    at: int | None
    split_bytes: int = SPLIT_BYTES
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES


@dataclass(frozen=True, slots=True)
class CopyReport:
    """What a COPY wrote: ``rows`` (``err_rows`` of them err rows) at ``time``."""

    into: str
    time: int
    upper: int
    rows: int
    err_rows: int
    files: int
    attempts: int

    def line(self) -> str:
        """One line: ``COPY <rows> rows [(<n> err rows)] from <n> files into '<c>' at time <t>``."""
        errs = f" ({self.err_rows} err rows)" if self.err_rows else ""
        files = "1 file" if self.files == 1 else f"{self.files} files"
        return f"COPY {self.rows} rows{errs} from {files} into {self.into!r} at time {self.time}"


# -- planning (driver, no Spark) ---------------------------------------------------------------


def plan_copy(
    client: PersistClient,
    path: str,
    into: str,
    *,
    format: str,
    header: bool | None = None,
    on_error: str = "fail",
    not_null: Sequence[str] = (),
    at: int | None = None,
    split_bytes: int = SPLIT_BYTES,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> CopyPlan:
    """Check a COPY's arguments and list its files (driver, no Spark; module doc).

    Raises InvalidUsage naming the offending value; nothing is written.
    """
    fmt = _choice("format", format, FORMATS)
    on_error = _choice("on_error", on_error, ON_ERROR)
    if header is not None and not isinstance(header, bool):  # "false" would read as true
        raise InvalidUsage(f"header must be True or False, got {header!r}")
    if header is not None and fmt != "csv":
        raise InvalidUsage(f"header={header!r} goes with format 'csv' only, not {fmt!r}")
    if at is not None and (not isinstance(at, int) or isinstance(at, bool) or at < 0):
        raise InvalidUsage(f"at must be a timestamp (an int >= 0), got {at!r}")
    if at is not None and at >= MAX_TIMESTAMP:
        raise InvalidUsage(
            f"at must be below {MAX_TIMESTAMP}: the COPY's batch ends at at + 1, which must be "
            f"a timestamp; got at {at}"
        )
    state = _collection(client, into)
    schema = state.data_schema
    not_null = _column_names("not_null", not_null)
    unknown = [c for c in not_null if c not in schema.names]
    if unknown:
        raise InvalidUsage(
            f"not_null names {unknown}, which collection {into!r} lacks: its columns are "
            f"{schema.names}"
        )
    if client.location.blob.root_uri is None:
        raise InvalidUsage(
            f"COPY into {into!r} needs a blob with a filesystem root (Spark tasks write its "
            "parts), not a memory blob"
        )
    upper = state.upper
    if upper.time is None:
        raise InvalidUsage(
            f"collection {into!r} is closed (its upper is empty): nothing can be added"
        )
    if at is not None and at < upper.time:
        raise InvalidUsage(
            f"at {at} is below the upper {upper.time} of collection {into!r}: the times "
            "before the upper are definite"
        )
    for name, value in (("split_bytes", split_bytes), ("max_line_bytes", max_line_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidUsage(f"{name} must be an int >= 1, got {value!r}")
    header_ = fmt == "csv" if header is None else header
    files = list_files(path)
    return CopyPlan(
        into, files, fmt, schema, header_, on_error, not_null, at, split_bytes, max_line_bytes
    )


def _choice(name: str, value: object, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise InvalidUsage(f"{name} must be one of {list(allowed)}, got {value!r}")
    return value


def _column_names(name: str, value: object) -> tuple[str, ...]:
    """``value``, an iterable of column names, as a tuple; InvalidUsage naming it if it is
    not one (a str, whose letters would be taken for names, is not)."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidUsage(f"{name} must be a list of column names, got {value!r}")
    names = tuple(value)
    if not all(isinstance(n, str) for n in names):
        raise InvalidUsage(f"{name} must be a list of column names, got {list(names)!r}")
    return names


def _collection(client: PersistClient, into: str) -> ShardState:
    """The state of collection ``into``; InvalidUsage if COPY must not write it."""
    if not isinstance(into, str):
        raise InvalidUsage(f"the collection must be named by a str, got {into!r}")
    check_shard_id(into)
    if into not in client.list_shards():
        raise InvalidUsage(
            f"unknown collection {into!r}: the location has no such shard (COPY loads into "
            "an existing collection: create it first, with its schema)"
        )
    reason = _not_writable(client, into)
    if reason is not None:
        raise InvalidUsage(f"COPY cannot write collection {into!r}: {reason}")
    return client.state(into)


def _not_writable(client: PersistClient, into: str) -> str | None:
    """Why COPY must not write ``into`` (another writer keeps it equal to something), or None."""
    # Imported here: the catalog imports timeshard.storage, whose package exports this module.
    from timeshard.catalog import CATALOG_SHARD, read_catalog
    from timeshard.storage.health import STATUS_SHARD

    if into in (CATALOG_SHARD, STATUS_SHARD):
        return "it is the location's catalog or status collection"
    for entry in read_catalog(client):
        if entry.kind == "view" and entry.name == into:
            return "it is a materialized view's shard, which its sink keeps equal to the query"
        if entry.kind == "export" and entry.name == into:
            if entry.definition.get("envelope") == "upsert":
                return (
                    "it is an UPSERT collection (one row per key, kept by its source); COPY "
                    "appends inserts"
                )
            return (
                f"it is an output of source {entry.definition.get('source')!r}, which its "
                "ingestion keeps equal to the source's records at each time"
            )
        if entry.kind == "source" and entry.definition.get("remap") == into:
            return f"it is the remap shard of source {entry.name!r}"
    return None


def list_files(path: str) -> tuple[str, ...]:
    """The files ``path`` names (a file, a directory or a glob), sorted (driver).

    Local files are named by their absolute paths, others by URIs with the
    scheme of ``path``. Raises InvalidUsage if ``path`` does not exist,
    matches no file, or it or a name under a directory it lists is not UTF-8.
    """
    if not isinstance(path, str) or not path.strip():
        raise InvalidUsage(f"path must be a non-empty str, got {path!r}")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidUsage(f"path {path!r} is not UTF-8") from None
    components = path.split("/")
    glob_at = next((i for i, c in enumerate(components) if _GLOB.search(c)), None)
    if glob_at is not None and _exists(path):  # a name with [ in it, as written
        glob_at = None
    fixed = path if glob_at is None else "/".join(components[:glob_at])
    fs, base, scheme = _filesystem(fixed or ("." if glob_at == 0 else "/"))
    if glob_at is None:
        found = _files_at(fs, base, path)
    else:
        pattern = [*base.rstrip("/").split("/"), *components[glob_at:]]
        found = _files_matching(fs, base, pattern)
        if not found:
            raise InvalidUsage(f"path {path!r} matches no file")
    return tuple(sorted((scheme + f for f in found), key=lambda f: f.encode("utf-8")))


def _filesystem(path: str) -> tuple[pafs.FileSystem, str, str]:
    """The filesystem of ``path``, its path there, and the prefix that makes it a name."""
    if "://" not in path:
        return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(path)), ""
    fs, inner = file_system(path)
    at = path.find(inner) if inner else -1
    scheme = path[:at] if at > 0 else path.split("://", 1)[0] + "://"
    return fs, inner, scheme


def _files_at(fs: pafs.FileSystem, base: str, path: str) -> list[str]:
    info = fs.get_file_info(base)
    if info.type == pafs.FileType.File:
        return [base]
    if info.type != pafs.FileType.Directory:
        raise InvalidUsage(f"path {path!r} does not exist")
    found = _walk(fs, base)
    if not found:
        raise InvalidUsage(f"directory {path!r} holds no file (hidden ones aside)")
    return found


def _walk(fs: pafs.FileSystem, directory: str) -> list[str]:
    """The files under ``directory``, none of whose names below it is hidden.

    Raises InvalidUsage naming ``directory`` if a name under it is not UTF-8
    (pyarrow lists only UTF-8 names).
    """
    infos = fs.get_file_info(pafs.FileSelector(directory, recursive=True))
    try:
        files = [i.path for i in infos if i.type == pafs.FileType.File]
    except UnicodeDecodeError:  # from a FileInfo's path
        raise InvalidUsage(f"COPY: the name of a file under {directory!r} is not UTF-8") from None
    depth = len(directory.rstrip("/").split("/"))
    return [f for f in files if not hidden(f.split("/")[depth:])]


def _exists(path: str) -> bool:
    """Whether ``path``, as written, names a file or a directory."""
    fs, base, _ = _filesystem(path)
    return fs.get_file_info(base).type in (pafs.FileType.File, pafs.FileType.Directory)


def _files_matching(fs: pafs.FileSystem, base: str, pattern: list[str]) -> list[str]:
    """The files that ``pattern`` (path components, some globs) matches, or that lie
    in a directory it matches.

    A component that names an existing file or directory as written matches it
    alone (``data[1].csv``, not ``data1.csv``); another is a glob of ``*``, ``?``
    and ``[...]``.
    """
    if fs.get_file_info(base).type != pafs.FileType.Directory:
        return []
    files = [f.split("/") for f in _walk(fs, base)]
    present = {tuple(names[: i + 1]) for names in files for i in range(len(names))}

    def matches(names: list[str]) -> bool:
        for i, (name, glob) in enumerate(zip(names, pattern, strict=False)):
            literal = (*names[:i], glob) in present
            if not (name == glob if literal else fnmatch.fnmatchcase(name, glob)):
                return False
        return True

    return ["/".join(names) for names in files if len(names) >= len(pattern) and matches(names)]


# -- running (driver: one Spark job per attempt) -----------------------------------------------


def copy_files(
    spark: Any,
    client: PersistClient,
    path: str,
    into: str,
    *,
    format: str,
    header: bool | None = None,
    on_error: str = "fail",
    not_null: Sequence[str] = (),
    at: int | None = None,
    attempts: int = DEFAULT_ATTEMPTS,
    split_bytes: int = SPLIT_BYTES,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> CopyReport:
    """Load the files of ``path`` into collection ``into`` at one time (module doc)."""
    plan = plan_copy(
        client,
        path,
        into,
        format=format,
        header=header,
        on_error=on_error,
        not_null=not_null,
        at=at,
        split_bytes=split_bytes,
        max_line_bytes=max_line_bytes,
    )
    return run_copy(spark, client, plan, attempts=attempts)


def run_copy(
    spark: Any, client: PersistClient, plan: CopyPlan, *, attempts: int = DEFAULT_ATTEMPTS
) -> CopyReport:
    """Run a planned COPY: one Spark job (two when a file is split) and one
    compare-and-append per attempt.

    Raises CopyError on bad rows (``fail``), UpperMismatch when other writers
    kept moving the upper (see the module doc); nothing is written then.
    """
    if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1:
        raise InvalidUsage(f"attempts must be an int >= 1, got {attempts!r}")
    writer = client.open_writer(plan.into)
    try:
        if not writer.schema.equals(plan.schema):
            raise InvalidUsage(
                f"collection {plan.into!r} has the schema {writer.schema}, not the planned "
                f"{plan.schema}"
            )
        mismatch: UpperMismatch | None = None
        for attempt in range(1, attempts + 1):
            lower = _lower(writer, plan)
            t = lower if plan.at is None else plan.at
            batch, outcome = _stage(spark, client, writer, plan, lower, t)
            result = _append(client, writer, batch, t)
            if isinstance(result, Appended):
                return CopyReport(
                    plan.into, t, t + 1, batch.num_rows, outcome.bad, len(plan.files), attempt
                )
            mismatch = result
            if plan.at is not None:
                break
        assert mismatch is not None
        raise mismatch
    finally:
        expire_all([writer])


def _lower(writer: WriteHandle, plan: CopyPlan) -> int:
    """The collection's upper now: the lower of the batch to append."""
    upper = writer.fetch_recent_upper()
    if upper.time is None:
        raise InvalidUsage(f"collection {plan.into!r} was closed (its upper is empty)")
    if plan.at is not None and upper.time > plan.at:
        raise UpperMismatch(frontier(plan.at), upper)
    return upper.time


@dataclass
class _Outcome:
    """The tasks' result rows, summed (driver)."""

    bad: int = 0
    stopped: bool = False
    first_bad: list[BadRow] = field(default_factory=list)

    @staticmethod
    def of(rows: Iterable[Any]) -> _Outcome:
        outcome = _Outcome()
        for r in rows:
            outcome.bad += r["bad"]
            outcome.stopped = outcome.stopped or r["stopped"]
            outcome.first_bad += [BadRow(b["file"], b["line"], b["reason"]) for b in r["first_bad"]]
        outcome.first_bad.sort(key=lambda b: (b.file.encode("utf-8"), b.line))
        del outcome.first_bad[REPORTED_ROWS:]
        return outcome


def _stage(
    spark: Any, client: PersistClient, writer: WriteHandle, plan: CopyPlan, lower: int, t: int
) -> tuple[Batch, _Outcome]:
    """The files' rows at ``t`` as a staged batch ``[lower, t + 1)``: one Spark job.

    Raises CopyError (after deleting the parts) on bad rows with ``fail``.
    """
    from timeshard.spark.parts import await_tasks, current_task_faults, typed_errors
    from timeshard.storage.upsert_pass import delete_batch_files, written_parts

    blob, config = client.location.blob, client.config
    assert blob.root_uri is not None, "plan_copy checks the blob"
    prefix = f"{plan.into}/{writer.writer_id}/{uuid.uuid4().hex}"
    task = CopyTask(
        blob.root_uri,
        prefix,
        plan.schema.serialize().to_pybytes(),
        plan.format,
        plan.header,
        plan.on_error,
        plan.not_null,
        t,
        plan.into,
        current_task_faults(),
        plan.max_line_bytes,
    )
    cores = max(int(spark.sparkContext.defaultParallelism), 1)
    try:
        with typed_errors():
            pieces = _pieces(spark, plan)
            slices = min(len(pieces), cores * TASKS_PER_CORE)
            rows = [(p.file, p.start, p.end, p.line) for p in pieces]
            seeds = spark.sparkContext.parallelize(rows, slices)
            out = spark.createDataFrame(seeds, PIECE_DDL).mapInArrow(task, RESULT_DDL)
            collected = out.collect()
    except BaseException:
        with contextlib.suppress(Exception):  # what stays behind is garbage for GC
            await_tasks(spark)
        delete_batch_files(blob, prefix, config)
        raise
    outcome = _Outcome.of(collected)
    if plan.on_error == "fail" and outcome.bad:
        delete_batch_files(blob, prefix, config)
        raise CopyError(plan.into, outcome.first_bad, outcome.bad, not outcome.stopped)
    entries = [
        (prefix, r["partition"], r["attempt"], None if r["part"] is None else json.loads(r["part"]))
        for r in collected
    ]
    parts = written_parts(entries, blob, prefix, config)
    return _batch(client, writer, lower, t, parts), outcome


def _pieces(spark: Any, plan: CopyPlan) -> list[Piece]:
    """What the tasks read: whole files, but uncompressed CSV and JSON files larger than
    ``plan.split_bytes``, which are split into pieces of about that size.

    A split file's pieces need the number of their first line: one Spark job
    counts the newlines of each piece's bytes first (:func:`count_newlines`),
    and each piece starts at line ``1 +`` the newlines of the pieces before it.
    """
    sizes = _split_sizes(plan)
    if not sizes:
        return [Piece(f) for f in plan.files]
    ranges = [
        Piece(f, start, min(start + plan.split_bytes, size))
        for f, size in sizes.items()
        for start in range(0, size, plan.split_bytes)
    ]
    counted = spark.sparkContext.parallelize(
        [(p.file, p.start, p.end) for p in ranges], len(ranges)
    ).map(lambda r: count_newlines(Piece(r[0], r[1], r[2])))
    lines = dict(zip(((p.file, p.start) for p in ranges), counted.collect(), strict=True))
    pieces = []
    for file in plan.files:
        if file not in sizes:
            pieces.append(Piece(file))
            continue
        before = 0
        for start in range(0, sizes[file], plan.split_bytes):
            end = min(start + plan.split_bytes, sizes[file])
            pieces.append(Piece(file, start, end, 1 + before))
            before += lines[(file, start)]
    return pieces


def _split_sizes(plan: CopyPlan) -> dict[str, int]:
    """The files of ``plan`` to split, with their sizes (driver: one stat per file)."""
    if plan.format == "parquet":
        return {}
    out = {}
    for file in plan.files:
        try:
            pa.Codec.detect(file)
            continue  # compressed: read whole
        except (TypeError, ValueError):
            pass
        fs, path = file_system(file) if "://" in file else (pafs.LocalFileSystem(), file)
        size = fs.get_file_info(path).size or 0
        if size > plan.split_bytes:
            out[file] = size
    return out


def _batch(
    client: PersistClient, writer: WriteHandle, lower: int, t: int, parts: tuple[PartMeta, ...]
) -> Batch:
    desc = Description(frontier(lower), frontier(t + 1))
    schema = encode_schema(writer.schema)
    blob, config = client.location.blob, client.config
    return Batch(blob, writer.shard_id, writer.writer_id, desc, parts, schema, config)


def _append(
    client: PersistClient, writer: WriteHandle, batch: Batch, t: int
) -> Appended | UpperMismatch:
    """Append ``batch`` (every row at ``t``); while the upper moves but not past ``t``,
    append its parts at the new upper. A mismatch past ``t`` deletes the batch."""
    while True:
        lower = batch.desc.lower
        try:
            result = writer.compare_and_append_batch([batch], lower, t + 1)
        except BaseException as e:
            if not_appended(e):  # else the batch may be in the collection: its parts stay
                batch.delete()
            raise
        if isinstance(result, Appended):
            return result
        current = result.current.time
        if current is None or current > t:
            batch.delete()
            return result
        batch = _batch(client, writer, current, t, batch.parts)


__all__ = [
    "DEFAULT_ATTEMPTS",
    "FORMATS",
    "ON_ERROR",
    "REPORTED_ROWS",
    "BadRow",
    "CopyError",
    "CopyPlan",
    "CopyReport",
    "copy_files",
    "list_files",
    "plan_copy",
    "run_copy",
]
