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

Modules. This one writes parts on the driver (:func:`write_parts`, the JVM
write function it makes once per py4j gateway, the cleanup of a write) and
re-exports the names of the others, where the rest lives:
:mod:`~timeshard.spark.part_conform` (:func:`conform_df`, driver),
:mod:`~timeshard.spark.part_writer` (:class:`PartWriter` and the part rows,
executors), :mod:`~timeshard.spark.part_read` (:func:`check_parts` and
:func:`read_parts`, driver), :mod:`~timeshard.spark.part_errors`
(:func:`typed_errors`, driver), :mod:`~timeshard.spark.part_faults` (injected
task faults, both) and :mod:`~timeshard.spark.part_paths` (a part's paths, both).
"""

from __future__ import annotations

import contextlib
import threading
import uuid
import weakref
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from timeshard.location.blob import Blob, check_blob_key
from timeshard.persist._internal.blobio import delete_keys, write_part
from timeshard.persist._internal.parts import PartMeta, conform
from timeshard.persist.config import PersistConfig
from timeshard.persist.gc import delete_temporaries_under
from timeshard.spark.part_conform import _conform_casts, conform_df
from timeshard.spark.part_errors import check_part_file, typed_error, typed_errors
from timeshard.spark.part_faults import (
    PartReadFaults,
    current_task_faults,
    inject_task_faults,
    task_attempt,
)
from timeshard.spark.part_paths import filesystem_of, spark_path
from timeshard.spark.part_read import (
    NO_FOOTER_FILTERING,
    VERIFY_PAGE_CHECKSUMS,
    check_parts,
    read_parts,
)
from timeshard.spark.part_writer import (
    PART_META_DDL,
    PREFIX_PROPERTY,
    PartWriter,
    part_from_row,
    part_meta_batch,
    write_part_file,
    write_task_part,
)
from timeshard.spark.sqltext import quoted, select_exprs


def column(name: str) -> Column:
    """The column ``name``, quoted so that dots and spaces in it are not parsed."""
    return F.col(quoted(name))


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


__all__ = [
    "NO_FOOTER_FILTERING",
    "PART_META_DDL",
    "PREFIX_PROPERTY",
    "VERIFY_PAGE_CHECKSUMS",
    "PartReadFaults",
    "PartWriter",
    "await_tasks",
    "check_part_file",
    "check_parts",
    "column",
    "conform_df",
    "current_task_faults",
    "filesystem_of",
    "inject_task_faults",
    "part_from_row",
    "part_meta_batch",
    "quoted",
    "read_parts",
    "spark_path",
    "task_attempt",
    "typed_error",
    "typed_errors",
    "write_part_file",
    "write_parts",
    "write_task_part",
]
