"""Queries serve answered otherwise than PostgreSQL 15 until the typing rewrites' version
4, as Spark SQL text (no Spark).

``tests/integration/test_serve_pg_gaps4.py`` runs them on serve and on PostgreSQL and
compares what a client sees.
"""

from __future__ import annotations

import pytest
from tests.unit.test_postgres_arithmetic_rewrites import rewritten

from timeshard.server.statements import SqlError


def test_a_rank_over_a_named_window_of_no_order_runs_as_postgresql_s_does() -> None:
    """Spark refused ``row_number() OVER w`` of a ``WINDOW w AS (PARTITION BY s)`` (XX000:
    "requires window to be ordered"); PostgreSQL numbers its rows in an order of its own.
    The use is written out as the definition, ordered by NULL, as an inline one is."""
    assert rewritten("SELECT row_number() OVER w AS n FROM t WINDOW w AS (PARTITION BY s)") == (
        "SELECT CAST(ROW_NUMBER() OVER (PARTITION BY s ORDER BY NULL NULLS LAST) AS BIGINT) "
        "AS n FROM t WINDOW w AS (PARTITION BY s)"
    )
    assert rewritten("SELECT ntile(2) OVER w2, sum(i) OVER w FROM t WINDOW w AS (), w2 AS (w)") == (
        "SELECT NTILE(2) OVER (ORDER BY NULL NULLS LAST), SUM(i) OVER w FROM t "
        "WINDOW w AS (), w2 AS (w)"
    )
    # Ordered where it is defined, or not defined here: as it was.
    for sql in (
        "SELECT rank() OVER w FROM t WINDOW w AS (PARTITION BY s ORDER BY i)",
        "SELECT rank() OVER w2 FROM t WINDOW w AS (ORDER BY i), w2 AS (w)",
        "SELECT rank() OVER v FROM t WINDOW w AS (PARTITION BY s)",
    ):
        assert "BY NULL" not in rewritten(sql), sql


def test_a_cte_s_reader_s_column_aliases_fewer_than_its_columns_are_completed() -> None:
    """PostgreSQL names the columns of ``z AS w(a)`` past the aliases as the CTE ``z``
    does; Spark refused fewer aliases than columns (42802)."""
    cte = "WITH z AS (SELECT 7 AS k, 2 AS m) "
    assert rewritten(cte + "SELECT * FROM z AS w(a)") == cte + "SELECT * FROM z AS w(a, m)"
    assert rewritten(cte + "SELECT a / 2 FROM z AS w(a)") == (
        cte + "SELECT CAST(a DIV 2 AS INT) FROM z AS w(a, m)"
    )
    # The CTE's own column aliases name its columns; a later CTE reads an earlier one.
    assert rewritten("WITH z(p) AS (SELECT 1 AS k, 2 AS m) SELECT * FROM z AS w(a)").endswith(
        "FROM z AS w(a, m)"
    )
    two = "WITH z AS (SELECT 7 AS k, 2 AS m), y AS (SELECT * FROM z AS w(a{})) SELECT * FROM y"
    assert rewritten(two.format("")) == two.format(", m")
    # Not known here (a *, a CTE defined after its reader): as they were.
    for sql in (
        "WITH z AS (SELECT * FROM t) SELECT * FROM z AS w(a)",
        "WITH y AS (SELECT * FROM z AS w(a)), z AS (SELECT 1 AS k, 2 AS m) SELECT * FROM y",
    ):
        assert rewritten(sql) == sql, sql
    with pytest.raises(SqlError) as caught:
        rewritten("WITH z AS (SELECT 1 AS k) SELECT * FROM z AS w(a, b)")
    assert (caught.value.sqlstate, str(caught.value)) == (
        "42P10",
        'table "w" has 1 columns available but 2 columns specified',
    )
