"""A view's delta on Spark: the incremental plan (:mod:`timeshard.compute.incremental`) run.

```
 input updates in [lower, upper) ──> ok updates (weighted: _ts, _diff) ──┐
        │                                                                ├─> terms ──> Δ view
        └──> err updates ──────────────────────────────> err rows of the view ─┘
 input snapshot at lower - 1 (joins, touched groups) ──> old rows (_ts = lower - 1)
```

:meth:`SparkDelta.delta` returns the view's updates at times in
``[lower, upper)`` as a lazy DataFrame (the data columns, ``_ts``, ``_diff``,
``_err``, consolidated), or None when no input has an update in the interval:
then the view does not change and no Spark job is needed to know it.

Linear plans: each term's placeholder tables are bound to the inputs' old,
delta or new rows (temp views private to this delta), the terms are unioned
by position, and the inputs' err updates are added as the view's err rows.

Grouped plans: the touched keys are the grouping keys of the input's ok
updates. The input rows of those keys are taken at every evaluation time --
``lower - 1`` and each change time -- tagged ``__t``, consolidated and
expanded by multiplicity (a negative multiplicity becomes an err row, as in
the full path). The rewritten query runs over them once; each group's rows at
``__t`` are inserted at ``__t`` and retracted at the next evaluation time.

Runs on the driver (planning); the work runs in Spark tasks when the delta is
written. Reading: the sink's leased readers when it writes (their since holds
every part read), unleased readers in read-only mode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from timeshard.compute.aggregate import SparkAggregates, empty_contributions
from timeshard.compute.incremental import AT, KeyedSource, Plan, Term, next_time, times_array
from timeshard.persist._internal.parts import DIFF, ERR, TS
from timeshard.progress import Timestamp

if TYPE_CHECKING:
    from timeshard.spark.snapshot import PartsReader

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
        self._aggregates: SparkAggregates | None = None

    def delta(self, lower: Timestamp, upper: Timestamp) -> Any | None:
        """The view's updates at times in ``[lower, upper)``, or None if no input changed."""
        self._planned.clear()
        times = {a: self._change_times(a, lower, upper) for a in self.sources}
        changed = {a for a, ts in times.items() if ts}
        if not changed:
            if self._aggregates is not None:
                self._aggregates.skip(lower, upper)
            return None
        if self.plan.classification.path == "linear":
            ok = self._linear(lower, upper, changed)
        elif self.plan.aggregate is not None:
            aggregate = self.plan.aggregate
            changes = self._terms(aggregate.terms, lower, upper, changed)
            if changes is None:  # none of the inputs the query reads changed
                self._aggregated().skip(lower, upper)
                ok = None
            else:
                snapshot = lambda: self._aggregate_snapshot(lower)  # noqa: E731
                ok = self._aggregated().delta(changes, snapshot, lower, upper)
        else:
            keyed = {s.input for s in self.plan.keyed}
            changes = sorted({t for a in keyed for t in times[a]})
            ok = self._grouped(lower, upper, changes) if changes else None
        errs = [self._err_updates(a, lower, upper) for a in sorted(changed)]
        out = self._consolidated(ok, errs)
        rows = sum(self._rows_in(a, lower, upper) for a in changed)
        return out.coalesce(1) if rows <= self.one_part_rows else out

    def prepare(self, lower: Timestamp) -> None:
        """The next delta starts at ``lower``: build the arrangements it reads now."""
        if self.plan.aggregate is not None:
            self._aggregated().prepare(lower, lambda: self._aggregate_snapshot(lower))

    def arrangements(self) -> list[Any]:
        """The arrangements this delta keeps."""
        return [] if self._aggregates is None else [self._aggregates.state]

    def close(self) -> None:
        """Free the arrangements."""
        if self._aggregates is not None:
            self._aggregates.close()
            self._aggregates = None

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
        parts = self._reader_of(alias).snapshot_parts(upper - 1)
        return sum(p.num_rows for p in parts if p.has_update_in(lower, upper) is not False)

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
            self._planned[key] = updates_df(self.spark, self._reader_of(alias), lower, upper)
        return self._planned[key]

    def _ok_updates(self, alias: str, lower: Timestamp, upper: Timestamp) -> Any:
        from pyspark.sql import functions as F

        names = self._names(alias)
        updates = self._updates(alias, lower, upper)
        return updates.where(F.col(ERR).isNull()).select(*names, TS, DIFF)

    def _err_updates(self, alias: str, lower: Timestamp, upper: Timestamp) -> Any:
        """The input's err updates as the view's err updates (data columns null)."""
        from pyspark.sql import functions as F

        from timeshard.spark.session import arrow_to_spark_schema

        target = arrow_to_spark_schema(self.data_schema)
        updates = self._updates(alias, lower, upper)
        return updates.where(F.col(ERR).isNotNull()).select(
            *[F.lit(None).cast(f.dataType).alias(f.name) for f in target.fields], TS, DIFF, ERR
        )

    def _old(self, alias: str, lower: Timestamp) -> Any:
        """The input's ok rows at ``lower - 1``, weighted, with ``_ts = lower - 1``.

        Not consolidated: the rows as stored, so reading them is a scan and no
        shuffle. Every use is linear in them (a join's product, or the sum per
        row and time the grouped path takes anyway), so rows that cancel still
        cancel there.
        """
        from pyspark.sql import functions as F

        from timeshard.spark.parts import read_parts

        reader = self._reader_of(alias)
        names = self._names(alias)
        parts = reader.snapshot_parts(lower - 1) if lower > 0 else []
        rows = read_parts(self.spark, reader.blob, parts, reader.schema)
        old = F.lit(lower - 1).cast("long")
        return rows.where((F.col(TS) <= old) & F.col(ERR).isNull()).select(
            *names, old.alias(TS), DIFF
        )

    def _snapshot(self, alias: str, lower: Timestamp) -> Any:
        """The input's ok rows at ``lower - 1``, consolidated: each row once, with its count.

        What a rebuilt state sums: the rows from-scratch evaluation reads, so a
        long sum overflows in it only where it overflows there too.
        """
        from pyspark.sql import functions as F

        from timeshard.spark.snapshot import consolidate_df

        old = self._old(alias, lower).withColumn(ERR, F.lit(None).cast("string"))
        return consolidate_df(old, self._names(alias)).drop(ERR)

    # -- linear ------------------------------------------------------------------------------

    def _linear(self, lower: Timestamp, upper: Timestamp, changed: set[str]) -> Any | None:
        from pyspark.sql import functions as F

        out = self._terms(self.plan.terms, lower, upper, changed)
        if out is None:
            return None
        out = out.toDF(*self.data_schema.names, TS, DIFF)
        return out.where(F.col(TS) >= F.lit(lower)).withColumn(ERR, F.lit(None).cast("string"))

    def _terms(
        self,
        terms: Sequence[Term],
        lower: Timestamp,
        upper: Timestamp,
        changed: set[str],
    ) -> Any | None:
        """The sum of the delta ``terms`` whose delta input changed (None: none did).

        Each term's placeholders are bound to its inputs' old, delta or new
        rows; the terms are unioned by position.
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
        if not results:
            return None
        out = results[0]
        for r in results[1:]:
            out = out.union(r)  # by position: every term has the same columns, _ts, _diff
        return out

    # -- grouped -----------------------------------------------------------------------------

    def _grouped(self, lower: Timestamp, upper: Timestamp, changes: Sequence[Timestamp]) -> Any:
        from pyspark.sql import functions as F

        evaluated = ([lower - 1] if lower > 0 else []) + list(changes)
        at = times_array(evaluated)
        sources = self.plan.keyed
        deltas = {s.input: self._ok_updates(s.input, lower, upper) for s in sources}
        touched = None
        for s in sources:
            pairs = zip(self._key_names(s), self._key_names(s, "t"), strict=True)
            keys = self._keyed(deltas[s.input], s).select(*[F.col(k).alias(t) for k, t in pairs])
            touched = keys if touched is None else touched.union(keys)
        assert touched is not None
        touched = touched.distinct()
        negatives = []
        for s in sources:
            names = self._names(s.input)
            old = self._keyed(self._old(s.input, lower), s)
            old = old.join(touched, self._key_match(s), "left_semi")
            rows = (
                old.select(*names, TS, DIFF)
                .unionByName(deltas[s.input])
                .withColumn(AT, F.explode(at))
                .where(F.col(TS) <= F.col(AT))
            )
            counted = rows.groupBy(*names, AT).agg(F.sum(DIFF).alias(DIFF))
            present = (
                counted.where(F.col(DIFF) > 0)
                .withColumn("__n", F.explode(F.sequence(F.lit(1), F.col(DIFF).cast("int"))))
                .select(*names, AT)
            )
            present.createOrReplaceTempView(s.placeholder)
            negatives.append(self._negative(counted, s.input, names))
        (term,) = self.plan.terms
        result = self.spark.sql(term.sql).toDF(*self.data_schema.names, AT)
        result = result.withColumn(ERR, F.lit(None).cast("string")).withColumn(DIFF, F.lit(1))
        content = result
        for negative in negatives:
            content = content.unionByName(negative)
        last = evaluated[-1]
        inserted = content.where(F.col(AT) >= F.lit(lower)).withColumn(TS, F.col(AT))
        retracted = (
            content.where(F.col(AT) < F.lit(last))
            .withColumn(TS, next_time(F.col(AT), evaluated))
            .withColumn(DIFF, -F.col(DIFF))
        )
        cols = [*self.data_schema.names, TS, DIFF, ERR]
        return inserted.select(*cols).unionByName(retracted.select(*cols))

    @staticmethod
    def _key_names(source: KeyedSource, suffix: str = "") -> list[str]:
        return [f"__k{i}{suffix}" for i in range(len(source.keys))]

    def _keyed(self, frame: Any, source: KeyedSource) -> Any:
        """``frame`` (rows of ``source``'s input) with its keys as ``__k<i>``."""
        from pyspark.sql import functions as F

        names = self._key_names(source)
        keys = [F.expr(k).alias(n) for k, n in zip(source.keys, names, strict=True)]
        return frame.alias(source.alias).select("*", *keys)

    def _key_match(self, source: KeyedSource) -> Any:
        """A source's keys ``__k<i>`` equal to the touched keys ``__k<i>t`` (nulls equal)."""
        from pyspark.sql import functions as F

        cond = None
        for n in self._key_names(source):
            eq = F.col(n).eqNullSafe(F.col(f"{n}t"))
            cond = eq if cond is None else cond & eq
        return cond

    def _negative(self, counted: Any, alias: str, names: list[str]) -> Any:
        """Input rows with a negative multiplicity at ``__t``: err rows, as the full path has."""
        from pyspark.sql import functions as F

        from timeshard.spark.session import arrow_to_spark_schema

        target = arrow_to_spark_schema(self.data_schema)
        message = F.concat(
            F.lit(f"input {alias!r} has a negative multiplicity: "),
            F.to_json(F.struct(*names)),
        )
        return counted.where(F.col(DIFF) < 0).select(
            *[F.lit(None).cast(f.dataType).alias(f.name) for f in target.fields],
            AT,
            message.alias(ERR),
            F.abs(F.col(DIFF)).alias(DIFF),
        )

    # -- output ------------------------------------------------------------------------------

    def _consolidated(self, ok: Any | None, errs: list[Any]) -> Any:
        from pyspark.sql import functions as F

        from timeshard.spark.session import arrow_to_spark_schema

        target = arrow_to_spark_schema(self.data_schema)
        cols = [*self.data_schema.names, TS, DIFF, ERR]
        parts = ([] if ok is None else [ok]) + errs
        out = parts[0].select(*cols)
        for p in parts[1:]:
            out = out.unionByName(p.select(*cols))
        out = out.select(
            *[F.col(f.name).cast(f.dataType) for f in target.fields],
            F.col(TS).cast("long").alias(TS),
            F.col(DIFF).cast("long").alias(DIFF),
            ERR,
        )
        return (
            out.groupBy(*self.data_schema.names, TS, ERR)
            .agg(F.sum(DIFF).alias(DIFF))
            .where(F.col(DIFF) != 0)
            .select(*cols)
        )


__all__ = ["SparkDelta"]
