"""A view input's rows arranged in Spark by join key: the arrangement of a linear join.

A linear view that joins inputs on equalities runs, per tick, the delta rule
(two inputs: ``Δ(A ⋈ B) = ΔA ⋈ B_old + A_new ⋈ ΔB``). Read from the shards,
``B_old`` is a scan of every part of ``B`` and the join a broadcast of
``ΔA`` (one Spark job per broadcast). Arranged, each input's rows are kept
cached in Spark, hash-partitioned by its key columns (once per key it is
joined on); the rows joined so far are shuffled by the matching expressions,
so each step of a term is a hash join, built on them, that the union of the
cached layers streams through where they lie (Spark 4.1 keeps a partitioning
through a union whose children share it)::

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
        #: Columns a layer has after the data columns, before ``_ts`` (a computed key).
        self.carried: list[str] = []

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

        data = [f"_c{i}" for i in range(len(self.columns))] + self.carried
        summed = layer.groupBy(*data).agg(F.max(TS).alias(TS), F.sum(DIFF).alias(DIFF))
        return summed.where(F.col(DIFF) != 0)


#: The key column of a :class:`KeyedRows` layer.
KEY = "_k"


class KeyedRows(ArrangedRows):
    """An input's ok rows at ``time - 1``, hash-partitioned by a grouped plan's key.

    The key is SQL expressions over the input's ``alias`` (a grouped plan's
    :class:`~timeshard.compute.incremental.KeyedSource`), computed into one
    column ``_k`` after the data columns: a struct of the expressions, never
    null itself, so that ``=`` on it matches keys whose parts are null as
    GROUP BY groups them (Spark compares and hashes a struct's null fields as
    equal), and a hash join on it keeps the layers' partitioning.

    A tick reads the rows of the keys its updates touched
    (:meth:`touched`): the union of the layers, semi-joined with those keys,
    partitioned alike, so no layer is shuffled.
    """

    def __init__(
        self,
        spark: Any,
        expressions: Sequence[str],
        alias: str,
        columns: Sequence[str],
        partitions: int | None = None,
    ) -> None:
        super().__init__(spark, (), columns, partitions)
        self.expressions = list(expressions)
        self.alias = alias
        self.carried = [KEY]

    def why_not(self, schema: Any) -> str | None:
        """Why rows of ``schema`` (Spark, the data columns) cannot be arranged by the key,
        or None (Spark analysis only: no job)."""
        from timeshard.spark.snapshot import _has_map

        if not self.expressions:
            return "no key"
        for field in schema.fields:
            if _has_map(field.dataType):
                return f"column {field.name!r} is a map (layers group on every column)"
        empty = self.spark.createDataFrame([], schema)
        key = self._keyed(empty).schema[_KEYED].dataType
        why = _unhashable(key)
        return None if why is None else f"the key {key.simpleString()} has {why}"

    def partitioned(self, df: Any) -> Any:
        """``df`` (the data columns by name, ``_ts``, ``_diff``) as a layer: the data columns
        by position, the key ``_k``, ``_ts``, ``_diff``, hash-partitioned by ``_k``."""
        from timeshard.spark.parts import column

        names = [column(c).alias(f"_c{i}") for i, c in enumerate(self.columns)]
        key = column(_KEYED).alias(KEY)
        positional = self._keyed(df).select(*names, key, column(TS).alias(TS), DIFF)
        return positional.repartition(self.partitions, KEY)

    def _keys(self) -> list[str]:
        return [KEY]

    def touched(self, layers: Sequence[Layer], keys: Any, lower: int) -> Any:
        """The rows of ``layers`` whose key is in ``keys`` (a DataFrame of ``_k``, as
        :meth:`partitioned` computes it) with their names, ``_ts = lower - 1`` and ``_diff``.

        ``keys`` is the build side of a hash join that the layers stream
        through where they lie: partitioned like them, it is not shuffled either.
        """
        union = functools.reduce(lambda a, b: a.union(b), [x.df for x in layers])
        rows = union.join(keys.hint("shuffle_hash"), KEY, "left_semi")
        return self.named(rows, f"CAST({int(lower) - 1} AS BIGINT)")

    def _keyed(self, df: Any) -> Any:
        """``df`` with the key struct as ``__timeshard_key``.

        The expressions are unqualified rather than evaluated over ``df``
        aliased: Spark 4.1 fails to optimize a union of checkpoints of a plan
        with a subquery alias and a filter under it ("key not found" in the
        union's constraints), which a merge of two layers is.
        """
        from pyspark.sql import functions as F

        fields = ", ".join(
            f"'k{i}', {_unqualified(e, self.alias)}" for i, e in enumerate(self.expressions)
        )
        return df.select("*", F.expr(f"named_struct({fields})").alias(_KEYED))


def _unqualified(expression: str, alias: str) -> str:
    """``expression`` (Spark SQL) with its columns' qualifier ``alias`` dropped."""
    from sqlglot import exp, parse_one

    tree = parse_one(expression, dialect="spark")
    for col in list(tree.find_all(exp.Column)):
        part = "db" if col.args.get("db") is not None else "table"
        if col.args.get(part) is not None and col.text(part).lower() == alias.lower():
            col.set(part, None)
    return tree.sql(dialect="spark")


_KEYED = "__timeshard_key"


def _unhashable(data_type: Any) -> str | None:
    """What in a key type makes hash partitioning disagree with GROUP BY, or None.

    Floats: GROUP BY (and a join) makes -0.0 one with 0.0 and every NaN one,
    hashing does not. A string with a collation other than binary groups
    values that hash apart. Maps and variants cannot be grouped.
    """
    from pyspark.sql import types as T

    if isinstance(data_type, T.FloatType | T.DoubleType):
        return "a floating-point field"
    if isinstance(data_type, T.StringType) and data_type.collation != "UTF8_BINARY":
        return f"a string of collation {data_type.collation}"
    if isinstance(data_type, T.MapType | T.VariantType):
        return f"a {data_type.simpleString()} field"
    if isinstance(data_type, T.ArrayType):
        return _unhashable(data_type.elementType)
    if isinstance(data_type, T.StructType):
        return next((w for f in data_type.fields if (w := _unhashable(f.dataType))), None)
    return None


__all__ = ["KEY", "ArrangedRows", "KeyedRows"]
