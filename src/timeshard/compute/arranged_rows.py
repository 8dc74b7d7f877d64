"""A view input's rows arranged in Spark by join key: the arrangement of a linear join.

A linear view that joins two inputs on equalities of their columns runs, per
tick, the delta rule ``Δ(A ⋈ B) = ΔA ⋈ B_old + A_new ⋈ ΔB``. Read from the
shards, ``B_old`` is a scan of every part of ``B`` and the join a broadcast of
``ΔA`` (one Spark job per broadcast). Arranged, each input's rows are kept
cached in Spark, hash-partitioned by its key columns; the other input's
delta is partitioned the same way, so each term is a hash join, built on the
delta, that the cached rows stream through where they lie::

    layers (oldest first), each: the input's data columns, _ts, _diff
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

from collections.abc import Sequence
from typing import Any

from timeshard.persist._internal.parts import DIFF, TS
from timeshard.storage.upsert_state import Arrangement, Layer, checkpointed


class ArrangedRows(Arrangement):
    """An input's ok rows at ``time - 1`` (``columns``), hash-partitioned by ``keys``."""

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
        """``df`` (with the key columns) hash-partitioned like the layers."""
        from timeshard.spark.parts import column

        return df.repartition(self.partitions, *[column(k) for k in self.keys])

    def rebuild(self, rows: Any, time: int) -> None:
        """Hold ``rows`` (the data columns, ``_ts``, ``_diff``: the input's ok rows at
        ``time - 1``) from now on, consolidated into one base layer (one Spark job)."""
        self.reset([checkpointed(self._summed(self.partitioned(rows)))], time)

    def pending(self, updates: Any) -> Layer:
        """``updates`` (data columns, ``_ts``, ``_diff``) as a layer to :meth:`push` once the
        tick is planned: partitioned like the layers, checkpointed by the first job that
        reads it (the tick's write)."""
        return Layer(self.partitioned(updates).localCheckpoint(eager=False), 0, pending=True)

    def old(self, layers: Sequence[Layer], lower: int) -> list[Any]:
        """Each of ``layers`` as the delta rule's old rows: the data columns, ``_ts = lower - 1``
        and ``_diff`` (a projection: the partitioning stays)."""
        from timeshard.spark.sqltext import quoted, select_exprs

        names = [quoted(c) for c in self.columns]
        ts = f"CAST({int(lower) - 1} AS BIGINT) AS {TS}"
        return [select_exprs(layer.df, [*names, ts, DIFF]) for layer in layers]

    def _merge(self, older: Layer, newer: Layer, *, into_base: bool) -> Layer:
        return checkpointed(self._summed(self.partitioned(older.df.unionByName(newer.df))))

    def _summed(self, rows: Any) -> Any:
        """``rows`` summed per distinct row, zero sums dropped (grouped on every column, a
        superset of the key: no shuffle, the partitioning stays)."""
        from timeshard.spark.sqltext import quoted, sql_over

        names = ", ".join(quoted(c) for c in self.columns)

        def query(v: Any) -> str:
            summed = (
                f"SELECT {names}, max({TS}) AS {TS}, sum({DIFF}) AS {DIFF} "
                f"FROM {v['rows']} GROUP BY {names}"
            )
            return f"SELECT * FROM ({summed}) WHERE {DIFF} != 0"

        return sql_over({"rows": rows}, query)


__all__ = ["ArrangedRows"]
