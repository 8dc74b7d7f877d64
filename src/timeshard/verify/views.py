"""Check 5 of ``timeshard verify``: a SQL view against its query, recomputed from scratch.

The view's upper must not be beyond the frontier its inputs determine
(:func:`check_view_frontier`, without Spark: the sink never appends past
desired's frontier). At sampled times below it where the view and all its
inputs are readable, the view's snapshot is compared with its query evaluated
over the inputs' snapshots by
:class:`~timeshard.compute.view.SparkViewDesired`, the code path the sink
evaluates a view with. :func:`differences` compares two collections at many
times in one job, as multisets, their rows tagged with the time (:data:`AT`);
the replayed-export check (:mod:`timeshard.verify.replay`) uses it too.

Driver vs executors: the functions here run on the driver, where they read
shard states and change times to sample and build Spark DataFrames; the
reads of parts, the query and the difference (a ``groupBy``) run as Spark
jobs on the executors, and at most :data:`ROW_LIMIT` missing and extra rows
per time are collected back to the driver.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from timeshard.catalog import CatalogEntry
from timeshard.errors import SinceError
from timeshard.persist import PersistClient, UnleasedReader
from timeshard.persist._internal.parts import DIFF, ERR, TS
from timeshard.progress import MAX_TIMESTAMP, Frontier, Timestamp
from timeshard.verify.report import ROW_LIMIT, Finding, ObjectReport, VerifyReport
from timeshard.verify.shards import _rng, checked_upper, readable_range, sample_times

AT = "_at"
"""The column that tags each row of a fused comparison with its time."""

Difference = tuple[list[dict[str, Any]], int, list[dict[str, Any]], int]
"""``(missing, missing_total, extra, extra_total)`` at one time."""


def differences(expected: Any, got: Any, data: Sequence[str]) -> dict[Timestamp, Difference]:
    """Per time, rows of ``expected`` not in ``got`` and the reverse, as multisets (one job).

    Both have ``_at`` (the time), the data columns, ``_diff`` and ``_err``;
    ``expected`` is cast to ``got``'s column types. For each time with a
    difference: at most :data:`ROW_LIMIT` missing and extra rows (``_diff`` the
    multiplicity missing or extra) and how many there are.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from timeshard.spark.parts import column

    types = {f.name: f.dataType for f in got.schema.fields}
    cols = [*data, ERR]
    exp = expected.select(
        F.col(AT),
        *[column(c).cast(types[c]).alias(c) for c in cols],
        column(DIFF).cast("long").alias(DIFF),
    )
    neg = got.select(
        F.col(AT), *[column(c) for c in cols], (-column(DIFF)).cast("long").alias(DIFF)
    )
    side = Window.partitionBy(F.col(AT), F.col("_extra"))
    ranked = (
        exp.unionByName(neg)
        .groupBy(F.col(AT), *[column(c) for c in cols])
        .agg(F.sum(column(DIFF)).alias(DIFF))
        .where(column(DIFF) != 0)
        .withColumn("_extra", column(DIFF) < 0)
        .withColumn("_total", F.count(F.lit(1)).over(side))
        .withColumn("_rank", F.row_number().over(side.orderBy(F.abs(column(DIFF)).desc())))
        .where(F.col("_rank") <= ROW_LIMIT)
    )
    out: dict[Timestamp, Difference] = {}
    for r in ranked.collect():
        row = r.asDict()
        t, extra, total = int(row.pop(AT)), bool(row.pop("_extra")), int(row.pop("_total"))
        del row["_rank"]
        row[DIFF] = abs(row[DIFF])
        missing_rows, n_missing, extra_rows, n_extra = out.get(t, ([], 0, [], 0))
        if extra:
            extra_rows.append(row)
            n_extra = total
        else:
            missing_rows.append(row)
            n_missing = total
        out[t] = (missing_rows, n_missing, extra_rows, n_extra)
    return out


def _report_differences(
    report: VerifyReport, name: str, check: str, found: Mapping[Timestamp, Difference], what: str
) -> None:
    for t, (missing, n_missing, extra, n_extra) in sorted(found.items()):
        report.add(
            Finding(
                name,
                check,
                f"{n_missing} row{'s' if n_missing != 1 else ''} missing, "
                f"{n_extra} row{'s' if n_extra != 1 else ''} extra ({what})",
                time=t,
                missing=tuple(missing),
                missing_total=n_missing,
                extra=tuple(extra),
                extra_total=n_extra,
            )
        )


def _union(frames: Sequence[Any]) -> Any:
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def desired_frontier(uppers: Iterable[Frontier], refresh_every_ms: int | None) -> Frontier:
    """The frontier before which a view's content is determined by its inputs, whose
    uppers are ``uppers``: their meet, or for a view refreshed every
    ``refresh_every_ms`` the first refresh time at or beyond it (the view shows
    the inputs at the last refresh time until the next).
    :meth:`~timeshard.compute.view.SparkViewDesired.frontier`, without Spark."""
    upper = Frontier.empty()
    for u in uppers:
        upper = upper.meet(u)
    every = refresh_every_ms
    if every is None or upper.time is None or upper.time % every == 0:
        return upper
    return Frontier(upper.time + every - upper.time % every)


def check_view_frontier(client: PersistClient, entry: CatalogEntry, report: VerifyReport) -> None:
    """The view's upper is not beyond the frontier its inputs determine (without Spark).

    The sink appends only up to desired's frontier, and inputs' uppers only
    advance: the view's state is read first, its inputs' after it.
    """
    upper = checked_upper(client, entry.name, "view", report)
    inputs = dict(entry.definition["inputs"])
    present = set(client.list_shards())
    uppers = []
    for alias, shard in sorted(inputs.items()):
        if shard not in present:
            message = f"its input {alias!r} is shard {shard!r}, which does not exist"
            report.add(Finding(entry.name, "frontiers", message))
            return
        uppers.append(client.state(shard).upper)
    frontier = desired_frontier(uppers, entry.definition.get("refresh_every_ms"))
    if frontier < upper:
        assert frontier.time is not None
        report.add(
            Finding(
                entry.name,
                "frontiers",
                f"the view's upper {upper} is beyond {frontier}, the frontier up to which its "
                f"inputs determine it: its content from {frontier.time} on follows from no query",
                time=frontier.time,
            )
        )


def check_view(
    spark: Any, client: PersistClient, entry: CatalogEntry, report: VerifyReport
) -> None:
    """Check 5: the view's shard against its query over the inputs, at sampled times."""
    from pyspark.sql import functions as F

    from timeshard.compute.view import SparkViewDesired, ViewDefinition, is_data_error
    from timeshard.spark.snapshot import snapshot_df

    obj = report.object(entry.name, "view")
    d = entry.definition
    definition = ViewDefinition(
        entry.name,
        dict(d["inputs"]),
        d["sql"],
        refresh_every_ms=d.get("refresh_every_ms"),
    )
    obj.checks.append("query")
    desired = SparkViewDesired(spark, client, definition)
    view = client.open_unleased_reader(entry.name)
    produced = desired.data_schema()
    if not produced.equals(view.schema):
        report.add(
            Finding(
                entry.name,
                "query",
                f"the query produces columns {produced} but the view's shard holds {view.schema}",
            )
        )
        return
    times = _view_times(report, obj, desired, view, int(d.get("as_of") or 0))
    expected, got, checked = [], [], []
    for t in times:
        try:
            want = desired.snapshot(t).withColumn(AT, F.lit(t))
            have = snapshot_df(spark, view, t).drop(TS).withColumn(AT, F.lit(t))
        except SinceError:
            obj.notes.append(f"time {t} was compacted away during the check")
            continue
        expected.append(want)
        got.append(have)
        checked.append(t)
    if not checked:
        return
    what = "the view differs from its query over the inputs"
    data = list(view.schema.names)
    try:
        found = differences(_union(expected), _union(got), data)
    except Exception as e:
        if not is_data_error(e):  # a fault: the check could not run, no difference
            raise
        # The query fails on the data at some time: evaluate time by time, as the sink does.
        found = {}
        for t, g in zip(checked, got, strict=True):
            found.update(differences(_desired_at(spark, desired, t), g, data))
    _report_differences(report, entry.name, "query", found, what)
    for t in checked:
        obj.checked("query", t)


def _view_times(
    report: VerifyReport, obj: ObjectReport, desired: Any, view: UnleasedReader, as_of: Timestamp
) -> list[Timestamp]:
    """The sampled times at which the view and all its inputs are readable.

    Times at or beyond desired's frontier are not: a view there is ahead of its
    inputs, which :func:`check_view_frontier` reports.
    """
    view_state = view.state()
    frontier = desired.frontier()  # after the view's state: the inputs only advance
    span = readable_range(view_state)
    if span is None or span[1] <= as_of:
        obj.notes.append(f"no readable time at or beyond as_of {as_of}")
        return []
    first, end = max(span[0], as_of), span[1]
    if frontier.time is not None:
        end = min(end, frontier.time)
    if end <= first:
        return []
    inputs = [r.state() for r in desired.readers.values()]
    input_upper = Frontier.empty()
    for s in inputs:
        input_upper = input_upper.meet(s.upper)
    candidates = set(view.change_times(first, end))
    desired_end = min(end, MAX_TIMESTAMP if input_upper.time is None else input_upper.time)
    if first < desired_end:
        candidates |= set(desired.change_times(first, desired_end))
    last = end - 1 if end < MAX_TIMESTAMP else max([first, *candidates])
    rng = _rng(report.seed, obj.object, "query")
    times = sample_times(rng, candidates, first, last, report.samples)

    def compacted(t: Timestamp) -> bool:
        at = desired.definition.refresh_time(t)
        return not all(s.since.less_equal(at) for s in inputs)

    gone = [t for t in times if compacted(t)]
    if gone:
        obj.notes.append(
            f"inputs compacted away at {len(gone)} sampled times {gone[:5]}: not recomputed there"
        )
    return [t for t in times if not compacted(t)]


def _desired_at(spark: Any, desired: Any, t: Timestamp) -> Any:
    """The view at ``t`` (with ``_at``) as the sink evaluates it (``MvSink._evaluate``):
    a query that fails on the data at ``t`` gives the error snapshot; a fault (I/O, a
    Py4J or JVM error, a worker that died) is raised, never compared as content."""
    from pyspark.sql import functions as F

    from timeshard.compute.engine import SparkEngine
    from timeshard.compute.view import is_data_error

    engine = SparkEngine(spark)
    try:
        snap = engine.materialize(desired.snapshot(t))
    except Exception as e:
        if not is_data_error(e):
            raise
        snap = engine.materialize(desired.error_snapshot(t, e))
    return snap.withColumn(AT, F.lit(t))
