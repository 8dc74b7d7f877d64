"""The feedback UPSERT operator on Spark: the same semantics as ``upsert``, in parallel.

```
 commands ──> dedupe per (key, _ts) ──> lag chain per key ──> retract / insert ──> output shard
                                              ^                                        │
                         lookup(keys) ────────┘                                        │
 ArrangedState (cached layers = the shard's content) <── push layer / catch up ────────┘
```

Commands are a DataFrame with the key columns, the value columns, ``_ts``
(the reclocked time), ``_order`` (the FromTime position, larger wins),
``_delete`` (boolean) and ``_err`` (a decode error, or null). One apply, at
the shard upper ``lower``:

1. brings the arranged state (:mod:`timeshard.storage.upsert_state`) to
   ``lower``: rehydrated from the shard on first use, advanced with the
   updates of other writers when the upper moved under it;
2. keeps the commands with ``_ts`` in ``[lower, input upper)`` and, per
   ``(key, _ts)``, the one with the highest ``_order``;
3. for each key, orders its winners by time and takes each one's previous
   row with ``lag``; the first winner's previous row is the key's row in the
   arranged state (the feedback);
4. emits at each winner's time the retraction of the previous row and the
   insertion of the new one (nothing for a delete), skipping equal pairs;
5. stages the result as a batch and appends it at ``[lower, input upper)``;
   on success the state of every touched key at its last winner becomes the
   arrangement's newest layer, on ``UpperMismatch`` the batch is deleted and
   the next apply catches up from the shard.

Invariants:

1. The output at every time ``t`` is the last value per key among the
   commands reclocked to ``<= t`` (highest ``_order`` within one time); an
   err command makes the key's row an err row, which a later value or delete
   retracts.
2. Keys are compared null-safely: a null key is one key.
3. A tick reads only its commands and the arrangement, never the whole shard
   (except for the one rehydration of a new instance).
4. An unkeyed err command (``_err`` set, every key column null: a record that
   did not decode far enough to have a key) is kept as an err row of its own,
   never retracted: no later command names its key.

Runs on the driver; the work runs in Spark tasks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage, LeaseExpired, SinceError, UpperMismatch
from timeshard.persist import Appended, PersistClient, expire_all
from timeshard.persist._internal.parts import DIFF, ERR, TS
from timeshard.storage.upsert_state import GONE, ArrangedState, unkeyed_error

ORDER = "_order"
DELETE = "_delete"
UNKEYED = "_unkeyed"


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
        self.client = client
        self.shard_id = shard_id
        self.schema = schema
        self.keys = list(key_columns)
        self.values = [n for n in schema.names if n not in key_columns]
        self._writer = client.open_writer(shard_id, schema, background_compaction=True)
        self._reader = client.open_leased_reader(shard_id, schema)
        self.state = ArrangedState(spark, self.keys, self.values)

    def apply(self, commands: Any, input_upper: int) -> Appended | UpperMismatch | None:
        from pyspark.sql import functions as F

        lower = self._writer.fetch_recent_upper().time
        if lower is None or input_upper <= lower:
            return None
        self._sync(lower)
        cmds = commands.where((F.col(TS) >= lower) & (F.col(TS) < input_upper))
        # One pass over the commands (whose source may be costly to run twice): the
        # keyed winners, and the unkeyed errors kept as they are.
        winners = self._winners(cmds).persist()
        try:
            keyed = winners.where(~F.col(UNKEYED))
            kept = winners.where(F.col(UNKEYED)).select(
                *self.keys, *self.values, TS, F.lit(1).cast("long").alias(DIFF), ERR
            )
            updates = self._updates(self._chain(keyed)).unionByName(kept)
            batch = self._writer.batch(updates, lower, input_upper)
            result = self._writer.compare_and_append_batch([batch], lower, input_upper)
            if isinstance(result, UpperMismatch):
                batch.delete()
            else:
                self.state.push(self._last_states(keyed), input_upper, partitioned=True)
                self._hold_since(input_upper - 1)
            return result
        finally:
            winners.unpersist()

    @property
    def lease_lost(self) -> bool:
        """Whether the writer's lease ran out (its reader's is renewed when used)."""
        return self._writer.lease_lost

    def close(self) -> None:
        """Free the arrangement's cached layers and release the shard's handles."""
        self.state.clear()
        expire_all([self._reader, self._writer])

    def advance(self, lower: int, input_upper: int) -> Appended | UpperMismatch:
        """Append no updates at ``[lower, input_upper)``: the input had no commands there.

        Runs no Spark job; the arrangement moves along if it was at ``lower``.
        """
        result = self._writer.compare_and_append_batch([], lower, input_upper)
        if isinstance(result, Appended) and self.state.time == lower:
            self.state.advance(input_upper)
            self._hold_since(input_upper - 1)
        return result

    def _sync(self, lower: int) -> None:
        """Bring the arranged state to the shard upper ``lower``."""
        if self.state.time is not None and self.state.time <= lower:
            try:
                self.state.catch_up(self._reader, lower)
                return
            except (SinceError, LeaseExpired):
                pass  # the updates are no longer readable as they were: rehydrate
        # Rehydrate with a new lease. The old reader must expire now: left to its lease,
        # it would hold the shard's since and old states back for minutes.
        with contextlib.suppress(LeaseExpired):
            self._reader.expire()
        self._reader = self.client.open_leased_reader(self.shard_id, self.schema)
        self.state.rehydrate(self._reader, lower)

    def _hold_since(self, since: int) -> None:
        """Hold the shard's since at ``since`` (with a new lease if the old one ran out).

        If the since passed it meanwhile, the next catch-up sees that and rehydrates.
        """
        try:
            self._reader.downgrade_since(since)
        except LeaseExpired:
            self._reader = self.client.open_leased_reader(self.shard_id, self.schema)
            self._reader.downgrade_since(since)

    def _winners(self, cmds: Any) -> Any:
        """Per ``(key, _ts)`` the command with the highest ``_order``, as its new row.

        ``_order`` is the command's FromTime position: unique per record and
        totally ordered (a struct compares field by field). Ingestion gives
        ``(_partition, _offset)``, partition names compared as UTF-8 bytes
        (:mod:`timeshard.storage.file_source`, "Order"). Unkeyed err commands
        are all kept, marked ``_unkeyed``: they name no key, so they take no
        part in ranking the null key's commands.
        """
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        # One shuffle by key: the windows here, in _chain and in _last_states, and the
        # arrangement's new layer, all keep this partitioning.
        by_key = cmds.repartition(self.state.partitions, *self.keys)
        by_key = by_key.withColumn(UNKEYED, unkeyed_error(self.keys))
        per_time = Window.partitionBy(*self.keys, TS, UNKEYED).orderBy(F.col(ORDER).desc())
        ranked = by_key.withColumn("_rank", F.row_number().over(per_time))
        top = ranked.where((F.col("_rank") == 1) | F.col(UNKEYED))
        # The new row of each winner: null values and no row at all for a delete.
        return top.select(
            *self.keys,
            TS,
            *[F.when(F.col(ERR).isNull(), F.col(v)).alias(v) for v in self.values],
            ERR,
            (F.col(DELETE) & F.col(ERR).isNull()).alias(GONE),
            UNKEYED,
        )

    def _chain(self, winners: Any) -> Any:
        """Each winner with its key's previous row (``_prev_*``) and whether it had one."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        per_key = Window.partitionBy(*self.keys).orderBy(TS)
        carried = [*self.values, ERR]
        chained = winners.select(
            "*",
            *[F.lag(v).over(per_key).alias(f"_prev_{v}") for v in [*carried, GONE]],
            F.row_number().over(per_key).alias("_nth"),
        )
        first = F.col("_nth") == 1
        prev = self.state.lookup(winners.select(*self.keys).distinct())
        if prev is None:
            return chained.withColumn("_had", ~first & ~F.col(f"_prev_{GONE}"))
        prev = prev.withColumn("_found", F.lit(True))
        renamed = [f"_pk{i}" for i in range(len(self.keys))]
        prev = prev.select(
            *[F.col(k).alias(r) for k, r in zip(self.keys, renamed, strict=True)],
            *[F.col(f"_prev_{v}").alias(f"_state_{v}") for v in carried],
            "_found",
        )
        cond = None
        for k, r in zip(self.keys, renamed, strict=True):
            eq = chained[k].eqNullSafe(prev[r])
            cond = eq if cond is None else cond & eq
        joined = chained.join(prev, cond, "left").drop(*renamed)
        for v in carried:
            joined = joined.withColumn(
                f"_prev_{v}", F.when(first, F.col(f"_state_{v}")).otherwise(F.col(f"_prev_{v}"))
            )
        had = F.when(first, F.col("_found").isNotNull()).otherwise(~F.col(f"_prev_{GONE}"))
        return joined.withColumn("_had", had)

    def _updates(self, chained: Any) -> Any:
        """The retractions and insertions of the winners that change their key.

        One pass: each changed winner yields its retraction (if its key had a
        row) and its insertion (unless it deletes), through one ``inline``.
        """
        from pyspark.sql import functions as F

        carried = [*self.values, ERR]
        same = F.col("_had") & ~F.col(GONE)
        for v in carried:
            same = same & F.col(v).eqNullSafe(F.col(f"_prev_{v}"))
        retract = F.when(
            F.col("_had"),
            F.struct(
                *[F.col(f"_prev_{v}").alias(v) for v in self.values],
                F.lit(-1).cast("long").alias(DIFF),
                F.col(f"_prev_{ERR}").alias(ERR),
            ),
        )
        insert = F.when(
            ~F.col(GONE),
            F.struct(*self.values, F.lit(1).cast("long").alias(DIFF), F.col(ERR).alias(ERR)),
        )
        pair = F.filter(F.array(retract, insert), lambda u: u.isNotNull())
        return (
            chained.where(~same)
            .select(*self.keys, TS, F.inline(pair))
            .select(*self.keys, *self.values, TS, DIFF, ERR)
        )

    def _last_states(self, winners: Any) -> Any:
        """Per touched key, its state after its last winner: the arrangement's new layer."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        latest = Window.partitionBy(*self.keys).orderBy(F.col(TS).desc())
        return (
            winners.withColumn("_last", F.row_number().over(latest))
            .where(F.col("_last") == 1)
            .select(*self.keys, *self.values, ERR, GONE)
        )


__all__ = ["DELETE", "ORDER", "SparkFeedbackUpsert"]
