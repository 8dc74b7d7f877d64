"""The incremental view path on Spark against a from-scratch evaluation at every time.

Hypothesis draws a query from a small grammar (filters, projections, 2- and
3-way inner joins, UNION ALL, GROUP BY with count/sum/avg/min/max/count
DISTINCT and HAVING, DISTINCT, left/right/full outer joins, windows with
PARTITION BY, divisions and casts that fail on some rows (err rows of those
rows) or where a guard keeps them from being evaluated, a subquery (the full path))
and a history of both inputs: inserts and retractions, err rows, several
changes per time, several times per append. Two replicas of the view
step in a random order and restart at random; at the end the view's shard
must equal the query over the inputs' snapshots (the full path,
``SparkViewDesired.snapshot``) at every time since ``as_of``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from timeshard.compute import MaterializedView, ViewDefinition
from timeshard.compute.arranged_rows import KeyedRows
from timeshard.compute.delta import SparkDelta
from timeshard.compute.mv_sink import DEPLOY_READER
from timeshard.compute.view import SparkViewDesired, is_data_error
from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.persist.holds import view_hold_id
from timeshard.spark.jobs import JobCounter

pytestmark = pytest.mark.spark

A = pa.schema([("k", pa.int64()), ("v", pa.int64())])
B = pa.schema([("k", pa.int64()), ("w", pa.int64())])
INPUTS = {"a": "in_a", "b": "in_b"}

#: (template, the path the view must take; "state": grouped, by per-group aggregate state).
#: ``{n}`` is a drawn small integer.
QUERIES = [
    ("SELECT k, v * 2 AS w FROM a WHERE v % 3 <> {n}", "linear"),
    ("SELECT a.k, a.v, b.w FROM a JOIN b ON a.k = b.k WHERE a.v >= {n}", "linear"),
    (
        "SELECT x.k, y.w, z.w AS w2 FROM a AS x JOIN b AS y ON x.k = y.k "
        "JOIN b AS z ON z.k = x.v % 4",
        "linear",
    ),
    ("SELECT k, v FROM a WHERE v > {n} UNION ALL SELECT k, w FROM b", "linear"),
    ("SELECT k, count(*) AS n, sum(v) AS s, avg(CAST(v AS INT)) AS m FROM a GROUP BY k", "state"),
    (
        "SELECT v % 3 AS r, count(v) AS c, sum(k) + {n} AS s, avg(CAST(k AS INT)) AS m FROM a "
        "WHERE k <> {n} GROUP BY v % 3 HAVING sum(v) > {n}",
        "state",
    ),
    ("SELECT k, sum(v) AS s, max(v) AS hi FROM a GROUP BY k", "state"),
    ("SELECT a.k, count(*) AS n, sum(b.w) AS s FROM a JOIN b ON a.k = b.k GROUP BY a.k", "state"),
    (
        "SELECT x.v % 2 AS p, count(y.w) AS c, avg(CAST(z.w AS INT)) AS m FROM a AS x "
        "JOIN b AS y ON x.k = y.k JOIN b AS z ON z.k = x.v % 4 WHERE y.w >= {n} "
        "GROUP BY x.v % 2 HAVING count(*) > {n}",
        "state",
    ),
    (
        "SELECT k, min(v) AS lo, max(v) AS hi FROM a WHERE v <> {n} GROUP BY k HAVING count(*) > 1",
        "state",
    ),
    ("SELECT DISTINCT v % 3 AS r FROM a", "grouped"),
    ("SELECT k, count(DISTINCT v) AS d FROM a GROUP BY k", "grouped"),
    (
        "SELECT CASE WHEN v > {n} THEN k END AS g, min(k) AS lo, max(k + v) AS hi, "
        "min(v) + count(*) AS m FROM a WHERE k <> {n} GROUP BY CASE WHEN v > {n} THEN k END "
        "HAVING max(k) > {n}",
        "state",
    ),
    ("SELECT a.k, a.v, b.w FROM a LEFT JOIN b ON a.k = b.k", "grouped"),
    ("SELECT a.k, b.w FROM a FULL OUTER JOIN b ON a.k = b.k AND a.v > b.w", "grouped"),
    ("SELECT b.k, a.v FROM a RIGHT JOIN b ON a.k + {n} = b.k", "grouped"),
    (
        "SELECT k, v, dense_rank() OVER (PARTITION BY k ORDER BY v) AS rn, "
        "sum(v) OVER (PARTITION BY k) AS t FROM a",
        "grouped",
    ),
    ("SELECT k, v FROM a WHERE v > (SELECT min(w) FROM b) ORDER BY k", "full"),
    ("SELECT k, 12 / v AS r FROM a", "linear"),
]

#: Rows the query fails on are err rows of those rows (row_errors): a division kept by a
#: WHERE, a guarded one, a cast that overflows over a join, failing groups.
ROW_ERRORS = [
    ("SELECT k, v FROM a WHERE v = {n} OR 10 / (v - {n}) > 2", "linear"),
    ("SELECT k, CASE WHEN v = {n} THEN 0 ELSE 12 / (v - {n}) END AS r FROM a", "linear"),
    ("SELECT a.k, CAST(a.v * 60 AS TINYINT) AS t, b.w FROM a JOIN b ON a.k = b.k", "linear"),
    ("SELECT k, sum(v) / (count(*) - {n} - 1) AS q FROM a GROUP BY k", "state"),
    ("SELECT k, max(v) AS hi FROM a GROUP BY k HAVING 12 / (max(v) - {n}) > 1", "state"),
    ("SELECT k, v, 12 / (sum(v) OVER (PARTITION BY k) - {n}) AS f FROM a", "grouped"),
    # a subquery failing on its input's rows fails the query at that time (err, as in Spark)
    ("SELECT k, v FROM a WHERE v > (SELECT max(12 / (w - {n})) FROM b) - 3", "grouped"),
]


#: Inner joins on equalities of a column with an expression of the tables joined before it:
#: every input is kept arranged by each key it is joined on (a self-join: two per input).
ARRANGED_JOINS = [
    ("SELECT a.k, a.v, b.w FROM a JOIN b ON a.k = b.k WHERE a.v >= {n}", "linear"),
    ("SELECT x.k, x.v, y.w FROM a AS x JOIN b AS y ON x.v = y.w AND y.k = x.k", "linear"),
    ("SELECT b.w, a.v, a.k + {n} AS s FROM b JOIN a ON b.k = a.k AND a.v > b.w", "linear"),
    (
        "SELECT x.k, y.w, z.w AS w2 FROM a AS x JOIN b AS y ON x.k = y.k "
        "JOIN b AS z ON z.w = x.v WHERE y.w <> {n}",
        "linear",
    ),
    (
        "SELECT x.k, x.v, y.w, z.k AS k2 FROM a AS x JOIN b AS y ON y.k = x.k "
        "JOIN a AS z ON z.k = y.w AND z.v + {n} = x.v",
        "linear",
    ),
]

#: Grouped plans whose inputs are kept arranged by key (the touched keys' rows read from the
#: layers), with null keys, keys computed by expressions and two keyed inputs.
ARRANGED_KEYS = [
    (
        "SELECT CASE WHEN v > {n} THEN k END AS g, min(v) AS lo, max(v) AS hi, "
        "count(DISTINCT v) AS d FROM a GROUP BY CASE WHEN v > {n} THEN k END",
        "grouped",
    ),
    ("SELECT DISTINCT CAST(v % 3 AS STRING) AS r, k > {n} AS big FROM a", "grouped"),
    ("SELECT a.k, a.v, b.w FROM a LEFT JOIN b ON a.k = b.k", "grouped"),
    ("SELECT b.k, a.v FROM a RIGHT JOIN b ON a.k + {n} = b.k", "grouped"),
    (
        "SELECT k, v, rank() OVER (PARTITION BY k % 2, k > {n} ORDER BY v) AS r FROM a",
        "grouped",
    ),
]

#: Scalar subqueries in the WHERE (evaluated at every change time; the keys whose rows a
#: change of one moves across the WHERE recomputed) and GROUP BY over a join by its key.
#: Keys of a double (-0.0 and 0.0 hash apart) are not arranged: their rows come from parts.
PARAMETERS = [
    ("SELECT k, v FROM a WHERE v > (SELECT min(w) FROM b)", "grouped"),
    (
        "SELECT a.k, max(b.w) AS hi, count(*) AS n FROM a JOIN b ON b.k = a.k "
        "WHERE a.v > (SELECT max(k) FROM a) - {n} GROUP BY a.k",
        "grouped",
    ),
    (
        "SELECT k, sum(v) AS s FROM a WHERE v >= (SELECT avg(CAST(w AS INT)) FROM b WHERE w > {n}) "
        "OR k = {n} GROUP BY k",
        "grouped",
    ),
    (
        "SELECT a.k, a.v, b.w FROM a LEFT JOIN b ON a.k = b.k "
        "WHERE b.w < (SELECT count(*) FROM a) OR b.k = {n}",
        "full",  # compared with the NULL-filled side of an outer join
    ),
    (
        "SELECT a.k, b.w FROM a JOIN b ON a.k = b.k "
        "WHERE a.v > (SELECT max(v) FROM a) - 2 AND b.w <> (SELECT min(w) FROM b)",
        "grouped",
    ),
    (
        "SELECT CAST(v AS DOUBLE) * 0.0 AS h, count(*) AS n FROM a "
        "WHERE k >= (SELECT sum(w) FROM b) - {n} GROUP BY CAST(v AS DOUBLE) * 0.0",
        "grouped",
    ),
    (
        "SELECT a.k, max(b.w) AS hi, count(DISTINCT b.w) AS d FROM a JOIN b ON a.k = b.k "
        "WHERE b.w <> {n} GROUP BY a.k HAVING min(b.w) >= 0",
        "grouped",
    ),
    (
        "SELECT a.k, min(b.w) AS lo, count(b.k) AS n FROM a LEFT JOIN b ON a.k = b.k GROUP BY a.k",
        "grouped",
    ),
]

#: Hypothesis settings of the tests below: each example runs Spark jobs for seconds.
SLOW = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
#: The factor by which a deeper run multiplies the examples of these model tests.
EXAMPLES_FACTOR = "TIMESHARD_TEST_EXAMPLES"


def examples(n: int) -> int:
    """``n`` examples, times ``TIMESHARD_TEST_EXAMPLES`` if set (a run of every tier holds
    these tests to a few each; ``TIMESHARD_TEST_EXAMPLES=5`` checks five times as many)."""
    raw = os.environ.get(EXAMPLES_FACTOR, "1")
    try:
        factor = float(raw)
    except ValueError:
        factor = -1.0
    if not factor > 0:
        raise ValueError(f"{EXAMPLES_FACTOR}={raw!r}: a factor above 0, such as 3")
    return max(1, round(n * factor))


@st.composite
def histories(draw: Any, queries: list[tuple[str, str]] = QUERIES) -> dict[str, Any]:
    template, path = draw(st.sampled_from(queries))
    sql = template.format(n=draw(st.integers(0, 2)))
    steps = st.sampled_from(["r0", "r1", "restart0", "restart1"])
    return {"sql": sql, "path": path, "ticks": draw(input_ticks(steps))}


@st.composite
def input_ticks(draw: Any, steps: st.SearchStrategy[str]) -> list[Any]:
    """Ticks, each: times per append, the ops on the inputs, then up to 4 ``steps``."""
    ticks = []
    for _ in range(draw(st.integers(2, 5))):
        width = draw(st.integers(1, 3))  # times per append
        ops = draw(
            st.lists(
                st.tuples(
                    st.sampled_from(["a", "b"]),
                    st.sampled_from(["insert", "insert", "retract", "err"]),
                    st.integers(0, 3),
                    st.integers(0, 4),
                    st.integers(0, width - 1),
                ),
                max_size=8,
            )
        )
        ticks.append((width, ops, draw(st.lists(steps, max_size=4))))
    return ticks


def normalized(rows: list[dict[str, Any]], names: list[str]) -> Counter[tuple[Any, ...]]:
    """A collection as a Counter; an err row counts as ``("err", message)``, or as
    ``("err",)`` if it is a query's failure (whose message the path it failed on words)."""
    out: Counter[tuple[Any, ...]] = Counter()
    for r in rows:
        err = r["_err"]
        if err is None:
            key = tuple(r[n] for n in names)
        else:
            key = ("err",) if " failed on its inputs: " in err else ("err", err)
        out[key] += r["_diff"]
    return Counter({k: v for k, v in out.items() if v})


class Inputs:
    """The two input shards, the live rows of each (to retract from), and the times at which
    either has an update (``changed``: between two of them, every query has the same rows)."""

    def __init__(self, client: PersistClient) -> None:
        self.writers = {a: client.open_writer(s, A if a == "a" else B) for a, s in INPUTS.items()}
        self.live: dict[str, list[tuple[int, int]]] = {"a": [], "b": []}
        self.upper = 0
        self.changed: set[int] = set()

    def append(self, width: int, ops: list[tuple[str, str, int, int, int]]) -> None:
        rows: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
        for alias, op, k, v, dt in sorted(ops, key=lambda o: o[4]):
            other = "v" if alias == "a" else "w"
            row: dict[str, Any] = {"k": k, other: v, "_ts": self.upper + dt, "_err": None}
            if op == "retract" and self.live[alias]:
                k, v = self.live[alias].pop((k * 7 + v) % len(self.live[alias]))
                row.update({"k": k, other: v, "_diff": -1})
            elif op == "err":
                row.update({"k": None, other: None, "_diff": 1, "_err": f"bad record {k}{v}"})
            else:
                self.live[alias].append((k, v))
                row["_diff"] = 1
            rows[alias].append(row)
            self.changed.add(row["_ts"])
        for alias, writer in self.writers.items():
            names = [*writer.schema.names, "_ts", "_diff", "_err"]
            table = pa.Table.from_pylist(rows[alias], schema=_updates_schema(writer.schema))
            writer.append(table.select(names), self.upper, self.upper + width)
        self.upper += width


def _updates_schema(data: pa.Schema) -> pa.Schema:
    return pa.schema([*data, ("_ts", pa.int64()), ("_diff", pa.int64()), ("_err", pa.string())])


def install(spark: SparkSession, client: PersistClient, sql: str) -> MaterializedView:
    return MaterializedView.install(
        spark, client, ViewDefinition("v", INPUTS, sql), background_io=False
    )


@settings(SLOW, max_examples=examples(10))
@given(history=histories())
def test_incremental_view_equals_the_query_at_every_time(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, history: dict[str, Any]
) -> None:
    check_history(spark, tmp_path_factory, history)


@settings(SLOW, max_examples=examples(4))
@given(history=histories(ROW_ERRORS))
def test_a_view_with_rows_the_query_fails_on_equals_the_query_at_every_time(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, history: dict[str, Any]
) -> None:
    """The same check on queries that fail on some rows: each such row is an err row with
    the row's multiplicity and message, on the incremental and the full path alike."""
    check_history(spark, tmp_path_factory, history)


@settings(SLOW, max_examples=examples(5))
@given(history=histories(ARRANGED_JOINS))
def test_a_join_of_arranged_inputs_equals_the_query_at_every_time(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, history: dict[str, Any]
) -> None:
    """The same check on joins whose inputs are arranged by key (their layers rebuilt at
    restarts and at another replica's appends, merged in the background)."""
    check_history(spark, tmp_path_factory, history, arranged=True)


@settings(SLOW, max_examples=examples(5))
@given(history=histories(ARRANGED_KEYS))
def test_a_grouped_view_over_inputs_arranged_by_key_equals_the_query_at_every_time(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, history: dict[str, Any]
) -> None:
    """The same check on grouped plans whose inputs are arranged by the plan's keys."""
    check_history(spark, tmp_path_factory, history, keyed=True)


@settings(SLOW, max_examples=examples(6))
@given(history=histories(PARAMETERS))
def test_a_view_with_scalar_subqueries_or_a_grouped_join_equals_the_query_at_every_time(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, history: dict[str, Any]
) -> None:
    """The same check on views whose WHERE compares with scalar subqueries over the inputs
    (a change of one may move rows of keys no update touched), and on GROUP BY over a join
    by its join key."""
    check_history(spark, tmp_path_factory, history)


def test_a_subquerys_new_value_moves_groups_no_update_touched(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """W2's max_bid: a new auction (a row of ``a``, no bid) raises ``max(k)`` and closes the
    open auctions it passes, whose rows did not change; a retraction lowers it again."""
    sql = (
        "SELECT a.k, max(b.w) AS hi FROM a JOIN b ON b.k = a.k "
        "WHERE a.v > (SELECT max(k) FROM a) GROUP BY a.k"
    )
    bids = [("b", "insert", k, w, 0) for k in range(3) for w in (1, 4)]
    ticks = [
        (
            1,
            [("a", "insert", 0, 3, 0), ("a", "insert", 1, 4, 0), ("a", "insert", 2, 4, 0), *bids],
            ["r0"],
        ),
        (1, [("a", "insert", 3, 0, 0)], ["r0", "r1"]),  # max(k) = 3: auction 0 closes
        (2, [("a", "insert", 4, 0, 0), ("b", "insert", 1, 9, 1)], ["r1", "r0"]),  # all close
        # the 5th live row of a, (4, 0): max(k) = 3 again
        (1, [("a", "retract", 2, 0, 0)], ["r0", "restart1", "r1"]),
    ]
    history = {"sql": sql, "path": "grouped", "ticks": ticks}
    check_history(spark, tmp_path_factory, history, keyed=True)


def test_a_subquery_failing_on_its_input_is_the_views_error_at_those_times(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``12 / (w - n)`` fails while ``b`` holds ``w = n``: Spark raises it while it plans the
    delta (a broadcast of the subquery's values, wrapped in an "awaitResult" error with no
    SQLSTATE of its own), which must count as the data's error, not as a fault retried for
    ever; the view is the query's err at those times and the rows again after. The same
    holds for a view on the full path, whose snapshot at each time fails the same way."""
    sql = "SELECT k, v FROM a WHERE v > (SELECT max(12 / (w - {n})) FROM b) - 3"
    ticks = [
        (1, [("a", "insert", 1, 4, 0), ("a", "insert", 2, 1, 0), ("b", "insert", 0, 3, 0)], ["r0"]),
        (2, [("b", "insert", 1, 1, 0), ("a", "insert", 3, 2, 1)], ["r0", "r1"]),
        # (1, 1) leaves b (a retraction picks its row by index: (1 * 7 + 0) % 2 = 1)
        (1, [("b", "retract", 1, 0, 0)], ["r1", "restart0", "r0"]),
        (1, [("b", "insert", 2, 4, 0), ("a", "insert", 0, 3, 0)], ["r0"]),
    ]
    # (1, 1) is in b at times 1 and 2; (0, 3) from time 0 on. The times the query fails:
    failing = {0: set(), 1: {1, 2}, 3: {0, 1, 2, 3, 4}}
    for n, times in failing.items():
        history = {"sql": sql.format(n=n), "path": "grouped", "ticks": ticks}
        check_history(spark, tmp_path_factory, history, err_times=times)
    # The same failure on the full path (ORDER BY keeps it there), evaluated time by time:
    # the ticks until (1, 1) has left b again.
    history = {"sql": sql.format(n=1) + " ORDER BY k", "path": "full", "ticks": ticks[:3]}
    check_history(spark, tmp_path_factory, history, err_times={1, 2})


def test_a_float_key_is_not_arranged_and_the_view_stays_the_query(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A GROUP BY on a double (one group for -0.0 and 0.0, which hash apart) reads the touched
    keys' rows from the shards, and says why in the log."""
    key = "CAST(v - {n} AS DOUBLE) * 0.0"  # -0.0 for v < n, else 0.0
    sql = f"SELECT {key} AS h, max(k) AS hi FROM a GROUP BY {key}"
    ticks = [
        (1, [("a", "insert", k, v, 0) for k in range(3) for v in range(3)], ["r0"]),
        (2, [("a", "retract", 1, 2, 0), ("a", "insert", 0, 1, 1)], ["r0", "restart0", "r1"]),
    ]
    for n in (1, 2):
        history = {"sql": sql.format(n=n), "path": "grouped", "ticks": ticks}
        check_history(spark, tmp_path_factory, history, keyed=False)


def check_history(
    spark: SparkSession,
    tmp_path_factory: pytest.TempPathFactory,
    history: dict[str, Any],
    *,
    arranged: bool = False,
    keyed: bool | None = None,
    err_times: set[int] | None = None,
) -> None:
    """Run ``history`` on two replicas, then compare the view with the query at every time.

    ``keyed``: whether the grouped plan's inputs must be arranged by key (None: either).
    ``err_times``: the times at which the view (and so the query) must hold an err row.
    """
    tmp: Path = tmp_path_factory.mktemp("inc")
    client = PersistClient(Location.embedded(tmp))
    inputs = Inputs(client)
    holds = [client.open_leased_reader(s) for s in INPUTS.values()]
    replicas = [install(spark, client, history["sql"])]
    holds.append(client.open_leased_reader("v"))
    replicas.append(install(spark, client, history["sql"]))
    plan = replicas[0].desired.plan
    assert plan.classification.path == history["path"].replace("state", "grouped")
    assert (plan.aggregate is not None) == (history["path"] == "state"), plan
    if arranged:
        assert plan.arranged, plan
    as_of = replicas[0].sink.as_of
    try:
        failures = run_ticks(
            inputs, history["ticks"], replicas, lambda i: install(spark, client, history["sql"])
        )
        if keyed is not None:  # (a view no update reached has built no arrangement)
            kinds = {type(a) for r in replicas for a in r.desired.arrangements()}
            assert kinds <= {KeyedRows} if keyed else KeyedRows not in kinds, kinds
        # No fault happens here: every tick must have gone through (a delta whose plan
        # fails would be retried from snapshots and hide the failure).
        assert failures + sum(r.stats.failures for r in replicas) == 0
        times = range(max(as_of, 0), inputs.upper)
        assert_the_query(spark, client, "v", history["sql"], times, inputs.changed)
        if err_times is not None:
            view = client.open_leased_reader("v")
            erring = {t for t in times if pc.any(view.snapshot(t)["_err"].is_valid()).as_py()}
            view.expire()
            assert erring == err_times, (history["sql"], erring)
    finally:
        for replica in replicas:
            replica.close()
        for hold in holds:
            hold.expire()


def run_ticks(
    inputs: Inputs,
    ticks: list[Any],
    views: list[MaterializedView],
    reinstall: Callable[[int], MaterializedView],
) -> int:
    """Append each tick's ops, then take its steps (``<x><i>``: view ``i`` steps;
    ``restart<i>``: it is closed and ``reinstall(i)`` takes its place); then catch every view
    up. Returns the failures of the views closed."""
    failures = 0
    for width, ops, steps in ticks:
        inputs.append(width, ops)
        for step in steps:
            i = int(step[-1])
            if step.startswith("restart"):
                failures += views[i].stats.failures
                views[i].close()
                views[i] = reinstall(i)
            else:
                views[i].step()
    for view in views:
        view.catch_up()
    return failures


def assert_the_query(
    spark: SparkSession,
    client: PersistClient,
    name: str,
    sql: str,
    times: Iterable[int],
    changed: Collection[int] | None = None,
) -> None:
    """The view ``name`` equals ``sql`` over the inputs (from scratch) at each of ``times``.

    ``changed``: the only times at which an input has updates (None: any time may). The
    query is then evaluated at the first of ``times`` and at those of ``changed`` among
    them; the view at every other time is compared with the query at the last time
    evaluated before it, whose inputs, and so rows, are the same.
    """
    reference = SparkViewDesired(spark, client, ViewDefinition("ref", INPUTS, sql))
    columns = list(reference.data_schema().names)
    times = list(times)
    assert times == sorted(times), times
    evaluated = [t for t in times if changed is None or t == times[0] or t in changed]
    wanted: dict[int, list[Any]] = {}
    for i in range(0, len(evaluated), UNION_TIMES):
        wanted.update(from_scratch_at(reference, evaluated[i : i + UNION_TIMES]))
    view = client.open_leased_reader(name)
    same_as = times[0] if times else 0
    for t in times:
        same_as = t if t in wanted else same_as
        want = normalized(wanted[same_as], columns)
        assert normalized(view.snapshot(t).to_pylist(), columns) == want, (sql, t, same_as)
    view.expire()


#: The column that tags each row of :func:`from_scratch_at`'s one job with its time (no
#: view's column: their names never start with ``INTERNAL_PREFIX``).
AT = "__at"
#: The most times :func:`from_scratch_at` evaluates in one job. Each ``unionByName`` analyzes
#: the whole union built so far: a union of 11 times took 70 s, 3 jobs of up to 4 took 19 s.
UNION_TIMES = 4


def from_scratch_at(reference: SparkViewDesired, times: Sequence[int]) -> dict[int, list[Any]]:
    """:func:`from_scratch` at each of ``times`` (at most :data:`UNION_TIMES` of them), in
    one Spark job: the snapshots at every time, each row tagged with its time, in one union.
    If the query fails on the data at some of them, each half of ``times`` again, down to one
    time (its err row)."""
    if len(times) <= 1:
        return {t: from_scratch(reference, t) for t in times}
    snapshots = [reference.snapshot(t).withColumn(AT, F.lit(t)) for t in times]
    try:
        rows = functools.reduce(lambda x, y: x.unionByName(y), snapshots).collect()
    except Exception as e:
        if not is_data_error(e):
            raise
        half = len(times) // 2
        return {
            **from_scratch_at(reference, times[:half]),
            **from_scratch_at(reference, times[half:]),
        }
    out: dict[int, list[Any]] = {t: [] for t in times}
    for r in rows:
        row = r.asDict()
        out[row.pop(AT)].append(row)
    return out


def from_scratch(reference: SparkViewDesired, t: int) -> list[dict[str, Any]]:
    """The query over the inputs at ``t``; a query failing on the data is one err row."""
    try:
        return [r.asDict() for r in reference.snapshot(t).collect()]
    except Exception as e:
        if not is_data_error(e):
            raise
        return [r.asDict() for r in reference.error_snapshot(t, e).collect()]


@contextlib.contextmanager
def merges_paused(view: MaterializedView) -> Iterator[None]:
    """No background merge of the view's arrangements runs (their jobs would count)."""
    with contextlib.ExitStack() as paused:
        for state in view.desired.arrangements():
            paused.enter_context(state.merges_paused())
        yield


def held_install(
    spark: SparkSession, client: PersistClient, sql: str
) -> tuple[MaterializedView, list[Any], int]:
    """View ``v`` of ``sql`` installed, leased readers holding both inputs and the view (the
    view's last), and the view's ``as_of``."""
    holds = [client.open_leased_reader(s) for s in INPUTS.values()]
    view = install(spark, client, sql)
    holds.append(client.open_leased_reader("v"))
    return view, holds, view.sink.as_of


def append_exactly(inputs: Inputs, width: int, rows: list[tuple[int, int, int, int]]) -> None:
    """Append ``(k, v, diff, dt)`` rows to input ``a`` at ``upper + dt`` (``b``: no row)."""
    table = pa.Table.from_pylist(
        [
            {"k": k, "v": v, "_ts": inputs.upper + dt, "_diff": diff, "_err": None}
            for k, v, diff, dt in rows
        ],
        schema=_updates_schema(A),
    )
    inputs.writers["a"].append(table, inputs.upper, inputs.upper + width)
    inputs.changed.update(inputs.upper + dt for *_, dt in rows)
    empty = pa.Table.from_pylist([], schema=_updates_schema(B))
    inputs.writers["b"].append(empty, inputs.upper, inputs.upper + width)
    inputs.upper += width


def test_min_max_state_recomputes_only_the_groups_an_extreme_may_have_left(
    spark: SparkSession, tmp_path: Path
) -> None:
    """min/max kept in the state: a tick that retracts no group's extreme moves every group by
    its state (it shuffles the changes alone); a retraction of an extreme, or of a value
    inserted earlier in the tick as the new extreme, makes that group alone read its rows
    (shuffling them at each evaluation time). At every time the view is the query, across a
    restart (which rebuilds the state)."""
    client = PersistClient(Location.embedded(tmp_path))
    inputs = Inputs(client)
    sql = "SELECT k, min(v) AS lo, max(v) AS hi, count(*) AS n FROM a GROUP BY k"
    view, holds, as_of = held_install(spark, client, sql)
    plan = view.desired.plan
    assert plan.aggregate is not None and plan.aggregate.extremes, plan.classification
    append_exactly(inputs, 1, [(k, v, 1, 0) for k in range(4) for v in range(300)])
    view.catch_up()
    view.catch_up()  # the first batch checks desired against the shard

    def tick(width: int, rows: list[tuple[int, int, int, int]], *, rebuilt: bool = False) -> int:
        """The tick's shuffled records; two jobs (``rebuilt``: and the rebuilds' jobs)."""
        append_exactly(inputs, width, rows)
        with merges_paused(view), JobCounter(spark) as jobs:
            view.catch_up()
        assert jobs.count == 2 or rebuilt, jobs.count  # the state's tick, then the write
        return jobs.shuffled_records()

    try:
        # Middle values out, new extremes in, over two times: no group is recomputed.
        safe = tick(2, [(0, 150, -1, 0), (0, 1000, 1, 0), (1, -5, 1, 1), (2, 7, -1, 1)])
        assert safe < 100, safe
        # Group 0's min (0) out; group 1's new min (-5) in at 1 and out at 2: both read their
        # 300 rows at the 3 evaluation times; groups 2 and 3 (a middle value) do not.
        moved = tick(3, [(0, 0, -1, 0), (1, -6, 1, 1), (1, -6, -1, 2), (3, 5, -1, 2)])
        assert moved >= 2 * 300, moved
        view.close()
        view = install(spark, client, sql)  # restarts: the state is rebuilt at its first tick
        tick(1, [(0, 999, 1, 0), (3, 6, -1, 0)], rebuilt=True)
        safe = tick(1, [(0, 999, -1, 0), (3, 4, -1, 0)])
        assert safe < 100, safe
        tick(1, [(0, 1000, -1, 0), (2, 299, -1, 0), (2, 300, 1, 0)])
        assert view.stats.failures == 0
        assert_the_query(
            spark, client, "v", sql, range(max(as_of, 0), inputs.upper), inputs.changed
        )
    finally:
        view.close()
        for hold in holds:
            hold.expire()


def test_view_tick_job_counts(spark: SparkSession, tmp_path: Path) -> None:
    """An idle tick runs no job; a delta tick one, the write, whichever inputs changed: it also
    fills the new layers of a GROUP BY's state and of the inputs arranged by key (a join's, a
    min/max's, an outer join's, a three-way join's: two per input, one no term reads). A
    GROUP BY whose state keeps min and max runs one more, first: the state's tick, which
    counts the groups to recompute."""
    client = PersistClient(Location.embedded(tmp_path))
    inputs = Inputs(client)
    inputs.append(1, [(t, "insert", k % 500, k, 0) for k in range(1000) for t in ("a", "b")])
    for i, sql in enumerate(
        [
            "SELECT k, count(*) AS n, sum(v) AS s FROM a GROUP BY k",
            "SELECT a.k, a.v, b.w FROM a JOIN b ON a.k = b.k",
            "SELECT k, min(v) AS lo, max(v) AS hi FROM a GROUP BY k",
            "SELECT a.k, a.v, b.w FROM a LEFT JOIN b ON a.k = b.k",
            "SELECT x.k, y.w, z.w AS w2 FROM a AS x JOIN b AS y ON x.k = y.k "
            "JOIN b AS z ON z.w = x.v",
        ]
    ):
        view = MaterializedView.install(  # no full check: its jobs would count
            spark,
            client,
            ViewDefinition(f"v{i}", INPUTS, sql),
            background_io=False,
            check_every_s=None,
        )
        view.catch_up()
        view.catch_up()  # the first batch checks desired against the shard
        inputs.append(1, [])
        with merges_paused(view), JobCounter(spark) as jobs:
            view.catch_up()
        assert jobs.count == 0, sql
        inputs.append(1, [("a", "insert", 1, 9, 0)])
        with merges_paused(view), JobCounter(spark) as jobs:
            view.catch_up()
        assert jobs.count == (2 if "min(v)" in sql else 1), (sql, jobs.count)
        assert view.stats.history[-1]["parts"] <= 1, view.stats.history  # a small delta: one part
        inputs.append(1, [("a", "insert", 2, 9, 0), ("b", "insert", 2, 5, 0)])
        with merges_paused(view), JobCounter(spark) as jobs:
            view.catch_up()
        assert jobs.count == (2 if "min(v)" in sql else 1), (sql, jobs.count)
        # It shuffles the changes (and a grouped plan the touched keys' rows, 2 per key at 2
        # evaluation times), never the inputs' 2,000 arranged rows.
        assert jobs.shuffled_records() < 100, (sql, jobs.shuffled_records())
        # An update of an input the query does not read is no update of the view: no job.
        inputs.append(1, [("b", "insert", 3, 9, 0)])
        with merges_paused(view), JobCounter(spark) as jobs:
            view.catch_up()
        assert jobs.count == (1 if " b " in sql else 0), (sql, jobs.count)
        view.close()


def test_a_tick_with_no_update_unpins_the_layers_it_read(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A tick whose only changed input the query does not read writes nothing; the layers
    of the arrangements its plan read were left pinned until the next tick (retired ones
    stayed cached meanwhile)."""
    client = PersistClient(Location.embedded(tmp_path))
    inputs = Inputs(client)
    inputs.append(1, [(t, "insert", k % 50, k, 0) for k in range(100) for t in ("a", "b")])
    sql = "SELECT x.k, y.v FROM a AS x JOIN a AS y ON x.k = y.v"
    view = MaterializedView.install(
        spark, client, ViewDefinition("v", INPUTS, sql), background_io=False, check_every_s=None
    )
    try:
        view.catch_up()
        view.catch_up()
        inputs.append(1, [("b", "insert", 3, 9, 0)])
        with JobCounter(spark) as jobs:
            view.catch_up()
        assert jobs.count == 0
        arrangements = view.desired.arrangements()
        assert arrangements, "the join's input is arranged"
        assert [a._pins for a in arrangements] == [0] * len(arrangements)
    finally:
        view.close()


def test_a_tick_reads_no_input_part_for_err_rows_its_metadata_rules_out(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delta tick's write scans an input's new parts for err updates only if their recorded
    ``err_rows`` allow one: a GROUP BY tick over updates without an err row reads no part
    file at all (its ok rows come from the state's checkpoint). An err update still
    reaches the view."""
    import timeshard.spark.parts as parts

    plans: list[str] = []
    written = parts._written

    def recorded(positional: Any, root: str, schema: pa.Schema) -> Any:
        out = written(positional, root, schema)
        plans.append(str(out._jdf.queryExecution().executedPlan().toString()))
        return out

    monkeypatch.setattr(parts, "_written", recorded)
    client = PersistClient(Location.embedded(tmp_path))
    inputs = Inputs(client)
    inputs.append(1, [("a", "insert", k % 50, k, 0) for k in range(100)])
    sql = "SELECT k, count(*) AS n, sum(v) AS s FROM a GROUP BY k"
    view = MaterializedView.install(
        spark, client, ViewDefinition("v", INPUTS, sql), background_io=False, check_every_s=None
    )
    try:
        view.catch_up()
        view.catch_up()  # the first batch checks desired against the shard
        inputs.append(1, [("a", "insert", 3, 7, 0)])
        plans.clear()
        view.catch_up()
        assert len(plans) == 1 and "FileScan" not in plans[0], plans
        inputs.append(1, [("a", "insert", 4, 8, 0), ("a", "err", 4, 9, 0)])
        plans.clear()
        view.catch_up()
        assert len(plans) == 1 and plans[0].count("FileScan") == 1, plans
        assert_the_query(spark, client, "v", sql, [inputs.upper - 1], inputs.changed)
    finally:
        view.close()


def test_a_group_by_state_tick_shuffles_only_its_changes(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A GROUP BY sum's tick over one input is one job that shuffles its changes to the
    state's partitions, and nothing else: the view's rows (a retraction and an insertion per
    touched group) are summed in the task that writes the part, not shuffled to it."""
    client = PersistClient(Location.embedded(tmp_path))
    inputs = Inputs(client)
    inputs.append(1, [("a", "insert", k % 500, k, 0) for k in range(1000)])
    sql = "SELECT k, count(*) AS n, sum(v) AS s FROM a GROUP BY k"
    view = MaterializedView.install(  # no full check: its jobs would count
        spark, client, ViewDefinition("v", INPUTS, sql), background_io=False, check_every_s=None
    )
    try:
        view.catch_up()
        view.catch_up()  # the first batch checks desired against the shard
        touched = 40  # groups, one insertion each, and one more row in the first
        inputs.append(
            1,
            [("a", "insert", k, 5000 + k, 0) for k in range(touched)] + [("a", "insert", 0, 7, 0)],
        )
        with merges_paused(view), JobCounter(spark) as jobs:
            view.catch_up()
        assert jobs.count == 1, jobs.count
        assert jobs.shuffled_records() == touched + 1, jobs.shuffled_records()  # the changes
        assert view.stats.history[-1]["rows"] == 2 * touched, view.stats.history[-1]
        assert_the_query(spark, client, "v", sql, [inputs.upper - 1], inputs.changed)
    finally:
        view.close()


def test_a_view_with_a_scalar_subquery_runs_one_job_per_tick(
    spark: SparkSession, tmp_path: Path
) -> None:
    """W2's max_bid shape: an idle tick runs no job; a delta tick one, the write, which also
    computes the subquery's values and the keys their change moves (lazy checkpoints it
    fills), whichever inputs changed."""
    client = PersistClient(Location.embedded(tmp_path))
    inputs = Inputs(client)
    inputs.append(1, [(t, "insert", k % 500, k, 0) for k in range(1000) for t in ("a", "b")])
    sql = (
        "SELECT a.k, max(b.w) AS hi FROM a JOIN b ON b.k = a.k "
        "WHERE a.v > (SELECT max(k) FROM a) + 490 GROUP BY a.k"
    )
    view = MaterializedView.install(  # no full check: its jobs would count
        spark, client, ViewDefinition("v", INPUTS, sql), background_io=False, check_every_s=None
    )
    assert view.desired.plan.parameters is not None, view.desired.plan.classification
    view.catch_up()
    view.catch_up()  # the first batch checks desired against the shard
    inputs.append(1, [])
    with merges_paused(view), JobCounter(spark) as jobs:
        view.catch_up()
    assert jobs.count == 0
    for ops in (
        [("b", "insert", 3, 9, 0)],  # a bid: its auction is touched
        [("a", "insert", 507, 9, 0)],  # max(k) moves: auctions close, none of them touched
        [("a", "insert", 2, 990, 0), ("b", "insert", 2, 5, 0)],
    ):
        inputs.append(1, ops)
        with merges_paused(view), JobCounter(spark) as jobs:
            view.catch_up()
        assert jobs.count == 1, (ops, jobs.count)
    assert_the_query(spark, client, "v", sql, [inputs.upper - 1])  # (the inputs compact)
    view.close()


@pytest.mark.parametrize(
    ("sql", "arrangements"),
    [
        ("SELECT a.k, a.v, b.w FROM a JOIN b ON a.k = b.k", 2),
        ("SELECT a.k, a.v, b.w FROM a LEFT JOIN b ON a.k = b.k", 2),
        (
            "SELECT x.k, y.w, z.w AS w2 FROM a AS x JOIN b AS y ON x.k = y.k "
            "JOIN b AS z ON z.k = x.v",
            3,  # a by k, a by v (from z's delta), b by k
        ),
    ],
    ids=["join", "left_join", "three_way_join"],
)
def test_a_view_reads_every_layer_of_its_arranged_inputs(
    spark: SparkSession, tmp_path: Path, sql: str, arrangements: int
) -> None:
    """With merges paused each tick adds a layer to each changed input's arrangement (by join
    key, one per key an input is joined on; for the outer join, a grouped plan, by key); the
    view must stay the query at every time while they pile up, and after they merge."""
    client = PersistClient(Location.embedded(tmp_path))
    inputs = Inputs(client)
    holds = [client.open_leased_reader(s) for s in INPUTS.values()]  # the reference reads back
    view = install(spark, client, sql)
    holds.append(client.open_leased_reader("v"))
    as_of = view.sink.as_of
    inputs.append(1, [("a", "insert", k % 3, k, 0) for k in range(5)] + [("b", "insert", 1, 7, 0)])
    view.catch_up()
    assert len(view.desired.arrangements()) == arrangements, view.desired.plan
    ticks = [
        [("a", "insert", 1, 8, 0), ("b", "insert", 0, 5, 0)],
        [("a", "retract", 1, 0, 0), ("b", "insert", 1, 9, 0), ("a", "insert", 2, 2, 1)],
        [("b", "retract", 0, 0, 0), ("a", "insert", 0, 4, 0), ("b", "insert", 2, 3, 1)],
        [("a", "retract", 2, 1, 0), ("b", "retract", 1, 2, 0)],
    ]
    with merges_paused(view):
        for ops in ticks:
            inputs.append(2, ops)
            view.catch_up()
        assert all(len(rows.layers) == 1 + len(ticks) for rows in view.desired.arrangements())
    inputs.append(1, [("a", "insert", 1, 6, 0), ("b", "insert", 1, 1, 0)])
    view.catch_up()
    for rows in view.desired.arrangements():
        rows.wait_for_merges()
    # Geometric merges (a layer merges with a newer one at least half its size): some ran.
    layers = sum(len(rows.layers) for rows in view.desired.arrangements())
    assert layers < arrangements * (2 + len(ticks)), layers
    inputs.append(1, [("a", "retract", 0, 0, 0), ("b", "insert", 0, 2, 0)])
    view.catch_up()
    assert view.stats.failures == 0
    reference = SparkViewDesired(spark, client, ViewDefinition("ref", INPUTS, sql))
    names = list(reference.data_schema().names)
    reader = holds[-1]
    for t in range(max(as_of, 0), inputs.upper):
        want = normalized(from_scratch(reference, t), names)
        assert want, t  # the join is not empty: a missed layer would show
        assert normalized(reader.snapshot(t).to_pylist(), names) == want, t
    for hold in holds:
        hold.expire()
    view.close()


@pytest.mark.parametrize(
    ("sql", "joins"),
    [
        (
            "SELECT x.k, y.w, z.w AS w2 FROM a AS x JOIN b AS y ON x.k = y.k "
            "JOIN b AS z ON z.k = x.v AND z.w <> y.w",
            4,
        ),
        # Aliases named like the merged step's own columns (__term, __p0): no merge.
        (
            "SELECT term.k, p0.w, z.w AS w2 FROM a AS term JOIN b AS p0 ON term.k = p0.k "
            "JOIN b AS z ON z.k = term.v AND z.w <> p0.w",
            6,
        ),
    ],
    ids=["merged", "names_collide"],
)
def test_the_terms_of_a_three_way_join_take_their_shared_last_step_once(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sql: str, joins: int
) -> None:
    """Every term of this join ends by reading b arranged by k (as z from x's and y's deltas,
    as of the tick's end; as y from z's delta, as of its start): one hash join for the three,
    whose build side is their rows so far, so b's layers stream through it once per tick
    (4 joins in the tick's plan, not 6). The view stays the query at every time."""
    deltas: list[Any] = []
    delta = SparkDelta.delta

    def kept(self: SparkDelta, lower: int, upper: int) -> Any:
        out = delta(self, lower, upper)
        deltas.append(out)
        return out

    monkeypatch.setattr(SparkDelta, "delta", kept)
    client = PersistClient(Location.embedded(tmp_path))
    inputs = Inputs(client)
    holds = [client.open_leased_reader(s) for s in INPUTS.values()]  # the reference reads back
    inputs.append(1, [("a", "insert", k % 3, k % 4, 0) for k in range(6)])
    inputs.append(1, [("b", "insert", k % 4, k, 0) for k in range(5)])
    view = install(spark, client, sql)
    holds.append(client.open_leased_reader("v"))
    view.catch_up()
    ticks = [
        [("a", "insert", 1, 2, 0), ("b", "insert", 2, 6, 0), ("b", "insert", 1, 3, 1)],
        [("a", "retract", 1, 0, 0), ("b", "retract", 0, 0, 0), ("a", "insert", 3, 1, 1)],
        [("b", "insert", 3, 7, 0), ("a", "insert", 0, 3, 0), ("b", "retract", 2, 1, 1)],
    ]
    for ops in ticks:
        inputs.append(2, ops)
        deltas.clear()
        view.catch_up()
        [tick] = [d for d in deltas if d is not None]
        plan = str(tick._jdf.queryExecution().executedPlan().toString())
        assert plan.count("ShuffledHashJoin") == joins, plan
    assert view.stats.failures == 0
    reference = SparkViewDesired(spark, client, ViewDefinition("ref", INPUTS, sql))
    names = list(reference.data_schema().names)
    for t in range(max(view.sink.as_of, 0), inputs.upper):
        want = normalized(from_scratch(reference, t), names)
        assert normalized(holds[-1].snapshot(t).to_pylist(), names) == want, t
    assert want, "the join is not empty at the end"
    for hold in holds:
        hold.expire()
    reference.close()
    view.close()


def test_join_keys_of_different_types_are_matched_as_the_query_compares_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A string key equal to a number (Spark casts the string: '01' = 1): the touched keys
    of one side cast to the other side's type ('1') missed the rows they join with. Such
    keys take the full path."""
    client = PersistClient(Location.embedded(tmp_path))
    inputs = Inputs(client)
    sql = "SELECT a.k, b.w FROM a LEFT JOIN b ON concat('0', CAST(a.v AS STRING)) = b.k"
    inputs.append(1, [("a", "insert", 5, 1, 0)])
    view = install(spark, client, sql)
    view.catch_up()
    inputs.append(1, [("b", "insert", 1, 7, 0)])  # joins a's row: '01' = 1
    view.catch_up()
    assert not view.desired.incremental, view.desired.plan.classification
    assert "types" in view.desired.plan.classification.reason
    reference = SparkViewDesired(spark, client, ViewDefinition("ref", INPUTS, sql))
    names = list(reference.data_schema().names)
    reader = client.open_leased_reader("v")
    last = inputs.upper - 1
    assert (
        normalized(reader.snapshot(last).to_pylist(), names)
        == normalized(from_scratch(reference, last), names)
        == Counter({(5, 7): 1})
    )
    reader.expire()
    reference.close()
    view.close()


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        ("SELECT k, collect_list(v) AS l FROM a GROUP BY k", "CollectList"),
        ("SELECT k, first(v) AS f FROM a GROUP BY k", "First"),
        ("SELECT k, sum(v / 2) AS s FROM a GROUP BY k", "Sum of floating point"),
        ("SELECT k, stddev(v) AS s FROM a GROUP BY k", "StddevSamp"),
        ("SELECT k, v, row_number() OVER (PARTITION BY k ORDER BY v) AS r FROM a", "RowNumber"),
        ("SELECT k, v, lag(v) OVER (PARTITION BY k ORDER BY v) AS p FROM a", "Lag"),
        (
            "SELECT k, v, sum(v) OVER (PARTITION BY k ORDER BY v "
            "ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s FROM a",
            "ROWS window frame",
        ),
        (
            "SELECT a.k, b.w FROM a LEFT JOIN b ON a.k = b.k "
            "WHERE a.v > (SELECT avg(w / 3) FROM b)",
            "Average of floating point",
        ),
        ("SELECT k, avg(v) AS m FROM a GROUP BY k", "Average of a type wider than INT"),
        ("SELECT k, avg(v + 1) AS m FROM a GROUP BY k", "Average of a type wider than INT"),
    ],
)
def test_a_query_whose_rows_depend_on_the_order_of_its_input_takes_the_full_path(
    spark: SparkSession, tmp_path: Path, sql: str, said: str
) -> None:
    """A touched key is recomputed at lower - 1 and those rows are retracted: for a query
    that may give other rows for the same input in another order (a list's order, a float
    sum's rounding, which of two tied rows is first), that retracts rows never written."""
    client = PersistClient(Location.embedded(tmp_path))
    Inputs(client).append(1, [("a", "insert", 1, 2, 0)])
    desired = SparkViewDesired(spark, client, ViewDefinition("v", INPUTS, sql))
    assert not desired.incremental and said in desired.plan.classification.reason, (
        desired.plan.classification
    )
    desired.close()


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        ("SELECT k, log10(v) AS l FROM a", "Log10 became"),
        ("SELECT floor(log10(v)) AS m, count(*) AS n FROM a GROUP BY floor(log10(v))", "Log10"),
        ("SELECT k, to_char(v, '000') AS c FROM a", "ToCharacter became"),
    ],
)
def test_a_query_sqlglot_writes_with_other_expressions_takes_the_full_path(
    spark: SparkSession, tmp_path: Path, sql: str, said: str
) -> None:
    """The incremental terms are sqlglot's Spark SQL: ``log10(x)`` written ``LOG(10, x)``
    rounds 1000 to 2.9999999999999996, so deltas retracted rows the snapshot never wrote
    (the GROUP BY put the second 1000 in group 2); ``to_char`` lost its format."""
    client = PersistClient(Location.embedded(tmp_path))
    inputs = Inputs(client)
    inputs.append(1, [("a", "insert", 1, 1000, 0)])
    view = install(spark, client, sql)
    view.catch_up()
    inputs.append(1, [("a", "insert", 2, 1000, 0)])
    view.catch_up()
    assert not view.desired.incremental, view.desired.plan.classification
    assert said in view.desired.plan.classification.reason, view.desired.plan.classification
    reference = SparkViewDesired(spark, client, ViewDefinition("ref", INPUTS, sql))
    names = list(reference.data_schema().names)
    reader = client.open_leased_reader("v")
    last = inputs.upper - 1
    got = normalized(reader.snapshot(last).to_pylist(), names)
    assert got == normalized(from_scratch(reference, last), names), got
    reader.expire()
    reference.close()
    view.close()


def test_tied_rows_numbered_in_another_order_leave_no_negative_row(
    spark: SparkSession, tmp_path: Path
) -> None:
    """row_number() over rows that all tie: recomputed, a partition's rows may be numbered
    in another order than written, and retracting those left rows of multiplicity -1 (at
    a run before this took the full path, from its second tick on)."""
    client = PersistClient(Location.embedded(tmp_path))
    inputs = Inputs(client)
    sql = "SELECT k, v, row_number() OVER (PARTITION BY k ORDER BY k) AS r FROM a"
    inputs.append(1, [("a", "insert", k % 2, k, 0) for k in range(8)])
    view = install(spark, client, sql)
    view.catch_up()
    reader = client.open_leased_reader("v")
    counts = {0: 4, 1: 4}
    for i in range(4):
        inputs.append(1, [("a", "insert", i % 2, 100 + i, 0)])
        view.catch_up()
        rows: Counter[tuple[Any, ...]] = Counter()
        for r in reader.snapshot(inputs.upper - 1).to_pylist():
            rows[(r["k"], r["v"], r["r"])] += r["_diff"]
        assert all(m in (0, 1) for m in rows.values()), rows
        counts[i % 2] += 1
        numbers = sorted((k, n) for (k, _, n), m in rows.items() if m)
        assert numbers == [(k, n) for k in (0, 1) for n in range(1, counts[k] + 1)], numbers
    reader.expire()
    view.close()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT k, count(CAST(v AS DOUBLE)) AS n, sum(v) AS s, avg(CAST(v AS INT)) AS m "
        "FROM a GROUP BY k",
        "SELECT k, count(DISTINCT v) AS d, median(v) AS m FROM a GROUP BY k",
        "SELECT k, max(CAST(v AS DOUBLE)) AS m, min(v / 2) AS n FROM a GROUP BY k",
        "SELECT k, v, rank() OVER (PARTITION BY k ORDER BY v) AS r, "
        "sum(v) OVER (PARTITION BY k ORDER BY v) AS s FROM a",
    ],
)
def test_a_query_whose_rows_do_not_depend_on_the_order_stays_incremental(
    spark: SparkSession, tmp_path: Path, sql: str
) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    Inputs(client).append(1, [("a", "insert", 1, 2, 0)])
    desired = SparkViewDesired(spark, client, ViewDefinition("v", INPUTS, sql))
    assert desired.plan.classification.path == "grouped", desired.plan.classification
    desired.close()


def test_distinct_over_a_generator_takes_the_full_path(spark: SparkSession, tmp_path: Path) -> None:
    """``DISTINCT explode(arr)`` was keyed by the generator, which Spark refuses inside the
    key's struct (an analysis error, so a fault): every tick failed and the view never
    advanced."""
    client = PersistClient(Location.embedded(tmp_path))
    schema = pa.schema([("k", pa.int64()), ("arr", pa.list_(pa.int64()))])
    writer = client.open_writer("inp", schema)
    writer.append([((1, [1, 2]), 0, 1)], 0, 1)
    definition = ViewDefinition("v", {"a": "inp"}, "SELECT DISTINCT explode(arr) AS x FROM a")
    view = MaterializedView.install(spark, client, definition, background_io=False)
    assert not view.desired.incremental and "generator" in view.desired.plan.classification.reason
    view.catch_up()
    writer.append([((2, [2, 3]), 1, 1)], 1, 2)
    view.catch_up()
    assert view.sink.stats.failures == 0, view.sink.last_error
    reader = client.open_leased_reader("v")
    assert sorted((r["x"], r["_diff"]) for r in reader.snapshot(1).to_pylist()) == [
        (1, 1),
        (2, 1),
        (3, 1),
    ]
    reader.expire()
    view.close()


def _checked_filter(
    spark: SparkSession, tmp_path: Path
) -> tuple[PersistClient, Inputs, str, MaterializedView]:
    """A linear view over four rows of ``a``, with a full check after every batch (the
    client, the inputs, the view's SQL and the view; synchronous I/O)."""
    client = PersistClient(Location.embedded(tmp_path))
    inputs = Inputs(client)
    inputs.append(1, [("a", "insert", k, k, 0) for k in range(4)])
    sql = "SELECT k, v FROM a WHERE v >= 0"
    view = MaterializedView.install(
        spark, client, ViewDefinition("v", INPUTS, sql), background_io=False, check_every_s=0.0
    )
    return client, inputs, sql, view


def test_the_full_check_heals_a_wrong_delta_off_the_tick_path(
    spark: SparkSession, tmp_path: Path
) -> None:
    client, inputs, sql, view = _checked_filter(spark, tmp_path)
    view.catch_up()
    # A delta that loses its rows (a bug): the shard now differs from desired.
    desired = view.desired
    real = desired.delta
    desired.delta = lambda lo, hi: None  # type: ignore[method-assign]
    inputs.append(1, [("a", "insert", 7, 7, 0)])
    view.catch_up()
    desired.delta = real  # type: ignore[method-assign]
    reference = SparkViewDesired(spark, client, ViewDefinition("ref", INPUTS, sql))
    names = list(reference.data_schema().names)
    reader = client.open_leased_reader("v")
    last = inputs.upper - 1
    assert normalized(reader.snapshot(last).to_pylist(), names) != normalized(
        from_scratch(reference, last), names
    )
    sink = view.sink
    for _ in range(3):  # a check starts on a tick; its heal joins the next delta batch
        if sink._check is not None:
            sink._check[0].result()
        inputs.append(1, [])
        view.catch_up()
    assert sink.stats.heals == 1 and sink.stats.check_failures == 0, sink.stats
    last = inputs.upper - 1
    assert normalized(reader.snapshot(last).to_pylist(), names) == normalized(
        from_scratch(reference, last), names
    )
    reader.expire()
    view.close()


def test_a_check_that_finds_the_state_wrong_rebuilds_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A GROUP BY's per-group state that drifted from its input (a bug; here every group's
    state is lost under a running view) makes each later delta of a touched group wrong
    from the state on. The check's difference at its time, added to a later delta, did
    not undo that (the deltas in between had already moved the shard on from the wrong
    state), nor did it mend the state. A check that finds a difference now ends the chain:
    the next batch is desired against the shard, from snapshots, and the state is rebuilt
    from the inputs."""
    client = PersistClient(Location.embedded(tmp_path))
    inputs = Inputs(client)
    inputs.append(1, [("a", "insert", k % 2, k, 0) for k in range(6)])
    sql = "SELECT k, sum(v) AS s, count(*) AS n FROM a GROUP BY k"
    view = MaterializedView.install(
        spark, client, ViewDefinition("v", INPUTS, sql), background_io=False, check_every_s=0.0
    )
    assert view.desired.plan.aggregate is not None, view.desired.plan.classification
    view.catch_up()
    delta = view.desired._delta
    assert delta is not None and delta._aggregates is not None
    state = delta._aggregates.state
    assert state.layers and state.time is not None
    state.reset([], state.time)  # the drift: the state holds no group any more
    sink = view.sink
    for i in range(4):  # group 0 changes at every tick
        if sink._check is not None:
            sink._check[0].result()
        inputs.append(1, [("a", "insert", 0, 10 + i, 0)])
        view.catch_up()
    assert sink.stats.heals >= 1 and sink.stats.check_failures == 0, sink.stats
    reference = SparkViewDesired(spark, client, ViewDefinition("ref", INPUTS, sql))
    names = list(reference.data_schema().names)
    reader = client.open_leased_reader("v")
    last = inputs.upper - 1
    assert normalized(reader.snapshot(last).to_pylist(), names) == normalized(
        from_scratch(reference, last), names
    )
    reader.expire()
    reference.close()
    view.close()


def test_a_full_check_slower_than_the_ticks_keeps_its_time_readable(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A full check holds its time readable while it runs (its own leases): ticks that move
    the sink's holds on (here at every append) do not compact the view shard or the inputs
    past it, so a check slower than the ticks completes (it failed every time, "not
    readable", in a fast-ticking benchmark). The check is held back by an event, not by a
    timing."""
    client, inputs, _sql, view = _checked_filter(spark, tmp_path)
    sink = view.sink
    sink.hold_interval_s = 0.0  # the holds move at every append
    view.catch_up()
    started, go = threading.Event(), threading.Event()
    real = sink._full_check
    times: list[int] = []

    def held_back(t: int, *reads: Any) -> object:
        times.append(t)
        started.set()
        assert go.wait(300), "the test never let the check go"
        return real(t, *reads)

    sink._full_check = held_back  # type: ignore[method-assign]
    inputs.append(1, [("a", "insert", 10, 10, 0)])
    view.catch_up()  # the check starts
    assert sink._check is not None and started.wait(300)
    [checked] = times
    for k in range(11, 14):  # ticks while the check waits: the holds stay at its time
        inputs.append(1, [("a", "insert", k, k, 0)])
        view.catch_up()
    for shard in ("v", *INPUTS.values()):
        assert client.state(shard).since.less_equal(checked), shard
    go.set()
    sink._check[0].result()
    inputs.append(1, [])
    view.catch_up()  # takes the check's outcome
    assert sink.stats.checks == 1 and sink.stats.check_failures == 0, sink.stats
    assert sink.stats.heals == 0, sink.stats
    for _ in range(2):  # the holds move on once it is done
        inputs.append(1, [])
        view.catch_up()
    assert not client.state("v").since.less_equal(checked)
    view.close()


def _batches_to_merge(view: MaterializedView, inputs: Inputs) -> None:
    """Four batches of ``a`` for compaction to merge, with no full check left in flight."""
    sink = view.sink
    sink.check_every_s = None
    for k in range(4, 8):
        inputs.append(1, [("a", "insert", k, k, 0)])
        view.catch_up()
    if sink._check is not None:  # one started before: its outcome is taken at a tick
        sink._check[0].exception()
        inputs.append(1, [])
        view.catch_up()
    assert sink._check is None and sink.stats.check_failures == 0, sink.stats


def _ticks_compaction_and_gc(client: PersistClient, inputs: Inputs, view: MaterializedView) -> int:
    """Four ticks of ``view`` that replace rows of ``a``, each followed by compaction and GC
    of the view shard and the inputs; the merges compaction made."""
    merges = 0
    for k in range(8, 12):
        inputs.append(1, [("a", "retract", k - 8, k - 8, 0), ("a", "insert", k, k, 0)])
        view.catch_up()
        for shard in ("v", *INPUTS.values()):
            merges += client.compact(shard)
            client.gc(shard)
    return merges


def _start_a_held_check(view: MaterializedView, inputs: Inputs) -> threading.Event:
    """Start one full check of ``view`` and hold it between its planning and its job until
    the returned event is set (an event, not a timing); no other check starts."""
    sink = view.sink
    planned, go = threading.Event(), threading.Event()
    real = sink.engine.materialize

    def held_back(collection: Any) -> Any:
        if threading.current_thread().name.startswith("mv-sink-check"):
            planned.set()
            assert go.wait(300), "the test never let the check go"
        return real(collection)

    sink.engine.materialize = held_back  # type: ignore[method-assign]
    sink.check_every_s = 0.0
    for _ in range(3):  # a check starts at a tick that continues the chain of deltas
        inputs.append(1, [])
        view.catch_up()
        if sink._check is not None:
            assert planned.wait(300), "the check never planned its reads"
            break
    assert planned.is_set()
    sink.check_every_s = None  # no other check
    return go


def test_a_full_check_reads_parts_that_compaction_and_gc_would_collect_under_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The check plans its reads, then ticks go on while its job has not read them yet:
    every tick's read moves the view's input leases on, compaction merges the batches the
    check listed and GC collects what no reader holds. The check's own leases keep its
    parts; it failed ("missing part") when it read through the ticks' handles. Held back
    by an event between its planning and its job, not by a timing."""
    client, inputs, _sql, view = _checked_filter(spark, tmp_path)
    sink = view.sink
    sink.hold_interval_s = 0.0  # the holds move at every append
    _batches_to_merge(view, inputs)
    checks = sink.stats.checks
    go = _start_a_held_check(view, inputs)
    assert _ticks_compaction_and_gc(client, inputs, view) > 0  # while the check's job waits
    go.set()
    assert sink._check is not None
    failure = sink._check[0].exception()  # waits for the check's job
    inputs.append(1, [])
    view.catch_up()  # takes the check's outcome
    assert failure is None and sink.stats.check_failures == 0, failure
    assert sink.stats.checks == checks + 1 and sink.stats.heals == 0, sink.stats
    view.close()


def test_a_full_check_reads_its_time_while_another_replica_moves_the_shared_holds_on(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Replicas of one generation share the view's durable holds (the deploy since on the
    view shard, ``view.<name>`` on the inputs). A replica ticking on moves them past the
    other's check, and compaction and GC then collect what that check reads, unless the
    check holds its time with leases of its own."""
    client, inputs, sql, view = _checked_filter(spark, tmp_path)
    _batches_to_merge(view, inputs)
    go = _start_a_held_check(view, inputs)
    checked_at = inputs.upper - 1  # the check's time: the sink's upper - 1 when it started
    other = MaterializedView.install(
        spark, client, ViewDefinition("v", INPUTS, sql), background_io=False, check_every_s=None
    )
    other.sink.hold_interval_s = 0.0  # its holds move at every append
    assert _ticks_compaction_and_gc(client, inputs, other) > 0  # this one waits for its check
    shared = [client.state("v").critical_readers[DEPLOY_READER]]
    shared += [client.state(s).critical_readers[view_hold_id("v")] for s in INPUTS.values()]
    assert not any(hold.since.less_equal(checked_at) for hold in shared), shared  # moved on
    assert view.sink._check is not None
    checked = view.sink._check
    go.set()
    failure = checked[0].exception()  # waits for the check's job
    assert failure is None, failure
    inputs.append(1, [])
    view.catch_up()
    assert view.sink.stats.check_failures == 0, view.sink.stats
    other.close()
    view.close()


def test_a_state_sum_that_overflows_is_an_err_row_of_its_group_until_it_fits_again(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A group whose BIGINT sum passes 2**63 - 1 (ANSI) is an err row of that group, with its
    multiplicity, at the times its sum does not fit: the other groups keep their rows, the
    view stays on its deltas, and a restart while it overflows (a rebuild of the state)
    writes the same. The full path has the same err row (the rewritten query's try_sum). It
    was one coarse err row for the whole view, the batch going time by time."""
    client = PersistClient(Location.embedded(tmp_path))
    inputs = Inputs(client)
    sql = f"SELECT k, count(*) AS n, sum(v * {2**62}) AS s FROM a GROUP BY k"  # 2 rows of 1
    holds = [client.open_leased_reader(s) for s in INPUTS.values()]  # every time stays readable

    def install_v() -> MaterializedView:
        definition = ViewDefinition("v", INPUTS, sql)
        return MaterializedView.install(
            spark, client, definition, background_io=False, check_every_s=None
        )

    inputs.append(1, [("a", "insert", 1, 1, 0), ("a", "insert", 2, 0, 0)])
    view = install_v()
    holds.append(client.open_leased_reader("v"))
    try:
        assert view.desired.plan.aggregate is not None, view.desired.plan
        view.catch_up()
        inputs.append(1, [("a", "insert", 1, 1, 0)])  # group 1: 2 * 2**62 overflows
        view.catch_up()
        inputs.append(1, [("a", "insert", 2, 0, 0)])  # group 2 changes; group 1 still overflows
        view.catch_up()
        failures = view.stats.failures
        view.close()
        view = install_v()  # rebuilt at a time group 1 overflows
        inputs.append(1, [("a", "insert", 3, 1, 0), ("a", "insert", 1, 0, 0)])
        view.catch_up()
        inputs.append(1, [("a", "retract", 1, 1, 0)])  # takes back a (1, 1): fits again
        view.catch_up()
        inputs.append(1, [("a", "insert", 2, 0, 0)])
        view.catch_up()
        assert failures + view.stats.failures == 0, view.stats
        assert view.stats.query_errors == 0, view.stats  # no batch went time by time
        assert_the_query(
            spark, client, "v", sql, range(view.sink.as_of, inputs.upper), inputs.changed
        )
        reader = client.open_leased_reader("v")
        names = ["k", "n", "s"]
        overflow = ("err", f"arithmetic overflow in SUM(v * {2**62})")
        for t, n2 in ((1, 1), (2, 2), (3, 2)):
            assert normalized(reader.snapshot(t).to_pylist(), names) == Counter(
                {overflow: 1, (2, n2, 0): 1, **({(3, 1, 2**62): 1} if t == 3 else {})}
            ), t
        assert normalized(reader.snapshot(4).to_pylist(), names) == Counter(
            {(1, 2, 2**62): 1, (2, 2, 0): 1, (3, 1, 2**62): 1}
        )
        reader.expire()
    finally:
        view.close()
        for hold in holds:
            hold.expire()


@pytest.mark.parametrize(
    ("sql", "column", "where"),
    [
        ("SELECT k, __n FROM a", "__n", "input 'a'"),  # the full path's multiples of a row
        ("SELECT k, max(__n) AS m FROM a GROUP BY k", "__n", "input 'a'"),
        ("SELECT k, CAST(v AS STRING) AS __err FROM a", "__err", "its output"),  # row errors
        ("SELECT k, CAST(max(v) AS STRING) AS __err FROM a GROUP BY k", "__err", "its output"),
        ("SELECT DISTINCT k AS __t, v FROM a", "__t", "its output"),  # the evaluation time
    ],
)
def test_a_column_named_like_the_views_own_is_refused_at_install(
    spark: SparkSession, tmp_path: Path, sql: str, column: str, where: str
) -> None:
    """Columns starting with ``__`` are the view's own: an input's ``__n`` was replaced by
    the multiple of its row (wrong rows), an output ``__err`` made every row an err row, an
    output ``__t`` made the keyed query ambiguous (every tick failed: the view stalled)."""
    client = PersistClient(Location.embedded(tmp_path))
    other = "__n" if "__n" in sql else "v"
    writer = client.open_writer("in_a", pa.schema([("k", pa.int64()), (other, pa.int64())]))
    writer.append([((1, 7), 0, 2), ((2, 8), 0, 1)], 0, 1)
    definition = ViewDefinition("v", {"a": "in_a"}, sql)
    with pytest.raises(InvalidUsage) as refused:
        MaterializedView.install(spark, client, definition, background_io=False)
    assert f"column {column!r} of {where}" in str(refused.value), refused.value
    assert "'v'" in str(refused.value) and "v" not in client.list_shards()


def test_an_avg_of_bigint_past_2_53_equals_the_query_at_every_time(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Spark sums avg's argument in double: 2**53 + 1 and 1 sum to 2**53 there, not to the
    state's exact 2**53 + 2. The state retracted an average never written (a row of
    multiplicity -1 beside the one written, for good); Spark's double sum also rounds in
    the order of its rows, so such an avg takes the full path."""
    client = PersistClient(Location.embedded(tmp_path))
    inputs = Inputs(client)
    sql = "SELECT k, avg(v) AS m, count(*) AS n FROM a GROUP BY k"
    holds = [client.open_leased_reader(s) for s in INPUTS.values()]  # every time stays readable
    inputs.append(1, [("a", "insert", 1, 2**53 + 1, 0), ("a", "insert", 1, 1, 0)])
    view = install(spark, client, sql)
    holds.append(client.open_leased_reader("v"))
    try:
        view.catch_up()
        inputs.append(1, [("a", "insert", 1, 3, 0)])
        view.catch_up()
        assert view.stats.failures == 0, view.sink.last_error
        assert_the_query(
            spark, client, "v", sql, range(view.sink.as_of, inputs.upper), inputs.changed
        )
    finally:
        view.close()
        for hold in holds:
            hold.expire()


def test_a_negative_multiplicity_is_an_err_row_of_a_grouped_view_over_arranged_inputs(
    spark: SparkSession, tmp_path: Path
) -> None:
    """An input row retracted more often than inserted: at those times the view has the err
    row the full path has (the counted rows read once serve the query and the error)."""
    client = PersistClient(Location.embedded(tmp_path))
    inputs = Inputs(client)
    sql = "SELECT k, max(v) AS hi FROM a GROUP BY k"
    view, holds, as_of = retracted_then_inserted(spark, client, inputs, sql, [(1, 9)])
    try:
        assert any(isinstance(a, KeyedRows) for a in view.desired.arrangements())
        assert view.stats.failures == 0
        reference = SparkViewDesired(spark, client, ViewDefinition("ref", INPUTS, sql))
        names = list(reference.data_schema().names)
        reader = holds[-1]
        errs = []
        for t in range(max(as_of, 0), inputs.upper):
            want = normalized(from_scratch(reference, t), names)
            assert normalized(reader.snapshot(t).to_pylist(), names) == want, t
            errs.append(sum(n for row, n in want.items() if row[0] == "err"))
        assert errs[-2:] == [1, 0], errs  # the err row at the negative time, and gone after
    finally:
        for hold in holds:
            hold.expire()
        view.close()


def test_a_group_state_of_negative_row_count_is_an_err_row_of_null_data(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A group kept by count/sum state alone whose row count goes negative (a row retracted
    that was never inserted, in a group of no other row): at that time the view has one err
    row, its data null, naming the group; once inserted, the group is gone, and the view
    is the query again. (The full path names the row instead: the state cannot tell it.)"""
    client = PersistClient(Location.embedded(tmp_path))
    inputs = Inputs(client)
    sql = "SELECT k, count(*) AS n, sum(v) AS s FROM a GROUP BY k HAVING sum(v) > 0"
    view, holds, _ = retracted_then_inserted(spark, client, inputs, sql, [(5, 9)], [(1, 3)])
    try:
        assert "per-group aggregate state" in view.desired.plan.classification.reason
        assert view.stats.failures == 0 and view.stats.deltas >= 2, view.stats
        negative_at = inputs.upper - 2
        rows = view_rows_at(holds[-1], negative_at)
        errs = [r for r in rows if r["_err"] is not None]
        assert [(r["k"], r["n"], r["s"], r["_diff"]) for r in errs] == [(None, None, None, 1)]
        assert "negative multiplicity in the group" in errs[0]["_err"], errs
        assert '{"__g0":5}' in errs[0]["_err"], errs
        reference = SparkViewDesired(spark, client, ViewDefinition("ref", INPUTS, sql))
        names = list(reference.data_schema().names)

        def data(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
            return Counter({k: n for k, n in normalized(rows, names).items() if k[0] != "err"})

        # The other groups, as the query has them (its err row names the row).
        assert data(rows) == data(from_scratch(reference, negative_at))
        last = inputs.upper - 1
        assert normalized(view_rows_at(holds[-1], last), names) == normalized(
            from_scratch(reference, last), names
        )
    finally:
        for hold in holds:
            hold.expire()
        view.close()


def view_rows_at(reader: Any, t: int) -> list[dict[str, Any]]:
    """The view's rows at ``t``, consolidated, as dicts (``_diff`` their multiplicity)."""
    return [r for r in reader.snapshot(t).to_pylist() if r["_diff"] != 0]


def retracted_then_inserted(
    spark: SparkSession,
    client: PersistClient,
    inputs: Inputs,
    sql: str,
    rows: list[tuple[int, int]],
    also: Sequence[tuple[int, int]] = (),
) -> tuple[MaterializedView, list[Any], int]:
    """View ``v`` of ``sql`` (:func:`held_install`) over 2 rows for each of keys 0-2, then
    ``rows`` of ``a`` retracted, never inserted, at one time and inserted at the next (0
    again), with ``also`` inserted at each of those times; a catch-up after each append."""
    view, holds, as_of = held_install(spark, client, sql)
    inputs.append(1, [("a", "insert", k, v, 0) for k in range(3) for v in range(2)])
    view.catch_up()
    for diff in (-1, 1):
        added = [(k, v, 1, 0) for k, v in also]
        append_exactly(inputs, 1, [*((k, v, diff, 0) for k, v in rows), *added])
        view.catch_up()
    return view, holds, as_of


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT CASE WHEN v > 1 THEN 'hi' ELSE 'lo' END AS g, min(k) AS lo FROM a GROUP BY 1",
        "SELECT coalesce(k, 0) AS g, max(v) AS hi FROM a GROUP BY coalesce(k, 0)",
    ],
)
def test_a_group_key_that_is_never_null_recomputes_a_group_whose_extreme_left(
    spark: SparkSession, tmp_path: Path, sql: str
) -> None:
    """The keys of the groups to recompute were cast to the arrangement's key type, whose
    field is NOT NULL for such a key: Spark refused the cast at every tick, and the view
    never moved past the retraction of an extreme."""
    client = PersistClient(Location.embedded(tmp_path))
    inputs = Inputs(client)
    view, holds, as_of = held_install(spark, client, sql)
    try:
        append_exactly(inputs, 1, [(1, 3, 1, 0)])
        append_exactly(inputs, 1, [(1, 3, -1, 0)])
        for _ in range(10):  # each step moves on or fails the same way again: stuck, not slow
            view.step()
            if (client.state("v").upper.time or 0) >= inputs.upper:
                break
        assert view.sink.last_error is None, view.sink.last_error
        assert client.state("v").upper.time == inputs.upper
        assert_the_query(
            spark, client, "v", sql, range(max(as_of, 0), inputs.upper), inputs.changed
        )
    finally:
        view.close()
        for hold in holds:
            hold.expire()
