"""A view's delta on Spark: the incremental plan (:mod:`timeshard.compute.incremental`) run.

```
 input updates in [lower, upper) ──> ok updates (weighted: _ts, _diff) ──┐
        │                                                                ├─> terms ──> Δ view
        └──> err updates ──────────────────────────────> err rows of the view ─┘
 input snapshot at lower - 1 (joins, touched groups) ──> old rows (_ts < lower)
```

:meth:`SparkDelta.delta` returns the view's updates at times in
``[lower, upper)`` as a lazy DataFrame (the data columns, ``_ts``, ``_diff``,
``_err``, consolidated), or None when no input has an update in the interval, or
only inputs the query does not read (with no err row): then the view does not
change and no Spark job is needed to know it.

Linear plans: each term's placeholder tables are bound to the inputs' old,
delta or new rows (temp views private to this delta), the terms are unioned
by position, and the inputs' err updates are added as the view's err rows.
A join whose inputs are arranged by key (:attr:`Plan.arranged`,
:mod:`timeshard.compute.arranged_rows`) runs each term as its join path:
from the changed input's updates, a chain of hash joins built on the rows so
far, each with an input's arrangement by the key of that step (``old``: the
union of the cached layers; ``new``: with the updates partitioned like
them), so no term reads the shards' parts at ``lower - 1`` or shuffles them.
The updates become each of the input's arrangements' next layers, filled by
the write (a layer no term reads is read with no row).

Grouped plans: the touched keys are the grouping keys of the input's ok
updates. Their rows at ``lower - 1`` come from the input arranged by the
plan's key (:class:`~timeshard.compute.arranged_rows.KeyedRows`, a semi-join
of the layers with the updates' keys, no layer shuffled; the updates become
the next layer), or, for a key that cannot be arranged, from the shards'
parts. The input rows of those keys are taken at every evaluation time --
``lower - 1`` and each change time -- tagged ``__t``, consolidated and
expanded by multiplicity (a negative multiplicity becomes an err row, as in
the full path). The rewritten query runs over them once; each group's rows at
``__t`` are inserted at ``__t`` and retracted at the next evaluation time.
A plan's scalar subqueries (its parameters) read their inputs' rows at
``lower - 1`` whole (the arrangement's layers, or the parts) with the
updates, counted at every evaluation time; the keys whose rows their values'
changes move across the WHERE join the touched keys.

Runs on the driver (planning); the work runs in Spark tasks when the delta is
written. Reading: the sink's leased readers when it writes (their since holds
every part read), unleased readers in read-only mode.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from timeshard.compute.aggregate import SparkAggregates, empty_contributions
from timeshard.compute.arranged_rows import ArrangedRows, KeyedRows, SharedArrangements
from timeshard.compute.incremental import AT, PAIRS, JoinPath, KeyedSource, Plan, Step, Term
from timeshard.compute.row_errors import ERRORS
from timeshard.persist._internal.parts import DIFF, ERR, TS, PartMeta
from timeshard.progress import Timestamp
from timeshard.storage.upsert_state import Layer

if TYPE_CHECKING:
    from timeshard.spark.snapshot import PartsReader

log = logging.getLogger(__name__)

#: The RDD local property by which a checkpoint fills the checkpoints it reads as well.
_ALL_MARKED_ANCESTORS = "spark.checkpoint.checkpointAllMarkedAncestors"
#: SQL select item: one row per multiple of a row with a positive ``_diff``.
_EXPANDED = f"explode(sequence(1, CAST({DIFF} AS INT))) AS __n"
#: How long a delta waits for an arrangement another view's delta has checked out.
_CHECK_OUT_S = 600.0
#: Input alias -> the reader its parts are read through right now.
ReaderOf = Callable[[str], "PartsReader"]
#: (input alias, lower, upper) -> the input's change times in [lower, upper).
ChangeTimes = Callable[[str, Timestamp, Timestamp], list[Timestamp]]


class SparkDelta:
    """Computes a view's delta from its inputs' updates (see the module doc)."""

    def __init__(
        self,
        spark: Any,
        plan: Plan,
        data_schema: pa.Schema,
        sources: Mapping[str, str],
        reader_of: ReaderOf,
        change_times: ChangeTimes,
    ) -> None:
        assert plan.classification.incremental, plan
        #: A delta from at most this many input updates is written as one part.
        self.one_part_rows = 200_000
        self.spark = spark
        self.plan = plan
        self.data_schema = data_schema
        #: alias -> shard id, as the view definition names its inputs.
        self.sources = dict(sources)
        self._reader_of = reader_of
        self._change_times = change_times
        self._planned: dict[tuple[str, Timestamp, Timestamp], Any] = {}
        self._parts: dict[tuple[str, Timestamp, Timestamp], list[PartMeta]] = {}
        self._aggregates: SparkAggregates | None = None
        #: A join's inputs arranged by join key (Plan.arranged), and the pins of the layers
        #: the last delta reads (held until its write is done).
        self._rows: dict[tuple[str, tuple[str, ...]], ArrangedRows] | None = None
        self._held = contextlib.ExitStack()
        #: A grouped plan's sources arranged by key (by placeholder), or why they cannot be.
        self._keyed: dict[str, KeyedRows] | None = None
        self._keyed_not: str | None = None
        #: Arrangements come from the application's pool (shared with every view that
        #: arranges an input alike); those this delta has checked out while it plans.
        self._pool = SharedArrangements.of(spark)
        self._pooled: dict[int, tuple[Any, ...]] = {}  # id -> the pool's key
        self._checked_out: list[ArrangedRows] = []
        #: The arrangements (by id) this delta pushed pending layers to: it settles them
        #: (another view's pending layers are that view's to settle).
        self._pushed: set[int] = set()
        #: For merged join steps (_merged): per group of terms, their columns and conditions
        #: over the occurrences' structs (None: they cannot be merged); per input, its row type.
        self._structs: dict[tuple[JoinPath, ...], tuple[list[str], list[str]] | None] = {}
        self._row_types: dict[str, Any] = {}
        self._probes_agree: dict[tuple[JoinPath, ...], bool] = {}

    def delta(self, lower: Timestamp, upper: Timestamp) -> Any | None:
        """The view's updates at times in ``[lower, upper)``, or None if it has none there (no
        input changed, or only inputs its query does not read, with no err row): no job."""
        self._planned.clear()
        self._parts.clear()
        times = {a: self._change_times(a, lower, upper) for a in self.sources}
        changed = {a for a, ts in times.items() if ts}
        if not changed:
            if self._aggregates is not None:
                self._aggregates.skip(lower, upper)
            self._skip_rows(lower, upper)
            return None
        if self.plan.classification.path == "linear":
            ok = self._linear(lower, upper, changed)
        elif self.plan.aggregate is not None:
            aggregate = self.plan.aggregate
            changes = self._terms(aggregate.terms, lower, upper, changed)
            if changes is None:  # none of the inputs the query reads changed
                self._aggregated().skip(lower, upper)
                self._skip_rows(lower, upper)
                ok = None
            elif aggregate.extremes:
                ok = self._with_extremes(lower, upper, self._keyed_times(times), changed, changes)
            else:
                snapshot = lambda: self._aggregate_snapshot(lower)  # noqa: E731
                ok = self._aggregated().delta(changes, snapshot, lower, upper)
        else:
            changes = self._keyed_times(times)
            if changes:
                ok = self._grouped(lower, upper, changes, changed)
            else:
                self._skip_rows(lower, upper)
                ok = None
        # An input whose parts in the interval record no err row adds no branch (no scan).
        errs = [
            self._err_updates(a, lower, upper)
            for a in sorted(changed)
            if any(p.may_hold_errors for p in self._parts_in(a, lower, upper))
        ]
        if ok is None and not errs:  # no update at all (the inputs that changed are not read)
            self._settle_rows()  # no write follows: unpin the layers the plan pinned now
            return None
        rows = sum(self._rows_in(a, lower, upper) for a in changed)
        if rows > self.one_part_rows:
            return self._consolidated(ok, errs)
        terms = () if self.plan.aggregate is None else self.plan.aggregate.terms
        one_input = len(terms) == 1  # no join to multiply its rows
        if one_input and self._aggregates is not None and not (self.plan.arranged or self._keyed):
            # A GROUP BY state's tick over one input reads its states by partition and
            # its delta's rows (a few per group) once: in one task, the whole tick after
            # the delta's shuffle is one stage ending in the part, with no shuffle to sum
            # the rows (measured at 1M rows, 1% and 5% changed: 10-20% less job time than a
            # task per core and a shuffle; not so for joins, which scan arrangements).
            return self._consolidated(ok, errs, tasks=1)
        if self.plan.arranged or self._keyed or self._aggregates is not None:
            # It reads cached layers, partitioned, in the stage that ends in the sum: one
            # task would give up the cores, and one task per partition of the union (each
            # layer's, for every branch that reads it: 20 for a GROUP BY at 4 partitions)
            # costs more to schedule than its few rows to sum. A task per core; the sum
            # shuffles.
            return self._consolidated(ok, errs, tasks=self._cores).coalesce(1)
        return self._consolidated(ok, errs, tasks=1)

    @property
    def _cores(self) -> int:
        """The application's cores (Spark's default parallelism): a task for each."""
        return max(int(self.spark.sparkContext.defaultParallelism), 1)

    def prepare(self, lower: Timestamp) -> None:
        """The next delta starts at ``lower``: build the arrangements it reads now."""
        if self.plan.aggregate is not None:
            self._aggregated().prepare(lower, lambda: self._aggregate_snapshot(lower))
        if self.plan.arranged:
            with self._arranged(lower):
                pass
        if self.plan.keyed and (self.plan.aggregate is None or self.plan.aggregate.extremes):
            with self._keyed_rows(lower):
                pass

    def written(self) -> None:
        """The last delta has been written: settle the new layers its write filled."""
        if self._aggregates is not None:
            self._aggregates.settle()
        self._settle_rows()

    def arrangements(self) -> list[Any]:
        """The arrangements this delta keeps."""
        states: list[Any] = [] if self._aggregates is None else [self._aggregates.state]
        return states + self._every_rows()

    def describe(self) -> list[str]:
        """What the deltas keep cached in Spark, one line each (Spark analysis only, no job):
        for ``timeshard explain``."""
        if self.plan.aggregate is not None:
            state = ["per-group aggregate state, by the GROUP BY key"]
            if not self.plan.aggregate.extremes:
                return state
            keyed = [f"input {s.input} arranged by ({', '.join(s.keys)})" for s in self.plan.keyed]
            return [*state, *(f"{k}: the groups whose min/max may move" for k in keyed)]
        if self.plan.arranged:
            return [f"input {a} arranged by {', '.join(key)}" for a, key in self.plan.arranged]
        if not self.plan.keyed:
            return []
        why = self._why_not_keyed(self._new_keyed())
        if why is not None:
            lines = [f"nothing: {why}; the touched keys' rows are read from the parts"]
        else:
            lines = [f"input {s.input} arranged by ({', '.join(s.keys)})" for s in self.plan.keyed]
        if self.plan.parameters is not None:
            # Every row of a subquery's input is read at every tick an input changed.
            inputs = ", ".join(self.plan.parameters.inputs)
            lines.append(f"nothing for the scalar subqueries: they read all of {inputs} per tick")
        return lines

    def close(self) -> None:
        """Free the arrangements."""
        if self._aggregates is not None:
            self._aggregates.close()
            self._aggregates = None
        for rows in self._unique(self._every_rows()):
            if id(rows) in self._pushed and self._shared_with_others(rows):
                self._settle(rows)  # the others' reads need its new layer filled
        self._held.close()  # else a pending layer need not be filled: it is freed with the rest
        for rows in self._unique(self._every_rows()):
            self._let_go(rows)
        self._rows = self._keyed = None

    def _keyed_times(self, times: Mapping[str, list[Timestamp]]) -> list[Timestamp]:
        """The change times of the grouped plan's sources, from every input's (``times``)."""
        keyed = {s.input for s in self.plan.keyed}
        if self.plan.parameters is not None:
            keyed.update(self.plan.parameters.inputs)
        return sorted({t for a in keyed for t in times[a]})

    def _with_extremes(
        self,
        lower: Timestamp,
        upper: Timestamp,
        changes: Sequence[Timestamp],
        changed: set[str],
        contributions: Any,
    ) -> Any:
        """The delta of a GROUP BY whose state keeps min and max (one input): the state
        moves the groups no retraction may have moved an extreme of; the others (the
        state's ``recompute``) are recomputed as touched groups, their rows read from the
        input arranged by the group key."""
        from timeshard.spark.sqltext import bigint_where, quoted, select_exprs

        aggregate = self.plan.aggregate
        assert aggregate is not None
        evaluated = [int(t) for t in ([lower - 1] if lower > 0 else []) + list(changes)]
        snapshot = lambda: self._aggregate_snapshot(lower)  # noqa: E731
        with self._keyed_rows(lower) as arranged:
            # The view checked that the input can be arranged by the group key.
            assert arranged is not None, self._keyed_not

            def recompute(unsafe: Any | None) -> tuple[Any, Any | None]:
                if unsafe is None:  # the input's next layer, which the write must fill
                    return self._keyed_fills(lower, upper, changed, arranged), None
                frames = self._keyed_frames(lower, upper, changed, arranged, only=unsafe)
                rows, [counted] = self._recomputed(frames, evaluated, lower)
                [source] = self.plan.keyed
                names = [quoted(n) for n in self._names(source.input)]
                last = counted.where(bigint_where(AT, "=", evaluated[-1]))
                last = select_exprs(last, [*names, f"{AT} AS {TS}", DIFF])
                for name in aggregate.snapshot.tables:
                    last.createOrReplaceTempView(name)
                return rows, self.spark.sql(aggregate.snapshot.sql)

            return self._aggregated().delta(contributions, snapshot, lower, upper, recompute)

    def _aggregated(self) -> SparkAggregates:
        """The per-group states of a GROUP BY plan kept by state."""
        from timeshard.spark.session import arrow_to_spark_schema

        aggregate = self.plan.aggregate
        assert aggregate is not None
        if self._aggregates is None:
            empty = empty_contributions(
                self.spark,
                aggregate,
                lambda alias: arrow_to_spark_schema(self._reader_of(alias).schema),
            )
            self._aggregates = SparkAggregates(self.spark, aggregate, empty.schema)
        return self._aggregates

    def _aggregate_snapshot(self, lower: Timestamp) -> Any:
        """The contributions at ``lower - 1``: the state's rebuild reads them."""
        aggregate = self.plan.aggregate
        assert aggregate is not None
        for name, (alias, _mode) in aggregate.snapshot.tables.items():
            self._snapshot(alias, lower).createOrReplaceTempView(name)
        return self.spark.sql(aggregate.snapshot.sql)

    def _rows_in(self, alias: str, lower: Timestamp, upper: Timestamp) -> int:
        """At most how many updates the input has in the interval (parts' metadata)."""
        return sum(p.num_rows for p in self._parts_in(alias, lower, upper))

    def _parts_in(self, alias: str, lower: Timestamp, upper: Timestamp) -> list[PartMeta]:
        """The input's parts that may hold updates in the interval: fetched once per
        interval (a read of the shard's state), for its updates and their metadata."""
        from timeshard.spark.snapshot import parts_with_updates

        key = (alias, lower, upper)
        if key not in self._parts:
            self._parts[key] = parts_with_updates(self._reader_of(alias), lower, upper)
        return self._parts[key]

    # -- inputs ------------------------------------------------------------------------------

    def _names(self, alias: str) -> list[str]:
        return list(self._reader_of(alias).schema.names)

    def _updates(self, alias: str, lower: Timestamp, upper: Timestamp) -> Any:
        """The input's updates in the interval as stored (not consolidated: no shuffle).

        Every use is linear in them, and the delta is consolidated at the end,
        so updates that cancel still cancel there. Planned once per interval
        (its ok and err rows both use it): the part list is fetched and
        checked once, and the uses share one plan.
        """
        from timeshard.spark.snapshot import updates_df

        key = (alias, lower, upper)
        if key not in self._planned:
            parts = self._parts_in(alias, lower, upper)
            reader = self._reader_of(alias)
            self._planned[key] = updates_df(self.spark, reader, lower, upper, parts)
        return self._planned[key]

    def _ok_updates(self, alias: str, lower: Timestamp, upper: Timestamp) -> Any:
        from timeshard.spark.sqltext import quoted, select_exprs

        names = [quoted(n) for n in self._names(alias)]
        updates = self._updates(alias, lower, upper)
        return select_exprs(updates.where(f"{ERR} IS NULL"), [*names, TS, DIFF])

    def _err_updates(self, alias: str, lower: Timestamp, upper: Timestamp) -> Any:
        """The input's err updates as the view's err updates (data columns null), in the
        columns :meth:`_consolidated` sums: no column of failed rows, which is null here."""
        from timeshard.spark.sqltext import select_exprs

        updates = self._updates(alias, lower, upper).where(f"{ERR} IS NOT NULL")
        nulls = self._null_data()[: -1 if self._failed() else None]
        return select_exprs(updates, [*nulls, TS, DIFF, ERR])

    def _null_data(self) -> list[str]:
        """The view's data columns, each a typed null (SQL text)."""
        from timeshard.spark.session import arrow_to_spark_schema
        from timeshard.spark.sqltext import typed_null

        target = arrow_to_spark_schema(self.data_schema)
        return [typed_null(f.name, f.dataType) for f in target.fields]

    def _failed(self) -> bool:
        """Whether the view's last data column holds the message of a row the query failed
        on (:data:`~timeshard.compute.row_errors.ERRORS`): such a row is an err row."""
        return bool(self.data_schema.names[-1:] == [ERRORS])

    def _old(self, alias: str, lower: Timestamp) -> Any:
        """The input's ok rows at ``lower - 1``, weighted, each with its own ``_ts`` (below
        ``lower``).

        Not consolidated: the rows as stored, so reading them is a scan and no
        shuffle. Every use is linear in them (a join's product, or the sum per
        row and time the grouped path takes anyway), so rows that cancel still
        cancel there. A term's row takes the greatest ``_ts`` of its rows, its
        delta row's (at ``lower`` or later); the grouped path counts a row at
        every evaluation time at or after its ``_ts``, all at ``lower - 1`` or
        later. So the rows keep their times rather than ``lower - 1`` as a
        projected literal, which Spark would compile into the code of every
        stage reading them, anew every tick.
        """
        from timeshard.spark.parts import read_parts
        from timeshard.spark.sqltext import bigint_where, quoted, select_exprs

        reader = self._reader_of(alias)
        names = [quoted(n) for n in self._names(alias)]
        parts = reader.snapshot_parts(lower - 1) if lower > 0 else []
        rows = read_parts(self.spark, reader.blob, parts, reader.schema)
        rows = rows.where(f"{bigint_where(TS, '<', lower)} AND {ERR} IS NULL")
        return select_exprs(rows, [*names, TS, DIFF])

    def _snapshot(self, alias: str, lower: Timestamp) -> Any:
        """The input's ok rows at ``lower - 1``, consolidated: each row once, with its count.

        What a rebuilt state sums: the rows from-scratch evaluation reads, so a
        long sum overflows in it only where it overflows there too.
        """
        from pyspark.sql import functions as F

        from timeshard.spark.snapshot import consolidate_df

        old = self._old(alias, lower).select(
            *self._names(alias),
            F.lit(int(lower) - 1).cast("long").alias(TS),  # one time, so each row sums once
            DIFF,
            F.lit(None).cast("string").alias(ERR),
        )
        return consolidate_df(old, self._names(alias)).drop(ERR)

    # -- arranged join inputs ----------------------------------------------------------------

    @contextlib.contextmanager
    def _arranged(
        self, lower: Timestamp
    ) -> Iterator[dict[tuple[str, tuple[str, ...]], ArrangedRows]]:
        """The join's inputs arranged by each key they are joined on, checked out for the
        block, each readable as of ``lower`` (rebuilt, one Spark job per arrangement, where
        not)."""
        self._settle_rows()
        if self._rows is None:
            self._rows = {
                (alias, keys): self._shared(
                    ("rows", *self._input_id(alias), tuple(self._names(alias)), keys),
                    functools.partial(ArrangedRows, self.spark, keys, self._names(alias)),
                )
                for alias, keys in self.plan.arranged
            }
        with self._checked(self._rows.values()):
            self._rows = self._made_readable(self._rows, {k: k[0] for k in self._rows}, lower)
            yield self._rows

    def _made_readable(
        self, arranged: dict[Any, Any], inputs: Mapping[Any, str], lower: Timestamp
    ) -> dict[Any, Any]:
        """``arranged`` with each arrangement (once, if several names share one) made readable
        at ``lower`` (:meth:`_readable`); ``inputs`` gives each name's input."""
        made: dict[int, Any] = {}
        for name, rows in arranged.items():
            if id(rows) not in made:
                made[id(rows)] = self._readable(rows, inputs[name], lower)
        return {name: made[id(rows)] for name, rows in arranged.items()}

    # -- arrangements shared between views ---------------------------------------------------

    def _shared(self, key: tuple[Any, ...], make: Callable[[], ArrangedRows]) -> Any:
        """The application's arrangement ``key``, made by ``make`` if no view has it."""
        rows = self._pool.acquire(key, self, make)
        self._pooled[id(rows)] = key
        return rows

    def _input_id(self, alias: str) -> tuple[str, str]:
        """The input's location (its blob's root) and shard id: one arrangement's key."""
        blob = self._reader_of(alias).blob
        return (blob.root_uri or f"blob {id(blob)}", self.sources[alias])

    def _shared_with_others(self, rows: ArrangedRows) -> bool:
        return id(rows) in self._pooled and self._pool.users(self._pooled[id(rows)]) > 1

    def _let_go(self, rows: ArrangedRows) -> None:
        """This delta reads ``rows`` no more (the last reader of an arrangement frees it)."""
        pooled = self._pooled.pop(id(rows), None)
        if pooled is not None:
            self._pool.release(pooled, self)
        else:  # its own
            rows.wait_for_merges()
            rows.clear()

    def _readable(self, rows: ArrangedRows, alias: str, lower: Timestamp) -> Any:
        """``rows``, checked out, if they can be read as of ``lower``; else rebuilt at ``lower``
        (one Spark job): in place if no other view reads them, else as this delta's own
        arrangement from now on (the others read it at their times)."""
        rows.hold(self, int(lower))  # first: no merge from now on folds times it reads
        with rows.pinned() as layers:
            readable = rows.readable(layers, int(lower))
        if not readable:
            if self._shared_with_others(rows):
                log.info("a shared arrangement is not readable at %s: this view's own", lower)
                mine = rows.twin()
                self._checked_out.remove(rows)
                rows.in_use.release()
                self._let_go(rows)
                mine.in_use.acquire()
                self._checked_out.append(mine)
                rows = mine
            rows.rebuild(self._old(alias, lower), int(lower))
        rows.hold(self, int(lower))
        return rows

    @contextlib.contextmanager
    def _checked(self, arrangements: Iterable[ArrangedRows]) -> Iterator[None]:
        """``arrangements`` checked out for the block: another view's delta that plans over
        them waits (for a rebuild's Spark job at most; a tick's write runs after)."""
        assert not self._checked_out, self._checked_out
        every = sorted(self._unique(arrangements), key=lambda r: repr(self._order(r)))
        try:
            for rows in every:
                if not rows.in_use.acquire(timeout=_CHECK_OUT_S):
                    raise TimeoutError(
                        f"an arrangement of view inputs stayed checked out by another view "
                        f"for {_CHECK_OUT_S} s"
                    )
                self._checked_out.append(rows)
            yield
        finally:
            checked, self._checked_out = self._checked_out, []
            for rows in checked:
                rows.in_use.release()

    def _order(self, rows: ArrangedRows) -> tuple[Any, ...]:
        pooled = self._pooled.get(id(rows))
        return ("shared", *pooled) if pooled is not None else ("own", id(rows))

    @staticmethod
    def _unique(arrangements: Iterable[ArrangedRows]) -> list[ArrangedRows]:
        """Each arrangement once (two inputs of one shard may share one)."""
        return list({id(r): r for r in arrangements}.values())

    def _settle(self, rows: ArrangedRows) -> None:
        try:
            rows.settle()
        except Exception:
            log.info("a view input's new layer could not be filled: rebuilding", exc_info=True)
            rows.clear()

    def _settle_rows(self) -> None:
        """Settle the pending layers the last delta pushed (filled by the write, else one job
        each), then unpin what it read.

        A layer that cannot be filled drops its arrangement, which the next
        delta rebuilds from the input.
        """
        for rows in self._unique(self._every_rows()):
            if id(rows) in self._pushed:
                self._settle(rows)
        self._pushed.clear()
        self._held.close()

    def _skip_rows(self, lower: Timestamp, upper: Timestamp) -> None:
        """No input changed in ``[lower, upper)``: arrangements at ``lower`` or later (up to
        ``upper``) hold at ``upper``."""
        self._settle_rows()
        every = self._unique(self._every_rows())
        with self._checked(every):
            for rows in every:
                if rows.time is not None and lower <= rows.time < upper:
                    rows.advance(int(upper))
                if rows.time is not None and rows.time >= upper:
                    rows.hold(self, int(upper))

    def _every_rows(self) -> list[ArrangedRows]:
        """Every arranged input of this delta (a join's, or a grouped plan's)."""
        return [*(self._rows or {}).values(), *(self._keyed or {}).values()]

    def _next_layers(
        self,
        arranged: Iterable[tuple[str, ArrangedRows]],
        lower: Timestamp,
        upper: Timestamp,
        changed: set[str],
    ) -> dict[int, Layer | None]:
        """Per arrangement (by id) of a changed input, its next layer: the input's updates
        from the arrangement's time (``lower`` or later) to ``upper``, or None if it is at
        ``upper`` already (another view's delta pushed them)."""
        layers: dict[int, Layer | None] = {}
        for alias, rows in arranged:
            if alias in changed and id(rows) not in layers:
                at = rows.time
                assert at is not None and at >= lower, (at, lower)
                updates = self._ok_updates(alias, at, upper) if at < upper else None
                layers[id(rows)] = None if updates is None else rows.pending(updates, at, upper)
        return layers

    def _moved_on(
        self, arranged: Iterable[ArrangedRows], pushed: Mapping[int, Layer | None], upper: Timestamp
    ) -> None:
        """Push the new layers; every arrangement is at ``upper`` (or later) from here, and
        this delta reads them as of ``upper`` or later next."""
        for rows in self._unique(arranged):
            layer = pushed.get(id(rows))
            if layer is not None:
                rows.push(layer, int(upper))
                self._pushed.add(id(rows))
            elif rows.time is not None and rows.time < upper:
                rows.advance(int(upper))  # no update reached it in [time, upper)
            rows.hold(self, int(upper))

    def _arranged_frames(
        self, lower: Timestamp, upper: Timestamp, changed: set[str]
    ) -> tuple[dict[tuple[str, tuple[str, ...], str], Any], list[tuple[Any, set[Any]]]]:
        """Per (input, key, mode), its rows in that mode from its arrangement by that key,
        partitioned by it: the content as of ``lower`` (old), the updates (delta), or the
        content as of ``upper`` (new); and each pending layer with the frames that read it.

        A changed input's updates from each of its arrangements' time on become
        that arrangement's next layer, pushed now (the arrangement is at
        ``upper`` from here) and filled by the write. The delta is that layer
        when the arrangement was at ``lower``, else (another view's delta
        pushed some of them) the updates read from the parts. The layers read
        stay pinned until :meth:`written`.
        """
        with self._arranged(lower) as arranged:
            at = {id(rows): rows.time for rows in arranged.values()}
            pushed = self._next_layers(
                [(a, r) for (a, _), r in arranged.items()], lower, upper, changed
            )
            frames: dict[tuple[str, tuple[str, ...], str], Any] = {}
            readers: dict[int, set[Any]] = {i: set() for i, x in pushed.items() if x is not None}
            for (alias, key), rows in arranged.items():
                layers = self._held.enter_context(rows.pinned())
                frames[alias, key, "old"] = frames[alias, key, "new"] = rows.old(layers, lower)
                if alias not in changed:
                    continue
                layer = pushed[id(rows)]
                if at[id(rows)] == lower:
                    assert layer is not None
                    frames[alias, key, "delta"] = rows.named(layer.df)
                    frames[alias, key, "new"] = frames[alias, key, "old"].union(
                        rows.named(layer.df)
                    )
                    readers[id(rows)] |= {(alias, key, "delta"), (alias, key, "new")}
                else:
                    frames[alias, key, "delta"] = self._ok_updates(alias, lower, upper)
                    every = [*layers, *([] if layer is None else [layer])]
                    frames[alias, key, "new"] = rows.as_of(every, int(upper))
                    if layer is not None:
                        readers[id(rows)].add((alias, key, "new"))
            pending = [
                (arranged_rows.named(pushed[i].df), readers[i])  # type: ignore[union-attr]
                for i, arranged_rows in {id(r): r for r in arranged.values()}.items()
                if i in readers
            ]
            self._moved_on(arranged.values(), pushed, upper)
        return frames, pending

    def _joined_terms(
        self,
        paths: Sequence[JoinPath],
        frames: Mapping[tuple[str, tuple[str, ...], str], Any],
        used: set[tuple[str, tuple[str, ...], str]],
        lower: Timestamp,
    ) -> list[Any]:
        """Each term of ``paths`` as its :class:`JoinPath` (:meth:`_joined`), except that the
        terms whose last steps read one arrangement take that step together
        (:meth:`_merged`): its rows stream through once, not once per term."""
        groups: dict[tuple[str, tuple[str, ...]], list[JoinPath]] = {}
        for path in paths:
            groups.setdefault((path.steps[-1].input, path.steps[-1].key), []).append(path)
        out = []
        for group in groups.values():
            merged = self._merged(group, frames, used, lower) if len(group) > 1 else None
            if merged is not None:
                out.append(merged)
            else:
                out.extend(self._joined(path, frames, used) for path in group)
        return out

    def _chain(
        self,
        steps: Sequence[Step],
        frames: Mapping[tuple[str, tuple[str, ...], str], Any],
        used: set[tuple[str, tuple[str, ...], str]],
    ) -> Any:
        """The rows of a term's first ``steps``: from its delta, each step a hash join built on
        the rows so far, which its arrangement's layers stream through where they lie. Adds
        to ``used`` each frame they read."""
        from pyspark.sql import functions as F

        first = steps[0]
        key = next(k for (a, k, m) in frames if a == first.input and m == "delta")
        used.add((first.input, key, "delta"))
        out = frames[first.input, key, "delta"].alias(first.alias)
        for step in steps[1:]:
            assert step.on is not None, step
            used.add((step.input, step.key, step.mode))
            rows = frames[step.input, step.key, step.mode].alias(step.alias)
            out = out.hint("shuffle_hash").join(rows, F.expr(step.on), "inner")
        return out

    def _joined(
        self,
        path: JoinPath,
        frames: Mapping[tuple[str, tuple[str, ...], str], Any],
        used: set[tuple[str, tuple[str, ...], str]],
    ) -> Any:
        """A term as its :class:`JoinPath` (:meth:`_chain`), then its WHERE and columns. Adds
        to ``used`` each frame the term reads."""
        from pyspark.sql import functions as F

        from timeshard.spark.sqltext import select_exprs

        out = self._chain(path.steps, frames, used)
        if path.where is not None:
            out = out.where(F.expr(path.where))
        return select_exprs(out, path.columns)

    def _merged(
        self,
        paths: Sequence[JoinPath],
        frames: Mapping[tuple[str, tuple[str, ...], str], Any],
        used: set[tuple[str, tuple[str, ...], str]],
        lower: Timestamp,
    ) -> Any | None:
        """The terms ``paths``, whose last steps read one arrangement, with that step taken
        once; None where they cannot share it (the types of their probes differ, or an
        expression reads something other than qualified columns).

        Each term's rows before its last step become one row shape: ``__term``
        (its index), ``__p<j>`` (its expression paired with key column ``j``)
        and, per occurrence ``a`` of the query, ``__a``: its row as a struct
        (null where not joined yet). Their union is the build side of one
        hash join on the probes that the arrangement (``__s``) streams
        through; each row's ``__s`` becomes the occurrence its term's last
        step reads. Then each term's ON condition and WHERE, over the structs
        (:func:`~timeshard.compute.incremental.qualified_by_structs`), and the
        columns. The arrangement's rows are read as of ``upper`` (new) if some
        term reads them so; a term that reads them old keeps those of ``_ts``
        before ``lower`` (the content as of ``lower``, with their own times:
        the module doc of :mod:`~timeshard.compute.arranged_rows`). A join of
        three inputs streams each arrangement its last steps read once per
        tick instead of once per term (``join3`` of ``bench_view_tick.py``:
        ``side`` by ``k`` twice, not four times).
        """
        from pyspark.sql import functions as F

        from timeshard.spark.sqltext import bigint_where, quoted, select_exprs, type_sql, union_all

        aliases = [s.alias for s in paths[0].steps]
        inputs = {s.alias: s.input for s in paths[0].steps}
        last = [p.steps[-1] for p in paths]
        source, key = last[0].input, last[0].key
        mode = "new" if any(s.mode == "new" for s in last) else "old"
        group = tuple(paths)
        rewritten = self._over_structs(paths, aliases)
        if rewritten is None or not self._probes_agree.get(group, True):
            return None
        columns, conditions = rewritten
        reads: set[tuple[str, tuple[str, ...], str]] = set()
        builds = []
        for i, path in enumerate(paths):
            before = self._chain(path.steps[:-1], frames, reads)
            joined = {s.alias for s in path.steps[:-1]}
            shape = [f"{i} AS __term", *(f"{p} AS __p{j}" for j, p in enumerate(last[i].probe))]
            for alias in aliases:  # in one order for every term: the union is by position
                struct = quoted(f"__{alias}")
                if alias in joined:
                    shape.append(f"struct({quoted(alias)}.*) AS {struct}")
                else:
                    row_type = type_sql(self._row_type(inputs[alias], frames))
                    shape.append(f"CAST(NULL AS {row_type}) AS {struct}")
            builds.append(select_exprs(before, shape))
        if group not in self._probes_agree:  # the plan's and the inputs' types: read once
            probes = [[b.schema[f"__p{j}"].dataType for j in range(len(key))] for b in builds]
            self._probes_agree[group] = all(p == probes[0] for p in probes)
        if not self._probes_agree[group]:
            return None
        reads.add((source, key, mode))
        used |= reads
        stream = frames[source, key, mode].alias("__s")
        on = " AND ".join(f"__p{j} = `__s`.{quoted(k)}" for j, k in enumerate(key))
        both = union_all(builds).hint("shuffle_hash").join(stream, F.expr(on), "inner")
        played: dict[str, list[int]] = {}
        for i, step in enumerate(last):
            played.setdefault(step.alias, []).append(i)
        occurrences = []
        for alias in aliases:
            struct = quoted(f"__{alias}")
            if alias in played:
                terms = ", ".join(str(i) for i in played[alias])
                struct = f"CASE WHEN __term IN ({terms}) THEN struct(`__s`.*) ELSE {struct} END"
            occurrences.append(f"{struct} AS {quoted(f'__{alias}')}")
        cases = []
        for i, (step, condition) in enumerate(zip(last, conditions, strict=True)):
            if step.mode == "old" and mode == "new":  # the content as of lower
                ts = f"{quoted('__' + step.alias)}.{TS}"
                condition = f"{condition} AND {bigint_where(ts, '<', lower)}"
            cases.append(f"WHEN {i} THEN {condition}")
        rows = select_exprs(both, ["__term", *occurrences])
        return select_exprs(rows.where(f"CASE __term {' '.join(cases)} END"), columns)

    def _over_structs(
        self, paths: Sequence[JoinPath], aliases: Sequence[str]
    ) -> tuple[list[str], list[str]] | None:
        """For :meth:`_merged`: the terms' columns, and each term's last ON condition and its
        WHERE, over the occurrences' structs (None if some cannot be: see
        :func:`~timeshard.compute.incremental.qualified_by_structs`). Computed once per
        group of terms (the plan does not change)."""
        from timeshard.compute.incremental import qualified_by_structs

        group = tuple(paths)
        if group not in self._structs and self._names_collide(paths, aliases):
            self._structs[group] = None
        if group not in self._structs:
            [columns] = {p.columns for p in paths}  # one SELECT: every term has its columns
            over = [qualified_by_structs(c, aliases) for c in columns]
            conditions = []
            for path in paths:
                parts = [path.steps[-1].on, path.where]
                conditions.append(
                    [qualified_by_structs(c, aliases) for c in parts if c is not None]
                )
            if any(c is None for c in over) or any(c is None for cs in conditions for c in cs):
                self._structs[group] = None
            else:
                self._structs[group] = (
                    [c for c in over if c is not None],
                    [" AND ".join(f"({c})" for c in cs) for cs in conditions],
                )
        return self._structs[group]

    def _names_collide(self, paths: Sequence[JoinPath], aliases: Sequence[str]) -> bool:
        """Whether :meth:`_merged`'s own column names (``__term``, ``__p<j>``, ``__<alias>``)
        are not all distinct (an alias ``term`` or ``p0``), or one is a column of the input
        its last step streams (Spark resolves names regardless of case): either makes a
        name ambiguous."""
        last = paths[0].steps[-1]
        names = ["__term", *(f"__p{j}" for j in range(len(last.key)))]
        names += [f"__{a}" for a in aliases]
        folded = {n.lower() for n in names}
        streamed = {c.lower() for c in self._names(last.input)}
        return len(folded) != len(names) or bool(folded & streamed)

    def _row_type(self, source: str, frames: Mapping[tuple[str, tuple[str, ...], str], Any]) -> Any:
        """The Spark type of input ``source``'s row in a :meth:`_merged` step: a struct of its
        columns as its frames have them (read once: an input's columns do not change)."""
        if source not in self._row_types:
            self._row_types[source] = next(
                f for (a, _, _), f in frames.items() if a == source
            ).schema
        return self._row_types[source]

    # -- a grouped plan's arranged sources ---------------------------------------------------

    @contextlib.contextmanager
    def _keyed_rows(self, lower: Timestamp) -> Iterator[list[KeyedRows] | None]:
        """The grouped plan's sources arranged by key, checked out for the block, each
        readable as of ``lower`` (rebuilt, one Spark job per source, where not); None when
        a source cannot be arranged (:meth:`KeyedRows.why_not`): the ticks then read the
        touched keys' rows from the shards."""
        if self._keyed_not is not None:
            yield None
            return
        self._settle_rows()
        if self._keyed is None:
            keyed = self._new_keyed()
            self._keyed_not = self._why_not_keyed(keyed)
            if self._keyed_not is not None:
                log.info("%s", self._keyed_not)
                yield None
                return
            self._keyed = {}
            for s in self.plan.keyed:
                made = keyed[s.placeholder]
                names = tuple(self._names(s.input))
                key = ("keyed", *self._input_id(s.input), names, made.key_text)
                self._keyed[s.placeholder] = self._shared(key, lambda: made)  # noqa: B023 (called at once)
        with self._checked(self._keyed.values()):
            inputs = {s.placeholder: s.input for s in self.plan.keyed}
            self._keyed = self._made_readable(self._keyed, inputs, lower)
            yield [self._keyed[s.placeholder] for s in self.plan.keyed]

    def _new_keyed(self) -> dict[str, KeyedRows]:
        """The grouped plan's sources, each as an (empty) arrangement by its key."""
        from timeshard.compute.arranged_rows import KeyedRows

        return {
            s.placeholder: KeyedRows(self.spark, s.keys, s.alias, self._names(s.input))
            for s in self.plan.keyed
        }

    def _why_not_keyed(self, keyed: Mapping[str, KeyedRows]) -> str | None:
        """Why some source of the grouped plan cannot be arranged by its key, or None."""
        from timeshard.spark.session import arrow_to_spark_schema

        for s in self.plan.keyed:
            schema = arrow_to_spark_schema(self._reader_of(s.input).schema)
            why = keyed[s.placeholder].why_not(schema)
            if why is not None:
                return f"input {s.input!r} is not arranged by key: {why}"
        return None

    def _keyed_fills(
        self, lower: Timestamp, upper: Timestamp, changed: set[str], arranged: Sequence[KeyedRows]
    ) -> Any:
        """Push the grouped plan's sources' next layers without reading them: the rows
        (none) the write reads so that it fills them (:meth:`_fill`)."""
        inputs = [s.input for s in self.plan.keyed]
        pushed = self._next_layers(zip(inputs, arranged, strict=True), lower, upper, changed)
        fills = [self._fill(layer.df) for layer in pushed.values() if layer is not None]
        self._moved_on(arranged, pushed, upper)
        if not fills:  # another view's delta pushed them: no row at all
            columns = [*self._null_data(), f"0L AS {TS}", f"0L AS {DIFF}"]
            fills = [self.spark.sql(f"SELECT {', '.join(columns)}, NULL AS {ERR} WHERE false")]
        return self._summed(fills)

    def _keyed_frames(
        self,
        lower: Timestamp,
        upper: Timestamp,
        changed: set[str],
        arranged: Sequence[KeyedRows],
        only: Any | None = None,
        evaluated: Sequence[int] = (),
    ) -> dict[str, Any]:
        """Per source ``i`` of the grouped plan: ``d<i>`` its ok updates, ``t<i>`` its rows at
        ``lower - 1`` of the keys any source's update touched, read from its layers.

        ``only``: the keys to read instead (a DataFrame of one column, the key
        struct by position), and then ``d<i>`` holds their updates alone.
        With parameters (``evaluated``: the evaluation times), the keys whose
        rows their change may move are touched too (:meth:`_parameters`). A
        changed input's updates are each of its sources' next layer, pushed
        now and filled by the write (which reads them as ``d<i>`` and as the
        touched keys); the layers read stay pinned until :meth:`written`.
        """
        from pyspark.sql import functions as F

        from timeshard.compute.arranged_rows import KEY
        from timeshard.spark.sqltext import nullable, union_all

        at = {id(rows): rows.time for rows in arranged}
        inputs = [s.input for s in self.plan.keyed]
        pushed = self._next_layers(zip(inputs, arranged, strict=True), lower, upper, changed)
        frames: dict[str, Any] = {}
        keys = []
        keyed: dict[int, Any] = {}  # source -> its updates as a layer (with the key)
        for i, (alias, rows) in enumerate(zip(inputs, arranged, strict=True)):
            layer = pushed.get(id(rows))
            if alias in changed and at[id(rows)] == lower:
                assert layer is not None
                frames[f"d{i}"] = rows.named(layer.df)
                keyed[i] = layer.df
            else:  # unchanged, or some of its updates are in the layers (another view's)
                frames[f"d{i}"] = self._ok_updates(alias, lower, upper)
                if alias in changed:
                    keyed[i] = rows.partitioned(frames[f"d{i}"])
            if i in keyed:
                keys.append(keyed[i].select(KEY))
        if only is not None:
            keys = [only.select(F.col(only.columns[0]).alias(KEY))]
        pinned = [self._held.enter_context(rows.pinned()) for rows in arranged]
        if self.plan.parameters is not None:
            olds = [r.as_of(layers, int(lower)) for r, layers in zip(arranged, pinned, strict=True)]
            parameters = self._parameters(frames, olds, lower, upper, evaluated)
            frames.update(parameters)
            for i, rows in enumerate(arranged):
                if f"m{i}" in parameters:
                    # Once: every source's touched rows read them (a scan of all its rows).
                    keys.append(self._once(rows.partitioned(parameters[f"m{i}"]).select(KEY)))
        for i, (rows, layers) in enumerate(zip(arranged, pinned, strict=True)):
            # Another source's key (or the state's), as this one's type: the query's join
            # compares them so. As a nullable type: Spark casts no nullable field to one
            # that is NOT NULL (a key expression that is never null), and nullability
            # changes no comparison.
            key_type = nullable(layers[0].df.schema[KEY].dataType)
            typed = [
                k
                if nullable(k.schema[KEY].dataType) == key_type
                else k.select(F.col(KEY).cast(key_type).alias(KEY))
                for k in keys
            ]
            touched = union_all(typed)
            frames[f"t{i}"] = rows.touched(layers, touched, int(lower))
            if only is not None and i in keyed:
                frames[f"d{i}"] = rows.named(
                    keyed[i].join(touched.hint("shuffle_hash"), KEY, "left_semi")
                )
        self._moved_on(arranged, pushed, upper)
        return frames

    # -- linear ------------------------------------------------------------------------------

    def _linear(self, lower: Timestamp, upper: Timestamp, changed: set[str]) -> Any | None:
        from timeshard.spark.sqltext import bigint_where, quoted, renamed, select_exprs

        fills = []
        if self.plan.arranged:
            frames, pending = self._arranged_frames(lower, upper, changed)
            paths = [t.path for t in self.plan.terms if t.delta_of in changed and t.path]
            used: set[tuple[str, tuple[str, ...], str]] = set()
            out = self._summed(self._joined_terms(paths, frames, used, lower))
            fills = [self._fill(layer) for layer, readers in pending if not readers & used]
        else:
            out = self._terms(self.plan.terms, lower, upper, changed)
        if out is None:
            return None
        out = renamed(out, [*self.data_schema.names, TS, DIFF]).where(bigint_where(TS, ">=", lower))
        names = [quoted(n) for n in self.data_schema.names]
        out = select_exprs(out, [*names, TS, DIFF, f"CAST(NULL AS STRING) AS {ERR}"])
        return self._summed([out, *fills])

    def _fill(self, layer: Any) -> Any:
        """No row, read from a pending layer no term reads, so that the write fills it too
        (else it is a Spark job of its own): its rows with ``_diff = 0`` (there are none; a
        zero would change no sum), as the view's columns. The filter is opaque to Spark's
        optimizer, which would drop a branch it knows to be empty, and the layer with it."""
        from timeshard.spark.sqltext import select_exprs

        zero = layer.where(f"{DIFF} = 0")
        return select_exprs(zero, [*self._null_data(), TS, DIFF, f"CAST(NULL AS STRING) AS {ERR}"])

    def _terms(
        self, terms: Sequence[Term], lower: Timestamp, upper: Timestamp, changed: set[str]
    ) -> Any | None:
        """The sum of the delta ``terms`` whose delta input changed (None: none did).

        Each term's placeholders are bound to its inputs' old, delta or new
        rows, read from the shards.
        """
        frames: dict[tuple[str, str], Any] = {}

        def frame(alias: str, mode: str) -> Any:
            if (alias, mode) not in frames:
                if mode == "old":
                    frames[alias, mode] = self._old(alias, lower)
                elif mode == "delta":
                    frames[alias, mode] = self._ok_updates(alias, lower, upper)
                else:
                    frames[alias, mode] = frame(alias, "old").unionByName(frame(alias, "delta"))
            return frames[alias, mode]

        results = []
        for term in terms:
            if term.delta_of not in changed:
                continue  # that input has no update here: the term is empty
            for name, (alias, mode) in term.tables.items():
                frame(alias, mode).createOrReplaceTempView(name)
            results.append(self.spark.sql(term.sql))
        return self._summed(results)

    @staticmethod
    def _summed(results: Sequence[Any]) -> Any | None:
        """The union of terms by position (every term has the same columns, _ts, _diff)."""
        from timeshard.spark.sqltext import union_all

        return union_all(results) if results else None

    # -- grouped -----------------------------------------------------------------------------

    def _grouped(
        self,
        lower: Timestamp,
        upper: Timestamp,
        changes: Sequence[Timestamp],
        changed: set[str],
    ) -> Any:
        evaluated = [int(t) for t in ([lower - 1] if lower > 0 else []) + list(changes)]
        sources = self.plan.keyed
        with self._keyed_rows(lower) as arranged:
            if arranged is None:
                frames = {
                    f"d{i}": self._ok_updates(s.input, lower, upper) for i, s in enumerate(sources)
                }
                frames.update({f"o{i}": self._old(s.input, lower) for i, s in enumerate(sources)})
                if self.plan.parameters is not None:
                    olds = [frames[f"o{i}"] for i in range(len(sources))]
                    frames.update(self._parameters(frames, olds, lower, upper, evaluated))
            else:
                frames = self._keyed_frames(lower, upper, changed, arranged, evaluated=evaluated)
        rows, _counted = self._recomputed(frames, evaluated, lower)
        return rows

    def _recomputed(
        self, frames: Mapping[str, Any], evaluated: Sequence[int], lower: Timestamp
    ) -> tuple[Any, list[Any]]:
        """The grouped plan's rows of the touched keys of ``frames`` (:meth:`_counted`), each
        evaluation's inserted at its time and retracted at the next one's; and per source,
        its rows per evaluation time ``__t`` with their multiplicity there."""
        from timeshard.spark.sqltext import bigint_where, quoted, renamed, sql_over

        sources = self.plan.keyed
        negatives, every_counted = [], []
        for i, s in enumerate(sources):
            counted = self._once(
                sql_over(frames, lambda v, i=i: self._counted(v, i, evaluated))  # type: ignore[misc]
            )
            names = ", ".join(quoted(n) for n in self._names(s.input))
            present = sql_over(
                {"c": counted},
                lambda v, names=names: (  # type: ignore[misc]
                    f"SELECT {names}, {AT} FROM "
                    f"(SELECT *, {_EXPANDED} FROM {v['c']} WHERE {DIFF} > 0)"
                ),
            )
            # A join of the touched keys' rows is a sort-merge join, in the write's job, not
            # a broadcast (a job of its own) whatever size Spark estimates for them.
            hinted = present.hint("merge") if len(sources) > 1 else present
            hinted.createOrReplaceTempView(s.placeholder)
            negatives.append(self._negative(counted, s.input, self._names(s.input)))
            every_counted.append(counted)
        if self.plan.parameters is not None:
            frames["pv"].createOrReplaceTempView(self.plan.parameters.table)
        (term,) = self.plan.terms
        result = renamed(self.spark.sql(term.sql), [*self.data_schema.names, AT])
        data = ", ".join(quoted(n) for n in self.data_schema.names)
        content = {"r": result, **{f"n{i}": n for i, n in enumerate(negatives)}}

        def moved(v: Mapping[str, str]) -> str:
            """Each evaluation's rows inserted at its time, retracted at the next one's.

            One pass over the rows: each is stacked as its insertion and its
            retraction (no time after the last evaluation), so the query
            under them is evaluated once.
            """
            every = " UNION ALL ".join(
                f"SELECT {data}, {AT}, CAST(NULL AS STRING) AS {ERR}, 1L AS {DIFF} FROM {v['r']}"
                if r == "r"
                else f"SELECT {data}, {AT}, {ERR}, {DIFF} FROM {v[r]}"
                for r in content
            )
            # A map literal, not CASE WHEN: Spark's generated code refers to a map constant
            # but spells out each literal of a CASE, so each tick's times would compile anew.
            after = ", ".join(f"{b}L, {a}L" for b, a in itertools.pairwise(evaluated))
            following = f"try_element_at(map({after}), {AT})" if after else "CAST(NULL AS BIGINT)"
            stacked = (
                f"SELECT {data}, {ERR}, stack(2, {AT}, {DIFF}, {following}, -{DIFF}) "
                f"AS ({TS}, {DIFF}) FROM ({every})"
            )
            return (
                f"SELECT {data}, {TS}, {DIFF}, {ERR} FROM ({stacked}) "
                f"WHERE {bigint_where(TS, '>=', lower)}"
            )

        return sql_over(content, moved), every_counted

    def _counted(self, views: Mapping[str, str], i: int, evaluated: Sequence[int]) -> str:
        """SQL: source ``i``'s rows of the touched keys, per row and evaluation time ``__t``,
        with their multiplicity there (the old rows of those keys and the updates).

        ``views``: ``d<j>`` the sources' ok updates, ``o<j>`` their rows at ``lower - 1``.
        """
        from timeshard.spark.sqltext import quoted

        source = self.plan.keyed[i]
        quoted_names = [quoted(n) for n in self._names(source.input)]
        names = ", ".join(quoted_names)
        if f"t{i}" in views:  # arranged: the touched keys' rows at lower - 1, read already
            old = f"SELECT {names}, {TS}, {DIFF} FROM {views[f't{i}']}"
        else:
            old = self._touched_old(views, i)
        rows = f"{old} UNION ALL SELECT {names}, {TS}, {DIFF} FROM {views[f'd{i}']}"
        return _at_times(rows, quoted_names, evaluated)

    def _once(self, df: Any) -> Any:
        """``df``, computed once by the write that reads it twice (the query's rows and the
        negative multiplicities; Spark reuses no exchange between the two): a lazy local
        checkpoint, its blocks freed once the write is done (:meth:`written`)."""
        from timeshard.spark.checkpoint import local_checkpoint
        from timeshard.storage.upsert_state import Layer

        # The checkpoint also fills the lazy checkpoints it reads (the arrangements' new
        # layers), which Spark leaves to their own job otherwise: a flag of the RDD, taken
        # from the thread's local property when the RDD is made.
        context = self.spark.sparkContext
        before = context.getLocalProperty(_ALL_MARKED_ANCESTORS)
        context.setLocalProperty(_ALL_MARKED_ANCESTORS, "true")
        try:
            once = local_checkpoint(df, eager=False)
        finally:
            context.setLocalProperty(_ALL_MARKED_ANCESTORS, before)  # type: ignore[arg-type]
        self._held.callback(Layer(once, 0).release)
        return once

    def _touched_old(self, views: Mapping[str, str], i: int) -> str:
        """SQL: source ``i``'s rows at ``lower - 1`` (``o<i>``) of the keys any update touched."""
        from timeshard.spark.sqltext import quoted

        sources = self.plan.keyed
        source = sources[i]
        old_names = ", ".join(f"o.{quoted(n)}" for n in self._names(source.input))
        touched_keys = ", ".join(self._key_names(source, "t"))
        touched = " UNION ALL ".join(
            f"SELECT {touched_keys} FROM ({self._keyed_sql(s, views[f'{r}{j}'], 't')})"
            for j, s in enumerate(sources)
            for r in ("d", "m")
            if f"{r}{j}" in views
        )
        match = " AND ".join(f"o.{n} <=> t.{n}t" for n in self._key_names(source))
        return (
            f"SELECT {old_names}, o.{TS}, o.{DIFF} "
            f"FROM ({self._keyed_sql(source, views[f'o{i}'])}) o "
            f"LEFT SEMI JOIN (SELECT DISTINCT {touched_keys} FROM ({touched})) t ON {match}"
        )

    def _parameters(
        self,
        frames: Mapping[str, Any],
        olds: Sequence[Any],
        lower: Timestamp,
        upper: Timestamp,
        evaluated: Sequence[int],
    ) -> dict[str, Any]:
        """The plan's parameters (:class:`~timeshard.compute.incremental.Parameters`): ``pv``
        their values at each of ``evaluated``, and ``m<i>`` the rows of source ``i`` that a
        change of a value may move across the WHERE (their keys are touched).

        ``frames``: ``d<i>`` each source's ok updates; ``olds``: each source's rows at
        ``lower - 1`` (all of them). A subquery's input rows at each evaluation time are
        its rows at ``lower - 1`` and updates up to then, counted, one row per multiple;
        their values are computed once (a lazy checkpoint the write fills), so the
        moved rows and the query read them without computing them twice. A row with
        a negative multiplicity counts as absent from a subquery (an err row only
        where a source of the query reads it, for the keys it touches).
        """
        from timeshard.spark.sqltext import quoted, sql_over

        parameters = self.plan.parameters
        assert parameters is not None
        sources = self.plan.keyed

        cores = self._cores

        def rows(alias: str) -> Any:
            """The input's ok rows at lower - 1 and its ok updates in the interval, in a
            task per core (no shuffle): every row is read, from many small partitions
            (the partitions of each of an arrangement's layers, or the parts)."""
            for i, s in enumerate(sources):
                if s.input == alias:
                    return olds[i].union(frames[f"d{i}"]).coalesce(cores)
            old = self._old(alias, lower)
            return old.union(self._ok_updates(alias, lower, upper)).coalesce(cores)

        for name, alias in parameters.rows.items():
            # Counted on the columns the subquery reads alone: the same multiset of them.
            read = [quoted(n) for n in parameters.columns[name]]
            kept = ", ".join([*read, AT])
            present = sql_over(
                {"r": rows(alias)},
                lambda v, read=read, kept=kept: (  # type: ignore[misc]
                    f"SELECT {kept} FROM (SELECT *, {_EXPANDED} FROM "
                    f"({_at_times('SELECT * FROM ' + v['r'], read, evaluated)}) WHERE {DIFF} > 0)"
                ),
            )
            present.createOrReplaceTempView(name)
        at = f"array({', '.join(f'{t}L' for t in evaluated)})"
        self.spark.sql(f"SELECT explode({at}) AS {AT}").createOrReplaceTempView(parameters.times)
        values = self._once(self.spark.sql(parameters.sql))
        out: dict[str, Any] = {"pv": values}
        count = len(values.columns) - 1
        following = ", ".join(f"{b}L, {a}L" for b, a in itertools.pairwise(evaluated))
        if not following:  # one evaluation: no value moved
            return out
        # One partition: every row of the input meets the pairs in a cartesian product,
        # whose tasks are the partitions of one side times the other's (each of the
        # input's partitions was read once per partition of the pairs).
        pairs = sql_over(
            {"pv": values},
            lambda v: (
                "SELECT "
                + ", ".join(f"b.__p{j} AS __b{j}, a.__p{j} AS __a{j}" for j in range(count))
                + f" FROM {v['pv']} b JOIN {v['pv']} a "
                f"ON a.{AT} = try_element_at(map({following}), b.{AT})"
            ),
        ).coalesce(1)
        for i, condition in parameters.moved:
            source = sources[i]
            alias = quoted(source.alias)
            names = ", ".join(f"{alias}.{quoted(n)}" for n in self._names(source.input))
            out[f"m{i}"] = sql_over(
                {"r": rows(source.input), "p": pairs},
                lambda v, names=names, source=source, condition=condition: (  # type: ignore[misc]
                    f"SELECT {names}, {quoted(source.alias)}.{TS}, {quoted(source.alias)}.{DIFF} "
                    f"FROM {v['r']} AS {quoted(source.alias)} CROSS JOIN {v['p']} AS {PAIRS} "
                    f"WHERE {condition}"
                ),
            )
        return out

    def _keyed_sql(self, source: KeyedSource, view: str, suffix: str = "") -> str:
        """SQL: the rows of ``view`` (``source``'s input) with its keys as ``__k<i><suffix>``."""
        from timeshard.spark.sqltext import quoted

        names = self._key_names(source, suffix)
        keys = ", ".join(f"{k} AS {n}" for k, n in zip(source.keys, names, strict=True))
        return f"SELECT *, {keys} FROM {view} AS {quoted(source.alias)}"

    @staticmethod
    def _key_names(source: KeyedSource, suffix: str = "") -> list[str]:
        return [f"__k{i}{suffix}" for i in range(len(source.keys))]

    def _negative(self, counted: Any, alias: str, names: list[str]) -> Any:
        """Input rows with a negative multiplicity at ``__t``: err rows, as the full path has."""
        from pyspark.sql import functions as F

        from timeshard.spark.sqltext import quoted, select_exprs

        row = ", ".join(quoted(n) for n in names)
        message = F.concat(  # the input's name is user text: a literal, never SQL text
            F.lit(f"input {alias!r} has a negative multiplicity: "),
            F.expr(f"to_json(struct({row}))"),
        )
        negative = counted.where(f"{DIFF} < 0").withColumn("__message", message)
        return select_exprs(
            negative, [*self._null_data(), AT, f"__message AS {ERR}", f"abs({DIFF}) AS {DIFF}"]
        )

    # -- output ------------------------------------------------------------------------------

    def _consolidated(self, ok: Any | None, errs: list[Any], tasks: int | None = None) -> Any:
        """The ok updates cast to the view's types and unioned with the err updates (from
        :meth:`_err_updates`, already in those columns), summed per row and time (data
        columns, ``_ts``, ``_err``, ``_diff``: their users take them by name).

        ``tasks``: the union is coalesced into at most that many partitions before it is
        summed (no shuffle). At 1 the sum needs no shuffle either: the whole delta is one
        stage of one task (for a small delta read from its inputs' updates alone, a stage
        and a shuffle less per tick).

        The Dataset API, not SQL over temporary views: a view's creation and drop are
        py4j calls of their own, and its creation is a command Spark analyzes and runs
        (about 6 ms each; a linear view's tick registered two).
        """
        from timeshard.spark.session import arrow_to_spark_schema
        from timeshard.spark.sqltext import quoted, select_exprs, summed, type_sql, union_all

        target = arrow_to_spark_schema(self.data_schema)
        names = [quoted(f.name) for f in target.fields]
        # A row the query failed on (the rewritten query's last column, row_errors.ERRORS,
        # set) is an err row of that row: its data null, its message the err.
        failed = quoted(ERRORS) if self._failed() else None
        data = list(zip(names, target.fields, strict=True))[: -1 if failed else None]
        casts = [f"CAST({n} AS {type_sql(f.dataType)})" for n, f in data]
        typed = [
            *[
                f"{c} AS {n}" if failed is None else f"IF({failed} IS NULL, {c}, NULL) AS {n}"
                for c, (n, _f) in zip(casts, data, strict=True)
            ],
            f"CAST({TS} AS BIGINT) AS {TS}",
            f"CAST({DIFF} AS BIGINT) AS {DIFF}",
            ERR if failed is None else f"coalesce({ERR}, {failed}) AS {ERR}",
        ]
        rows = union_all(([] if ok is None else [select_exprs(ok, typed)]) + errs)
        if tasks is not None:
            rows = rows.coalesce(tasks)
        keys = [*(n for n, _f in data), TS, ERR]
        return summed(rows, keys, DIFF).where(f"{DIFF} != 0")


def _at_times(rows: str, names: Sequence[str], evaluated: Sequence[int]) -> str:
    """SQL: the rows of ``rows`` (SQL with ``names``, ``_ts``, ``_diff``) per distinct
    ``names`` and evaluation time ``__t`` of ``evaluated``, with their nonzero multiplicity
    there (every row at or before ``__t``); ``names`` (quoted) may be empty.

    Each row is aggregated once, whatever the number of times, into one sum per
    time. (A row repeated at every time made the aggregation the times' multiple of
    the rows.) The times reach Spark's generated code as references, never as
    literals (:func:`~timeshard.spark.sqltext.bigint_where`, an array constant), so a
    tick of the same shape compiles no code anew.
    """
    from timeshard.spark.sqltext import bigint_where

    sums = ", ".join(
        f"sum(IF({bigint_where(TS, '<=', t)}, {DIFF}, 0L)) AS __at{i}"
        for i, t in enumerate(evaluated)
    )
    kept = "".join(f"{n}, " for n in names)
    grouped = f"SELECT {kept}{sums} FROM ({rows})"
    if names:
        grouped += f" GROUP BY {', '.join(names)}"
    every = ", ".join(f"__at{i}" for i in range(len(evaluated)))
    timed = f"SELECT {kept}posexplode(array({every})) AS (__i, __d) FROM ({grouped})"
    at = f"array({', '.join(f'{t}L' for t in evaluated)})"
    return (
        f"SELECT {kept}element_at({at}, __i + 1) AS {AT}, __d AS {DIFF} FROM ({timed}) "
        "WHERE __d != 0"
    )


__all__ = ["SparkDelta"]
