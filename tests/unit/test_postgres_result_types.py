"""The rewrites that give a query's result columns the types PostgreSQL gives them, as
Spark SQL text (no Spark).

``tests/integration/test_serve_postgres_types.py`` runs such queries on serve and on
PostgreSQL and compares what a client sees.
"""

from __future__ import annotations

from tests.unit.test_postgres_arithmetic_rewrites import rewritten


def test_row_number_rank_and_dense_rank_are_int8s() -> None:
    """PostgreSQL's are int8; Spark's are INTs, described to a client as int4."""
    for name in ("ROW_NUMBER", "RANK", "DENSE_RANK"):
        assert rewritten(f"SELECT {name.lower()}() OVER (ORDER BY i) AS n FROM t") == (
            f"SELECT CAST({name}() OVER (ORDER BY i NULLS LAST) AS BIGINT) AS n FROM t"
        )
    assert rewritten("SELECT row_number() OVER (ORDER BY i) + 1 FROM t") == (
        "SELECT CAST(ROW_NUMBER() OVER (ORDER BY i NULLS LAST) AS BIGINT) + 1 FROM t"
    )
    assert rewritten("SELECT ntile(2) OVER (ORDER BY i) FROM t") == (
        "SELECT NTILE(2) OVER (ORDER BY i NULLS LAST) FROM t"
    )
