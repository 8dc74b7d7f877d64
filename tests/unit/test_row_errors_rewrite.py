"""The per-row error rewrite of a view's SQL (no Spark: the SQL text it gives)."""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from timeshard.compute.row_errors import ERRORS, with_row_errors


def rewritten(sql: str, **kwargs: bool) -> exp.Expression:
    out = with_row_errors(sql, **kwargs)
    assert out is not None, sql
    return sqlglot.parse_one(out, dialect="spark")


def errors_column(select: exp.Expression) -> exp.Expression:
    last = select.expressions[-1]
    assert last.alias == ERRORS
    return last.this


def test_nothing_that_can_fail_is_not_rewritten() -> None:
    assert with_row_errors("SELECT k, v FROM a WHERE v > 1") is None
    assert with_row_errors("SELECT k, count(*) FROM a GROUP BY k") is None
    assert with_row_errors("not sql at all ((") is None
    assert with_row_errors("SELECT 1; SELECT 2") is None


def test_a_division_is_tried_and_flagged_where_it_fails() -> None:
    select = rewritten("SELECT k, 12 / v AS r FROM a")
    assert select.expressions[1].sql("spark") == "TRY_DIVIDE(12, v) AS r"
    flag = errors_column(select).sql("spark")
    assert "TRY_DIVIDE(12, v) IS NULL AND NOT v IS NULL" in flag
    assert "'division by zero in 12 / v'" in flag


def test_casts_and_arithmetic_are_tried_unless_asked_not_to() -> None:
    sql = "SELECT CAST(s AS INT) AS i, v * 2 AS d, -v AS n FROM a"
    select = rewritten(sql)
    assert [e.this.sql("spark") for e in select.expressions[:3]] == [
        "TRY_CAST(s AS INT)",
        "TRY_MULTIPLY(v, 2)",
        "-v",  # a unary minus is left to Spark
    ]
    assert "' to INT in CAST(s AS INT)'" in errors_column(select).sql("spark")
    only_casts = rewritten(sql, arithmetic=False)
    assert only_casts.expressions[1].this.sql("spark") == "v * 2"
    assert with_row_errors("SELECT TRY_CAST(s AS INT) FROM a") is None  # already safe


def test_an_operator_in_an_unevaluated_branch_is_guarded() -> None:
    select = rewritten("SELECT CASE WHEN v = 0 THEN 0 ELSE 12 / v END AS r FROM a")
    flag = errors_column(select).sql("spark")
    assert "NOT (v = 0) IS TRUE" in flag  # only where the ELSE is evaluated
    select = rewritten("SELECT k FROM a WHERE v <> 0 AND 12 / v > 1")
    assert "NOT (v <> 0) IS FALSE" in errors_column(select).sql("spark")
    select = rewritten("SELECT coalesce(v, 12 / w) AS c FROM a")
    assert "v IS NULL" in errors_column(select).sql("spark")
    select = rewritten("SELECT IF(v > 0, 12 / v, 0) AS c FROM a")
    assert "(v > 0) IS TRUE" in errors_column(select).sql("spark")


def test_a_where_keeps_the_rows_it_fails_on() -> None:
    select = rewritten("SELECT k FROM a WHERE 12 / v > 1")
    where = select.args["where"].this
    assert isinstance(where, exp.Or)
    assert "TRY_DIVIDE(12, v) IS NULL" in where.expression.sql("spark")


def test_in_a_query_that_aggregates_only_expressions_of_aggregates_are_rewritten() -> None:
    sql = "SELECT k + 1 AS g, sum(v / w) AS s, sum(v) / count(w) AS m FROM a GROUP BY k + 1"
    select = rewritten(sql)
    assert [e.this.sql("spark") for e in select.expressions[:3]] == [
        "k + 1",  # a group key: as it is (GROUP BY names it)
        "TRY_SUM(v / w)",  # inside an aggregate: an error there is the group's, not a row's
        "TRY_DIVIDE(TRY_SUM(v), COUNT(w))",
    ]
    assert select.args["group"].sql("spark") == "GROUP BY k + 1"
    mixed = rewritten("SELECT k + 1 + sum(v) / count(*) AS x FROM a GROUP BY k + 1")
    assert mixed.expressions[0].this.sql("spark") == "k + 1 + TRY_DIVIDE(TRY_SUM(v), COUNT(*))"
    having = rewritten("SELECT k FROM a GROUP BY k HAVING 10 / max(v) > 1").args["having"]
    assert isinstance(having.this, exp.Or)
    assert with_row_errors("SELECT k, max(v / w) FROM a GROUP BY k") is None


def test_a_sum_that_overflows_is_an_err_row_of_its_group() -> None:
    """A group's sum is try_sum, flagged where it is null over non-null arguments (whatever
    CASE branch reads it: Spark computes every aggregate); a window's, a DISTINCT and a
    FILTERed sum are left as they are."""
    select = rewritten("SELECT k, CASE WHEN k > 1 THEN sum(v) END AS s FROM a GROUP BY k")
    assert select.expressions[1].this.sql("spark") == "CASE WHEN k > 1 THEN TRY_SUM(v) END"
    assert select.expressions[-1].this.sql("spark") == (
        "CASE WHEN TRY_SUM(v) IS NULL AND COUNT(v) > 0 THEN 'arithmetic overflow in SUM(v)' END"
    )
    having = rewritten("SELECT k FROM a GROUP BY k HAVING sum(v) > 2").args["having"]
    assert having.this.sql("spark") == ("(TRY_SUM(v) > 2) OR (TRY_SUM(v) IS NULL AND COUNT(v) > 0)")
    for sql in [
        "SELECT k, sum(DISTINCT v) AS s FROM a GROUP BY k",
        "SELECT k, sum(v) FILTER (WHERE v > 0) AS s FROM a GROUP BY k",
        "SELECT k, sum(v) OVER (PARTITION BY k) AS s FROM a",
    ]:
        assert with_row_errors(sql) is None, sql


def test_every_branch_of_a_union_has_the_errors_column() -> None:
    tree = rewritten("SELECT k, 12 / v FROM a UNION ALL SELECT k, w FROM b")
    assert isinstance(tree, exp.Union)
    left, right = tree.this, tree.expression
    assert left.expressions[-1].alias == right.expressions[-1].alias == ERRORS
    assert right.expressions[-1].this.sql("spark") == "CAST(NULL AS STRING)"


def test_what_is_not_rewritten() -> None:
    for sql in [
        "SELECT k FROM a WHERE v > (SELECT min(12 / w) FROM b)",  # a subquery
        "SELECT k FROM a WHERE v > (SELECT max(w) FROM b) - 2",  # of no row: a subquery's
        "SELECT transform(xs, x -> 12 / x) AS t FROM a",  # a lambda body
        "SELECT sum(v) OVER (PARTITION BY k % 2) AS s FROM a",  # a window specification
        "SELECT k IN (1, 12 / v) AS i FROM a",  # an IN list
        "SELECT CASE v WHEN 0 THEN 1 ELSE 12 / v END AS c FROM a",  # a simple CASE
        "SELECT nvl2(v, 12 / v, 0) AS c FROM a",  # a lazy function
        "SELECT k, 12 / v AS __err FROM a",  # a column of our name
    ]:
        assert with_row_errors(sql) is None, sql


def test_the_view_is_left_unchanged_and_messages_are_its_text() -> None:
    sql = "SELECT k, 12 / (v - 3) AS q FROM a"
    first = with_row_errors(sql)
    assert first == with_row_errors(sql)  # deterministic
    assert first is not None and "'division by zero in 12 / (v - 3)'" in first
