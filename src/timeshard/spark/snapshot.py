"""Snapshots of shards as Spark DataFrames.

``snapshot_df(spark, reader, as_of)`` is the collection at ``as_of``: every
update at a time ``<= as_of``, with its time advanced to ``as_of`` and
consolidated -- one row per distinct ``(data, _err)`` whose diffs do not sum to
zero. The parts are read by Spark tasks; the driver only picks them and checks
their footers.

Columns are the data columns, then ``_ts`` (= ``as_of``), ``_diff`` and
``_err``. Consolidation groups by every data column, so it is an error
(InvalidUsage) to snapshot a shard with a map column this way.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import MapType

from timeshard.errors import InvalidUsage
from timeshard.persist._internal.parts import DIFF, ERR, TS
from timeshard.persist.read import ReadHandle
from timeshard.progress import Timestamp
from timeshard.spark.parts import read_parts


def consolidate_df(df: DataFrame, data_columns: list[str]) -> DataFrame:
    """Sum ``_diff`` per distinct ``(data, _ts, _err)`` and drop zero sums."""
    for field in df.schema.fields:
        if isinstance(field.dataType, MapType):
            raise InvalidUsage(
                f"cannot consolidate column {field.name!r}: map columns cannot be grouped by"
            )
    keys = [*data_columns, TS, ERR]
    return (
        df.groupBy(*keys)
        .agg(F.sum(DIFF).alias(DIFF))
        .where(F.col(DIFF) != 0)
        .select(*data_columns, TS, DIFF, ERR)
    )


def snapshot_df(spark: SparkSession, reader: ReadHandle, as_of: Timestamp) -> DataFrame:
    """The shard ``reader`` reads, at ``as_of``, consolidated (see the module doc)."""
    parts = reader.snapshot_parts(as_of)
    df = read_parts(spark, reader.blob, parts, reader.schema)
    df = df.where(F.col(TS) <= F.lit(as_of)).withColumn(TS, F.lit(as_of).cast("long"))
    return consolidate_df(df, list(reader.schema.names))


def updates_df(spark: SparkSession, reader: ReadHandle, as_of: Timestamp) -> DataFrame:
    """The unconsolidated updates at times ``<= as_of``, with their own times."""
    parts = reader.snapshot_parts(as_of)
    df = read_parts(spark, reader.blob, parts, reader.schema)
    return df.where(F.col(TS) <= F.lit(as_of))


__all__ = ["consolidate_df", "snapshot_df", "updates_df"]
