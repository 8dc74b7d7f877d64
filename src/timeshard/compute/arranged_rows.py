"""A view input's rows arranged in Spark by join key: the arrangement of a linear join.

A linear view that joins two inputs on equalities of their columns runs, per
tick, the delta rule ``Δ(A ⋈ B) = ΔA ⋈ B_old + A_new ⋈ ΔB``. Read from the
shards, ``B_old`` is a scan of every part of ``B`` and the join a broadcast of
``ΔA`` (one Spark job per broadcast). Arranged, each input's rows are kept
cached in Spark, hash-partitioned by its key columns; the other input's
delta is partitioned the same way, so each term is a hash join, built on the
delta, that the union of the cached layers streams through where they lie
(Spark 4.1 keeps a partitioning through a union whose children share it)::

    layers (oldest first), each: the input's data columns (_c0 ..), _ts, _diff
    ┌─────────────────────────────┐
    │ base: the ok rows at lower-1│   hash-partitioned by the key columns into
    ├──────────────┬──────────────┘   `partitions`, locally checkpointed
    │ delta        │                  one tick's ok updates: a lazy checkpoint
    ├───────┬──────┘                  the tick's write fills (it is that
    │ delta │                         term's build side)
    └───────┘
    the content: per row, the sum of its _diff over the layers

Every use of the content is linear in it (a term's product), so the layers
need not be consolidated with each other: merges (background, geometric, as
for every :class:`~timeshard.storage.upsert_state.Arrangement`) sum the rows
of two layers and drop zero sums, to keep the layers few and small.

Invariants:

1. The content is the input's ok rows at ``time - 1`` (err rows are the
   view's err rows directly, never joined).
2. Every layer is hash-partitioned by the key columns into
   :attr:`~timeshard.storage.upsert_state.Arrangement.partitions`
   partitions, and its plan says so: a join on those columns with a side
   partitioned the same way shuffles no layer.
3. Every ``_ts`` in a layer is below ``time``; a reader sets it to
   ``lower - 1`` (the rows' time as the delta rule's ``old``).

Runs on the driver (bookkeeping); building the base (a rebuild) and a merge
are Spark jobs, a delta layer is filled by the tick's write.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from timeshard.persist._internal.parts import DIFF, TS
from timeshard.storage.upsert_state import Arrangement, Layer, checkpointed


class ArrangedRows(Arrangement):
    """An input's ok rows at ``time - 1`` (``columns``), hash-partitioned by ``keys``.

    A layer names the data columns by position (``_c0`` ..), then ``_ts``
    and ``_diff``; :meth:`named` gives them their names back.
    """

    def __init__(
        self,
        spark: Any,
        keys: Sequence[str],
        columns: Sequence[str],
        partitions: int | None = None,
    ) -> None:
        super().__init__(spark, partitions)
        self.keys = list(keys)
        self.columns = list(columns)

    def partitioned(self, df: Any) -> Any:
        """``df`` (the data columns by name, ``_ts``, ``_diff``) as a layer: hash-partitioned
        by the key.

        The columns are renamed by position first. That also makes the
        layer's partitioning name its own columns: Spark passes a partitioning
        through a union of layers (4.1), so that a join with the union
        shuffles none, only if the layers' partitionings compare equal once
        mapped onto the union's columns, comparing columns with their
        qualifiers; a checkpoint keeps its plan's columns (qualified, where
        SQL text selected them from a subquery) but a partitioning on columns
        that the optimizer unqualified. A renaming alias is a new column, and
        it stays.
        """
        from timeshard.spark.parts import column

        names = [column(c).alias(f"_c{i}") for i, c in enumerate(self.columns)]
        positional = df.select(*names, column(TS).alias(TS), column(DIFF).alias(DIFF))
        return positional.repartition(self.partitions, *self._keys())

    def _keys(self) -> list[str]:
        """The key columns' positional names in a layer."""
        return [f"_c{self.columns.index(k)}" for k in self.keys]

    def named(self, layer: Any, ts: str = TS) -> Any:
        """A layer's rows with the data columns' names, ``ts`` (SQL) as ``_ts``, and ``_diff``
        (a projection: the partitioning stays, on the named key)."""
        from timeshard.spark.sqltext import quoted, select_exprs

        names = [f"_c{i} AS {quoted(c)}" for i, c in enumerate(self.columns)]
        return select_exprs(layer, [*names, f"{ts} AS {TS}", DIFF])

    def rebuild(self, rows: Any, time: int) -> None:
        """Hold ``rows`` (the data columns, ``_ts``, ``_diff``: the input's ok rows at
        ``time - 1``) from now on, consolidated into one base layer (one Spark job)."""
        self.reset([checkpointed(self._summed(self.partitioned(rows)))], time)

    def pending(self, updates: Any) -> Layer:
        """``updates`` (data columns, ``_ts``, ``_diff``) as a layer to :meth:`push` once the
        tick is planned: partitioned like the layers, checkpointed by the first job that
        reads it (the tick's write)."""
        return Layer(self.partitioned(updates).localCheckpoint(eager=False), 0, pending=True)

    def old(self, layers: Sequence[Layer], lower: int) -> Any:
        """The union of ``layers`` as the delta rule's old rows: the data columns,
        ``_ts = lower - 1`` and ``_diff``, partitioned like each layer."""
        ts = f"CAST({int(lower) - 1} AS BIGINT)"
        return functools.reduce(lambda a, b: a.union(b), [self.named(x.df, ts) for x in layers])

    def _merge(self, older: Layer, newer: Layer, *, into_base: bool) -> Layer:
        # Shuffled again, off the tick path, rather than trusting the union's partitioning.
        union = older.df.union(newer.df).repartition(self.partitions, *self._keys())
        return checkpointed(self._summed(union))

    def _summed(self, layer: Any) -> Any:
        """Layer rows, partitioned by the key, summed per distinct row, zero sums dropped:
        grouped on every column, a superset of the key, so the partitioning stays (on the
        key columns, which the aggregate passes through)."""
        from pyspark.sql import functions as F

        data = [f"_c{i}" for i in range(len(self.columns))]
        summed = layer.groupBy(*data).agg(F.max(TS).alias(TS), F.sum(DIFF).alias(DIFF))
        return summed.where(F.col(DIFF) != 0)


__all__ = ["ArrangedRows"]
