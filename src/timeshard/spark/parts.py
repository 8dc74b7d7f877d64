"""Parts written and read by Spark tasks.

Writing (``write_parts``)::

    DataFrame --conform_df--> mapInArrow(PartWriter) --collect--> [PartMeta]
      driver: names and types,   executors: one task = one       driver: one small
      no Spark job               Parquet file in the blob root    row per part

Every task casts its rows to the part schema with pyarrow
(:func:`timeshard.persist._internal.parts.conform`), streams them into one
Parquet file at ``<key_prefix>/part-<partition:05d>-<id>.parquet`` under the
blob root, and returns one ``PART_META_DDL`` row: key, size in bytes, rows,
least and greatest ``_ts``, the distinct ``_ts`` when there are at most
``MAX_PART_TIMES`` (else null), how many rows are err rows, and the
SHA-256 of the part's bytes. Parts carry Parquet page checksums. No data
passes through the driver. A task whose partition is empty writes nothing
and returns no row. A task that writes parts in another plan yields
:func:`part_meta_batch` of what :func:`write_part_file` returned, and the
driver turns the collected rows back into parts with :func:`part_from_row`.

Reading (``read_parts``)::

    [PartMeta] --check_parts--> spark.read.schema(part schema).parquet(*uris)
      driver: every part exists with      executors: Spark's Parquet reader,
      its size, in one listing call       no footer filtering (below)

Footers. Parquet's footer (row-group statistics, dictionaries, bloom filters,
column indexes, row counts, page offsets) carries no checksum, and page
checksums cover only pages. Spark's reader skips row groups and pages by the
footer for a pushed filter (``_ts <= as_of``), so one flipped byte in a
statistic dropped rows silently. Every read of parts turns that filtering off
(:data:`NO_FOOTER_FILTERING`, options of the read alone: other Parquet reads
of the session keep it); the filter is still applied to every row. A part's
rows are rarely outside the filter anyway: a part holds the updates of one
batch, and reads are at or after its times. What this leaves: a flipped row
count or page offset in a footer. Checking each part's recorded SHA-256 in
every read's tasks (a Python task reading each part whole, in the same job)
catches those too, and was measured and not taken: at 1M rows and 1% change
a tick, it made a linear view's tick 2x and a grouped view's 1.6x.

What runs where (as in ``pyspark.sql.datasource``):

* driver: :func:`conform_df`, :func:`check_parts`, collecting part rows,
  deleting the parts of a failed write, :func:`typed_errors`,
  :func:`inject_task_faults`;
* executors: :class:`PartWriter` and :class:`PartReadFaults`. They must
  pickle, so they hold plain values only (the root URI, the key prefix, the
  data schema as Arrow IPC bytes, the injected faults);
  executors need ``pyarrow`` and ``timeshard`` importable by their Python
  (``PYSPARK_PYTHON``) and must reach the blob root under the same URI.

Local roots (``file://``) are written as a hidden ``.tmp-`` file that is
fsynced and hard-linked into place, as :class:`~timeshard.location.FileBlob` does
(never over a file at the key: other bytes there are CorruptState naming it),
and never through a symbolic link (a task raises CorruptState naming the key
for a path the blob's ``set`` refuses, before it writes);
other roots (``s3a://``, ``hdfs://``, ...) get the whole part in one write.

A blob with no filesystem root (the memory blob) cannot be reached by
executors. Such writes collect the DataFrame to the driver with ``toArrow``
and store one part through ``blob.set``; such reads decode the parts on the
driver and build the DataFrame from Arrow. That is the small-data path, for
tests and tools.

Injected faults (the nemesis). :func:`inject_task_faults` installs, on the
driver, a source of :class:`~timeshard.location.unreliable.KeyedFaults`.
While it gives one, every ``write_parts``/``read_parts`` call takes a fresh
one (driver) and hands it to its tasks, where each task draws once by its
partition and attempt number (executors): a write task fails before writing
its part, or after it (the part exists, the task still fails); a read task
fails before yielding rows (a pass-through ``mapInArrow`` behind the Parquet
scan, added only then). A failure is ``OSError(EIO)``, recorded in the
faults' journal by the task that injects it. Without a source (the default)
the plan has no such step and no task injects anything.

Errors. A write that does not fit the shard raises InvalidUsage before any
Spark job runs. A part that is missing, or whose size differs from the one the
state recorded (truncated, overwritten), raises PartError when ``read_parts``
is called; under a local root, a part whose path passes through a symbolic link
the blob refuses (out of the root, a directory link, a loop) raises
CorruptState naming its key then, as the blob's ``get`` does (Spark's reader
would follow the link). A part corrupted in place surfaces only when Spark reads it, at
the action (``collect``, ``count``, a write), as a Spark exception naming the
file, where Spark's reader sees it: it verifies the page checksums
(``VERIFY_PAGE_CHECKSUMS``) and fails on a footer it cannot decode, but checks no
SHA-256 (a pass over every byte read, every tick), so a corruption it cannot see
(a footer whose row count was lowered) is read as it is (see "Footers"); the
pyarrow path reads parts whole and checks their SHA-256. A part that cannot
be read (I/O, a timeout) is a
fault, not a corrupt part. Run the action inside :func:`typed_errors` to get
PartError naming the part, or Determinate for the fault, instead: a read that
Spark's reader failed is told apart by the part's bytes, read again on the
driver (:func:`typed_error`; a part that became a symbolic link the blob refuses is
CorruptState there, as at ``read_parts``). So is a part Spark's reader found no file
for: Hadoop's local reader says that of a file it may not open (EACCES) too, a fault.

Invariants:

1. Part keys are ``<shard>/<writer>/<batch>/part-<partition>-<id>.parquet``:
   exactly four components, as GC expects.
2. It is an error to write a DataFrame whose columns are not the shard's data
   columns plus ``_ts``, ``_diff`` and optionally ``_err``, or whose types are
   neither the shard's nor widened to them (integers to wider integers,
   decimals or doubles; float to double); nothing is written then.
3. If the Spark job of a write fails, every part it wrote under ``key_prefix``
   is deleted before the error is raised; if it succeeds, every file under
   ``key_prefix`` but the parts returned (those of task attempts that failed
   after writing, or lost to a speculative copy) is deleted before they are
   returned. Either way, so are the hidden temporaries there (of attempts
   killed while they wrote). An attempt still running then (a speculative copy
   being killed) may leave its part or temporary after that: GC deletes it
   once the writer is gone, or the batch is in the shard.
4. A missing part, and a corrupt one that Spark's reader fails on, raise
   PartError; no part is ever skipped (``ignoreCorruptFiles``/
   ``ignoreMissingFiles`` are off for every read), read as other data through a
   corrupt page (every read verifies page checksums), or read as fewer rows
   through a statistic of its footer (no read filters by them). A corruption
   Spark's reader cannot see is not caught here (above, and "Footers"). A part
   that cannot be read is Determinate, never PartError.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import threading
import urllib.parse
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ByteType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NullType,
    ShortType,
    StringType,
)

from timeshard.errors import (
    CorruptState,
    Determinate,
    InvalidUsage,
    PartError,
    TimeshardError,
)
from timeshard.location.blob import Blob, check_blob_key
from timeshard.location.file import check_key_path, open_served, served_sizes
from timeshard.location.unreliable import KeyedFaults
from timeshard.persist._internal.blobio import delete_keys, read_part, write_part
from timeshard.persist._internal.parts import (
    DIFF,
    ERR,
    TS,
    PartMeta,
    conform,
    distinct_times,
    err_row_count,
    updates_schema,
)
from timeshard.persist.config import PersistConfig
from timeshard.persist.gc import delete_temporaries_under
from timeshard.spark.session import arrow_to_spark_schema
from timeshard.spark.sqltext import empty_frame, java_strings, quoted, select_exprs, type_sql

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
#: The Parquet reader option that verifies page checksums (Spark's reader skips them by
#: default); a session's Hadoop conf sets it only when the session starts with it.
VERIFY_PAGE_CHECKSUMS = "parquet.page.verify-checksum.enabled"
#: Parquet's row-group and page filtering by the footer's statistics, dictionaries, bloom
#: filters and column indexes, turned off for every read of parts (module doc, "Footers").
NO_FOOTER_FILTERING = (
    "parquet.filter.stats.enabled",
    "parquet.filter.dictionary.enabled",
    "parquet.filter.bloom.enabled",
    "parquet.filter.columnindex.enabled",
)
_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)
_INTEGRAL_DIGITS: dict[type[DataType], int] = {
    ByteType: 3,
    ShortType: 5,
    IntegerType: 10,
    LongType: 19,
}
_TMP_PREFIX = ".tmp-"
#: Errors of ``os.link`` on a filesystem without hard links (as ``FileBlob``'s).
_NO_HARD_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP)
_LINK_ATTEMPTS = 10
#: The characters of Hadoop's glob patterns, which Spark expands in the paths it reads.
_GLOB_CHARACTER = re.compile(r"[{}\[\]*?\\]")
_task_faults: Callable[[], KeyedFaults | None] | None = None


def inject_task_faults(source: Callable[[], KeyedFaults | None] | None) -> None:
    """Make the tasks of later writes and reads inject faults (driver; see the module doc).

    ``source`` is asked once per ``write_parts``/``read_parts`` call and gives
    the faults for that call's tasks, or None for none; ``None`` removes it.
    """
    global _task_faults
    _task_faults = source


def current_task_faults() -> KeyedFaults | None:
    return None if _task_faults is None else _task_faults()


def task_attempt() -> tuple[int, int]:
    """(partition, attempt number) of the running Spark task; (0, 0) outside one."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return 0, 0
    return context.partitionId(), context.attemptNumber()


def column(name: str) -> Column:
    """The column ``name``, quoted so that dots and spaces in it are not parsed."""
    return F.col(quoted(name))


def spark_path(root_uri: str, key: str) -> str:
    """The path Spark's readers take for ``key`` under the blob root ``root_uri``.

    Hadoop's ``Path`` does not decode percent-escapes, so a ``file:`` root (a
    URI, escaped: ``file:///data/a%20b``) is given by its decoded path
    (``file:///data/a b``); other roots are taken as they are. Spark takes a
    path holding a glob character (``{}[]*?\\``) as a pattern, so each is
    escaped with a backslash: the path names that one file.
    """
    parsed = urllib.parse.urlsplit(root_uri)
    if parsed.scheme == "file":
        root_uri = "file://" + urllib.parse.unquote(parsed.path)
    return _GLOB_CHARACTER.sub(r"\\\g<0>", f"{root_uri.rstrip('/')}/{key}")


def filesystem_of(root_uri: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem and base path of a blob root URI (``s3a`` read as ``s3``)."""
    uri = "s3://" + root_uri.removeprefix("s3a://") if root_uri.startswith("s3a://") else root_uri
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, path.rstrip("/")


# -- writing ---------------------------------------------------------------------------------


def conform_df(df: DataFrame, data_schema: pa.Schema) -> DataFrame:
    """``df`` selected and cast to the part schema (driver, no Spark job).

    Adds a null ``_err`` if ``df`` has none. Raises InvalidUsage naming the
    columns or types when ``df`` does not fit ``data_schema``.
    """
    return select_exprs(df, [f"{e} AS {quoted(n)}" for e, n in _conform_casts(df, data_schema)])


def _conform_casts(df: DataFrame, data_schema: pa.Schema) -> list[tuple[str, str]]:
    """Per part column of :func:`conform_df`: its expression (a cast of ``df``'s), its name."""
    target = arrow_to_spark_schema(updates_schema(data_schema))
    names, expected = list(df.columns), target.fieldNames()
    if ERR not in names:
        names.append(ERR)
    missing = [n for n in expected if n not in names]
    unexpected = [n for n in names if n not in expected]
    if missing or unexpected or len(set(names)) != len(names):
        raise InvalidUsage(
            f"schema mismatch: DataFrame has columns {names}, the shard expects {expected} "
            f"(missing {missing}, unexpected {unexpected})"
        )
    actual = {f.name: f.dataType for f in df.schema.fields}
    actual.setdefault(ERR, StringType())
    wrong = [
        f"column {f.name!r} is {actual[f.name].simpleString()}, "
        f"the shard has {f.dataType.simpleString()}"
        for f in target.fields
        if not _widens(actual[f.name], f.dataType)
    ]
    if wrong:
        raise InvalidUsage("schema mismatch: " + "; ".join(wrong))
    present = set(df.columns)
    source = {f.name: quoted(f.name) if f.name in present else "NULL" for f in target.fields}
    return [(f"CAST({source[f.name]} AS {type_sql(f.dataType)})", f.name) for f in target.fields]


def _widens(source: DataType, target: DataType) -> bool:
    """Whether Spark widens ``source`` to ``target`` exactly (doubles: up to 2**53)."""
    if source.simpleString() == target.simpleString() or isinstance(source, NullType):
        return True
    if not isinstance(source, _INTEGRAL):
        return isinstance(source, FloatType) and isinstance(target, DoubleType)
    digits = _INTEGRAL_DIGITS[type(source)]
    if isinstance(target, DecimalType):
        return target.precision - target.scale >= digits
    if isinstance(target, _INTEGRAL):
        return _INTEGRAL_DIGITS[type(target)] >= digits
    return isinstance(target, DoubleType)


def write_parts(
    df: DataFrame, blob: Blob, key_prefix: str, data_schema: pa.Schema
) -> list[PartMeta]:
    """Write ``df`` as parts under ``key_prefix``, one per non-empty partition.

    Runs on the driver; the parts are written by Spark tasks (see the module
    doc). Returns the parts sorted by key. ``key_prefix`` is this write's own:
    every other file under it is deleted (invariant 3).
    """
    check_blob_key(key_prefix)
    casts = _conform_casts(df, data_schema)
    root = blob.root_uri
    if root is None:
        conformed = select_exprs(df, [f"{e} AS {quoted(n)}" for e, n in casts])
        return _write_through_driver(conformed, blob, key_prefix, data_schema)
    # mapInArrow resolves columns by name, which fails for names with dots: rename by
    # position here, and back in the task.
    positional = select_exprs(df, [f"{e} AS _c{i}" for i, (e, _) in enumerate(casts)])
    context = df.sparkSession.sparkContext
    before = context.getLocalProperty(PREFIX_PROPERTY)
    try:
        context.setLocalProperty(PREFIX_PROPERTY, key_prefix)  # the job's tasks read it
        with typed_errors():
            rows = _written(positional, root, data_schema).collect()
    except BaseException:
        with contextlib.suppress(Exception):  # what stays behind is garbage for GC
            await_tasks(positional.sparkSession)
            _delete_under(blob, key_prefix)
        raise
    finally:
        context.setLocalProperty(PREFIX_PROPERTY, before)  # type: ignore[arg-type]
    parts = sorted((part_from_row(r) for r in rows), key=lambda p: p.key)
    _delete_unnamed(blob, key_prefix, parts)
    return parts


#: The Spark local property that gives a write's tasks its key prefix
#: (:func:`write_parts`): the driver sets it on the thread that runs the write's job.
PREFIX_PROPERTY = "timeshard.parts.prefix"

#: Per py4j gateway: the JVM write function of each (root URI, data schema), made once,
#: and the empty argument list it is applied to.
_writer_udfs: weakref.WeakKeyDictionary[Any, dict[Any, Any]] = weakref.WeakKeyDictionary()
_writer_udfs_lock = threading.Lock()


def _written(positional: DataFrame, root: str, data_schema: pa.Schema) -> DataFrame:
    """``positional``'s partitions written as parts: ``mapInArrow`` of a :class:`PartWriter`
    that takes its key prefix from the job (:data:`PREFIX_PROPERTY`).

    The same writer for every write to one root and schema, so its JVM
    function, whose making is about 40 py4j calls (the pickled function, its
    return type parsed in the JVM, the JVM's function objects, and one call per
    column to name them), is made once per gateway, and a write is two calls.
    It is applied to no column: ``mapInArrow`` hands the function every
    column of the rows under it, whatever the UDF's arguments. With injected
    task faults (tests) the writer carries them and is made anew.
    """
    from pyspark.sql.functions import pandas_udf  # type: ignore[attr-defined]
    from pyspark.util import PythonEvalType

    from timeshard.spark.sqltext import jvm_class, jvm_static

    spark = positional.sparkSession
    schema_ipc = data_schema.serialize().to_pybytes()
    faults = current_task_faults()
    if faults is not None:
        return positional.mapInArrow(PartWriter(root, None, schema_ipc, faults), PART_META_DDL)
    gateway = spark.sparkContext._gateway
    with _writer_udfs_lock:
        made = _writer_udfs.setdefault(gateway, {})
        if "no columns" not in made:
            to_seq = jvm_static(spark, "org.apache.spark.api.python.PythonUtils", "toSeq")
            made["no columns"] = to_seq(jvm_class(spark, "java.util.ArrayList")())
        judf = made.get((root, schema_ipc))
        if judf is None:
            udf = pandas_udf(
                PartWriter(root, None, schema_ipc),
                returnType=PART_META_DDL,
                functionType=PythonEvalType.SQL_MAP_ARROW_ITER_UDF,
            )
            judf = made[root, schema_ipc] = udf._unwrapped._judf
    applied = judf.apply(made["no columns"])
    # as DataFrame.mapInArrow calls it: not a barrier stage, no resource profile
    return DataFrame(positional._jdf.mapInArrow(applied, False, None), spark)


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


def await_tasks(spark: SparkSession, timeout_s: float = 30.0) -> None:
    """Wait (a while) until no stage and no task runs: a failed job's other tasks may
    still be writing their parts, and a cleanup before they end would miss those.

    A failed stage stops being active before its cancelled tasks have ended, so
    the executors' running tasks are waited for too (other work on the session
    only makes this wait until ``timeout_s``).
    """
    import time

    tracker = spark.sparkContext.statusTracker()
    jvm_tracker = spark.sparkContext._jsc.sc().statusTracker()

    def running() -> bool:
        if tracker.getActiveStageIds():
            return True
        return any(e.numRunningTasks() > 0 for e in jvm_tracker.getExecutorInfos())

    deadline = time.monotonic() + timeout_s
    while running() and time.monotonic() < deadline:
        time.sleep(0.05)


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
    #: None: the job's (:data:`PREFIX_PROPERTY`, which :func:`write_parts` sets).
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


def _write_through_driver(
    df: DataFrame, blob: Blob, key_prefix: str, data_schema: pa.Schema
) -> list[PartMeta]:
    """The small-data path for blobs without a root: one part stored by the driver."""
    table = conform(df.toArrow(), data_schema)
    if table.num_rows == 0:
        return []
    key = f"{key_prefix}/part-00000-{uuid.uuid4().hex[:12]}.parquet"
    return [write_part(blob, key, table, PersistConfig())]


def _delete_under(blob: Blob, key_prefix: str) -> None:
    keys = [m.key for m in blob.list_keys(key_prefix + "/")]
    delete_keys(blob, keys, PersistConfig())
    delete_temporaries_under(blob, key_prefix, PersistConfig())


def _delete_unnamed(blob: Blob, key_prefix: str, parts: list[PartMeta]) -> None:
    """Delete the files under ``key_prefix`` that none of ``parts`` names (invariant 3): the
    parts of task attempts that failed after writing, or lost to a speculative copy, and the
    temporaries of attempts killed while they wrote. GC keeps such parts while their writer
    is registered, so they would stay for the writer's life. A failure here leaves them (the
    write stands)."""
    named = {p.key for p in parts}
    with contextlib.suppress(Exception):
        others = [m.key for m in blob.list_keys(key_prefix + "/") if m.key not in named]
        if others:
            delete_keys(blob, others, PersistConfig())
        delete_temporaries_under(blob, key_prefix, PersistConfig())


# -- reading ---------------------------------------------------------------------------------


def check_parts(blob: Blob, parts: list[PartMeta]) -> None:
    """Raise PartError unless every part exists with the size the state recorded.

    Runs on the driver: one ``get_file_info`` call for a blob with a remote root, a
    ``get`` per part for one without. Under a local root, the sizes are those of the
    files the blob's ``get`` serves (:func:`~timeshard.location.file.served_sizes`: an
    ``lstat`` per part and one per directory on the parts' paths): a part whose path passes
    through a symbolic link out of the root, through a directory link, or a loop, raises
    CorruptState naming its key, as the blob's ``get`` does, and Spark never reads it.
    """
    root = blob.root_uri
    if root is None:
        sizes = [_size_or_none(blob.get(p.key)) for p in parts]
    else:
        fs, base = filesystem_of(root)
        if isinstance(fs, pafs.LocalFileSystem):
            sizes = served_sizes(base, [p.key for p in parts])
        else:
            infos = fs.get_file_info([f"{base}/{p.key}" for p in parts])
            sizes = [info.size if info.type == pafs.FileType.File else None for info in infos]
    for part, size in zip(parts, sizes, strict=True):
        if size is None:
            raise PartError(part.key, "missing")
        if size != part.size_in_bytes:
            raise PartError(
                part.key, f"corrupt: it has {size} bytes, the state says {part.size_in_bytes}"
            )


def _size_or_none(data: bytes | None) -> int | None:
    return None if data is None else len(data)


def read_parts(
    spark: SparkSession, blob: Blob, parts: list[PartMeta], data_schema: pa.Schema
) -> DataFrame:
    """The raw updates of ``parts`` as a DataFrame with the part schema.

    Runs on the driver and checks the parts first (:func:`check_parts`; a part
    deleted after that check, before Spark lists it, is PartError too); Spark
    tasks read them at the action, where a part corrupted in place that Spark's
    reader fails on raises a Spark exception (PartError inside :func:`typed_errors`,
    once the driver found its bytes not the recorded SHA-256; an unreadable part
    Determinate); no SHA-256 is checked otherwise (module doc). No parts give an
    empty local relation, on which actions run no Spark job.
    """
    schema = arrow_to_spark_schema(updates_schema(data_schema))
    if not parts:  # a local relation: no action on it runs a Spark job
        return empty_frame(spark, schema)
    root = blob.root_uri
    if root is None:
        config = PersistConfig()
        table = pa.concat_tables([read_part(blob, p, data_schema, config) for p in parts])
        return spark.createDataFrame(table, schema)
    check_parts(blob, parts)
    uris = [spark_path(root, p.key) for p in parts]
    reader = (
        spark.read.schema(schema)
        .option("ignoreCorruptFiles", "false")
        .option("ignoreMissingFiles", "false")
        .option(VERIFY_PAGE_CHECKSUMS, "true")
        # pyarrow writes the proleptic Gregorian calendar and no Spark version in the
        # footer, so Spark would apply the session's rebase mode to old dates: never.
        .option("datetimeRebaseMode", "CORRECTED")
        .option("int96RebaseMode", "CORRECTED")
    )
    for option in NO_FOOTER_FILTERING:  # (the module doc, "Footers")
        reader = reader.option(option, "false")
    paths = java_strings(spark, uris)  # one py4j call, not one per part
    _plan(root, parts)
    with typed_errors():  # a part deleted since check_parts fails Spark's listing
        df = (
            reader.parquet(*uris)
            if paths is None
            else DataFrame(reader._jreader.parquet(paths), spark)
        )
    faults = current_task_faults()
    return df if faults is None else df.mapInArrow(PartReadFaults(faults), df.schema)


@dataclass(frozen=True, slots=True)
class PartReadFaults:
    """What a read task runs behind the Parquet scan when faults are injected (executors).

    Draws once by partition and attempt; fails the task before it yields a
    row, or passes the batches through unchanged.
    """

    faults: KeyedFaults

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        partition, attempt = task_attempt()
        fault = self.faults.draw(f"read:{partition}:{attempt}")
        if fault != "ok":
            self.faults.fail(f"task_read.{fault}", f"a read of parts (partition {partition})")
        yield from batches


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


# -- errors ----------------------------------------------------------------------------------

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


__all__ = [
    "PART_META_DDL",
    "VERIFY_PAGE_CHECKSUMS",
    "PartReadFaults",
    "PartWriter",
    "check_part_file",
    "check_parts",
    "column",
    "conform_df",
    "filesystem_of",
    "inject_task_faults",
    "part_from_row",
    "part_meta_batch",
    "quoted",
    "read_parts",
    "spark_path",
    "typed_error",
    "typed_errors",
    "write_part_file",
    "write_parts",
]
