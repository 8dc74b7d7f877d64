"""Which GROUP BY views keep per-group aggregate state, and the queries their plan runs.

Parsing and rewriting only (sqlglot): no Spark. The types (integral sums) and
the output's column types are checked against Spark's analysis elsewhere
(``tests/integration/test_incremental_views.py``).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
import sqlglot

from timeshard.compute.incremental import classify

SCHEMAS = {"a": pa.schema([("k", pa.int64()), ("v", pa.int64()), ("s", pa.string())])}


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT k, count(*) AS n FROM a GROUP BY k",
        "SELECT k, count(v), sum(v), avg(v) FROM a GROUP BY k",
        "SELECT v % 3 AS r, sum(k) + 1 AS s FROM a WHERE k <> 2 GROUP BY v % 3 HAVING count(*) > 1",
        "SELECT k AS kk, sum(v * 2) AS s FROM a x GROUP BY kk",
        "SELECT count(*) AS n, k FROM a GROUP BY 2",
    ],
)
def test_count_sum_and_avg_keep_state(sql: str) -> None:
    plan = classify(sql, SCHEMAS)
    assert plan.classification.path == "grouped"
    assert plan.aggregate is not None, plan.classification.reason
    assert "per-group aggregate state" in plan.classification.reason
    # Both rewritten queries parse, read only their placeholders, and keep the columns.
    contributions = sqlglot.parse_one(plan.aggregate.contributions, dialect="spark")
    output = sqlglot.parse_one(plan.aggregate.output, dialect="spark")
    assert {t.name for t in contributions.find_all(sqlglot.exp.Table)} == {plan.aggregate.rows}
    assert {t.name for t in output.find_all(sqlglot.exp.Table)} == {plan.aggregate.state}
    original = sqlglot.parse_one(sql, dialect="spark")
    assert len(output.expressions) == len(original.expressions) + 2  # and _ts, _diff
    assert not list(output.find_all(sqlglot.exp.AggFunc))


def test_repeated_arguments_share_one_state_column() -> None:
    plan = classify("SELECT k, sum(v), avg(v), count(v), count(s) FROM a GROUP BY k", SCHEMAS)
    assert plan.aggregate is not None
    assert plan.aggregate.summed == (True, False)  # v: summed; s: only counted
    assert plan.aggregate.values == ["__n", "__c0", "__c1", "__s0"]
    assert plan.aggregate.summed_arguments == ["__a0"]


def test_where_filters_the_contributions_and_having_the_output() -> None:
    plan = classify(
        "SELECT k, sum(v) AS s FROM a WHERE v > 1 GROUP BY k HAVING sum(v) < 10", SCHEMAS
    )
    assert plan.aggregate is not None
    assert "WHERE" in plan.aggregate.contributions and "> 1" in plan.aggregate.contributions
    assert "< 10" in plan.aggregate.output and "`__n` > 0" in plan.aggregate.output


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        ("SELECT k, min(v) FROM a GROUP BY k", "min() recomputes its touched groups"),
        ("SELECT k, max(v), sum(v) FROM a GROUP BY k", "max() recomputes"),
        ("SELECT k, count(DISTINCT v) FROM a GROUP BY k", "DISTINCT aggregates"),
        ("SELECT k, sum(DISTINCT v) FROM a GROUP BY k", "DISTINCT aggregates"),
        ("SELECT k, sum(v) FILTER (WHERE v > 1) FROM a GROUP BY k", "FILTER"),
        ("SELECT k, collect_list(v) FROM a GROUP BY k", "recomputes its touched groups"),
    ],
)
def test_other_aggregates_recompute_their_touched_groups(sql: str, said: str) -> None:
    plan = classify(sql, SCHEMAS)
    assert plan.classification.path == "grouped" and plan.aggregate is None
    assert "recompute the touched groups" in plan.classification.reason
    assert said in plan.classification.reason, plan.classification.reason


def test_distinct_and_windows_keep_no_state() -> None:
    assert classify("SELECT DISTINCT k FROM a", SCHEMAS).aggregate is None
    window = "SELECT k, sum(v) OVER (PARTITION BY k) AS t FROM a"
    assert classify(window, SCHEMAS).aggregate is None
