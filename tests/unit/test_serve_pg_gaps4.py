"""Queries serve answered otherwise than PostgreSQL 15 until the typing rewrites' version
4, as Spark SQL text (no Spark).

``tests/integration/test_serve_pg_gaps4.py`` runs them on serve and on PostgreSQL and
compares what a client sees.
"""

from __future__ import annotations

from tests.unit.test_postgres_arithmetic_rewrites import rewritten


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
