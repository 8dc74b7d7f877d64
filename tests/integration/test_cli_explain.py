"""``timeshard explain VIEW`` classifies a cataloged view as the running view does, and
``timeshard status`` shows the path ``MaterializedView.install`` recorded."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from timeshard.cli.main import app, main
from timeshard.compute import MaterializedView, ViewDefinition
from timeshard.location import Location
from timeshard.persist import PersistClient

pytestmark = pytest.mark.spark
ORDERS = pa.schema([("k", pa.string()), ("v", pa.int64())])
CUSTOMERS = pa.schema([("k", pa.string()), ("name", pa.string())])
INPUTS = {"o": "orders", "c": "customers"}
VIEWS = {
    "v_join": "SELECT o.k, o.v, c.name FROM o JOIN c ON o.k = c.k WHERE o.v > 0",
    "v_grouped": "SELECT k, count(*) AS n, count(DISTINCT v) AS d FROM o GROUP BY k",
    "v_minmax": "SELECT k, count(*) AS n, max(v) AS top FROM o GROUP BY k",
    "v_state": "SELECT k, count(*) AS n, sum(v) AS total FROM o GROUP BY k",
    "v_limit": "SELECT k, v FROM o ORDER BY v DESC LIMIT 2",
    "v_left": "SELECT o.k, c.name FROM o LEFT JOIN c ON o.k = c.k",
    "v_float": "SELECT CAST(v AS DOUBLE) AS d, max(k) AS top FROM o GROUP BY CAST(v AS DOUBLE)",
    "v_ratio": "SELECT k, 12 / (v - 1) AS r FROM o",
    "v_latest": "SELECT o.k, max(c.name) AS top FROM o JOIN c ON o.k = c.k "
    "WHERE o.v >= (SELECT max(v) FROM o) - 1 GROUP BY o.k",
}
runner = CliRunner()


def top_orders(frames: Mapping[str, Any]) -> Any:
    return frames["o"].where("v > 1")


@pytest.fixture(scope="module")
def location(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, dict[str, MaterializedView]]]:
    """Inputs and the views of VIEWS (plus a Python function view), installed and cataloged."""
    root = tmp_path_factory.mktemp("explain")
    client = PersistClient(Location.embedded(root))
    client.open_writer("orders", ORDERS).append([(("a", 1), 0, 1), (("b", 2), 1, 1)], 0, 2)
    client.open_writer("customers", CUSTOMERS).append([(("a", "ann"), 0, 1)], 0, 2)
    definitions = [ViewDefinition(name, INPUTS, sql) for name, sql in VIEWS.items()]
    definitions.append(ViewDefinition("v_fn", {"o": "orders"}, function=top_orders))
    views = {d.name: MaterializedView.install(spark, client, d) for d in definitions}
    yield root, views
    for view in views.values():
        view.close()


def explain_json(root: Path, view: str) -> dict[str, Any]:
    out = runner.invoke(app, ["explain", view, "-l", str(root), "--json"])
    assert out.exit_code == 0, (out.output, out.exception)
    doc: dict[str, Any] = json.loads(out.output)
    return doc


def test_a_join_is_linear_with_one_term_per_input(
    location: tuple[Path, dict[str, MaterializedView]],
) -> None:
    root, _ = location
    doc = explain_json(root, "v_join")
    assert doc["sql"] == VIEWS["v_join"] and doc["inputs"] == INPUTS
    assert doc["path"] == "linear" and "inner join" in doc["reason"]
    modes = [sorted((t["input"], t["mode"]) for t in term["tables"]) for term in doc["terms"]]
    assert modes == [[("c", "new"), ("o", "delta")], [("c", "delta"), ("o", "old")]]
    assert [term["delta_of"] for term in doc["terms"]] == ["o", "c"]
    # Each term runs from its delta, joining the other input's arrangement by k.
    assert doc["arrangements"] == ["input c arranged by k", "input o arranged by k"]
    assert doc["errors"].startswith("per time")  # nothing in it can fail on a row
    # The install recorded the settings the view runs with: explain took them.
    assert doc["session_recorded"] is True, doc["session"]
    orders = [[(s["alias"], s["mode"], s["by"]) for s in t["join_order"]] for t in doc["terms"]]
    assert orders == [
        [("o", "delta", []), ("c", "new", ["k"])],
        [("c", "delta", []), ("o", "old", ["k"])],
    ]
    for term in doc["terms"]:
        for table in term["tables"]:
            assert table["placeholder"] in term["sql"]
            assert table["shard"] == INPUTS[table["input"]]
            assert f"input {table['input']} (shard {table['shard']})" in table["stands_for"]


def test_a_division_fails_per_row(location: tuple[Path, dict[str, MaterializedView]]) -> None:
    root, views = location
    doc = explain_json(root, "v_ratio")
    assert doc["path"] == "linear" and doc["errors"].startswith("per row")
    assert all("TRY_DIVIDE" in t["sql"] and "__err" in t["sql"] for t in doc["terms"])
    views["v_ratio"].catch_up()  # order a's v = 1: an err row of that row, b's row stays
    rows = PersistClient(Location.embedded(root)).open_leased_reader("v_ratio").snapshot(1)
    got = sorted(((r["k"], r["r"], r["_err"]) for r in rows.to_pylist()), key=repr)
    assert got == [("b", 12.0, None), (None, None, "division by zero in 12 / (v - 1)")]


def test_a_group_by_is_grouped(location: tuple[Path, dict[str, MaterializedView]]) -> None:
    root, _ = location
    doc = explain_json(root, "v_grouped")
    assert doc["path"] == "grouped" and "GROUP BY" in doc["reason"]
    [term] = doc["terms"]
    assert [(t["input"], t["mode"], t["shard"]) for t in term["tables"]] == [("o", "at", "orders")]
    assert "__t" in term["sql"] and "__t" in term["tables"][0]["stands_for"]
    assert "DISTINCT aggregates keep no per-group state" in doc["reason"]
    [arranged] = doc["arrangements"]
    assert arranged.startswith("input o arranged by") and term["join_order"] is None


def test_a_group_by_a_float_says_why_its_input_is_not_arranged(
    location: tuple[Path, dict[str, MaterializedView]],
) -> None:
    root, _ = location
    doc = explain_json(root, "v_float")
    assert doc["path"] == "grouped"
    [line] = doc["arrangements"]
    assert line.startswith("nothing: input 'o' is not arranged by key") and "double" in line


def test_count_and_sum_keep_per_group_state(
    location: tuple[Path, dict[str, MaterializedView]],
) -> None:
    root, _ = location
    doc = explain_json(root, "v_state")
    assert doc["path"] == "grouped" and "per-group aggregate state" in doc["reason"]
    delta, state = doc["terms"]
    assert [(t["input"], t["mode"], t["shard"]) for t in delta["tables"]] == [
        ("o", "delta", "orders")
    ]
    assert "__g0" in delta["sql"] and "__a0" in delta["sql"]
    assert [t["mode"] for t in state["tables"]] == ["state"]
    assert "__c0" in state["sql"] and "__n" in state["sql"]
    assert "state" in doc["how"]


def test_min_and_max_keep_state_and_recompute_the_groups_they_may_leave(
    location: tuple[Path, dict[str, MaterializedView]],
) -> None:
    root, _ = location
    doc = explain_json(root, "v_minmax")
    assert doc["path"] == "grouped" and "(count/sum/avg/min/max)" in doc["reason"]
    delta, state, touched = doc["terms"]
    assert [t["mode"] for t in delta["tables"]] == ["delta"]
    assert [t["mode"] for t in state["tables"]] == ["state"] and "__hi0" in state["sql"]
    assert [t["mode"] for t in touched["tables"]] == ["at"] and "__t" in touched["sql"]
    assert "min or max" in doc["how"]
    state_line, keyed = doc["arrangements"]
    assert state_line.startswith("per-group aggregate state")
    assert keyed.startswith("input o arranged by") and "min/max may move" in keyed


def test_a_scalar_subquery_is_a_parameter_of_a_grouped_join(
    location: tuple[Path, dict[str, MaterializedView]],
) -> None:
    root, _ = location
    doc = explain_json(root, "v_latest")
    assert doc["path"] == "grouped", doc["reason"]
    assert "over INNER JOIN" in doc["reason"] and "1 scalar subquery" in doc["reason"]
    touched, values = doc["terms"]
    modes = [(t["input"], t["mode"]) for t in touched["tables"]]
    assert modes == [("o", "at"), ("c", "at"), (None, "parameters")]
    assert [(t["input"], t["mode"]) for t in values["tables"]] == [
        (None, "times"),
        ("o", "subquery"),
    ]
    assert "MAX(" in values["sql"].upper() and "__p0" in touched["sql"]
    *arranged, subqueries = doc["arrangements"]
    assert [a.split(" arranged")[0] for a in arranged] == ["input o", "input c"]
    assert subqueries == "nothing for the scalar subqueries: they read all of o per tick"


@pytest.mark.parametrize(
    ("view", "said"),
    [("v_limit", "ORDER BY"), ("v_fn", "Python function")],
)
def test_full_views_say_why(
    location: tuple[Path, dict[str, MaterializedView]], view: str, said: str
) -> None:
    root, _ = location
    doc = explain_json(root, view)
    assert doc["path"] == "full" and said in doc["reason"] and doc["terms"] == []
    if view == "v_fn":
        assert doc["sql"] is None and doc["function"].endswith(":top_orders")


@pytest.mark.parametrize("view", [*VIEWS, "v_fn"])
def test_explain_and_status_agree_with_the_running_view(
    location: tuple[Path, dict[str, MaterializedView]], view: str
) -> None:
    root, views = location
    plan = views[view].desired.plan
    doc = explain_json(root, view)
    assert (doc["path"], doc["reason"]) == (plan.classification.path, plan.classification.reason)
    modes = [sorted(t["mode"] for t in term["tables"]) for term in doc["terms"]]
    if plan.aggregate is not None:  # the contributions' terms and the state's query (and
        # with min/max, the touched groups' term)
        terms = plan.aggregate.terms
        touched = [["at"]] if plan.aggregate.extremes else []
        assert modes == [
            *[sorted(m for _, m in t.tables.values()) for t in terms],
            ["state"],
            *touched,
        ]
    elif plan.parameters is not None:  # the term joins the values, their query is last
        assert [sorted(m for _, m in t.tables.values()) for t in plan.terms] == [
            sorted(m for m in ms if m != "parameters") for ms in modes[:-1]
        ]
        assert modes[-1] == ["subquery", "times"]
    else:
        assert [sorted(m for _, m in t.tables.values()) for t in plan.terms] == modes
    out = runner.invoke(app, ["status", "-l", str(root), "--json"])
    assert out.exit_code == 0, out.output
    [row] = [r for r in json.loads(out.output) if r["object"] == view]
    assert row["kind"] == "view"
    assert (row["path"], row["path_reason"]) == (doc["path"], doc["reason"])


def test_the_table_names_the_path_and_the_placeholders(
    location: tuple[Path, dict[str, MaterializedView]],
) -> None:
    root, _ = location
    out = runner.invoke(app, ["explain", "v_join", "-l", str(root)], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    text = out.output
    assert "view v_join" in text and VIEWS["v_join"] in text
    assert "path: linear" in text and "term 1 of 2 (runs when o has updates)" in text
    assert "the updates of input o (shard orders) in [lower, upper)" in text
    assert "kept in Spark: input c arranged by k; input o arranged by k" in text
    assert "runs as: o (o, delta) -> c (c by k, new) on `o`.`k` = `c`.`k`" in text
    out = runner.invoke(app, ["explain", "v_limit", "-l", str(root)], env={"COLUMNS": "200"})
    assert "path: full -- ORDER BY" in out.output and "term 1" not in out.output
    out = runner.invoke(app, ["status", "-l", str(root)], env={"COLUMNS": "200"})
    assert "v_limit is maintained from snapshots (full path): ORDER BY" in out.output


def test_an_unknown_view_is_one_line(
    location: tuple[Path, dict[str, MaterializedView]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root, _ = location
    monkeypatch.setattr(sys, "argv", ["timeshard", "explain", "v_nope", "-l", str(root)])
    with pytest.raises(SystemExit) as e:
        main()
    out = capsys.readouterr()
    assert e.value.code == 2 and out.out == "", out
    assert out.err.startswith("error: ") and out.err.count("\n") == 1, out.err
    assert "no view 'v_nope'" in out.err and "'v_join'" in out.err


@pytest.mark.parametrize("ansi", ["true", "false"])
def test_explain_classifies_with_the_session_settings_the_view_recorded(
    spark: SparkSession, tmp_path: Path, ansi: str
) -> None:
    """A view run with ANSI off (a run file's ``[spark] conf``) evaluates its SQL as it is: no
    per-row errors, other terms. Explain, in a session of its own settings, classified it
    with those (per-row errors, the rewritten terms), not with the view's. The session it
    explains in is left as it was."""
    from timeshard.catalog import CatalogEntry
    from timeshard.cli.explain import ROW_ERRORS, TIME_ERRORS, explain_view

    client = PersistClient(Location.embedded(tmp_path))
    client.open_writer("orders", ORDERS).append([(("a", 1), 0, 1)], 0, 1)
    definition = {"inputs": {"o": "orders"}, "sql": "SELECT k, 12 / (v - 1) AS r FROM o"}
    settings = {"spark.sql.ansi.enabled": ansi}
    entry = CatalogEntry("v_ratio", "view", {**definition, "session": settings})
    own = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "false" if ansi == "true" else "true")
    try:
        doc = explain_view(spark, client, entry)
        after = spark.conf.get("spark.sql.ansi.enabled")
    finally:
        spark.conf.set("spark.sql.ansi.enabled", own)
    assert after == ("false" if ansi == "true" else "true")
    assert doc["session"] == settings, doc
    assert doc["errors"] == (ROW_ERRORS if ansi == "true" else TIME_ERRORS), doc
    assert ("__err" in doc["terms"][0]["sql"]) == (ansi == "true"), doc["terms"]
