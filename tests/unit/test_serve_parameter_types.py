"""The types inferred for undeclared parameters without Spark (PostgreSQL 15's answers
for the same statements: :mod:`tests.integration.test_serve_inferred_params_spark`)."""

from __future__ import annotations

import pyarrow as pa
import pytest
import sqlglot.optimizer.annotate_types

from timeshard.server.parameter_types import arrow_columns, parameter_types

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
        # sqlglot types ANY(...) as the predicate (boolean), not as the array's elements:
        # unknown here (PostgreSQL: the element type), never boolean.
        ("SELECT one FROM t WHERE $1 = ANY(ARRAY[one])", {}),
        ("SELECT 1 WHERE $1 < ANY(ARRAY[1, 2])", {}),
        # Spark's TIMESTAMP (now(), a shard's timestamp with a zone) is timestamptz.
        ("SELECT now() > $1", {1: 1184}),
        ("SELECT current_timestamp > $1", {1: 1184}),
        ("SELECT $1::timestamp", {1: 1114}),
        # The first place that types a parameter decides it, as in PostgreSQL (r is real).
        ("SELECT one FROM t WHERE r >= $1 AND $1 > 0", {1: 700}),
        ("SELECT one FROM t WHERE x >= $1 AND $1 > 0", {}),  # t has no x known here
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


def test_a_parameter_beside_a_column_of_unknown_type_is_not_decided_by_a_later_place() -> None:
    """At Parse no column is known: ``f >= $1`` leaves ``$1`` undecided, and ``$1 > 0``
    after it must not make it int4 (a float sent as text was refused, 22P02, where
    PostgreSQL reads it as the column's float8), review."""
    sql = "SELECT * FROM t WHERE f >= $1 AND $1 > 0"
    assert parameter_types(sql) == {}
    assert parameter_types(sql, {"t": {"f": "DOUBLE"}}.get) == {1: 701}


def test_a_shards_timestamp_without_a_zone_is_timestamp_and_with_one_timestamptz() -> None:
    schema = pa.schema([("a", pa.timestamp("us")), ("b", pa.timestamp("us", tz="UTC"))])
    columns = arrow_columns(schema)
    assert parameter_types("SELECT 1 FROM t WHERE a = $1 AND b = $2", {"t": columns}.get) == {
        1: 1114,
        2: 1184,
    }
