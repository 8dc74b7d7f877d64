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

Shared between views (:class:`SharedArrangements`). Every view of one Spark
application that arranges an input by the same key reads the same
arrangement, each at its own times: a delta over ``[lower, upper)`` reads
the content *as of* ``lower`` (old) and ``upper`` (new), the rows whose
``_ts`` is below that time. Each layer holds the updates of an interval of
times (``[Layer.lower, Layer.upper)``) and keeps each row's own ``_ts`` from
``Layer.exact_from`` on; a merge folds the times below the *frontier* of the
slowest reader (the earliest time any view still reads at, :meth:`hold`),
summing rows that differ only there, and keeps the later ones apart. So a
view that lags holds the merges back from folding what it still reads, as
Materialize holds an arrangement's compaction to its slowest reader. The
view at the front pushes the next layer (the input's updates from the
arrangement's time to its ``upper``); a view behind it reads that layer at
its own times (its delta then comes from the parts).

Invariants:

1. The content as of ``time`` is the input's ok rows at ``time - 1`` (err
   rows are the view's err rows directly, never joined).
2. Every layer is hash-partitioned by the key columns into
   :attr:`~timeshard.storage.upsert_state.Arrangement.partitions`
   partitions, and its plan says so: a join on those columns with a side
   partitioned the same way shuffles no layer; a filter on ``_ts`` keeps it.
3. Every ``_ts`` in a layer is in ``[Layer.lower, Layer.upper)``; below
   ``Layer.exact_from`` a row's ``_ts`` may be any time of it below
   ``exact_from`` (folded). The delta rule's ``old`` rows keep their own
   ``_ts`` (every one below ``lower``): a term's row takes the greatest
   ``_ts`` of its rows, which is its delta row's, at ``lower`` or later.
4. No layer folds a time at which a reader holds its frontier: every layer
   that holds times on both sides of a frontier keeps them apart from it.

Runs on the driver (bookkeeping); building the base (a rebuild) and a merge
are Spark jobs, a delta layer is filled by the tick's write.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Sequence
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
        #: Reader -> its frontier: it reads the content as of that time or later only.
        self._frontiers: dict[object, int] = {}
        #: Held by the one view that plans a delta over the layers (reads the time,
        #: rebuilds, pushes the next layer): see :class:`SharedArrangements`.
        self.in_use = threading.Lock()

    def twin(self) -> ArrangedRows:
        """A new, empty arrangement of the same rows by the same key."""
        return ArrangedRows(self.spark, self.keys, self.columns, self.partitions)

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
        from timeshard.spark.sqltext import quoted, select_exprs

        names = [f"{quoted(c)} AS _c{i}" for i, c in enumerate(self.columns)]
        positional = select_exprs(df, [*names, f"{TS} AS {TS}", f"{DIFF} AS {DIFF}"])
        return positional.repartition(self.partitions, *self._keys())

    def _keys(self) -> list[str]:
        """The key columns' positional names in a layer."""
        return [f"_c{self.columns.index(k)}" for k in self.keys]

    def named(self, layer: Any) -> Any:
        """A layer's rows with the data columns' names, ``_ts`` and ``_diff`` (a projection:
        the partitioning stays, on the named key)."""
        from timeshard.spark.sqltext import quoted, select_exprs

        names = [f"_c{i} AS {quoted(c)}" for i, c in enumerate(self.columns)]
        return select_exprs(layer, [*names, TS, DIFF])

    def rebuild(self, rows: Any, time: int) -> None:
        """Hold ``rows`` (the data columns, ``_ts``, ``_diff``: the input's ok rows at
        ``time - 1``) from now on, consolidated into one base layer (one Spark job)."""
        self.reset([checkpointed(self._summed(self.partitioned(rows), time))], time)

    def pending(self, updates: Any, lower: int, upper: int) -> Layer:
        """``updates`` (data columns, ``_ts``, ``_diff``: the input's ok updates in
        ``[lower, upper)``) as a layer to :meth:`push` once the tick is planned: partitioned
        like the layers, checkpointed by the first job that reads it (the tick's write)."""
        from timeshard.spark.checkpoint import local_checkpoint

        df = local_checkpoint(self.partitioned(updates), eager=False)
        return Layer(df, 0, pending=True, lower=lower, upper=upper, exact_from=lower)

    # -- readers at different times ----------------------------------------------------------

    def hold(self, reader: object, frontier: int) -> None:
        """``reader`` reads the content as of ``frontier`` or later only, from now on: merges
        may fold the times of rows below it."""
        with self._lock:
            self._frontiers[reader] = frontier

    def let_go(self, reader: object) -> None:
        """``reader`` reads no more."""
        with self._lock:
            self._frontiers.pop(reader, None)

    def readers(self) -> int:
        with self._lock:
            return len(self._frontiers)

    def readable(self, layers: Sequence[Layer], at: int) -> bool:
        """Whether ``layers`` give the content as of ``at`` (every row before ``at``): the
        arrangement is at ``at`` or later, and no layer that holds times on both sides of
        ``at`` has folded them."""
        if self.time is None or self.time < at:
            return False
        return all(_splits(layer, at) for layer in layers)

    def as_of(self, layers: Sequence[Layer], at: int) -> Any:
        """The content as of ``at`` (:meth:`readable`) from ``layers``, by name: the union of
        the layers before ``at``, the one that holds ``at`` filtered by ``_ts``, partitioned
        like each."""
        return self.named(self._upto(layers, at))

    def old(self, layers: Sequence[Layer], lower: int) -> Any:
        """The delta rule's old rows from ``layers``: the content as of ``lower``, each row
        with its own ``_ts`` (below ``lower``; see the module's invariant 3).

        Not ``lower - 1`` projected: a projected literal is compiled into the
        code Spark generates for the term's stages, so every tick would
        compile them anew.
        """
        return self.as_of(layers, lower)

    def _upto(self, layers: Sequence[Layer], at: int) -> Any:
        """The rows of ``layers`` at times before ``at``, positional (a union of layers, some
        filtered: every part keeps its partitioning)."""
        from timeshard.spark.sqltext import bigint_where, union_all

        assert layers and all(_splits(x, at) for x in layers), (at, layers)
        picked = [x for x in layers if x.lower < at]
        if not picked:  # nothing before `at`: the first layer, with no row left
            return layers[0].df.where(bigint_where(TS, "<", at))
        parts = [
            x.df if x.upper is not None and x.upper <= at else x.df.where(bigint_where(TS, "<", at))
            for x in picked
        ]
        return union_all(parts)

    def _merge(self, layers: list[Layer], *, into_base: bool) -> Layer:
        from timeshard.spark.sqltext import union_all

        # Shuffled again, off the tick path, rather than trusting the union's partitioning.
        newest = layers[-1]
        assert newest.upper is not None, newest
        with self._lock:
            fold = min([newest.upper, *self._frontiers.values()])
        union = union_all([x.df for x in layers])
        merged = checkpointed(self._summed(union.repartition(self.partitions, *self._keys()), fold))
        merged.exact_from = _merged_exact_from(layers, fold)
        return merged

    def _keeps(self, merged: Layer) -> bool:
        # A reader that came since the merge started may read at a time it folded.
        return all(_splits(merged, at) for at in self._frontiers.values())

    def _summed(self, layer: Any, fold: int) -> Any:
        """Layer rows, partitioned by the key, summed per distinct row and time, every time
        below ``fold`` as ``fold - 1``, zero sums dropped: grouped on every column, a
        superset of the key, so the partitioning stays (on the key columns, which the
        aggregate passes through)."""
        from timeshard.spark.sqltext import bigint_at_least, select_exprs, summed

        data = [f"_c{i}" for i in range(len(self.columns))] + self.carried
        # fold - 1 for every time below fold, as a reference in the generated code, so
        # that merges do not compile their stages anew for each fold
        folded = select_exprs(layer, [*data, f"{bigint_at_least(TS, fold - 1)} AS {TS}", DIFF])
        return summed(folded, [*data, TS], DIFF).where(f"{DIFF} != 0")


def _merged_exact_from(layers: Sequence[Layer], fold: int) -> int:
    """Where the merge of ``layers`` that folds the times below ``fold`` keeps each row's
    own time from: ``fold``, or later where a layer had folded times of its own. A layer
    exact from its lower on folded none (its ``exact_from`` says nothing of the others')."""
    folded = [x.exact_from for x in layers if x.exact_from is not None and x.exact_from > x.lower]
    return max([fold, *folded])


def _splits(layer: Layer, at: int) -> bool:
    """Whether ``layer`` tells its rows before ``at`` from the others (see Layer)."""
    if at <= layer.lower or (layer.upper is not None and layer.upper <= at):
        return True
    return layer.exact_from is not None and layer.exact_from <= at


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

    @property
    def key_text(self) -> tuple[str, ...]:
        """The key's expressions without the input's alias (the same key in any view)."""
        return tuple(_unqualified(e, self.alias) for e in self.expressions)

    def twin(self) -> KeyedRows:
        return KeyedRows(self.spark, self.expressions, self.alias, self.columns, self.partitions)

    def why_not(self, schema: Any) -> str | None:
        """Why rows of ``schema`` (Spark, the data columns) cannot be arranged by the key,
        or None (Spark analysis only: no job)."""
        from timeshard.spark.snapshot import _has_map

        if not self.expressions:
            return "no key"
        for field in schema.fields:
            if _has_map(field.dataType):
                return f"column {field.name!r} is a map (layers group on every column)"
        from timeshard.spark.sqltext import empty_frame

        empty = empty_frame(self.spark, schema)
        key = self._keyed(empty).schema[_KEYED].dataType
        why = _unhashable(key)
        return None if why is None else f"the key {key.simpleString()} has {why}"

    def partitioned(self, df: Any) -> Any:
        """``df`` (the data columns by name, ``_ts``, ``_diff``) as a layer: the data columns
        by position, the key ``_k``, ``_ts``, ``_diff``, hash-partitioned by ``_k``."""
        from timeshard.spark.sqltext import quoted, select_exprs

        names = [f"{quoted(c)} AS _c{i}" for i, c in enumerate(self.columns)]
        key = f"{self._key_sql()} AS {KEY}"
        positional = select_exprs(df, [*names, key, f"{TS} AS {TS}", DIFF])
        return positional.repartition(self.partitions, KEY)

    def _keys(self) -> list[str]:
        return [KEY]

    def touched(self, layers: Sequence[Layer], keys: Any, lower: int) -> Any:
        """The rows of the content as of ``lower`` (:meth:`ArrangedRows.as_of`) whose key is
        in ``keys`` (a DataFrame of ``_k``, as :meth:`partitioned` computes it) with their
        names, their own ``_ts`` (below ``lower``, as :meth:`old`) and ``_diff``.

        ``keys`` is the build side of a hash join that the layers stream
        through where they lie: partitioned like them, it is not shuffled either.
        """
        union = self._upto(layers, lower)
        rows = union.join(keys.hint("shuffle_hash"), KEY, "left_semi")
        return self.named(rows)

    def _keyed(self, df: Any) -> Any:
        """``df`` with the key struct as ``__timeshard_key``.

        The expressions are unqualified rather than evaluated over ``df``
        aliased: Spark 4.1 fails to optimize a union of checkpoints of a plan
        with a subquery alias and a filter under it ("key not found" in the
        union's constraints), which a merge of two layers is.
        """
        from pyspark.sql import functions as F

        return df.select("*", F.expr(self._key_sql()).alias(_KEYED))

    def _key_sql(self) -> str:
        """SQL: the key struct of a row (its expressions unqualified: :meth:`_keyed`)."""
        fields = ", ".join(
            f"'k{i}', {_unqualified(e, self.alias)}" for i, e in enumerate(self.expressions)
        )
        return f"named_struct({fields})"


@functools.lru_cache(maxsize=1024)
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
    values that hash apart. Maps and variants cannot be hashed (Spark refuses both).
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


class SharedArrangements:
    """The arrangements of view inputs in one Spark application, one per input shard, columns
    and key: every view that arranges an input alike reads the same layers.

    A view acquires an arrangement by its key (made if no view has it) and
    releases it when closed; the last to release it frees its layers. Views
    read it at their own times (:meth:`ArrangedRows.hold`), so a view that
    lags keeps the merges from folding the times it still reads, as
    Materialize holds an arrangement's compaction to its slowest reader.
    One view at a time plans a delta over it (:attr:`ArrangedRows.in_use`:
    it reads the arrangement's time, rebuilds it if need be, pushes the next
    layer); its write runs after, unlocked. A layer one view pushed is filled
    by the first job that reads it (that view's write, or another view's that
    read it at its own times: the same rows), and settled by each.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[Any, ...], tuple[ArrangedRows, set[int]]] = {}

    @classmethod
    def of(cls, spark: Any) -> SharedArrangements:
        """The pool of ``spark``'s application."""
        with _POOLS_LOCK:
            pool = _POOLS.get(spark)
            if pool is None:
                pool = _POOLS[spark] = cls()
            return pool

    def acquire(self, key: tuple[Any, ...], user: object, make: Callable[[], Any]) -> Any:
        """The arrangement ``key``, made by ``make`` if no view has it, read by ``user``."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = (make(), set())
            entry[1].add(id(user))
            return entry[0]

    def users(self, key: tuple[Any, ...]) -> int:
        with self._lock:
            entry = self._entries.get(key)
            return 0 if entry is None else len(entry[1])

    def wait_for_merges(self) -> None:
        """Block until no merge of any of the pool's arrangements runs."""
        with self._lock:
            every = [rows for rows, _users in self._entries.values()]
        for rows in every:
            rows.wait_for_merges()

    def release(self, key: tuple[Any, ...], user: object) -> None:
        """``user`` reads the arrangement ``key`` no more; the last user frees its layers."""
        with self._lock:
            rows, users = self._entries[key]
            users.discard(id(user))
            last = not users
            if last:
                del self._entries[key]
        rows.let_go(user)
        if last:
            rows.wait_for_merges()
            rows.clear()


#: Each Spark session's pool of arrangements.
_POOLS: weakref.WeakKeyDictionary[Any, SharedArrangements] = weakref.WeakKeyDictionary()
_POOLS_LOCK = threading.Lock()

__all__ = ["KEY", "ArrangedRows", "KeyedRows", "SharedArrangements"]
