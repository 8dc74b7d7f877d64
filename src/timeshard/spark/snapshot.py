"""Snapshots and updates of shards as Spark DataFrames.

``snapshot_df(spark, reader, as_of)`` is the collection at ``as_of``: every
update at a time ``<= as_of``, its time advanced to ``as_of``, consolidated --
one row per distinct ``(data, _err)`` whose diffs do not sum to zero::

    snapshot_parts(as_of) --read_parts--> _ts <= as_of --_ts := as_of--> group by data, _err
        driver: holds the     executors:                                 sum(_diff) != 0
        state against GC      Parquet scan

It equals ``reader.snapshot(as_of)`` (the pyarrow path) as a multiset of rows.
Columns are the data columns, then ``_ts``, ``_diff`` and ``_err``.

``updates_df(spark, reader, lower, upper)`` is the unconsolidated updates at
times in ``[lower, upper)``, with their own times::

    snapshot_parts(upper - 1) --keep parts whose metadata--> read_parts --> lower <= _ts < upper
        driver: holds the         may have a time in           executors:
        state against GC          [lower, upper) (no read)     Parquet scan

A part whose recorded times or bounds show no update in the interval is not
read at all, so a tick reads only the parts holding its interval, and an
interval with no updates plans no part read: its DataFrame is an empty local
relation, on which actions run no Spark job.

The driver picks the parts and checks that they exist with their recorded
sizes (a missing part raises PartError here); Spark tasks read them when an
action runs. A part corrupted in place that Spark's reader fails on (a page
checksum, a footer it cannot decode) raises a Spark exception -- PartError
inside :func:`timeshard.spark.parts.typed_errors`, once the driver has read the
part again and found it not the bytes whose SHA-256 the state recorded. These
reads check no part's SHA-256 otherwise: that is a pass over every byte of every
part read, on every tick (measured: a linear view's tick 2x; see the parts
module doc, "Footers"), so a corruption Spark's reader cannot see is read as it
is (a footer whose row count was lowered reads as fewer rows). The pyarrow path
(``ReadHandle.snapshot``) and ``timeshard verify`` check every part's digest.

Invariants:

1. Consolidation groups by every data column and ``_err``; null values are
   equal to each other there (so err rows with null data consolidate).
2. A map, at any depth, is grouped by its entries in any order: Spark (4.0 on)
   sorts a map's entries by key to group by it, and the consolidated rows hold
   it sorted so. A retraction of a map row whose entries come in another order
   cancels its insertion, and two consolidated rows equal as Python values
   (a map is a list of pairs in Arrow) are one row of the collection.
3. Spark compares no maps otherwise (``=``, ``<=>``, ORDER BY, DISTINCT, set
   operations, ``hash``): what does so refuses them with
   :func:`check_groupable` when it is declared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import ArrayType, DataType, MapType, StructType

from timeshard.errors import InvalidUsage
from timeshard.location.blob import Blob
from timeshard.persist._internal.parts import DIFF, ERR, TS, PartMeta
from timeshard.progress import Timestamp, check_timestamp
from timeshard.spark.parts import read_parts
from timeshard.spark.sqltext import bigint_within, quoted, select_exprs, sql_over


class PartsReader(Protocol):
    """What the snapshots need of a reader: ReadHandle and UnleasedReader have it.

    A ReadHandle holds the state whose parts it returns against GC for its
    lease; an UnleasedReader holds nothing, so a part compacted away and
    collected before Spark reads it fails the read (PartError).
    """

    @property
    def blob(self) -> Blob: ...

    @property
    def schema(self) -> pa.Schema: ...

    def snapshot_parts(self, as_of: Timestamp) -> list[PartMeta]: ...


def consolidate_df(df: DataFrame, data_columns: list[str]) -> DataFrame:
    """Sum ``_diff`` per distinct ``(data, _ts, _err)`` and drop zero sums (lazy).

    Maps, at any depth, come out with their entries sorted by key (module doc).
    Output columns: the data columns, ``_ts``, ``_diff``, ``_err``.
    """
    keys = ", ".join(quoted(c) for c in [*data_columns, TS, ERR])
    cols = ", ".join(quoted(c) for c in [*data_columns, TS, DIFF, ERR])

    def query(views: Mapping[str, str]) -> str:
        summed = f"SELECT {keys}, sum({DIFF}) AS {DIFF} FROM {views['rows']} GROUP BY {keys}"
        return f"SELECT {cols} FROM ({summed}) WHERE {DIFF} != 0"

    return sql_over({"rows": df}, query)


def check_groupable(schema: StructType) -> None:
    """Raise InvalidUsage naming the column if ``schema`` has a map anywhere: for what
    compares rows beyond GROUP BY (``<=>``, a join, a sort, DISTINCT, a hash), which
    Spark does for no map (module doc, invariant 3). Consolidation needs no check."""
    for field in schema.fields:
        if _has_map(field.dataType):
            raise InvalidUsage(
                f"cannot compare column {field.name!r} of type "
                f"{field.dataType.simpleString()}: Spark groups maps, but compares them "
                "in no other way (=, <=>, ORDER BY, DISTINCT)"
            )


def _has_map(data_type: DataType) -> bool:
    if isinstance(data_type, MapType):
        return True
    if isinstance(data_type, ArrayType):
        return _has_map(data_type.elementType)
    if isinstance(data_type, StructType):
        return any(_has_map(f.dataType) for f in data_type.fields)
    return False


def snapshot_df(spark: SparkSession, reader: PartsReader, as_of: Timestamp) -> DataFrame:
    """The collection ``reader`` reads at ``as_of``, consolidated (see the module doc).

    Raises SinceError or InvalidUsage as ``reader.snapshot_parts`` does, and
    PartError for a missing part. Checks no part's SHA-256 unless Spark's read of it
    fails (module doc).
    """
    return parts_snapshot_df(spark, reader, reader.snapshot_parts(as_of), as_of)


def parts_snapshot_df(
    spark: SparkSession, reader: PartsReader, parts: Sequence[PartMeta], as_of: Timestamp
) -> DataFrame:
    """:func:`snapshot_df` of ``parts``, which ``reader.snapshot_parts(as_of)`` gave (for a
    caller that reads their metadata too: one fetch of the shard's state, not two)."""
    df = read_parts(spark, reader.blob, list(parts), reader.schema)
    names = list(reader.schema.names)
    at = int(as_of)
    df = select_exprs(
        df.where(f"{TS} <= {at}"),
        [*[quoted(n) for n in names], f"CAST({at} AS BIGINT) AS {TS}", DIFF, ERR],
    )
    return consolidate_df(df, names)


def updates_df(
    spark: SparkSession,
    reader: PartsReader,
    lower: Timestamp,
    upper: Timestamp,
    parts: Sequence[PartMeta] | None = None,
) -> DataFrame:
    """The updates at times in ``[lower, upper)``, unconsolidated, with their own times.

    Needs ``lower < upper`` and ``upper - 1`` readable (else SinceError or
    InvalidUsage, as ``reader.snapshot_parts`` raises them). Times below the
    shard's since may have been advanced to it by compaction, so the result is
    exact only for a since below ``lower`` (or both 0): a reader that reads on
    from ``lower`` holds the shard at ``lower - 1``. Reads only the parts whose
    metadata does not rule out an update in the interval (module doc).

    ``parts``: those parts (:func:`parts_with_updates`), when the caller has
    them already (each fetch of them reads the shard's state from consensus).
    """
    check_timestamp(lower, "lower")
    check_timestamp(upper, "upper")
    if not lower < upper:
        raise InvalidUsage(f"updates_df needs lower < upper, got [{lower}, {upper})")
    if parts is None:
        parts = parts_with_updates(reader, lower, upper)
    df = read_parts(spark, reader.blob, list(parts), reader.schema)
    return df.where(bigint_within(TS, lower, upper))


def parts_with_updates(reader: PartsReader, lower: Timestamp, upper: Timestamp) -> list[PartMeta]:
    """The parts of the snapshot at ``upper - 1`` whose metadata does not rule out an
    update in ``[lower, upper)`` (one read of the shard's state; no part is read)."""
    return [
        p for p in reader.snapshot_parts(upper - 1) if p.has_update_in(lower, upper) is not False
    ]


__all__ = [
    "PartsReader",
    "check_groupable",
    "consolidate_df",
    "parts_snapshot_df",
    "parts_with_updates",
    "snapshot_df",
    "updates_df",
]
