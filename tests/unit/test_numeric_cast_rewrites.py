"""The rewrite of unconstrained numeric casts, as Spark SQL text (no Spark).

``tests/integration/test_serve_numeric_cast.py`` runs the rewritten queries on Spark
and against PostgreSQL; these pin the rewrite where a query reads two relations, where
the value a cast gives is divided or cast on, and where the operand is text that
Python's float reads and PostgreSQL's does not.
"""

from __future__ import annotations

import sqlglot
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from timeshard.server.dialect import DIALECT
from timeshard.server.query_rewrites import _numeric_casts

COLUMNS = {
    "t": {"i": "INT", "d": "DECIMAL(10, 3)", "x": "DOUBLE"},
    "u": {"i": "DOUBLE"},
    "m": {"Amount": "DOUBLE"},
}


def rewritten(sql: str) -> str:
    tree = normalize_identifiers(sqlglot.parse_one(sql, read=DIALECT), dialect=DIALECT)
    _numeric_casts(tree, COLUMNS.get)
    return tree.sql("spark")


def test_a_subquery_s_column_has_its_own_relation_s_type_not_the_outer_one_s() -> None:
    """(The outer scope lists the subquery's unqualified ``i`` too: ``t``'s int type won, and
    ``u``'s double 2.5 became DECIMAL(10, 0)'s 3.)"""
    assert rewritten("SELECT (SELECT max(i::numeric) FROM u) FROM t") == (
        "SELECT (SELECT MAX(CAST(FORMAT_STRING('%.15g', i) AS DECIMAL(38, 18))) FROM u) FROM t"
    )
    assert rewritten("SELECT i::numeric FROM t") == "SELECT CAST(i AS DECIMAL(10, 0)) FROM t"
    # A correlated column is the outer relation's, qualified or not (review of 9b0e2fa: the
    # inner scope claimed it, and it lost its type).
    for column in ("x", "t.x"):
        assert rewritten(f"SELECT (SELECT max({column}::numeric) FROM u) FROM t") == (
            f"SELECT (SELECT MAX(CAST(FORMAT_STRING('%.15g', {column}) AS DECIMAL(38, 18))) "
            "FROM u) FROM t"
        )


def test_an_operand_of_a_division_has_17_digits_at_least() -> None:
    """(``3::numeric`` was DECIMAL(1, 0), so the quotient had 6 digits after the point.)"""
    assert rewritten("SELECT 1::numeric / 3.5::numeric") == (
        "SELECT CAST(1 AS DECIMAL(17, 0)) / CAST(3.5 AS DECIMAL(18, 1))"
    )
    assert rewritten("SELECT 1::numeric + 3::numeric") == (
        "SELECT CAST(1 AS DECIMAL(1, 0)) + CAST(3 AS DECIMAL(1, 0))"
    )
    # An integral divisor, and one in parentheses, too (review: 1::numeric / 3 was 0.333333).
    assert rewritten("SELECT 1::numeric / 3") == (
        "SELECT CAST(1 AS DECIMAL(17, 0)) / CAST(3 AS DECIMAL(17, 0))"
    )
    assert rewritten("SELECT 1::numeric / (3::numeric)") == (
        "SELECT CAST(1 AS DECIMAL(17, 0)) / (CAST(3 AS DECIMAL(17, 0)))"
    )
    assert rewritten("SELECT sum(i)::numeric / count(*) FROM t") == (
        "SELECT CAST(SUM(i) AS DECIMAL(20, 0)) / CAST(COUNT(*) AS DECIMAL(20, 0)) FROM t"
    )


def test_a_cast_of_it_to_an_integer_rounds_first() -> None:
    """(Spark's cast of a decimal to an integer truncates: ``1.5::numeric::int`` was 1.)"""
    assert rewritten("SELECT 1.5::numeric::int") == (
        "SELECT CAST(ROUND(CAST(1.5 AS DECIMAL(2, 1)), 0) AS INT)"
    )
    assert rewritten("SELECT d::numeric::bigint FROM t") == (
        "SELECT CAST(ROUND(d, 0) AS BIGINT) FROM t"
    )
    assert rewritten("SELECT (2.5::numeric)::int") == (
        "SELECT CAST(ROUND((CAST(2.5 AS DECIMAL(2, 1))), 0) AS INT)"
    )
    assert rewritten("SELECT (5::numeric / 2::numeric)::int") == (
        "SELECT CAST(ROUND((CAST(5 AS DECIMAL(17, 0)) / CAST(2 AS DECIMAL(17, 0))), 0) AS INT)"
    )
    assert rewritten("SELECT 1.5::numeric::float8") == (
        "SELECT CAST(CAST(1.5 AS DECIMAL(2, 1)) AS DOUBLE)"
    )


def test_an_unquoted_column_has_its_type_whatever_the_case_of_its_name() -> None:
    """(The lookup was by the tree's lower-case name: ``Amount`` had no type, and a double
    was cast through its 17-digit text.)"""
    assert rewritten("SELECT Amount::numeric FROM m") == (
        "SELECT CAST(FORMAT_STRING('%.15g', amount) AS DECIMAL(38, 18)) FROM m"
    )


def test_float_text_python_reads_and_postgresql_does_not_is_left_to_spark() -> None:
    """(Python's float() read '1_000' as 1000; PostgreSQL refuses it, Spark's cast too.)"""
    assert "1_000" in rewritten("SELECT '1_000'::float8::numeric")
    assert rewritten("SELECT ' 1e3 '::float8::numeric") == "SELECT CAST(1000 AS DECIMAL(4, 0))"
