"""The feedback UPSERT operator on Spark: the same semantics as ``upsert``, in parallel.

Commands are a DataFrame with the key columns, the value columns, ``_ts``
(the reclocked time), ``_order`` (the FromTime position, larger wins),
``_delete`` (boolean) and ``_err`` (a decode error, or null). One apply:

1. keeps the commands with ``_ts`` in ``[persist upper, input upper)``, and per
   ``(key, _ts)`` the one with the highest ``_order`` (a window per key);
2. for each key, orders its winners by time and takes each one's previous row
   with ``lag``; the first winner's previous row is the key's row in the
   output shard's snapshot at ``persist upper - 1`` (the feedback: a join on
   the key, hash-partitioned by Spark);
3. emits at each winner's time the retraction of the previous row and the
   insertion of the new one (nothing for a delete), skipping equal pairs;
4. stages the result as a batch and appends it at ``[persist upper, input
   upper)``.

Runs on the driver; the work runs in Spark tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage, UpperMismatch
from timeshard.persist import Appended, PersistClient
from timeshard.persist._internal.parts import DIFF, ERR, TS

ORDER = "_order"
DELETE = "_delete"


class SparkFeedbackUpsert:
    """Applies command DataFrames to an output shard whose content is its state."""

    def __init__(
        self,
        spark: Any,
        client: PersistClient,
        shard_id: str,
        schema: pa.Schema,
        key_columns: Sequence[str],
    ) -> None:
        if not key_columns or any(k not in schema.names for k in key_columns):
            raise InvalidUsage(
                f"upsert key columns {list(key_columns)} must be non-empty columns of {schema}"
            )
        self.spark = spark
        self.schema = schema
        self.keys = list(key_columns)
        self.values = [n for n in schema.names if n not in key_columns]
        self._writer = client.open_writer(shard_id, schema)
        self._reader = client.open_leased_reader(shard_id, schema)

    def apply(self, commands: Any, input_upper: int) -> Appended | UpperMismatch | None:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        from timeshard.spark.snapshot import snapshot_df

        lower = self._writer.fetch_recent_upper().time
        if lower is None or input_upper <= lower:
            return None
        cols = [*self.keys, *self.values]
        cmds = commands.where((F.col(TS) >= lower) & (F.col(TS) < input_upper))
        per_time = Window.partitionBy(*self.keys, TS).orderBy(F.col(ORDER).desc())
        winners = (
            cmds.withColumn("_rank", F.row_number().over(per_time))
            .where(F.col("_rank") == 1)
            .drop("_rank")
        )
        # The new row of each winner: null values and no row at all for a delete.
        new = winners.select(
            *self.keys,
            TS,
            *[F.when(F.col(ERR).isNull(), F.col(v)).alias(v) for v in self.values],
            ERR,
            (F.col(DELETE) & F.col(ERR).isNull()).alias("_gone"),
        )
        per_key = Window.partitionBy(*self.keys).orderBy(TS)
        chained = new.select(
            "*",
            *[F.lag(v).over(per_key).alias(f"_prev_{v}") for v in [*self.values, ERR, "_gone"]],
            F.row_number().over(per_key).alias("_nth"),
        )
        if lower > 0:
            state = snapshot_df(self.spark, self._reader, lower - 1).select(
                *self.keys,
                *[F.col(v).alias(f"_state_{v}") for v in [*self.values, ERR]],
                F.lit(False).alias("_state_gone"),
            )
            chained = chained.join(state, on=self.keys, how="left")
            first = F.col("_nth") == 1
            for v in [*self.values, ERR]:
                chained = chained.withColumn(
                    f"_prev_{v}", F.when(first, F.col(f"_state_{v}")).otherwise(F.col(f"_prev_{v}"))
                )
            had = F.when(first, F.col("_state_gone").isNotNull()).otherwise(~F.col("_prev__gone"))
        else:
            had = F.when(F.col("_nth") == 1, F.lit(False)).otherwise(~F.col("_prev__gone"))
        chained = chained.withColumn("_had", had)
        same = F.col("_had") & ~F.col("_gone")
        for v in [*self.values, ERR]:
            same = same & F.col(v).eqNullSafe(F.col(f"_prev_{v}"))
        changed = chained.where(~same)
        retract = changed.where(F.col("_had")).select(
            *self.keys,
            *[F.col(f"_prev_{v}").alias(v) for v in self.values],
            TS,
            F.lit(-1).cast("long").alias(DIFF),
            F.col(f"_prev_{ERR}").alias(ERR),
        )
        insert = changed.where(~F.col("_gone")).select(
            *self.keys,
            *self.values,
            TS,
            F.lit(1).cast("long").alias(DIFF),
            ERR,
        )
        updates = retract.unionByName(insert).select(*cols, TS, DIFF, ERR)
        batch = self._writer.batch(updates, lower, input_upper)
        result = self._writer.compare_and_append_batch([batch], lower, input_upper)
        if isinstance(result, UpperMismatch):
            batch.delete()
        self._reader.downgrade_since(max(input_upper - 1, 0))
        return result


__all__ = ["DELETE", "ORDER", "SparkFeedbackUpsert"]
