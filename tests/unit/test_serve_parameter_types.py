"""The types inferred for undeclared parameters without Spark (PostgreSQL 15's answers
for the same statements: :mod:`tests.integration.test_serve_inferred_params_spark`)."""

from __future__ import annotations

import pytest
import sqlglot.optimizer.annotate_types

from timeshard.server.parameter_types import parameter_types

COLUMNS = {"t": {"one": "BIGINT", "r": "REAL"}, "a.b": {"x": "DATE"}, "Q": {"v": "VARCHAR"}}


@pytest.mark.parametrize(
    ("sql", "types"),
    [
        ("SELECT $1::int8", {1: 20}),
        ("SELECT $1 + 1", {1: 23}),
        ("SELECT $1 + 3000000000", {1: 20}),
        ("SELECT $1 + 1.5", {1: 1700}),
        ("SELECT $1", {}),
        ("SELECT $1 || 'x'", {}),
        ("SELECT $1::integer[]", {}),
        ("SELECT TRY_CAST($1 AS BIGINT)", {}),
        ("SELECT one FROM t WHERE r < $1", {1: 700}),
        ("SELECT one FROM t WHERE $1 % one = 0", {1: 20}),
        ("SELECT 1 FROM a.b WHERE x = $1", {1: 1082}),
        ('SELECT 1 FROM "a.b" WHERE x = $1', {1: 1082}),  # the same shard, as the engine reads it
        ('SELECT 1 FROM "Q" WHERE v = $1', {1: 25}),  # a varchar compares as text
        ("SELECT 1 FROM q WHERE v = $1", {}),  # q is not "Q"
    ],
)
def test_a_parameter_takes_the_type_where_it_stands(sql: str, types: dict[int, int]) -> None:
    assert parameter_types(sql, COLUMNS.get) == types


def test_a_tree_sqlglot_cannot_type_keeps_its_casts(monkeypatch: pytest.MonkeyPatch) -> None:
    """sqlglot's annotation failing (on a statement it cannot type) is no error of the
    statement's Parse: its parameters cast in place keep their types."""

    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError("cannot type it")

    monkeypatch.setattr(sqlglot.optimizer.annotate_types, "annotate_types", fail)
    assert parameter_types("SELECT $1::int8 FROM t WHERE one = $2", COLUMNS.get) == {1: 20}
