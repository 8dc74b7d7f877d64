"""The feedback upsert's state: its output shard's content, arranged in Spark by key.

The feedback upsert needs, for every key a tick touches, the key's row in its
output shard just before the tick. Reading the whole shard every tick costs in
proportion to the state; this arrangement keeps that content cached in Spark
instead, so a tick costs in proportion to its change::

    layers (oldest first)        each: _h, _key, _v0.._vm, _err, _gone
    ┌──────────────────────┐
    │ base: every live key │  hash-partitioned by _h into `partitions`,
    ├──────────────┬───────┘  locally checkpointed (memory, then disk)
    │ delta        │           the state of the keys one tick (or catch-up) changed;
    ├───────┬──────┘           _gone = the key was deleted there
    │ delta │
    └───────┘
    a key's row = the row of the newest layer that has it (absent if _gone)

Layout. A layer names its columns by position, so that any column name of
the shard (dots, spaces) is safe in Spark plans and Arrow tasks: ``_key`` is
one non-null struct ``<_k0, .., _kn>`` of the key columns (the shard's key
types, every field nullable), ``_v0 .. _vm`` the value columns, then
``_err`` and ``_gone``. Spark compares structs field by field with null equal
to null, so ``=`` on ``_key`` is the null-safe comparison of the keys. In
front is ``_h``, the ``xxhash64`` of the key's fields (a float field's
``-0.0`` hashed as ``0.0``, since Spark compares them equal).

Joins on the hash. Every layer is partitioned by ``_h``, and a lookup joins
on ``_h = _h`` with the keys compared only where the hashes match
(:func:`same_key`). A tick's lookup streams every row of every layer through
one join (the layers stacked in a union, which keeps their partitioning):
with the struct ``_key`` as the join key Spark builds an unsafe key row of
the whole struct for each streamed row, then hashes and compares its bytes;
with the long ``_h`` the key row is 8 bytes. At 1M keys
and 20k commands that made the lookup about 2.5x cheaper
(bench/bench_upsert_tick.py). The map is still Spark's generic one, not its
map of longs: an outer join built on its left side keeps null keys, which
only the generic map holds (an inner join of the same sides gets the long
map, and was 10-20% faster over a 1M-row layer; the lookup needs the outer
join).

Frontiers: the arrangement is the shard's content at ``time - 1``, where
``time`` is the shard upper it was built or advanced to. It advances in two
ways: ``push`` (this instance's own append made the shard upper move from
``time`` to ``new_time``, and the layer it pushes is exactly what changed) and
``catch_up`` (another instance appended: the updates in ``[time, upper)`` are
read back from the shard, consolidated, and become a layer). Reading those
updates needs their times unadvanced, so the reader must hold the shard's
since at or below ``time - 1``.

Layers merge off the tick path: after a push, a background thread (Spark
FAIR pool ``timeshard-merge``) merges a run of layers into one (newest wins
per key; merging into the base drops deleted keys) in one job, and swaps the
merged layer in under a lock. Which run is the subclass's choice
(:meth:`Arrangement._next_merge`): by default the two newest, whenever the
newer holds at least half the bytes of the older, so O(log(state / change))
layers; :class:`ArrangedState` lets up to :data:`MAX_DELTAS` layers
accumulate over its base, and folds them all into the base once they hold a
quarter of its bytes (:data:`BASE_SHARE`), since a tick joins all its layers
at once (:meth:`ArrangedState.with_layer_rows`). A row is then rewritten
about once per merge into the base, and a merge job runs about once every
``base / (BASE_SHARE * change)`` ticks.

Invariants:

1. Every layer has at most one row per key (null keys included).
2. The content (newest row per key, absent if ``_gone``) equals the shard's
   snapshot at ``time - 1`` (``_err`` included), whatever merges ran.
3. The base has no ``_gone`` rows.
4. Every layer is hash-partitioned by ``_h`` into :attr:`partitions`
   partitions, and its plan says so: a join with commands partitioned the same
   way shuffles no layer.
5. A layer a tick or merge reads (:meth:`pinned`) is freed only after it is
   done.
6. Unkeyed err rows (``_err`` set, every key column null: a record that did
   not decode far enough to have a key) are no key's state: the layers leave
   them out, and the upsert keeps them as they are (:func:`unkeyed_error`).
7. A pending layer (a lazy checkpoint) is merged with nothing until it is
   settled, and whoever pushed it keeps the layers it reads pinned until then.

The same type arranges the per-group state of GROUP BY views
(:mod:`timeshard.compute.aggregate`): there a key is a group, its row the
group's sums, and a layer is pushed by each view tick (``reset`` rebuilds it).

Runs on the driver; the layers live in Spark's block manager, and building
one (rehydrate, catch-up, merge) is a Spark job.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from timeshard.errors import SinceError
from timeshard.persist._internal.parts import DIFF, ERR, TS
from timeshard.persist.read import ReadHandle

log = logging.getLogger(__name__)

KEY = "_key"
HASH = "_h"
GONE = "_gone"
#: :class:`ArrangedState` merges every layer into its base once the layers over the base hold
#: 1 / BASE_SHARE of the base's bytes and at least MIN_MERGE_BYTES, and the layers over the
#: base into one once there are MAX_DELTAS of them (small ones are not worth a job sooner).
BASE_SHARE = 4
MAX_DELTAS = 8
MIN_MERGE_BYTES = 4 << 20
#: The index of the layer a row of :meth:`ArrangedState.with_layer_rows` came from (a
#: one-field struct: ordered as its field).
LAYER = "_li"
_LAYER_TYPE = "STRUCT<i: INT>"
MERGE_POOL = "timeshard-merge"


def key_fields(n: int) -> list[str]:
    """The field names of the ``_key`` struct of ``n`` key columns."""
    return [f"_k{i}" for i in range(n)]


def value_columns(n: int) -> list[str]:
    """The positional names of ``n`` value columns in a layer."""
    return [f"_v{i}" for i in range(n)]


@dataclass(eq=False)
class Layer:
    """A locally checkpointed DataFrame of key states, and the bytes its blocks hold.

    ``blocks`` is the checkpointed DataFrame whose cached blocks hold the
    layer, when ``df`` is a filter or projection of it (that keeps its
    partitioning); by default ``df`` itself. A *pending* layer's checkpoint is
    lazy (``localCheckpoint(eager=False)``): the first job that reads it fills
    it, its size is not known yet, and it takes part in no merge until it is
    settled (:meth:`settle`).
    """

    df: Any
    size: int
    blocks: Any = None
    pending: bool = False
    #: The times of the updates it holds: ``[lower, upper)``, set when it is pushed.
    lower: int = 0
    upper: int | None = None
    #: Its rows at times ``>= exact_from`` keep their own ``_ts``; a row at an earlier time
    #: may have any ``_ts`` below ``exact_from`` (a merge folded it). None: set at push.
    exact_from: int | None = None

    def release(self) -> None:
        """Free the checkpointed blocks now rather than at the next JVM GC."""
        self._rdd().unpersist(False)

    def settle(self) -> None:
        """Fill a pending layer's checkpoint if no job did (a Spark job then), and size it.

        Call it while the layers the pending one was computed from are still
        cached (pinned): a lazy checkpoint reads them until it is filled.
        """
        if not self.pending:
            return
        if not self._rdd().isCheckpointed():
            self._cached.count()  # the write that should have filled it did not run, or failed
        self.size = stored_bytes(self._cached)
        self.pending = False

    @property
    def _cached(self) -> Any:
        """The checkpointed DataFrame whose blocks hold the layer."""
        return self.df if self.blocks is None else self.blocks

    def _rdd(self) -> Any:
        return self._cached._jdf.queryExecution().logical().rdd()


def checkpointed(df: Any) -> Layer:
    """``df`` locally checkpointed (one Spark job) as a layer.

    A local checkpoint, not persist(): it also cuts the lineage, so the plans
    of later layers do not nest every earlier tick's query; it keeps the
    plan's output partitioning.
    """
    from timeshard.spark.checkpoint import local_checkpoint

    cached = local_checkpoint(df, eager=True)
    return Layer(cached, stored_bytes(cached))


class Arrangement:
    """Cached Spark layers (oldest first) that together hold a collection at ``time - 1``.

    The bookkeeping every arrangement shares: the layer list and its frontier,
    pins (a layer a tick or merge reads is freed only after), and merges of a
    run of layers into one in a background thread (FAIR pool
    ``timeshard-merge``). What a layer holds, how layers merge and when is
    the subclass's (:meth:`_merge`, :meth:`_next_merge`): a key's newest row here
    (:class:`ArrangedState`), a multiset of rows in
    :class:`timeshard.compute.arranged_rows.ArrangedRows`.
    """

    def __init__(self, spark: Any, partitions: int | None = None) -> None:
        self.spark = spark
        self.partitions = partitions or int(spark.conf.get("spark.sql.shuffle.partitions"))
        self.layers: list[Layer] = []
        self.time: int | None = None
        self._lock = threading.Lock()
        self._generation = 0
        self._pins = 0
        self._retired: list[Layer] = []
        self._paused = 0
        self._merger: threading.Thread | None = None

    def push(self, layer: Layer, new_time: int) -> None:
        """Add ``layer`` (what changed in ``[time, new_time)``): the content at ``new_time - 1``.

        ``layer`` is laid out and partitioned like every layer of the
        arrangement (for :class:`ArrangedState`: :attr:`columns`, at most one
        row per key, hash-partitioned by ``_h`` into :attr:`partitions`
        partitions). Merges that follow run in the background (unless paused).
        """
        assert self.time is not None and self.time < new_time, (self.time, new_time)
        if layer.upper is None:  # a layer of updates, each at its own time
            layer.lower, layer.upper, layer.exact_from = self.time, new_time, self.time
        assert layer.lower >= (self.layers[-1].upper or 0 if self.layers else 0), layer
        assert layer.upper == new_time, (layer, new_time)
        with self._lock:
            self.layers = [*self.layers, layer]
            self.time = new_time
        self._start_merges()

    def settle(self) -> None:
        """Settle every pending layer (:meth:`Layer.settle`) and start the merges now due."""
        with self.pinned() as layers:
            for layer in layers:
                layer.settle()
        self._start_merges()

    def reset(self, layers: list[Layer], time: int) -> None:
        """Replace every layer by ``layers``, the content at ``time - 1`` (every row's time
        folded: the layers are readable at ``time`` and later only)."""
        for layer in layers:
            layer.lower, layer.upper, layer.exact_from = 0, time, time
        with self._lock:
            self._generation += 1
            self._retire(self.layers)
            self.layers = list(layers)
            self.time = time

    def advance(self, new_time: int) -> None:
        """Nothing changed in ``[time, new_time)``: the content is the one at ``new_time - 1``."""
        assert self.time is not None and self.time <= new_time, (self.time, new_time)
        self.time = new_time

    def clear(self) -> None:
        """Drop every layer (their cached blocks are freed once no tick or merge reads them)."""
        with self._lock:
            self._generation += 1
            self._retire(self.layers)
            self.layers = []
            self.time = None

    # -- readers and merges ------------------------------------------------------------------

    @contextlib.contextmanager
    def pinned(self) -> Iterator[list[Layer]]:
        """The current layers, kept cached until the block ends (a tick's or merge's read)."""
        with self._lock:
            self._pins += 1
            layers = list(self.layers)
        try:
            yield layers
        finally:
            self._unpin()

    def _unpin(self) -> None:
        with self._lock:
            self._pins -= 1
            if self._pins == 0:
                retired, self._retired = self._retired, []
                for old in retired:
                    old.release()

    @contextlib.contextmanager
    def merges_paused(self) -> Iterator[None]:
        """No merge starts inside the block (one running is waited for first)."""
        with self._lock:
            self._paused += 1
        self.wait_for_merges()
        try:
            yield
        finally:
            with self._lock:
                self._paused -= 1
            self._start_merges()

    def wait_for_merges(self) -> None:
        """Block until no merge runs (merges a push started are done)."""
        merger = self._merger
        if merger is not None:
            merger.join()

    def _start_merges(self) -> None:
        from pyspark import InheritableThread

        with self._lock:
            if self._paused or (self._merger is not None and self._merger.is_alive()):
                return
            if self._next_merge() is None:
                return
            self._merger = InheritableThread(target=self._merge_loop, daemon=True)
            self._merger.start()

    def _next_merge(self) -> tuple[int, int] | None:
        """The layers due to merge into one, ``layers[i:j]`` (``j - i >= 2``), or None.

        By default the two newest, whenever the newer holds at least half the
        bytes of the older (geometric: O(log(state / change)) layers).
        """
        if len(self.layers) < 2 or any(layer.pending for layer in self.layers[-2:]):
            return None
        if 2 * self.layers[-1].size >= self.layers[-2].size:
            return len(self.layers) - 2, len(self.layers)
        return None

    def _merge_loop(self) -> None:
        """Merge due layers until none is (a background thread, FAIR pool ``MERGE_POOL``).

        The thread inherits the Spark local properties of the one that started it: a
        server's statement's job tags among them (a CREATE whose first tick starts a
        merge), whose cancel, later, would cancel the merge's jobs. They are cleared."""
        context = self.spark.sparkContext
        context.setLocalProperty("spark.scheduler.pool", MERGE_POOL)
        context.clearJobTags()
        context.setLocalProperty("spark.job.interruptOnCancel", None)  # type: ignore[arg-type]
        try:
            while self._merge_once():
                pass
        except Exception:  # the layers stay as they were: correct, only more of them
            log.exception("a background merge of arrangement layers failed")

    def _merge_once(self) -> bool:
        """Merge the layers due to merge; swap the result in if they are still current."""
        with self._lock:
            due = None if self._paused else self._next_merge()
            if due is None:
                return False
            i, j = due
            run = self.layers[i:j]
            generation = self._generation
            self._pins += 1
        try:
            merged = self._merge(run, into_base=i == 0)
        finally:
            self._unpin()
        assert all(layer.upper is not None for layer in run), run
        merged.lower, merged.upper = run[0].lower, run[-1].upper
        if merged.exact_from is None:  # the subclass folded every time
            merged.exact_from = merged.upper
        with self._lock:
            current = self._generation == generation and self.layers[i:j] == run
            current = current and self._keeps(merged)
            if current:
                self.layers = [*self.layers[:i], merged, *self.layers[j:]]
                self._retire(run)
        if not current:
            merged.release()
        return True

    def _merge(self, layers: list[Layer], *, into_base: bool) -> Layer:
        """One layer with the content of ``layers``, oldest first (``into_base``: from the
        oldest of the arrangement on)."""
        raise NotImplementedError

    def _keeps(self, merged: Layer) -> bool:
        """Whether a merge's result may replace its two layers now (holding the lock)."""
        return True

    def _retire(self, layers: list[Layer]) -> None:
        """Free ``layers`` now, or when the last pin ends (holding the lock)."""
        if self._pins:
            self._retired.extend(layers)
        else:
            for layer in layers:
                layer.release()


class ArrangedState(Arrangement):
    """The content of an upsert shard at ``time - 1``, as cached Spark layers.

    ``types`` maps every key and value column to its Spark type in the shard.
    """

    def __init__(
        self,
        spark: Any,
        keys: Sequence[str],
        values: Sequence[str],
        types: dict[str, Any],
        partitions: int | None = None,
    ) -> None:
        from pyspark.sql.types import StructField, StructType

        super().__init__(spark, partitions)
        self.keys = list(keys)
        self.values = list(values)
        self.types = dict(types)
        self.key_type = StructType(
            [
                StructField(f, types[k], True)
                for f, k in zip(key_fields(len(keys)), keys, strict=True)
            ]
        )

    @property
    def columns(self) -> list[str]:
        """The columns of every layer."""
        return [HASH, KEY, *value_columns(len(self.values)), ERR, GONE]

    # -- layout ------------------------------------------------------------------------------

    def key_of(self, df: Any) -> Any:
        """The ``_key`` column of ``df``, a DataFrame with the shard's key columns."""
        from pyspark.sql import functions as F

        return F.expr(self.key_sql())

    def key_sql(self) -> str:
        """SQL text of the ``_key`` column over the shard's key columns (``... AS _key``)."""
        from timeshard.spark.sqltext import quoted, type_sql

        fields = ", ".join(
            f"'{f}', CAST({quoted(k)} AS {type_sql(self.types[k])})"
            for k, f in zip(self.keys, key_fields(len(self.keys)), strict=True)
        )
        return f"CAST(named_struct({fields}) AS {type_sql(self.key_type)}) AS {KEY}"

    def hashed(self, df: Any) -> Any:
        """``df`` (with ``_key``) with ``_h`` first: the 64-bit hash the layers are partitioned and
        joined by (see "Joins on the hash" in the module doc)."""
        from pyspark.sql.types import DoubleType, FloatType

        from timeshard.spark.sqltext import quoted, select_exprs

        fields = []
        for f, k in zip(key_fields(len(self.keys)), self.keys, strict=True):
            field = f"{KEY}.{f}"
            if isinstance(self.types[k], (DoubleType, FloatType)):
                # -0.0 = 0.0 in Spark comparisons: hash them alike too.
                zero = f"CAST(0 AS {self.types[k].simpleString()})"
                field = f"CASE WHEN {field} = 0 THEN {zero} ELSE {field} END"
            fields.append(field)
        rest = [quoted(c) for c in df.columns if c != HASH]
        return select_exprs(df, [f"xxhash64({', '.join(fields)}) AS {HASH}", *rest])

    def partitioned(self, df: Any) -> Any:
        """``df`` (with ``_h``) hash-partitioned like the layers."""
        return df.repartition(self.partitions, HASH)

    def value_cols(self, df: Any) -> list[Any]:
        """The ``_v<i>`` columns of ``df``, a DataFrame with the shard's value columns."""
        from timeshard.spark.parts import column

        names = value_columns(len(self.values))
        return [
            column(v).cast(self.types[v]).alias(n) for v, n in zip(self.values, names, strict=True)
        ]

    def as_layer(self, df: Any, gone: bool) -> Any:
        """Rows of the shard's columns (and ``_err``) as layer rows, hash-partitioned by key."""
        from pyspark.sql import functions as F

        rows = df.select(self.key_of(df), *self.value_cols(df), ERR, F.lit(gone).alias(GONE))
        return self.partitioned(self.hashed(rows))

    def content(self) -> Any | None:
        """Every live key's row (keys, values, ``_err``): the shard's content at ``time - 1``.

        None if there are no layers (the content is empty). Read it while no
        merge runs (:meth:`merges_paused`): a merge frees the layers it replaced.
        """
        from pyspark.sql import functions as F

        with self.pinned() as layers:
            if not layers:
                return None
            rows = layers[0].df
            for layer in layers[1:]:
                rows = self.match(rows, layer.df, "left_anti").unionByName(layer.df)
            fields = zip(self.keys, key_fields(len(self.keys)), strict=True)
            values = zip(self.values, value_columns(len(self.values)), strict=True)
            return rows.where(~F.col(GONE)).select(
                *[F.col(f"{KEY}.{f}").alias(k) for k, f in fields],
                *[F.col(n).alias(v) for v, n in values],
                ERR,
            )

    def match(self, left: Any, right: Any, how: str, *, build_right: bool = False) -> Any:
        """``left`` joined with the keys of ``right`` on ``_h`` and ``_key`` (:func:`same_key`).

        The right side's key is renamed first, so the two sides may come from
        one lineage (no ambiguous self-join). ``build_right``: a hash join
        built on ``right`` (no sort of ``left``, where Spark would pick a
        sort-merge join between relations it knows no size of).
        """
        from timeshard.spark.sqltext import quoted, select_exprs

        probe = right.selectExpr(f"{HASH} AS _rh", f"{KEY} AS _rk")
        if build_right:
            probe = probe.hint("shuffle_hash")
        joined = left.join(probe, same_key("_rh", "_rk"), how)
        return select_exprs(joined, [quoted(c) for c in left.columns])

    def with_layer_rows(
        self, keyed: Any, layers: list[Layer], name: str, *, skip: str | None = None
    ) -> Any:
        """``keyed`` (``_h``, ``_key``, partitioned like the layers) with column ``name``, its
        key's row in a layer (a struct of the value columns, ``_err`` and ``_gone``), and
        :data:`LAYER`, that layer's index in ``layers`` (the newest is the highest).

        A keyed row comes once per layer that has its key, or once with both
        null if none has it (or if its boolean column ``skip`` is true). Its
        key's row is the one of the highest :data:`LAYER`: the caller keeps
        that one (in a window it runs anyway, as the upsert's ranking does).

        One join on the hash (:func:`same_key`), built on ``keyed``, with the
        layers stacked (their union keeps their partitioning): they stream
        through unshuffled, and a layer more costs a tick its rows only. A
        join per layer, chained, built each one more hash map of the keyed
        rows, wider each time: a tick cost about 0.2 s more per layer at 100k
        commands (bench/bench_upsert_tick.py).
        """
        from pyspark.sql import functions as F

        from timeshard.spark.sqltext import quoted, select_exprs, typed_null, union_all

        row = [*value_columns(len(self.values)), ERR, GONE]
        columns = [quoted(c) for c in keyed.columns]
        if not layers:
            missing = [typed_null(name, self.row_type()), f"CAST(NULL AS {_LAYER_TYPE}) AS {LAYER}"]
            return select_exprs(keyed, [*columns, *missing])
        # Renamed, not packed in a struct here: the layers stream every row through the
        # join, and only the few that match become a struct below. The index is a struct
        # literal, which reaches the generated code as a reference: every layer's stage
        # has the same Java source, compiled once (an int literal is spelled out in it).
        renamed = [f"{c} AS _l{c}" for c in row]
        sides = [
            select_exprs(
                layer.df,
                [f"{HASH} AS _lh", f"{KEY} AS _lk", *renamed, f"named_struct('i', {i}) AS {LAYER}"],
            )
            for i, layer in enumerate(layers)
        ]
        stacked = union_all(sides)
        on = same_key("_lh", "_lk")
        if skip is not None:
            on = on & ~F.col(skip)
        joined = keyed.hint("shuffle_hash").join(stacked, on, "left")
        fields = ", ".join(f"_l{c} AS {c}" for c in row)
        found = f"CASE WHEN _lh IS NOT NULL THEN struct({fields}) END AS {quoted(name)}"
        return select_exprs(joined, [*columns, found, LAYER])

    def row_type(self) -> Any:
        """The Spark type of a key's row in a layer: the value columns, ``_err``, ``_gone``."""
        from pyspark.sql.types import BooleanType, StringType, StructField, StructType

        names = value_columns(len(self.values))
        return StructType(
            [
                *[StructField(n, self.types[v]) for v, n in zip(self.values, names, strict=True)],
                StructField(ERR, StringType()),
                StructField(GONE, BooleanType()),
            ]
        )

    # -- building ----------------------------------------------------------------------------

    def rehydrate(self, reader: ReadHandle, upper: int) -> None:
        """Rebuild from the shard's snapshot at ``upper - 1`` (one full read)."""
        from timeshard.spark.snapshot import snapshot_df

        self.clear()
        layers = []
        if upper > 0:
            snapshot = snapshot_df(self.spark, reader, upper - 1)
            layers = [checkpointed(self.as_layer(snapshot.where(~unkeyed_error(self.keys)), False))]
        for layer in layers:
            layer.lower, layer.upper, layer.exact_from = 0, upper, upper
        with self._lock:
            self.layers = layers
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
        try:
            # The upsert output has one row per key: a key whose net change has an
            # insertion now holds that row; one with only retractions is gone.
            inserted = self.as_layer(net.where(F.col(DIFF) > 0), False)
            retracted = self.as_layer(net.where(F.col(DIFF) < 0), True)
            retracted = retracted.dropDuplicates([HASH, KEY])  # _h first: no exchange
            gone = self.match(retracted, inserted, "left_anti").select(
                HASH,
                KEY,
                *[F.lit(None).cast(self.types[v]).alias(n) for v, n in self._named_values()],
                F.lit(None).cast("string").alias(ERR),
                GONE,
            )
            layer = checkpointed(self.partitioned(inserted.unionByName(gone)))
        finally:
            net.unpersist()
        self.push(layer, upper)

    def _next_merge(self) -> tuple[int, int] | None:
        """Every layer into the base once those over it hold a :data:`BASE_SHARE` of its
        bytes (and :data:`MIN_MERGE_BYTES`); else the layers over the base into one once
        there are :data:`MAX_DELTAS` (into the base too, if they hold that share).

        Not the geometric default: a tick streams every layer's rows through
        one join (:meth:`with_layer_rows`), so a layer more costs it only its
        rows, while a merge costs a Spark job sharing the cores with the
        ticks. At 1M keys and 100k-command ticks, the pairwise merges of the
        default ran about one job per tick.
        """
        layers = self.layers
        if len(layers) < 2 or any(layer.pending for layer in layers):
            return None
        over = sum(layer.size for layer in layers[1:])
        into_base = over * BASE_SHARE >= layers[0].size
        if into_base and over >= MIN_MERGE_BYTES:
            return 0, len(layers)
        if len(layers) - 1 >= MAX_DELTAS:
            return (0 if into_base else 1), len(layers)
        return None

    def _merge(self, layers: list[Layer], *, into_base: bool) -> Layer:
        """Each key's row in the newest of ``layers`` that has it: per layer, the rows of keys
        no newer layer has (an anti join with the newer layers stacked), in one job."""
        from pyspark.sql import functions as F

        from timeshard.spark.sqltext import union_all

        kept = []
        for i, layer in enumerate(layers[:-1]):
            newer = union_all([x.df for x in layers[i + 1 :]])
            kept.append(self.match(layer.df, newer, "left_anti", build_right=True))
        merged = union_all([*kept, layers[-1].df])
        if into_base:
            merged = merged.where(~F.col(GONE))
        return checkpointed(self._partitioned_once(merged))

    def _partitioned_once(self, df: Any) -> Any:
        """``df`` (layer rows) partitioned like the layers: as it is if its plan says it
        already is (anti joins and unions of layers keep their partitioning), else shuffled."""
        partitioning = df._jdf.queryExecution().executedPlan().outputPartitioning()
        if (
            partitioning.getClass().getSimpleName() == "HashPartitioning"
            and partitioning.numPartitions() == self.partitions
            and partitioning.expressions().size() == 1
        ):
            by = partitioning.expressions().apply(0)
            if by.getClass().getSimpleName() == "AttributeReference" and by.name() == HASH:
                return df
        return self.partitioned(df)

    def _named_values(self) -> list[tuple[str, str]]:
        return list(zip(self.values, value_columns(len(self.values)), strict=True))


def same_key(right_hash: str, right_key: str) -> Any:
    """The join condition of ``_h``, ``_key`` on the left and these columns on the right.

    The hash is the equi-join key: a long, which Spark's hash join looks up
    fast. The keys are then compared for the rows whose hashes match, by an
    expression that Spark cannot turn into a second join key (``array_contains``
    compares structs field by field, null equal to null, like ``=``). The
    right side's names must not be on the left.
    """
    from pyspark.sql import functions as F

    from timeshard.spark.parts import quoted

    right_hash, right_key = quoted(right_hash), quoted(right_key)
    return F.expr(f"{HASH} = {right_hash} AND array_contains(array({right_key}), {KEY})")


def unkeyed_error(keys: Sequence[str]) -> Any:
    """The Spark condition of an unkeyed err row: ``_err`` set and every key column null."""
    from pyspark.sql import functions as F

    from timeshard.spark.parts import column

    cond = F.col(ERR).isNotNull()
    for k in keys:
        cond = cond & column(k).isNull()
    return cond


def stored_bytes(checkpointed: Any) -> int:
    """Memory plus disk bytes of a checkpointed DataFrame's blocks (driver only, no job).

    Spark's public ``getRDDStorageInfo()`` describes every cached RDD of the
    application (every layer of every arrangement), and reading each entry
    through py4j is two round trips: 100-160 calls a tick for a join view.
    Its overload taking a filter (a Scala ``Set`` is a predicate: the RDD's
    own, of one) describes this one alone, in about fifteen calls whatever the
    count; the JVM's method is public, though Scala marks it ``private[spark]``,
    so the scan stays as the fallback.
    """
    from py4j.protocol import Py4JError

    from timeshard.spark.sqltext import jvm_class, jvm_static

    spark = checkpointed.sparkSession
    jvm_sc = spark.sparkContext._jsc.sc()
    rdd = checkpointed._jdf.queryExecution().logical().rdd()
    try:
        one = jvm_class(spark, "java.util.ArrayList")()
        one.add(rdd)
        only = jvm_static(spark, "org.apache.spark.api.python.PythonUtils", "toSeq")(one).toSet()
        infos = list(jvm_sc.getRDDStorageInfo(only))
    except Py4JError:  # no such overload in this Spark: scan them all
        rdd_id = rdd.id()
        infos = [info for info in jvm_sc.getRDDStorageInfo() if info.id() == rdd_id]
    # no description for an empty layer: it has no blocks
    return sum(int(info.memSize()) + int(info.diskSize()) for info in infos[:1])


__all__ = [
    "GONE",
    "HASH",
    "KEY",
    "LAYER",
    "MERGE_POOL",
    "ArrangedState",
    "Arrangement",
    "Layer",
    "checkpointed",
    "key_fields",
    "stored_bytes",
    "unkeyed_error",
    "value_columns",
]
