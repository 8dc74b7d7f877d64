"""Which inner joins run over arranged inputs, and the join order of each delta term.

Parsing and planning only (sqlglot): no Spark. That the paths compute the
query at every time, in one Spark job per tick, is checked in
``tests/integration/test_incremental_views.py``.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from timeshard.compute.incremental import Step, classify, qualified_by_structs

SCHEMAS = {
    "a": pa.schema([("k", pa.int64()), ("v", pa.int64())]),
    "b": pa.schema([("k", pa.int64()), ("w", pa.int64())]),
    "c": pa.schema(
        [("w", pa.int64()), ("x", pa.float64()), ("m", pa.map_(pa.string(), pa.int64()))]
    ),
    "d": pa.schema([("k", pa.int64()), ("x", pa.float64())]),
}


def order(step: Step) -> tuple[str, str, tuple[str, ...]]:
    return step.alias, step.mode, step.key


def test_a_chain_of_three_starts_each_term_from_its_delta() -> None:
    plan = classify(
        "SELECT x.k, y.w, z.w AS w2 FROM a AS x JOIN b AS y ON x.k = y.k "
        "JOIN b AS z ON z.w = x.v WHERE y.w > 1",
        SCHEMAS,
    )
    paths = [t.path for t in plan.terms]
    assert all(p is not None for p in paths)
    # Term 2's delta is z's: x joins z on its own column v, then y joins x on k. Modes follow
    # the FROM order (before the delta: old; after: new), whatever the join order.
    assert [[order(s) for s in p.steps] for p in paths if p] == [
        [("x", "delta", ()), ("y", "new", ("k",)), ("z", "new", ("w",))],
        [("y", "delta", ()), ("x", "old", ("k",)), ("z", "new", ("w",))],
        [("z", "delta", ()), ("x", "old", ("v",)), ("y", "old", ("k",))],
    ]
    # One arrangement per input and key; b is joined on k (as y) and on w (as z).
    assert set(plan.arranged) == {("a", ("k",)), ("a", ("v",)), ("b", ("k",)), ("b", ("w",))}
    assert "b by w" in plan.classification.reason


def test_each_step_pairs_its_key_columns_with_the_expressions_they_are_joined_on() -> None:
    plan = classify(
        "SELECT x.k, y.w, z.w AS w2 FROM a AS x JOIN b AS y ON x.k = y.k "
        "JOIN b AS z ON x.v + 1 = z.k AND z.w = y.w",
        SCHEMAS,
    )
    paths = [t.path for t in plan.terms]
    assert [[(s.alias, s.key, s.probe) for s in p.steps[1:]] for p in paths if p] == [
        [("y", ("k",), ("`x`.`k`",)), ("z", ("k", "w"), ("`x`.`v` + 1", "`y`.`w`"))],
        [("x", ("k",), ("`y`.`k`",)), ("z", ("k", "w"), ("`x`.`v` + 1", "`y`.`w`"))],
        [("y", ("w",), ("`z`.`w`",)), ("x", ("k",), ("`y`.`k`",))],
    ]


@pytest.mark.parametrize(
    ("sql", "over"),
    [
        ("`x`.`k` + `y`.`w` > 1", "`__x`.`k` + `__y`.`w` > 1"),
        ("coalesce(`x`.`k`, 0) AS `k2`", "COALESCE(`__x`.`k`, 0) AS `k2`"),
        ("`k` > 1", None),  # unqualified: not a column of an occurrence
        ("`q`.`k` > 1", None),  # not one of the occurrences
        ("`x`.`s`.`f` > 1", None),  # a longer name
    ],
)
def test_expressions_over_occurrences_read_their_structs(sql: str, over: str | None) -> None:
    assert qualified_by_structs(sql, ["x", "y"]) == over


def test_each_on_conjunct_is_applied_where_its_tables_are_joined() -> None:
    plan = classify(
        "SELECT a.k FROM a JOIN b ON a.k = b.k AND b.w > a.v AND 1 = 1 AND b.w < 9",
        SCHEMAS,
    )
    first = plan.terms[0].path
    assert first is not None
    (step,) = first.steps[1:]
    assert step.key == ("k",)
    assert step.on is not None and "> `a`.`v`" in step.on and "< 9" in step.on
    assert first.where == "1 = 1"  # no table: after the joins


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("SELECT d.k, a.v FROM a JOIN d ON a.k = d.k JOIN b ON d.x = b.w", "a float key"),
        ("SELECT b.k, c.x FROM b JOIN c ON b.w = c.w", "a map column"),
        ("SELECT a.k, b.w FROM a JOIN b ON a.k > b.k", "no equality"),
        # From b's delta, a would be joined on an expression of its column, not a column.
        ("SELECT a.k, b.w FROM a JOIN b ON b.k = a.v % 4", "an expression key"),
        ("SELECT a.k, b.w FROM a CROSS JOIN b", "a cross join"),
        ("SELECT a.k, b.w FROM a JOIN b ON a.k = b.k JOIN d ON d.x > 0", "d joins on nothing"),
        ("SELECT a.k FROM a JOIN b ON a.k = b.k UNION ALL SELECT k FROM b", "a union"),
    ],
)
def test_joins_that_are_not_arranged(sql: str, why: str) -> None:
    plan = classify(sql, SCHEMAS)
    assert plan.classification.path == "linear", why
    assert plan.arranged == (), why
    assert all(t.path is None for t in plan.terms), why


def test_a_float_key_is_arranged_by_its_other_columns_only() -> None:
    plan = classify("SELECT a.k, d.x FROM a JOIN d ON a.k = d.k AND d.x = a.v", SCHEMAS)
    assert set(plan.arranged) == {("a", ("k", "v")), ("d", ("k",))}


def test_an_expression_of_the_joined_tables_is_joined_with_a_key_column() -> None:
    plan = classify(
        "SELECT x.k FROM a AS x JOIN b AS y ON y.k = x.v + 1 AND x.v = y.w "
        "JOIN a AS z ON z.k = y.w AND z.v = x.k * 2",
        SCHEMAS,
    )
    # From z's delta, x cannot come next (only expressions of its columns meet z): y can.
    last = plan.terms[2].path
    assert last is not None
    assert [order(s) for s in last.steps] == [
        ("z", "delta", ()),
        ("y", "old", ("w",)),
        ("x", "old", ("v",)),
    ]
    assert set(plan.arranged) == {
        ("b", ("k", "w")),
        ("a", ("k", "v")),
        ("a", ("v",)),
        ("b", ("w",)),
    }


@pytest.mark.parametrize(
    "call", ["aes_encrypt(CAST(v AS STRING), '0000111122223333')", "uuid()", "rand()"]
)
def test_a_function_of_another_result_at_every_evaluation_takes_the_full_path(call: str) -> None:
    # aes_encrypt draws a random IV (GCM, CBC): a retraction evaluated again gives another
    # ciphertext, and the view kept a +1 and a -1 row where it should hold none.
    found = classify(f"SELECT k, base64(CAST({call} AS BINARY)) AS e FROM a", SCHEMAS)
    why = found.classification
    assert why.path == "full" and "not deterministic" in why.reason, why
