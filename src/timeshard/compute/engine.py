"""Engines: how the sink computes with collections.

The sink works with *snapshots* (a collection at one time: data columns plus
``_diff`` and ``_err``, consolidated) and *updates* (the same plus ``_ts``).
An engine knows how to diff two snapshots into updates at a time, union
updates, and read a shard's snapshot. :class:`SparkEngine` does it with
DataFrames (the correction is a union plus a hash-partitioned ``groupBy``, so
cancelling updates of one row meet in one Spark task); :class:`ArrowEngine`
does it with pyarrow tables on the driver, for tests and small views.
"""

from __future__ import annotations

from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from timeshard.persist._internal.parts import DIFF, ERR, TS, consolidate, updates_schema
from timeshard.persist.fetch import UnleasedReader
from timeshard.progress import Timestamp


class Engine(Protocol):
    """Collection arithmetic for the sink. ``C`` is a table or a DataFrame."""

    def empty(self, data_schema: pa.Schema) -> Any: ...

    def diff_at(self, desired: Any, previous: Any, t: Timestamp, data_schema: pa.Schema) -> Any:
        """Updates at time ``t`` that turn ``previous`` into ``desired``."""
        ...

    def union(self, updates: list[Any], data_schema: pa.Schema) -> Any: ...

    def snapshot(self, reader: UnleasedReader, as_of: Timestamp) -> Any:
        """The shard's snapshot at ``as_of`` (data columns, ``_diff``, ``_err``)."""
        ...

    def materialize(self, collection: Any) -> Any:
        """Evaluate ``collection`` now (so that errors surface here) and keep it."""
        ...

    def release(self, collection: Any) -> None: ...

    def is_empty(self, collection: Any) -> bool:
        """Whether ``collection`` has no row (a Spark job for a DataFrame)."""
        ...


def snapshot_schema(data_schema: pa.Schema) -> pa.Schema:
    full = updates_schema(data_schema)
    return pa.schema([f for f in full if f.name != TS])


class ArrowEngine:
    """Collections as pyarrow tables on the driver."""

    def empty(self, data_schema: pa.Schema) -> pa.Table:
        return snapshot_schema(data_schema).empty_table()

    def diff_at(
        self, desired: pa.Table, previous: pa.Table, t: Timestamp, data_schema: pa.Schema
    ) -> pa.Table:
        schema = snapshot_schema(data_schema)
        previous = previous.select(schema.names).cast(schema)
        negated = previous.set_column(
            schema.get_field_index(DIFF), schema.field(DIFF), pc.negate(previous.column(DIFF))
        )
        both = pa.concat_tables([desired.select(schema.names).cast(schema), negated])
        with_ts = both.append_column(
            pa.field(TS, pa.int64(), nullable=False),
            pa.repeat(pa.scalar(t, pa.int64()), both.num_rows),
        )
        out = consolidate(with_ts.select(updates_schema(data_schema).names))
        return out.cast(updates_schema(data_schema))

    def union(self, updates: list[pa.Table], data_schema: pa.Schema) -> pa.Table:
        schema = updates_schema(data_schema)
        if not updates:
            return schema.empty_table()
        return pa.concat_tables([u.cast(schema) for u in updates])

    def snapshot(self, reader: UnleasedReader, as_of: Timestamp) -> pa.Table:
        return reader.snapshot(as_of).drop_columns([TS])

    def materialize(self, collection: pa.Table) -> pa.Table:
        return collection

    def release(self, collection: pa.Table) -> None:
        return None

    def is_empty(self, collection: pa.Table) -> bool:
        return bool(collection.num_rows == 0)


class SparkEngine:
    """Collections as Spark DataFrames; runs jobs from the driver."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def empty(self, data_schema: pa.Schema) -> Any:
        from timeshard.spark.session import arrow_to_spark_schema
        from timeshard.spark.sqltext import empty_frame

        return empty_frame(self.spark, arrow_to_spark_schema(snapshot_schema(data_schema)))

    def diff_at(self, desired: Any, previous: Any, t: Timestamp, data_schema: pa.Schema) -> Any:
        from pyspark.sql import functions as F

        data = list(data_schema.names)
        negated = previous.withColumn(DIFF, -F.col(DIFF))
        both = desired.select(*data, DIFF, ERR).unionByName(negated.select(*data, DIFF, ERR))
        return (
            both.groupBy(*data, ERR)
            .agg(F.sum(DIFF).alias(DIFF))
            .where(F.col(DIFF) != 0)
            .withColumn(TS, F.lit(t).cast("long"))
            .select(*data, TS, DIFF, ERR)
        )

    def union(self, updates: list[Any], data_schema: pa.Schema) -> Any:
        from timeshard.spark.session import arrow_to_spark_schema

        if not updates:
            return self.spark.createDataFrame(
                [], arrow_to_spark_schema(updates_schema(data_schema))
            )
        out = updates[0]
        for u in updates[1:]:
            out = out.unionByName(u)
        return out

    def snapshot(self, reader: UnleasedReader, as_of: Timestamp) -> Any:
        from pyspark.sql import functions as F

        from timeshard.spark.parts import read_parts
        from timeshard.spark.snapshot import consolidate_df

        parts = reader.snapshot_parts(as_of)
        df = read_parts(self.spark, reader.blob, parts, reader.schema)
        df = df.where(F.col(TS) <= F.lit(as_of)).withColumn(TS, F.lit(as_of).cast("long"))
        return consolidate_df(df, list(reader.schema.names)).drop(TS)

    def materialize(self, collection: Any) -> Any:
        from timeshard.spark.checkpoint import local_checkpoint

        return local_checkpoint(collection, eager=True)

    def release(self, collection: Any) -> None:
        collection.unpersist(blocking=False)

    def is_empty(self, collection: Any) -> bool:
        return bool(collection.isEmpty())


__all__ = ["ArrowEngine", "Engine", "SparkEngine", "snapshot_schema"]
