"""A row the view's query fails on is an err row of that row, on every path (Spark).

A small model (a dict of live input rows) gives what the view must hold at
every time: the query's value for each row that evaluates, and one err row
(with the row's multiplicity and a message naming the operator) for each row
that fails. Retracting the input row retracts its error. The same view is
kept by the incremental path and by the full path (a REFRESH EVERY 1 view
takes the full path), and both must equal the model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.compute import MaterializedView, ViewDefinition
from timeshard.location import Location
from timeshard.persist import PersistClient

pytestmark = pytest.mark.spark

A = pa.schema([("k", pa.int64()), ("v", pa.int64())])
UPDATES = pa.schema([*A, ("_ts", pa.int64()), ("_diff", pa.int64()), ("_err", pa.string())])

#: Each time's updates of input ``a``: (k, v, diff).
HISTORY: list[list[tuple[int, int, int]]] = [
    [(1, 0, 1), (2, 3, 1), (1, 0, 1), (3, 200, 1)],
    [(1, 0, -1), (4, 0, 1)],
    [(1, 0, -1), (3, 200, -1), (2, 3, 1)],
    [(4, 0, -1)],
]


def model(
    rows: Counter[tuple[int, int]], value: Callable[[int, int], Any]
) -> Counter[tuple[Any, ...]]:
    """The view over ``rows``: ``value(k, v)`` is the output row, or an error message."""
    out: Counter[tuple[Any, ...]] = Counter()
    for (k, v), n in rows.items():
        got = value(k, v)
        if got is None:  # filtered out
            continue
        out[("err", got) if isinstance(got, str) else got] += n
    return Counter({r: n for r, n in out.items() if n})


def ratio(k: int, v: int) -> Any:
    return "division by zero in 12 / v" if v == 0 else (k, 12 / v)


def narrowed(k: int, v: int) -> Any:
    if v * 2 > 127:
        return f"cannot cast '{v * 2}' to TINYINT in CAST(v * 2 AS TINYINT)"
    return (k, v * 2)


def guarded(k: int, v: int) -> Any:
    return (k, 0.0 if v == 0 else 12 / v)


def kept_by_where(k: int, v: int) -> Any:
    """WHERE k > 1 AND 12 / v > 1: a row whose division fails is kept, as its error."""
    if k <= 1:
        return None
    if v == 0:
        return "division by zero in 12 / v"
    return (k, v) if 12 / v > 1 else None


def quotient(k: int, v: int) -> Any:
    """``12 DIV v`` (what a typed view of serve makes of ``12 / v``), truncated to zero."""
    return "division by zero in 12 DIV v" if v == 0 else (k, int(12 / v))


def negated(k: int, v: int) -> Any:
    """``(v - 201 - 9223372036854775607) DIV -1``: past BIGINT at v = 0 (its minimum)."""
    x = v - 201 - 9223372036854775607
    if x == -(2**63):
        return "arithmetic overflow in (v - 201 - 9223372036854775607) DIV -1"
    return (k, -x)


CASES = [
    ("SELECT k, 12 / v AS r FROM a", ratio, "linear"),
    ("SELECT k, 12 DIV v AS r FROM a", quotient, "linear"),
    ("SELECT k, (v - 201 - 9223372036854775607) DIV -1 AS r FROM a", negated, "linear"),
    ("SELECT k, CAST(v * 2 AS TINYINT) AS t FROM a", narrowed, "linear"),
    ("SELECT k, CASE WHEN v = 0 THEN 0 ELSE 12 / v END AS r FROM a", guarded, "linear"),
    ("SELECT k, v FROM a WHERE k > 1 AND 12 / v > 1", kept_by_where, "linear"),
]


def collection(rows: list[dict[str, Any]], names: list[str]) -> Counter[tuple[Any, ...]]:
    out: Counter[tuple[Any, ...]] = Counter()
    for r in rows:
        key = ("err", r["_err"]) if r["_err"] is not None else tuple(r[n] for n in names)
        out[key] += r["_diff"]
    return Counter({k: v for k, v in out.items() if v})


@pytest.mark.parametrize(
    ("sql", "value", "path"), CASES, ids=lambda c: getattr(c, "__name__", str(c))[:40]
)
def test_a_failing_row_is_an_err_row_of_that_row(
    spark: SparkSession, tmp_path: Path, sql: str, value: Callable[[int, int], Any], path: str
) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    writer = client.open_writer("in_a", A)
    hold = client.open_leased_reader("in_a")
    views = {
        "inc": ViewDefinition("inc", {"a": "in_a"}, sql),
        "full": ViewDefinition("full", {"a": "in_a"}, sql, refresh_every_ms=1),
    }
    installed = {
        name: MaterializedView.install(spark, client, d, as_of=0, background_io=False)
        for name, d in views.items()
    }
    reads = [client.open_leased_reader(name) for name in views]
    assert installed["inc"].desired.plan.classification.path == path
    assert installed["full"].desired.plan.classification.path == "full"
    assert all(v.desired.row_errors for v in installed.values())
    live: Counter[tuple[int, int]] = Counter()
    wants = []
    for t, updates in enumerate(HISTORY):
        rows = [{"k": k, "v": v, "_ts": t, "_diff": d, "_err": None} for k, v, d in updates]
        writer.append(pa.Table.from_pylist(rows, schema=UPDATES), t, t + 1)
        for k, v, d in updates:
            live[(k, v)] += d
        wants.append(model(live, value))
        for view in installed.values():
            view.catch_up()
    try:
        for name, view in installed.items():
            assert view.stats.query_errors == 0, name  # no time fell back to one coarse err
            names = list(view.desired.data_schema().names)
            for t, want in enumerate(wants):
                got = collection(client.open_leased_reader(name).snapshot(t).to_pylist(), names)
                assert got == want, (name, t)
    finally:
        for view in installed.values():
            view.close()
        for r in [hold, *reads]:
            r.expire()


def test_without_ansi_mode_a_division_by_zero_is_null_as_in_spark(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Outside ANSI mode Spark's division by zero is null, not an error: no rewrite."""
    client = PersistClient(Location.embedded(tmp_path))
    writer = client.open_writer("in_a", A)
    hold = client.open_leased_reader("in_a")
    rows = [{"k": 1, "v": 0, "_ts": 0, "_diff": 1, "_err": None}]
    writer.append(pa.Table.from_pylist(rows, schema=UPDATES), 0, 1)
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        definition = ViewDefinition("v", {"a": "in_a"}, "SELECT k, 12 / v AS r FROM a")
        view = MaterializedView.install(spark, client, definition, as_of=0, background_io=False)
        assert not view.desired.row_errors
        view.catch_up()
    finally:
        spark.conf.set("spark.sql.ansi.enabled", "true")
    got = client.open_leased_reader("v").snapshot(0).to_pylist()
    assert [(r["k"], r["r"], r["_err"], r["_diff"]) for r in got] == [(1, None, None, 1)]
    view.close()
    hold.expire()


def per_group(rows: Counter[tuple[int, int]]) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for (k, v), n in rows.items():
        groups.setdefault(k, []).extend([v] * n)
    return {k: vs for k, vs in groups.items() if vs}


def mean_over_others(k: int, vs: list[int]) -> Any:
    if len(vs) == 1:
        return "division by zero in SUM(v) / (COUNT(*) - 1)"
    return (k, sum(vs) / (len(vs) - 1))


def highest_kept(k: int, vs: list[int]) -> Any:
    if max(vs) == 0:
        return "division by zero in 12 / MAX(v)"
    return (k, max(vs)) if 12 / max(vs) > 1 else None


GROUPED = [
    ("SELECT k, sum(v) / (count(*) - 1) AS q FROM a GROUP BY k", mean_over_others, "state"),
    ("SELECT k, max(v) AS hi FROM a GROUP BY k HAVING 12 / max(v) > 1", highest_kept, "state"),
    (  # count(DISTINCT) keeps no state: the touched groups are recomputed
        "SELECT k, max(v) AS hi FROM a GROUP BY k HAVING 12 / max(v) > count(DISTINCT k)",
        highest_kept,
        "grouped",
    ),
]


@pytest.mark.parametrize(
    ("sql", "value", "path"), GROUPED, ids=["state", "having", "having_touched"]
)
def test_a_failing_group_is_an_err_row_of_that_group(
    spark: SparkSession,
    tmp_path: Path,
    sql: str,
    value: Callable[[int, list[int]], Any],
    path: str,
) -> None:
    """In a query that aggregates, an expression over a group's aggregates (the select list,
    HAVING) that fails is an err row of that group's output row."""

    def groups_model(rows: Counter[tuple[int, int]]) -> Counter[tuple[Any, ...]]:
        out: Counter[tuple[Any, ...]] = Counter()
        for k, vs in per_group(rows).items():
            got = value(k, vs)
            if got is not None:
                out[("err", got) if isinstance(got, str) else got] += 1
        return out

    client = PersistClient(Location.embedded(tmp_path))
    writer = client.open_writer("in_a", A)
    hold = client.open_leased_reader("in_a")
    definition = ViewDefinition("g", {"a": "in_a"}, sql)
    view = MaterializedView.install(spark, client, definition, as_of=0, background_io=False)
    read = client.open_leased_reader("g")
    plan = view.desired.plan
    assert plan.classification.path == "grouped"
    assert (plan.aggregate is not None) == (path == "state"), plan.classification.reason
    live: Counter[tuple[int, int]] = Counter()
    wants = []
    try:
        for t, updates in enumerate(HISTORY):
            rows = [{"k": k, "v": v, "_ts": t, "_diff": d, "_err": None} for k, v, d in updates]
            writer.append(pa.Table.from_pylist(rows, schema=UPDATES), t, t + 1)
            for k, v, d in updates:
                live[(k, v)] += d
            wants.append(groups_model(live))
            view.catch_up()
        assert view.stats.query_errors == 0
        names = list(view.desired.data_schema().names)
        for t, want in enumerate(wants):
            assert collection(read.snapshot(t).to_pylist(), names) == want, t
    finally:
        view.close()
        read.expire()
        hold.expire()
