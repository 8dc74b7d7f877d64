"""Writing and reading parts with Spark tasks.

``write_parts`` turns a DataFrame of updates into parts: every Spark task
writes the rows of its partition as one Parquet file straight into the blob
root through ``pyarrow.fs`` (a temporary name, then a rename), and returns one
row describing it (key, size, rows, least and greatest ``_ts``). The driver
collects those rows; no data passes through it. ``read_parts`` reads parts
back as a DataFrame after checking, on the driver, that every part exists and
has an intact Parquet footer with the row count the state recorded.

What runs where:

* driver: schema checks, the footer checks, collecting part descriptions;
* executors: the function given to ``mapInArrow``. It closes over plain
  strings and bytes only (the root URI, the key prefix, the schema as Arrow
  IPC bytes), and needs ``pyarrow`` and ``timeshard`` importable by the
  workers' Python (``PYSPARK_PYTHON``).

A blob with no filesystem root (the memory blob) cannot be reached by
executors: such writes collect the DataFrame to the driver with ``toArrow``
and store it through the blob; reads build the DataFrame from Arrow on the
driver. That path is for tests and small data.

Invariants:

1. Part keys are ``<shard>/<writer>/<batch>/part-<partition>-<id>.parquet``.
2. It is an error to write a DataFrame whose columns are not the shard's data
   columns plus ``_ts``, ``_diff`` and optionally ``_err``, or whose types do
   not cast safely to the shard's; nothing is written then.
3. A missing part, or one whose footer is unreadable or disagrees with the
   state's row count, raises PartError naming it before Spark reads anything.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
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
)

from timeshard.errors import InvalidUsage, PartError
from timeshard.location.blob import Blob
from timeshard.persist._internal.blobio import read_part, write_part
from timeshard.persist._internal.parts import (
    ERR,
    SYSTEM_COLUMNS,
    PartMeta,
    conform,
    encode_part,
    ts_bounds,
    updates_schema,
)
from timeshard.persist.config import PersistConfig
from timeshard.spark.session import arrow_to_spark_schema

_META_SCHEMA = "key string, size long, rows long, ts_min long, ts_max long"
_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)


def filesystem_of(root_uri: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem and base path of a blob root URI (``s3a`` as ``s3``)."""
    uri = "s3://" + root_uri[len("s3a://") :] if root_uri.startswith("s3a://") else root_uri
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, path.rstrip("/")


def conform_df(df: DataFrame, data_schema: pa.Schema) -> DataFrame:
    """Select and cast ``df`` to the part schema; InvalidUsage if it does not fit."""
    target = arrow_to_spark_schema(updates_schema(data_schema))
    columns = list(df.columns)
    if ERR not in columns:
        df = df.withColumn(ERR, F.lit(None).cast("string"))
        columns.append(ERR)
    expected = [f.name for f in target.fields]
    if sorted(columns) != sorted(expected):
        raise InvalidUsage(
            f"schema mismatch: DataFrame has columns {sorted(columns)}, "
            f"the shard expects {expected}"
        )
    actual = {f.name: f.dataType for f in df.schema.fields}
    for field in target.fields:
        if not _casts_safely(actual[field.name], field.dataType):
            raise InvalidUsage(
                f"schema mismatch: column {field.name!r} is {actual[field.name].simpleString()}, "
                f"the shard has {field.dataType.simpleString()}"
            )
    return df.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in target.fields])


def _casts_safely(source: DataType, target: DataType) -> bool:
    if source == target or isinstance(source, NullType):
        return True
    if isinstance(target, LongType | DecimalType) and isinstance(source, _INTEGRAL):
        return True
    if isinstance(target, IntegerType) and isinstance(source, ByteType | ShortType):
        return True
    return isinstance(target, DoubleType) and isinstance(source, (FloatType, *_INTEGRAL))


def write_parts(
    df: DataFrame, blob: Blob, key_prefix: str, data_schema: pa.Schema
) -> list[PartMeta]:
    """Write ``df`` as parts under ``key_prefix``, one per Spark partition (driver)."""
    df = conform_df(df, data_schema)
    root = blob.root_uri
    if root is None:
        return _write_through_driver(df, blob, key_prefix, data_schema)
    schema_ipc = data_schema.serialize().to_pybytes()
    rows = df.mapInArrow(_part_writer(root, key_prefix, schema_ipc), _META_SCHEMA).collect()
    parts = [PartMeta(r["key"], r["size"], r["rows"], r["ts_min"], r["ts_max"]) for r in rows]
    return sorted(parts, key=lambda p: p.key)


def _part_writer(root: str, key_prefix: str, schema_ipc: bytes) -> Any:
    """The function each task runs (executors); it closes over str and bytes only."""

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        data_schema = pa.ipc.read_schema(pa.py_buffer(schema_ipc))
        collected = [b for b in batches if b.num_rows]
        if not collected:
            return
        table = conform(pa.Table.from_batches(collected), data_schema)
        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        key = f"{key_prefix}/part-{partition:05d}-{uuid.uuid4().hex[:12]}.parquet"
        fs, base = filesystem_of(root)
        path = f"{base}/{key}"
        tmp = f"{base}/{key_prefix}/.tmp-{uuid.uuid4().hex}"
        fs.create_dir(f"{base}/{key_prefix}", recursive=True)
        data = encode_part(table)
        with fs.open_output_stream(tmp) as out:
            out.write(data)
        fs.move(tmp, path)
        lo, hi = ts_bounds(table)
        yield pa.RecordBatch.from_pylist(
            [{"key": key, "size": len(data), "rows": table.num_rows, "ts_min": lo, "ts_max": hi}],
            schema=pa.schema(
                [
                    ("key", pa.string()),
                    ("size", pa.int64()),
                    ("rows", pa.int64()),
                    ("ts_min", pa.int64()),
                    ("ts_max", pa.int64()),
                ]
            ),
        )

    return write


def _write_through_driver(
    df: DataFrame, blob: Blob, key_prefix: str, data_schema: pa.Schema
) -> list[PartMeta]:
    table = conform(df.toArrow(), data_schema)
    if table.num_rows == 0:
        return []
    return [
        write_part(
            blob, f"{key_prefix}/part-00000-{uuid.uuid4().hex[:12]}.parquet", table, PersistConfig()
        )
    ]


def check_parts(blob: Blob, parts: list[PartMeta]) -> None:
    """Raise PartError unless every part exists with a sound footer and row count (driver)."""
    root = blob.root_uri
    if root is None:
        return
    fs, base = filesystem_of(root)
    infos = fs.get_file_info([f"{base}/{p.key}" for p in parts])
    for part, info in zip(parts, infos, strict=True):
        if info.type != pafs.FileType.File:
            raise PartError(part.key, "missing")
        try:
            with fs.open_input_file(info.path) as f:
                meta = pq.read_metadata(f)
        except Exception as e:  # pyarrow raises several types for a bad footer
            raise PartError(part.key, f"corrupt: {e}") from e
        if meta.num_rows != part.num_rows:
            raise PartError(
                part.key, f"corrupt: it has {meta.num_rows} rows, the state says {part.num_rows}"
            )


def read_parts(
    spark: SparkSession, blob: Blob, parts: list[PartMeta], data_schema: pa.Schema
) -> DataFrame:
    """The raw updates of ``parts`` as a DataFrame (checked on the driver first)."""
    schema = updates_schema(data_schema)
    spark_schema = arrow_to_spark_schema(schema)
    if not parts:
        return spark.createDataFrame([], spark_schema)
    root = blob.root_uri
    if root is None:
        config = PersistConfig()
        table = pa.concat_tables([read_part(blob, p, data_schema, config) for p in parts])
        return spark.createDataFrame(table.to_pandas(), spark_schema)
    check_parts(blob, parts)
    uris = [f"{root.rstrip('/')}/{p.key}" for p in parts]
    return spark.read.schema(spark_schema).parquet(*uris)


__all__ = [
    "SYSTEM_COLUMNS",
    "check_parts",
    "conform_df",
    "filesystem_of",
    "read_parts",
    "write_parts",
]
