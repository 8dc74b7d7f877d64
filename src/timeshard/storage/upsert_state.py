"""The feedback upsert's state: its output shard's content, arranged in Spark by key.

The feedback upsert needs, for every key a tick touches, the key's row in its
output shard just before the tick. Reading the whole shard every tick costs in
proportion to the state; this arrangement keeps that content cached in Spark
instead, so a tick costs in proportion to its change::

    layers (oldest first)        each: key columns, value columns, _err, _gone
    ┌──────────────────────┐
    │ base: every live key │  hash-partitioned by key, cached (memory, then disk)
    ├──────────────┬───────┘
    │ delta        │           the state of the keys one tick (or catch-up) changed;
    ├───────┬──────┘           _gone = the key was deleted there
    │ delta │
    └───────┘
    lookup(keys) = per key, the row of the newest layer that has it (absent if _gone)

Frontiers: the arrangement is the shard's content at ``time - 1``, where
``time`` is the shard upper it was built or advanced to. It advances in two
ways: ``push`` (this instance's own append made the shard upper move from
``time`` to ``new_time``, and the layer it pushes is exactly what changed) and
``catch_up`` (another instance appended: the updates in ``[time, upper)`` are
read back from the shard, consolidated, and become a layer). Reading those
updates needs their times unadvanced, so the reader holds the shard's since
at ``time - 1``.

Layers merge geometrically: whenever the newest layer has at least half the
size (bytes held by Spark's block manager) of the one below it, the two
become one (newest wins per key; merging into the base drops deleted keys).
So there are O(log(state / change))
layers, and a row is rewritten O(log(state / change)) times over its life:
per tick, the amortised cost is proportional to the change. Only a lookup
still scans the cached base (a broadcast semi-join, in memory); that is the
part of a tick that grows with the state, at in-memory scan speed.

Invariants:

1. Every layer has at most one row per key (null keys included: keys are
   compared null-safely).
2. ``lookup`` of a key equals the key's row in the shard's snapshot at
   ``time - 1`` (``_err`` included), or nothing if the key is absent there.
3. The base has no ``_gone`` rows.
4. Unkeyed err rows (``_err`` set, every key column null: a record that did
   not decode far enough to have a key) are no key's state: the layers leave
   them out, and the upsert keeps them as they are (:func:`unkeyed_error`).

Runs on the driver; the layers live in Spark's block manager and every
operation is a Spark job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from timeshard.errors import SinceError
from timeshard.persist._internal.parts import DIFF, ERR, TS
from timeshard.persist.read import ReadHandle

GONE = "_gone"
LAYER = "_layer"


@dataclass
class Layer:
    """A locally checkpointed DataFrame of key states, and the bytes its blocks hold."""

    df: Any
    size: int

    def release(self) -> None:
        """Free the checkpointed blocks now rather than at the next JVM GC."""
        self.df._jdf.queryExecution().logical().rdd().unpersist(False)


class ArrangedState:
    """The content of an upsert shard at ``time - 1``, as cached Spark layers."""

    def __init__(
        self, spark: Any, keys: Sequence[str], values: Sequence[str], partitions: int | None = None
    ) -> None:
        self.spark = spark
        self.keys = list(keys)
        self.values = list(values)
        self.partitions = partitions or int(spark.conf.get("spark.sql.shuffle.partitions"))
        self.layers: list[Layer] = []
        self.time: int | None = None

    @property
    def columns(self) -> list[str]:
        """The columns of every layer."""
        return [*self.keys, *self.values, ERR, GONE]

    def rehydrate(self, reader: ReadHandle, upper: int) -> None:
        """Rebuild from the shard's snapshot at ``upper - 1`` (one full read)."""
        from pyspark.sql import functions as F

        from timeshard.spark.snapshot import snapshot_df

        self.clear()
        if upper > 0:
            snapshot = snapshot_df(self.spark, reader, upper - 1)
            base = snapshot.where(~unkeyed_error(self.keys)).select(
                *self.keys, *self.values, ERR, F.lit(False).alias(GONE)
            )
            self.layers = [self._cache(base)]
        self.time = upper
        reader.downgrade_since(max(upper - 1, 0))

    def catch_up(self, reader: ReadHandle, upper: int) -> None:
        """Advance to ``upper`` with the updates other writers appended since ``time``.

        It is an error to call it with ``upper`` below ``time``. Raises
        SinceError if ``reader`` no longer holds the since at ``time - 1``, and
        LeaseExpired if its lease ran out: then only ``rehydrate`` can help.
        """
        from pyspark.sql import functions as F

        from timeshard.spark.snapshot import consolidate_df, updates_df

        assert self.time is not None and self.time <= upper, (self.time, upper)
        if self.time == upper:
            return
        held = max(self.time - 1, 0)
        if not reader.since.less_equal(held):  # updates at >= time may have been advanced
            raise SinceError(held, reader.since)
        data = [*self.keys, *self.values]
        updates = updates_df(self.spark, reader, self.time, upper).withColumn(TS, F.lit(0))
        net = consolidate_df(updates, data).where(~unkeyed_error(self.keys)).persist()
        # The upsert output has one row per key: a key whose net change has an
        # insertion now holds that row; one with only retractions is gone.
        inserted = net.where(F.col(DIFF) > 0).select(*self.keys, *self.values, ERR)
        retracted = net.where(F.col(DIFF) < 0).select(*self.keys).distinct()
        gone = self.match(retracted, inserted, "left_anti").select(
            *self.keys,
            *[F.lit(None).cast(net.schema[v].dataType).alias(v) for v in [*self.values, ERR]],
        )
        layer = inserted.withColumn(GONE, F.lit(False)).unionByName(
            gone.withColumn(GONE, F.lit(True))
        )
        self.push(layer, upper)
        net.unpersist()
        reader.downgrade_since(upper - 1)

    def lookup(self, wanted: Any) -> Any | None:
        """Per key of ``wanted`` (a small DataFrame of keys), its current row.

        Columns: the keys, ``_prev_<value>`` for each value column and
        ``_prev__err``; a key that is absent has no row. None if the state is
        empty (every key is absent).
        """
        from pyspark.sql import functions as F

        found = None
        for i, layer in enumerate(self.layers):
            hits = self.match(layer.df, wanted, "left_semi", broadcast=True)
            hits = hits.withColumn(LAYER, F.lit(i))
            found = hits if found is None else found.unionByName(hits)
        if found is None:
            return None
        newest = F.max_by(F.struct(*self.values, ERR, GONE), F.col(LAYER)).alias("_row")
        latest = found.groupBy(*self.keys).agg(newest)
        return latest.where(~F.col(f"_row.{GONE}")).select(
            *self.keys, *[F.col(f"_row.{v}").alias(f"_prev_{v}") for v in [*self.values, ERR]]
        )

    def content(self) -> Any | None:
        """Every live key's row (keys, values, ``_err``): the shard's content at ``time - 1``.

        None if there are no layers (the content is empty).
        """
        from pyspark.sql import functions as F

        if not self.layers:
            return None
        rows = self.layers[0].df
        for layer in self.layers[1:]:
            rows = self.match(rows, layer.df, "left_anti").unionByName(layer.df)
        return rows.where(~F.col(GONE)).select(*self.keys, *self.values, ERR)

    def push(self, layer: Any, new_time: int, *, partitioned: bool = False) -> None:
        """Add ``layer`` (the states of the keys that changed) as the content at ``new_time - 1``.

        ``layer`` has :attr:`columns` and at most one row per key; with
        ``partitioned`` it is already hash-partitioned by the keys into
        :attr:`partitions` partitions (no shuffle needed).
        """
        assert self.time is not None and self.time < new_time, (self.time, new_time)
        self.layers.append(self._cache(layer.select(*self.columns), partitioned=partitioned))
        self.time = new_time
        while len(self.layers) >= 2 and 2 * self.layers[-1].size >= self.layers[-2].size:
            newer, older = self.layers.pop(), self.layers.pop()
            self.layers.append(self._merge(older, newer, into_base=not self.layers))

    def advance(self, new_time: int) -> None:
        """Nothing changed in ``[time, new_time)``: the content is the one at ``new_time - 1``."""
        assert self.time is not None and self.time <= new_time, (self.time, new_time)
        self.time = new_time

    def clear(self) -> None:
        """Drop every layer (their cached blocks are freed)."""
        for layer in self.layers:
            layer.release()
        self.layers = []
        self.time = None

    def _merge(self, older: Layer, newer: Layer, *, into_base: bool) -> Layer:
        from pyspark.sql import functions as F

        kept = self.match(older.df, newer.df, "left_anti")
        merged = kept.unionByName(newer.df)
        if into_base:
            merged = merged.where(~F.col(GONE))
        layer = self._cache(merged)
        older.release()
        newer.release()
        return layer

    def _cache(self, df: Any, *, partitioned: bool = False) -> Layer:
        # A local checkpoint, not persist(): it also cuts the lineage, so the
        # plans of later layers do not nest every earlier tick's query.
        if not partitioned:
            df = df.repartition(self.partitions, *self.keys)
        cached = df.localCheckpoint(eager=True)
        return Layer(cached, _stored_bytes(cached))

    def match(self, left: Any, right: Any, how: str, *, broadcast: bool = False) -> Any:
        """``left`` joined with the keys of ``right``, keys compared null-safely.

        The right side's keys are renamed first, so the two sides may come
        from one lineage (no ambiguous self-join).
        """
        from pyspark.sql import functions as F

        renamed = [f"_rk{i}" for i in range(len(self.keys))]
        probe = right.select(*[F.col(k).alias(r) for k, r in zip(self.keys, renamed, strict=True)])
        if broadcast:
            probe = F.broadcast(probe)
        cond = None
        for k, r in zip(self.keys, renamed, strict=True):
            eq = left[k].eqNullSafe(probe[r])
            cond = eq if cond is None else cond & eq
        return left.join(probe, cond, how)


def unkeyed_error(keys: Sequence[str]) -> Any:
    """The Spark condition of an unkeyed err row: ``_err`` set and every key column null."""
    from pyspark.sql import functions as F

    cond = F.col(ERR).isNotNull()
    for k in keys:
        cond = cond & F.col(k).isNull()
    return cond


def _stored_bytes(checkpointed: Any) -> int:
    """Memory plus disk bytes of a checkpointed DataFrame's blocks (driver only, no job)."""
    jvm_sc = checkpointed.sparkSession.sparkContext._jsc.sc()
    rdd_id = checkpointed._jdf.queryExecution().logical().rdd().id()
    for info in jvm_sc.getRDDStorageInfo():
        if info.id() == rdd_id:
            return int(info.memSize()) + int(info.diskSize())
    return 0  # an empty layer has no blocks


__all__ = ["GONE", "ArrangedState", "Layer", "unkeyed_error"]
