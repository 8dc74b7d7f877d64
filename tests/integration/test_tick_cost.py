"""What a small tick of a view read from its inputs' updates alone costs: one stage, no shuffle.

A linear view over one input (no join, so nothing arranged) computes its
delta from the input's updates in the interval. A small delta is summed in
the one partition it is written from, so the tick is one Spark job of one
stage that shuffles nothing, and writes one part. The view still equals its
query at every time: updates that cancel within the tick (a retraction and
an insertion of the same output row) are summed away, and err rows pass. A
catch-up is one step: it ends when the append is done, with no idle step
(and its pause) after it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.compute import MaterializedView, ViewDefinition
from timeshard.compute.arranged_rows import SharedArrangements
from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark.jobs import JobCounter
from timeshard.spark.snapshot import snapshot_df
from timeshard.spark.sqltext import bigint_at_least, bigint_where

pytestmark = pytest.mark.spark

DATA = pa.schema([("k", pa.int64()), ("v", pa.int64())])
UPDATES = pa.schema([*DATA, ("_ts", pa.int64()), ("_diff", pa.int64()), ("_err", pa.string())])
SQL = "SELECT k % 3 AS g, v * 2 AS w FROM a WHERE v >= 0"


def _expected(live: Counter[tuple[int, int]]) -> Counter[tuple[Any, ...]]:
    """The view's rows over the input's live rows (the SQL above, in Python)."""
    out: Counter[tuple[Any, ...]] = Counter()
    for (k, v), n in live.items():
        if v >= 0:
            out[(k % 3, v * 2)] += n
    return +out


def _view_at(spark: SparkSession, client: PersistClient, t: int) -> Counter[tuple[Any, ...]]:
    """The view's rows at ``t`` with their counts: its data columns, or ``("err", message)``."""
    reader = client.open_leased_reader("v")
    try:
        rows = snapshot_df(spark, reader, t).collect()
    finally:
        reader.expire()
    out: Counter[tuple[Any, ...]] = Counter()
    for r in rows:
        key = ("err", r["_err"]) if r["_err"] is not None else tuple(r)[:-3]
        out[key] += r["_diff"]
    return +out


def test_a_small_linear_tick_is_one_stage_that_shuffles_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    writer = client.open_writer("in_a", DATA)
    live: Counter[tuple[int, int]] = Counter()
    errs: Counter[tuple[Any, ...]] = Counter()
    upper = 0

    def append(rows: list[tuple[int | None, int | None, int, str | None]]) -> None:
        nonlocal upper
        table = pa.Table.from_pylist(
            [{"k": k, "v": v, "_ts": upper, "_diff": d, "_err": e} for k, v, d, e in rows],
            schema=UPDATES,
        )
        writer.append(table, upper, upper + 1)
        for k, v, d, e in rows:
            if e is not None:
                errs[("err", e)] += d
            else:
                assert k is not None and v is not None
                live[(k, v)] += d
        upper += 1

    append([(k, k - 5, 1, None) for k in range(40)])
    view = MaterializedView.install(
        spark,
        client,
        ViewDefinition("v", {"a": "in_a"}, SQL),
        background_io=False,
        check_every_s=None,  # the full check's jobs would count
    )
    assert view.desired.plan.classification.path == "linear"
    view.catch_up()
    view.catch_up()  # the first batch checks desired against the shard
    ticks: list[list[tuple[int | None, int | None, int, str | None]]] = [
        [(1, 7, 1, None), (2, -3, 1, None)],
        # k 4 -> 7 maps (1, 18) to (1, 18): a retraction and an insertion that cancel
        [(4, 9, -1, None), (7, 9, 1, None), (0, -5, -1, None), (0, 6, 1, None)],
        [(None, None, 1, "bad record 1"), (9, 12, 1, None)],
        [(9, 12, -1, None), (10, 5, -1, None), (11, 6, -1, None)],
    ]
    for rows in ticks:
        append(rows)
        steps = view.stats.ticks
        with JobCounter(spark) as jobs:
            view.catch_up()
        assert view.stats.ticks - steps == 1  # the append ends the catch-up: no idle step after
        assert jobs.count == 1, (rows, jobs.count)
        assert jobs.shuffled_records() == 0, (rows, jobs.shuffled_records())
        assert view.stats.history[-1]["parts"] <= 1, view.stats.history
        assert _view_at(spark, client, upper - 1) == _expected(live) + errs
    # The tick whose changes cancel wrote only what did not cancel.
    assert view.stats.history[-3]["rows"] == 1, view.stats.history
    view.close()


def _classes_compiled(spark: SparkSession) -> int:
    """How many classes Spark's code generator has compiled in this JVM so far."""
    metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics  # type: ignore[union-attr]
    return int(metrics.METRIC_COMPILATION_TIME().getCount())


@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "="])
def test_bigint_where_keeps_the_rows_the_plain_comparison_keeps(
    spark: SparkSession, op: str
) -> None:
    df = spark.createDataFrame([(None,), (-3,), (4,), (5,), (6,), (2**62,)], "_ts BIGINT")
    for value in (-3, 5, 2**62):
        plain = sorted(r[0] for r in df.where(f"_ts {op} {value}").collect())
        kept = sorted(r[0] for r in df.where(bigint_where("_ts", op, value)).collect())
        assert kept == plain, (op, value, kept, plain)
    with pytest.raises(InvalidUsage, match="'<>'"):
        bigint_where("_ts", "<>", 1)


def test_bigint_at_least_is_greatest(spark: SparkSession) -> None:
    df = spark.createDataFrame([(None,), (-3,), (4,), (5,), (6,), (2**62,)], "_ts BIGINT")
    for value in (-5, 5, 2**62):
        plain = sorted(r[0] for r in df.selectExpr(f"greatest(_ts, {value})").collect())
        raised = sorted(r[0] for r in df.selectExpr(bigint_at_least("_ts", value)).collect())
        assert raised == plain, (value, raised, plain)


#: One view per incremental path: linear over one input; a join of two arranged inputs (its old
#: rows read from the arrangements); a join on a theta condition (its old rows read from the
#: shards); min and max by group (per-group state, and the touched-groups term for the groups
#: whose extreme a retraction may move, evaluated at two times a tick).
COMPILED = {
    "linear": (SQL, "linear"),
    "join": ("SELECT a.k, a.v, b.v AS w FROM a JOIN b ON a.k = b.k", "linear"),
    "theta_join": ("SELECT a.k, a.v, b.v AS w FROM a JOIN b ON a.k < b.k", "linear"),
    "minmax": ("SELECT k % 3 AS g, min(v) AS lo, max(v) AS hi FROM a GROUP BY k % 3", "grouped"),
}


@pytest.mark.parametrize("name", list(COMPILED))
def test_ticks_after_the_first_compile_no_new_class(
    spark: SparkSession, tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark compiles a stage's generated Java once per distinct source text. A tick's times
    reach that code as references, never as literals: its bounds (sqltext.bigint_where), the
    old rows' times (their own, not ``lower - 1``), the grouped path's evaluation times (a map
    constant). So a tick of the same shape as an earlier one compiles nothing (with
    literals, each compiled anew)."""
    sql, path = COMPILED[name]
    # A plan of n layers has its own stages (their ids are in the generated code), so the per-group
    # state's shapes repeat every MAX_DELTAS + 1 ticks, and merges into the base or not differ:
    # with 8 (the default), a few dozen ticks to see them all. Short cycles here.
    monkeypatch.setattr("timeshard.storage.upsert_state.MAX_DELTAS", 2)
    client = PersistClient(Location.embedded(tmp_path))
    writers = {"a": client.open_writer("in_a", DATA), "b": client.open_writer("in_b", DATA)}
    live: dict[str, Counter[tuple[int, int]]] = {"a": Counter(), "b": Counter()}
    upper = 0

    def append(k: int) -> None:
        """Tick ``k``: ``a`` gets ``(k, k)``, loses ``(k - 3, k - 3)``; ``b`` gets ``(k, 10 k)``."""
        nonlocal upper
        rows = {"a": [(k, k, 1)] + ([(k - 3, k - 3, -1)] if k >= 3 else []), "b": [(k, 10 * k, 1)]}
        for input_, changes in rows.items():
            table = [
                {"k": key, "v": v, "_ts": upper, "_diff": d, "_err": None} for key, v, d in changes
            ]
            writers[input_].append(pa.Table.from_pylist(table, schema=UPDATES), upper, upper + 1)
            for key, v, d in changes:
                live[input_][(key, v)] += d
        upper += 1

    append(0)
    view = MaterializedView.install(
        spark,
        client,
        ViewDefinition("v", {"a": "in_a", "b": "in_b"} if "join" in name else {"a": "in_a"}, sql),
        background_io=False,
        check_every_s=None,
    )
    try:
        assert view.desired.plan.classification.path == path
        assert bool(view.desired.plan.arranged) == (name == "join")
        pool = SharedArrangements.of(spark)
        view.catch_up()
        view.catch_up()
        # Ticks of this shape compile its stages, and merges' stages. A min/max view merges
        # two arrangements (its state and its input by key), so more merge shapes: after 3
        # warm-up ticks, one CI run compiled 2 classes at tick 4 (which, not found).
        warm = 6 if name == "minmax" else 3
        for k in range(1, warm + 1):
            append(k)
            view.catch_up()
            pool.wait_for_merges()
        for k in range(warm + 1, warm + 4):
            append(k)
            before = _classes_compiled(spark)
            view.catch_up()
            pool.wait_for_merges()  # the merges a tick starts compile nothing either
            assert _classes_compiled(spark) == before, f"tick {k} compiled new classes"
        assert _view_at(spark, client, upper - 1) == _evaluated(spark, sql, live)
    finally:
        view.close()


def _evaluated(
    spark: SparkSession, sql: str, live: dict[str, Counter[tuple[int, int]]]
) -> Counter[tuple[Any, ...]]:
    """``sql`` evaluated from scratch by Spark over the inputs' live rows."""
    for input_, rows in live.items():
        expanded = [row for row, n in rows.items() for _ in range(n)]
        spark.createDataFrame(expanded, "k BIGINT, v BIGINT").createOrReplaceTempView(input_)
    return Counter(tuple(r) for r in spark.sql(sql).collect())


def test_a_group_by_state_tick_reads_its_checkpoint_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A GROUP BY kept by state: its write reads the tick's lazy checkpoint in one branch
    (new rows, old rows and negative groups' err rows from one scan). Read by several, the
    first task to reach a partition computed it and the write's coalesce gave one task
    every partition of a branch, so one task computed the whole checkpoint."""
    client = PersistClient(Location.embedded(tmp_path))
    writer = client.open_writer("in_a", DATA)
    upper = 0

    def append(rows: list[tuple[int, int, int]]) -> None:
        nonlocal upper
        table = pa.Table.from_pylist(
            [{"k": k, "v": v, "_ts": upper, "_diff": d, "_err": None} for k, v, d in rows],
            schema=UPDATES,
        )
        writer.append(table, upper, upper + 1)
        upper += 1

    append([(k, k, 1) for k in range(40)])
    sql = "SELECT k % 5 AS g, count(*) AS n, sum(v) AS s FROM a GROUP BY k % 5"
    view = MaterializedView.install(
        spark,
        client,
        ViewDefinition("v", {"a": "in_a"}, sql),
        background_io=False,
        check_every_s=None,
    )
    try:
        assert "per-group aggregate state" in view.desired.plan.classification.reason
        view.catch_up()
        view.catch_up()
        for rows in ([(1, 1, -1), (41, 2, 1)], [(2, 2, -1), (3, 9, 1)]):
            append(rows)
            with JobCounter(spark) as jobs:
                view.catch_up()
            assert jobs.count == 1, jobs.count
            plan = _last_write_plan(spark)
            assert plan.count("Scan ExistingRDD") == 1, plan  # the checkpoint
        live = Counter({(k, k): 1 for k in range(40)})
        live.update({(41, 2): 1, (3, 9): 1})
        live.subtract({(1, 1): 1, (2, 2): 1})
        want: Counter[tuple[Any, ...]] = Counter()
        for g in range(5):
            members = [v for (k, v), n in live.items() if n and k % 5 == g]
            want[(g, len(members), sum(members))] += 1
        assert _view_at(spark, client, upper - 1) == want
    finally:
        view.close()


def _last_write_plan(spark: SparkSession) -> str:
    """The physical plan of the newest SQL execution that wrote a part (``MapInArrow``), from
    Spark's status store once its listener has seen it."""
    context = spark.sparkContext._jsc.sc()  # type: ignore[union-attr]
    context.listenerBus().waitUntilEmpty()
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    plans = [str(executions.apply(i).physicalPlanDescription()) for i in range(executions.size())]
    writes = [p for p in plans if "MapInArrow" in p]
    assert writes, "no execution wrote a part"
    return writes[-1]
