"""Which scalar subqueries a grouped plan keeps as parameters, and the queries it runs.

Parsing and rewriting only (sqlglot): no Spark. The Spark side (that the view
equals the query at every time while a subquery's value moves) is in
``tests/integration/test_incremental_views.py``.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
import sqlglot

from timeshard.compute.incremental import PAIRS, classify

SCHEMAS = {
    "auctions": pa.schema([("id", pa.int64()), ("end_offset", pa.int64())]),
    "bids": pa.schema([("auction_id", pa.int64()), ("amount", pa.int64())]),
    "a": pa.schema([("k", pa.int64()), ("v", pa.int64())]),
    "b": pa.schema([("k", pa.int64()), ("w", pa.int64())]),
}

MAX_BID = """
SELECT a.id AS auction_id, max(b.amount) AS max_amount
FROM auctions a JOIN bids b ON b.auction_id = a.id
WHERE a.end_offset > (SELECT max(id) FROM auctions)
GROUP BY a.id
"""


def tables(sql: str) -> set[str]:
    return {t.name for t in sqlglot.parse_one(sql, dialect="spark").find_all(sqlglot.exp.Table)}


def test_w2_max_bid_recomputes_the_join_keys_its_subquery_may_move() -> None:
    plan = classify(MAX_BID, SCHEMAS)
    assert plan.classification.path == "grouped", plan.classification
    assert plan.aggregate is None
    assert "1 scalar subquery evaluated at each change time" in plan.classification.reason
    assert [(s.input, s.keys) for s in plan.keyed] == [
        ("auctions", ("`a`.`id`",)),
        ("bids", ("`b`.`auction_id`",)),
    ]
    parameters = plan.parameters
    assert parameters is not None
    assert parameters.inputs == ["auctions"]
    # The values: one per evaluation time, the subquery over its input's rows at that time.
    assert tables(parameters.sql) == {parameters.times, *parameters.rows}
    [subquery] = sqlglot.parse_one(parameters.sql, dialect="spark").find_all(sqlglot.exp.Subquery)
    assert "`auctions`.`__t` = `__timeshard_times`.`__t`" in subquery.sql(dialect="spark")
    # The term joins the values on its evaluation time, and compares with them.
    [term] = plan.terms
    assert tables(term.sql) == {*term.tables, parameters.table}
    assert "`a`.`end_offset` > `__pv`.`__p0`" in term.sql
    assert "SELECT" not in term.sql.split("FROM", 1)[1]  # no subquery left
    # An auction's rows move when the comparison differs between two consecutive values.
    [(source, condition)] = parameters.moved
    assert source == 0
    assert f"`{PAIRS}`.`__b0`" in condition and f"`{PAIRS}`.`__a0`" in condition
    assert condition.startswith("(NOT ((") and "IS NOT DISTINCT FROM" in condition


def test_each_source_has_the_conditions_of_the_subqueries_compared_with_it() -> None:
    plan = classify(
        "SELECT a.k, b.w FROM a JOIN b ON a.k = b.k "
        "WHERE a.v > (SELECT max(v) FROM a) - 2 AND b.w <> (SELECT min(w) FROM b) "
        "AND (a.v < (SELECT count(*) FROM b) OR a.k = 1)",
        SCHEMAS,
    )
    parameters = plan.parameters
    assert parameters is not None, plan.classification
    assert "3 scalar subqueries" in plan.classification.reason
    assert sorted(parameters.rows.values()) == ["a", "b", "b"]
    moved = dict(parameters.moved)
    assert set(moved) == {0, 1}
    assert "__b0" in moved[0] and "__b2" in moved[0] and " OR " in moved[0]
    assert "__b1" in moved[1] and "__b0" not in moved[1]


def test_a_select_over_one_input_is_keyed_by_the_row() -> None:
    plan = classify("SELECT k, v + 1 AS u FROM a WHERE v > (SELECT min(w) FROM b)", SCHEMAS)
    assert plan.classification.path == "grouped", plan.classification
    assert "recompute the touched rows" in plan.classification.reason
    assert [s.keys for s in plan.keyed] == [("`a`.`k`", "`a`.`v`")]


def test_a_group_by_with_a_subquery_keeps_no_per_group_state() -> None:
    plan = classify(
        "SELECT k, count(*) AS n FROM a WHERE v >= (SELECT avg(w) FROM b) GROUP BY k", SCHEMAS
    )
    assert plan.classification.path == "grouped" and plan.aggregate is None
    assert "keep no per-group state" in plan.classification.reason


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        ("SELECT k FROM a WHERE v IN (SELECT w FROM b)", "IN, EXISTS"),
        ("SELECT k FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.k = a.k)", "subqueries need"),
        ("SELECT k, (SELECT max(w) FROM b) AS m FROM a", "outside WHERE"),
        ("SELECT k FROM a WHERE v > (SELECT max(w) FROM b WHERE b.k = a.k)", "not correlated"),
        ("SELECT k FROM a WHERE v > (SELECT max(w) FROM b GROUP BY k)", "without GROUP BY"),
        ("SELECT k FROM a WHERE v > (SELECT w FROM b)", "one aggregate"),
        ("SELECT k FROM a WHERE v > (SELECT w + max(w) FROM b)", "one aggregate"),
        ("SELECT k FROM a WHERE v > (SELECT max(w) FROM b JOIN a ON a.k = b.k)", "one input"),
        ("SELECT k FROM a WHERE (SELECT count(*) FROM b) > 2", "no column of"),
        (
            "SELECT a.k FROM a JOIN b ON a.k = b.k WHERE a.v + b.w > (SELECT max(w) FROM b)",
            "more than one",
        ),
        ("SELECT count(*) FROM a WHERE v > (SELECT min(w) FROM b)", "global aggregate"),
        ("SELECT k FROM a WHERE v > (SELECT min(w) FROM b) ORDER BY k", "ORDER BY"),
        ("SELECT a.k FROM a, b WHERE a.k = b.k AND a.v > (SELECT min(w) FROM b)", "ON"),
        # a key with no row of b has a NULL-filled row that no row of b touches
        (
            "SELECT a.k, b.w FROM a LEFT JOIN b ON a.k = b.k "
            "WHERE coalesce(b.w, 0) >= (SELECT count(*) FROM b)",
            "fills with NULL",
        ),
        (
            "SELECT a.k, b.w FROM a RIGHT JOIN b ON a.k = b.k "
            "WHERE coalesce(a.v, 0) >= (SELECT count(*) FROM b)",
            "fills with NULL",
        ),
        (
            "SELECT a.k, b.w FROM a FULL JOIN b ON a.k = b.k "
            "WHERE coalesce(a.v, 0) >= (SELECT count(*) FROM b)",
            "fills with NULL",
        ),
    ],
)
def test_other_subqueries_take_the_full_path(sql: str, said: str) -> None:
    plan = classify(sql, SCHEMAS)
    assert plan.classification.path == "full", plan.classification
    assert said in plan.classification.reason, plan.classification.reason
