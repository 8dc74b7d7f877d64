"""PostgreSQL 15's operators of ``x NOT BETWEEN a AND b`` (``x < a OR x > b``), of ``x NOT
IN (a, b)`` (``x <> a AND x <> b``; of a subquery, ``NOT (x = ANY (...))``), and of ``NOT
x BETWEEN ...`` and ``NOT x IN (...)``, which negate ``x >= a AND x <= b`` and ``x = a OR
x = b``: its 42883 of a text and a number names them. sqlglot reads both negations as one
``NOT`` of the predicate; the parser marks the one written inside it
(:data:`~timeshard.server.dialect.NEGATED`).

A ``BETWEEN SYMMETRIC`` is PostgreSQL's ``(x >= a AND x <= b) OR (x >= b AND x <= a)``,
resolved in that order: its first error is the one of ``BETWEEN`` (``NOT BETWEEN
SYMMETRIC``'s of ``NOT BETWEEN``), as each case here shows. Checked against PostgreSQL 15.
"""

from __future__ import annotations

import pytest
from tests.unit.test_serve_42883 import refusal, typed

#: Per query, the operator PostgreSQL 15's 42883 names.
OPERATORS = {
    "SELECT s BETWEEN 1 AND 2 FROM t": "text >= integer",
    "SELECT s NOT BETWEEN 1 AND 2 FROM t": "text < integer",
    "SELECT s NOT BETWEEN '1' AND 2 FROM t": "text > integer",
    "SELECT s NOT BETWEEN 1 AND '2' FROM t": "text < integer",
    "SELECT i NOT BETWEEN 1 AND s FROM t": "integer > text",
    "SELECT s NOT BETWEEN 1 AND upper(i) FROM t": "text < integer",
    "SELECT (s, i) NOT BETWEEN (1, 2) AND (3, 4) FROM t": "text < integer",
    "SELECT NOT s BETWEEN 1 AND 2 FROM t": "text >= integer",
    "SELECT NOT (s BETWEEN 1 AND 2) FROM t": "text >= integer",
    "SELECT NOT (s NOT BETWEEN 1 AND 2) FROM t": "text < integer",
    "SELECT s BETWEEN SYMMETRIC 1 AND 2 FROM t": "text >= integer",
    "SELECT s BETWEEN ASYMMETRIC 1 AND 2 FROM t": "text >= integer",
    "SELECT s BETWEEN SYMMETRIC '1' AND 2 FROM t": "text <= integer",
    "SELECT s BETWEEN SYMMETRIC 1 AND '2' FROM t": "text >= integer",
    "SELECT s BETWEEN SYMMETRIC 1 AND upper(i) FROM t": "text >= integer",
    "SELECT s NOT BETWEEN SYMMETRIC 1 AND 2 FROM t": "text < integer",
    "SELECT s NOT BETWEEN SYMMETRIC '1' AND 2 FROM t": "text > integer",
    "SELECT s NOT BETWEEN SYMMETRIC 1 AND '2' FROM t": "text < integer",
    "SELECT s NOT BETWEEN SYMMETRIC 1 AND upper(i) FROM t": "text < integer",
    "SELECT i NOT BETWEEN SYMMETRIC 1 AND s FROM t": "integer > text",
    "SELECT s NOT IN (1, 2) FROM t": "text <> integer",
    "SELECT NOT s IN (1, 2) FROM t": "text = integer",
    "SELECT i FROM t WHERE NOT s IN (SELECT 1)": "text = integer",
    # Of a subquery, NOT (x = ANY (SELECT ...)).
    "SELECT i FROM t WHERE s NOT IN (SELECT 1)": "text = integer",
    "SELECT i FROM t WHERE (s, i) NOT IN (SELECT 1, 2)": "text = integer",
    "SELECT i FROM t WHERE (s, i) NOT IN ((1, 2))": "text <> integer",
}


@pytest.mark.parametrize("sql", sorted(OPERATORS))
def test_the_operator_is_postgresqls(sql: str) -> None:
    assert refusal(sql) == ("42883", f"operator does not exist: {OPERATORS[sql]}")


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT s BETWEEN SYMMETRIC '1' AND upper(i) FROM t",
        "SELECT s NOT BETWEEN upper(i) AND 1 FROM t",
    ],
)
def test_a_bound_is_read_where_postgresql_reads_it(sql: str) -> None:
    assert refusal(sql) == ("42883", "function upper(integer) does not exist")


def test_a_between_symmetric_runs_as_both_orders() -> None:
    """PostgreSQL 15: ``5 BETWEEN SYMMETRIC 7 AND 1`` is true, ``NOT BETWEEN`` false."""
    assert typed("SELECT i BETWEEN SYMMETRIC 7 AND 1 AS b FROM t") == (
        "SELECT (i BETWEEN 7 AND 1 OR i BETWEEN 1 AND 7) AS b FROM t"
    )
    assert typed("SELECT i NOT BETWEEN SYMMETRIC 7 AND 1 AS b FROM t") == (
        "SELECT NOT (i BETWEEN 7 AND 1 OR i BETWEEN 1 AND 7) AS b FROM t"
    )
