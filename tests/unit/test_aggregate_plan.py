"""Which GROUP BY views keep per-group aggregate state, and the queries their plan runs.

Parsing and rewriting only (sqlglot): no Spark. The types (integral sums) and
the output's column types are checked against Spark's analysis elsewhere
(``tests/integration/test_incremental_views.py``).
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
import sqlglot

from timeshard.compute.incremental import classify, order_dependent

SCHEMAS = {
    "a": pa.schema([("k", pa.int64()), ("v", pa.int64()), ("s", pa.string())]),
    "b": pa.schema([("k", pa.int64()), ("w", pa.int64())]),
}


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
    # The rewritten queries parse, read only their placeholders, and keep the columns.
    [term] = plan.aggregate.terms  # one input: one delta term
    assert [mode for _, mode in term.tables.values()] == ["delta"] and term.delta_of == "a"
    assert [mode for _, mode in plan.aggregate.snapshot.tables.values()] == ["old"]
    contributions = sqlglot.parse_one(term.sql, dialect="spark")
    output = sqlglot.parse_one(plan.aggregate.output, dialect="spark")
    assert {t.name for t in contributions.find_all(sqlglot.exp.Table)} == set(term.tables)
    assert {t.name for t in output.find_all(sqlglot.exp.Table)} == {plan.aggregate.state}
    assert plan.terms, "the touched groups' term stays, should the types not fit the state"
    original = sqlglot.parse_one(sql, dialect="spark")
    assert len(output.expressions) == len(original.expressions) + 3  # and _ts, _diff, _err
    assert not list(output.find_all(sqlglot.exp.AggFunc))


def test_repeated_arguments_share_one_state_column() -> None:
    plan = classify("SELECT k, sum(v), avg(v), count(v), count(s) FROM a GROUP BY k", SCHEMAS)
    assert plan.aggregate is not None
    assert plan.aggregate.summed == (True, False)  # v: summed; s: only counted
    assert plan.aggregate.values == ["__n", "__c0", "__c1", "__s0"]
    assert plan.aggregate.summed_arguments == ["__a0"]


def test_avg_arguments_are_marked_for_their_type_check() -> None:
    """An avg keeps state only of INT or narrower (the type check is Spark's analysis)."""
    plan = classify("SELECT k, sum(k), avg(v), avg(k) FROM a GROUP BY k", SCHEMAS)
    assert plan.aggregate is not None
    assert plan.aggregate.summed_arguments == ["__a0", "__a1"]
    assert plan.aggregate.averaged_arguments == ["__a0", "__a1"]
    plan = classify("SELECT k, sum(v), count(k) FROM a GROUP BY k", SCHEMAS)
    assert plan.aggregate is not None and plan.aggregate.averaged_arguments == []


def _average(*argument: tuple[str, int, str | None]) -> str:
    """Spark's analysed plan (``LogicalPlan.toJSON``) of ``SELECT avg(<argument>) FROM a``:
    ``argument`` in pre-order, each node (class, number of children, its dataType)."""
    spark = "org.apache.spark.sql.catalyst"
    nodes = [
        {"class": f"{spark}.expressions.Alias", "num-children": 1},
        {"class": f"{spark}.expressions.aggregate.AggregateExpression", "num-children": 1},
        {"class": f"{spark}.expressions.aggregate.Average", "num-children": 1},
    ]
    for kind, children, data_type in argument:
        node = {"class": f"{spark}.expressions.{kind}", "num-children": children}
        nodes.append(node if data_type is None else {**node, "dataType": data_type})
    aggregate = {
        "class": f"{spark}.plans.logical.Aggregate",
        "num-children": 1,
        "aggregateExpressions": [nodes],
    }
    relation = {"class": f"{spark}.plans.logical.LocalRelation", "num-children": 0}
    return json.dumps([aggregate, relation])


@pytest.mark.parametrize(
    "argument",
    [
        [("AttributeReference", 0, "long")],  # avg(v): Spark shows no cast to double
        [  # avg(v + i)
            ("Add", 2, None),
            ("AttributeReference", 0, "long"),
            ("Cast", 1, "long"),
            ("AttributeReference", 0, "integer"),
        ],
        [("Length", 1, None), ("AttributeReference", 0, "string")],  # not known to be exact
    ],
)
def test_an_avg_wider_than_int_depends_on_the_order_of_its_rows(
    argument: list[tuple[str, int, str | None]],
) -> None:
    """Spark sums avg's argument in double: 2**53 + 1 and 1 sum to 2**53, and a recomputed
    group's average follows the order of its rows."""
    why = order_dependent(_average(*argument))
    assert why is not None and "Average of a type wider than INT" in why, why


@pytest.mark.parametrize(
    "argument",
    [
        [("AttributeReference", 0, "integer")],
        [("Cast", 1, "integer"), ("AttributeReference", 0, "long")],  # avg(CAST(v AS INT))
        [("Add", 2, None), ("AttributeReference", 0, "short"), ("Literal", 0, "short")],
        [("AttributeReference", 0, "decimal(10,2)")],
    ],
)
def test_an_avg_exact_in_double_does_not_depend_on_the_order(
    argument: list[tuple[str, int, str | None]],
) -> None:
    assert order_dependent(_average(*argument)) is None


def test_min_and_max_over_one_input_keep_their_extremes_in_the_state() -> None:
    plan = classify(
        "SELECT k, min(v) AS lo, max(v) AS hi, max(s) AS top, sum(v) AS t FROM a "
        "WHERE v > 0 GROUP BY k HAVING min(v) < 9",
        SCHEMAS,
    )
    assert plan.aggregate is not None, plan.classification.reason
    assert "(count/sum/avg/min/max)" in plan.classification.reason
    assert (plan.aggregate.lows, plan.aggregate.highs) == ((True, False), (True, True))
    assert plan.aggregate.sums == ["__n", "__c0", "__c1", "__s0"]
    assert plan.aggregate.extremes == ["__lo0", "__hi0", "__hi1"]
    # Between them: how many rows have a negative multiplicity (such a group is recomputed).
    assert plan.aggregate.values == [*plan.aggregate.sums, "__neg", *plan.aggregate.extremes]
    assert plan.aggregate.extreme_arguments == ["__a0", "__a1"]
    assert plan.aggregate.summed_arguments == ["__a0"]
    output = plan.aggregate.output
    assert "`__lo0` < 9" in output and "`__hi1` END AS `top`" in output, output
    # A group of negative row count is an err row of null data, from the same state row.
    assert "WHEN `__state`.`__n` < 0 THEN `__state`.`__message` END AS `_err`" in output
    # The touched groups' term and the input's key stay: the groups a retraction may move
    # are recomputed by them.
    [source] = plan.keyed
    assert plan.terms and source.keys == ("`a`.`k`",)


def test_where_filters_the_contributions_and_having_the_output() -> None:
    plan = classify(
        "SELECT k, sum(v) AS s FROM a WHERE v > 1 GROUP BY k HAVING sum(v) < 10", SCHEMAS
    )
    assert plan.aggregate is not None
    [term] = plan.aggregate.terms
    assert "WHERE" in term.sql and "> 1" in term.sql and "HAVING" not in term.sql
    assert "< 10" in plan.aggregate.output and "`__n` > 0" in plan.aggregate.output


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        ("SELECT k, count(DISTINCT v) FROM a GROUP BY k", "DISTINCT aggregates"),
        ("SELECT k, min(DISTINCT v) FROM a GROUP BY k", "DISTINCT aggregates"),
        ("SELECT k, sum(DISTINCT v) FROM a GROUP BY k", "DISTINCT aggregates"),
        ("SELECT k, sum(v) FILTER (WHERE v > 1) FROM a GROUP BY k", "FILTER"),
        ("SELECT k, collect_list(v) FROM a GROUP BY k", "collect_list() keeps no per-group state"),
    ],
)
def test_other_aggregates_recompute_their_touched_groups(sql: str, said: str) -> None:
    plan = classify(sql, SCHEMAS)
    assert plan.classification.path == "grouped" and plan.aggregate is None
    assert "recompute the touched groups" in plan.classification.reason
    assert said in plan.classification.reason, plan.classification.reason


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT k, count(*) AS n FROM a GROUP BY k WITH ROLLUP",
        "SELECT k, v, sum(v) FROM a GROUP BY CUBE(k, v)",
        "SELECT k, v, count(*) FROM a GROUP BY k, v GROUPING SETS ((k, v), (k))",
        "SELECT k, count(*) FROM a GROUP BY GROUPING SETS ((k), ())",
        "SELECT k, v, count(*) FROM a GROUP BY k, ROLLUP(v)",
    ],
)
def test_subtotals_over_one_input_take_the_full_path(sql: str) -> None:
    plan = classify(sql, SCHEMAS)
    assert plan.classification.path == "full", plan.classification
    assert "ROLLUP, CUBE and GROUPING SETS" in plan.classification.reason


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        ("SELECT k, v FROM a TABLESAMPLE (2 ROWS)", "TABLESAMPLE"),
        ("SELECT k, v FROM a TABLESAMPLE (50 PERCENT)", "TABLESAMPLE"),
        ("SELECT k, count(*) AS n FROM a TABLESAMPLE (50 PERCENT) GROUP BY k", "TABLESAMPLE"),
        ("SELECT a.k, b.w FROM a TABLESAMPLE (50 PERCENT) JOIN b ON a.k = b.k", "TABLESAMPLE"),
        ("SELECT k, reflect('java.util.UUID', 'randomUUID') AS u FROM a", "reflect"),
        ("SELECT k, java_method('java.util.UUID', 'randomUUID') AS u FROM a", "java_method"),
        ("SELECT k, try_reflect('java.util.UUID', 'randomUUID') AS u FROM a", "try_reflect"),
    ],
)
def test_samples_and_reflection_take_the_full_path(sql: str, said: str) -> None:
    """A sample (or a LIMIT, as Spark reads ``n ROWS``) applied to each tick's updates, or
    a value drawn at each evaluation, is not the query's result at any time."""
    plan = classify(sql, SCHEMAS)
    assert plan.classification.path == "full", plan.classification
    assert said in plan.classification.reason, plan.classification.reason


def test_sql_the_parser_fails_on_takes_the_full_path() -> None:
    """sqlglot raised IndexError on ``map`` with an odd number of arguments: the view's
    creation failed with an internal error, where Spark itself answers the SQL (here, with
    its own error). Any failure to parse it leaves the view on the full path."""
    plan = classify("SELECT map(1, 2, 3) AS m FROM a", SCHEMAS)
    assert plan.classification.path == "full", plan.classification
    assert "did not parse" in plan.classification.reason, plan.classification.reason


def test_distinct_and_windows_keep_no_state() -> None:
    assert classify("SELECT DISTINCT k FROM a", SCHEMAS).aggregate is None
    window = "SELECT k, sum(v) OVER (PARTITION BY k) AS t FROM a"
    assert classify(window, SCHEMAS).aggregate is None


def test_group_by_over_inner_joins_keeps_state_by_the_delta_rule() -> None:
    plan = classify(
        "SELECT a.k, count(*) AS n, sum(b.w) AS s FROM a JOIN b ON a.k = b.k "
        "JOIN b AS c ON c.k = a.v WHERE b.w > 0 GROUP BY a.k",
        SCHEMAS,
    )
    assert plan.aggregate is not None and plan.terms == ()
    assert "over 3 inputs joined" in plan.classification.reason
    modes = [set(t.tables.values()) for t in plan.aggregate.terms]
    # One term per occurrence (b twice, as b and c): before it old, after it new.
    assert [t.delta_of for t in plan.aggregate.terms] == ["a", "b", "b"]
    assert modes == [
        {("a", "delta"), ("b", "new")},
        {("a", "old"), ("b", "delta"), ("b", "new")},
        {("a", "old"), ("b", "old"), ("b", "delta")},
    ]
    assert plan.aggregate.inputs == ["a", "b"]


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        ("SELECT a.k, max(b.w) FROM a JOIN b ON a.k = b.k GROUP BY a.k", "INNER JOIN"),
        ("SELECT b.k, max(a.v) FROM a JOIN b ON a.k = b.k GROUP BY b.k, a.v", "INNER JOIN"),
        ("SELECT a.k, count(*) FROM a LEFT JOIN b ON a.k = b.k GROUP BY a.k", "LEFT OUTER"),
        ("SELECT b.k, min(a.v) FROM a RIGHT JOIN b ON a.k = b.k GROUP BY b.k", "RIGHT OUTER"),
    ],
)
def test_other_group_bys_over_a_join_by_a_join_key_recompute_the_touched_keys(
    sql: str, said: str
) -> None:
    plan = classify(sql, SCHEMAS)
    assert plan.classification.path == "grouped" and plan.aggregate is None, plan
    assert "recompute the touched join keys" in plan.classification.reason
    assert said in plan.classification.reason
    assert [s.input for s in plan.keyed] == ["a", "b"]
    assert [s.keys for s in plan.keyed] == [("`a`.`k`",), ("`b`.`k`",)]
    [term] = plan.terms
    rewritten = sqlglot.parse_one(term.sql, dialect="spark")
    grouped = [g.sql(dialect="spark") for g in rewritten.args["group"].expressions]
    assert grouped[-1] in ("`a`.`__t`", "`b`.`__t`"), grouped  # each time its own groups


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        ("SELECT DISTINCT count(*) FROM a JOIN b ON a.k = b.k GROUP BY a.k", "DISTINCT"),
        ("SELECT a.v, max(b.w) FROM a JOIN b ON a.k = b.k GROUP BY a.v", "a side's join key"),
        ("SELECT b.k, count(*) FROM a LEFT JOIN b ON a.k = b.k GROUP BY b.k", "keeps whole"),
        ("SELECT a.k, max(b.w) FROM a FULL JOIN b ON a.k = b.k GROUP BY a.k", "keeps whole"),
        ("SELECT a.k, max(c.w) FROM a JOIN b ON a.k = b.k JOIN b c ON c.k = a.k GROUP BY a.k", ""),
        # Subtotal rows depend on every group: no per-group state or key keeps them.
        ("SELECT a.k, count(*) AS n FROM a JOIN b ON a.k = b.k GROUP BY a.k WITH ROLLUP", "ROLLUP"),
        ("SELECT a.k, sum(b.w) AS s FROM a JOIN b ON a.k = b.k GROUP BY a.k WITH CUBE", "CUBE"),
        (
            "SELECT a.k, a.v, count(*) AS n FROM a JOIN b ON a.k = b.k "
            "GROUP BY a.k, a.v GROUPING SETS ((a.k, a.v), (a.k))",
            "GROUPING SETS",
        ),
        ("SELECT a.k, max(b.w) FROM a JOIN b ON a.k = b.k GROUP BY ROLLUP(a.k)", "ROLLUP"),
    ],
)
def test_other_group_bys_over_joins_take_the_full_path(sql: str, said: str) -> None:
    plan = classify(sql, SCHEMAS)
    assert plan.classification.path == "full", plan.classification
    assert (
        "GROUP BY over a join" in plan.classification.reason and said in plan.classification.reason
    )
