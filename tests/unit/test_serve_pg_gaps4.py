"""Queries serve answered otherwise than PostgreSQL 15 until the typing rewrites' version
4, as Spark SQL text (no Spark).

``tests/integration/test_serve_postgres_types.py`` runs them on serve and on PostgreSQL and
compares what a client sees.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlglot
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
from tests.unit.test_postgres_arithmetic_rewrites import rewritten

from timeshard.server.dialect import DIALECT
from timeshard.server.query_rewrites import _numeric_casts
from timeshard.server.statements import SqlError


def assert_refused(sql: str, sqlstate: str, message: str, rewrite: Any = None) -> None:
    """``sql``'s rewrite (:func:`rewritten`, or ``rewrite``) raises PostgreSQL's error."""
    with pytest.raises(SqlError) as caught:
        (rewrite or rewritten)(sql)
    assert (caught.value.sqlstate, str(caught.value)) == (sqlstate, message), sql


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


def test_a_rank_or_offset_window_s_frame_is_dropped_as_postgresql_ignores_it() -> None:
    """PostgreSQL ignores a frame for ``row_number``, ``rank``, ``lag`` and the others of
    their kind; Spark refused any frame but the one it requires ("Window Frame ... must
    match the required frame", "Cannot specify window frame for lag function")."""
    assert rewritten(
        "SELECT row_number() OVER (ORDER BY i ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS n FROM t"
    ) == ("SELECT CAST(ROW_NUMBER() OVER (ORDER BY i NULLS LAST) AS BIGINT) AS n FROM t")
    assert rewritten(
        "SELECT lag(i) OVER w AS n FROM t WINDOW w AS (PARTITION BY s ORDER BY i ROWS "
        "UNBOUNDED PRECEDING)"
    ).startswith("SELECT LAG(i) OVER (PARTITION BY s ORDER BY i NULLS LAST) AS n FROM t")
    assert rewritten(
        "SELECT row_number() OVER w AS n FROM t WINDOW w AS (PARTITION BY s ROWS BETWEEN 1 "
        "PRECEDING AND 1 FOLLOWING)"
    ).startswith("SELECT CAST(ROW_NUMBER() OVER (PARTITION BY s ORDER BY NULL NULLS LAST)")
    # A frame of an aggregate's window is its own, and a named window of order and no
    # frame is Spark's as it is.
    for sql in (
        "SELECT sum(i) OVER (ORDER BY i ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS n FROM t",
        "SELECT rank() OVER w AS n, sum(i) OVER w AS m FROM t WINDOW w AS (ORDER BY i)",
    ):
        assert "OVER w" in rewritten(sql) or "1 FOLLOWING" in rewritten(sql), sql


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
    assert_refused(
        "WITH z AS (SELECT 1 AS k) SELECT * FROM z AS w(a, b)",
        "42P10",
        'table "w" has 1 columns available but 2 columns specified',
    )


def test_a_text_compared_with_a_number_is_postgresql_s_42883() -> None:
    """PostgreSQL casts no text to a number implicitly: ``s = 5`` of a text ``s`` is
    42883 when it plans the query. Spark cast the text, and answered 22P02 at a row whose
    text was no number (and rows where all were)."""
    shards = {"t": {"i": "INT", "s": "TEXT"}}

    def typed(sql: str) -> str:
        tree = normalize_identifiers(sqlglot.parse_one(sql, read=DIALECT), dialect=DIALECT)
        _numeric_casts(tree, shards.get)
        return tree.sql("spark")

    refused = {
        "SELECT * FROM t WHERE s = 5": "text = integer",
        "SELECT 1 FROM t WHERE 2.5 < s": "numeric < text",
        "SELECT 1 FROM t WHERE s >= i": "text >= integer",
        "SELECT 1 FROM t WHERE CAST(i AS TEXT) <> 3000000000": "text <> bigint",
        # Typed whatever else the query holds (a side that is no bare column too).
        "SELECT * FROM t WHERE s = i + 1": "text = integer",
        "SELECT s FROM t GROUP BY s HAVING max(s) = 5": "text = integer",
        # The other forms PostgreSQL resolves with these operators.
        "SELECT * FROM t WHERE s IN ('1', 2)": "text = integer",
        "SELECT * FROM t WHERE s NOT IN (1)": "text <> integer",
        "SELECT * FROM t WHERE s IN (SELECT 1)": "text = integer",
        "SELECT * FROM t WHERE s BETWEEN '1' AND 2": "text <= integer",
        "SELECT CASE s WHEN 5 THEN 1 END FROM t": "text = integer",
        "SELECT * FROM t WHERE s IS DISTINCT FROM 5": "text = integer",
    }
    for sql, operator in refused.items():
        assert_refused(sql, "42883", f"operator does not exist: {operator}", typed)
    # A string constant takes the other side's type; a number and a number pass.
    for sql in (
        "SELECT * FROM t WHERE s = '5'",
        "SELECT * FROM t WHERE i = '5' AND i = 5",
        "SELECT * FROM t WHERE s IN ('1', '2') AND i IN (1, 2) AND i BETWEEN 1 AND '2'",
        "SELECT CASE s WHEN '5' THEN 1 END FROM t WHERE s IN (SELECT s FROM t)",
    ):
        assert typed(sql) == sql, sql


def test_a_using_name_twice_on_a_side_past_a_lateral_or_a_parenthesized_join_is_42702() -> None:
    """PostgreSQL refuses these (42702); the check stopped at the ``LATERAL`` subquery and
    at the parenthesized join, and Spark joined on one of the two ``k`` columns."""
    refused = [
        "SELECT * FROM (SELECT 1 AS k, 2 AS k) AS a CROSS JOIN LATERAL (SELECT 1 AS m) AS l "
        "JOIN (SELECT 1 AS k) AS b USING (k)",
        "SELECT * FROM (SELECT 1 AS k) AS a CROSS JOIN LATERAL (SELECT 1 AS k) AS l "
        "JOIN (SELECT 1 AS k) AS b USING (k)",
        "SELECT * FROM ((SELECT 1 AS k, 2 AS k) AS a JOIN (SELECT 1 AS m) AS l ON TRUE) "
        "JOIN (SELECT 1 AS k) AS b USING (k)",
    ]
    for sql in refused:
        assert_refused(sql, "42702", 'common column name "k" appears more than once in left table')
    for sql in (
        "SELECT * FROM ((SELECT 1 AS k) AS a JOIN (SELECT 1 AS k) AS l USING (k)) "
        "JOIN (SELECT 1 AS k) AS b USING (k)",
        "SELECT * FROM (SELECT 1 AS k, 2 AS m) AS a CROSS JOIN LATERAL (SELECT a.m AS n) AS l "
        "JOIN (SELECT 1 AS k) AS b USING (k)",
    ):
        assert rewritten(sql) == sql, sql


def test_a_use_of_a_named_window_keeps_its_own_order() -> None:
    """``OVER (w ORDER BY i)`` ranks by ``i`` within ``w``'s partitions, as PostgreSQL
    does; the use written out as its definition had taken the definition's lack of order
    (every row ranked 1). Spark cannot parse the form, so it is written out."""
    for function in ("rank()", "lag(i)"):
        sql = f"SELECT {function} OVER (w ORDER BY i) AS r FROM t WINDOW w AS (PARTITION BY s)"
        assert "OVER (PARTITION BY s ORDER BY i NULLS LAST)" in rewritten(sql), sql


def test_a_natural_join_of_an_expression_of_no_known_name_stays_natural() -> None:
    """An expression whose PostgreSQL name is not known here (``?column?``) was joined
    ``USING (`*`)``, which Spark refuses: such a join is left to Spark's NATURAL; one
    under column aliases is named."""
    for sql in ("SELECT * FROM (SELECT i * 2 FROM t) AS q NATURAL JOIN (SELECT 1 + 1) AS r",):
        assert "NATURAL JOIN" in rewritten(sql), sql
    named = rewritten("SELECT * FROM (SELECT count(*) FROM t) AS q(i) NATURAL JOIN t")
    assert "JOIN t USING (`i`)" in named, named


def test_a_natural_join_joins_on_postgresql_s_names_of_unnamed_columns() -> None:
    """PostgreSQL names an unnamed ``sum(i)`` ``sum`` and a cast of ``k`` ``k``: a NATURAL
    join of two such sides joins on them, where Spark's names (``sum(i)``, ``sum(y)``)
    joined on ``i`` alone and answered more rows. They are named so for Spark too."""
    both = rewritten(
        "SELECT * FROM (SELECT i, sum(i) FROM t GROUP BY i) AS p "
        "NATURAL JOIN (SELECT i, sum(y) FROM t GROUP BY i) AS q"
    )
    assert "SUM(i) AS `sum`" in both and "USING (`i`, `sum`)" in both, both
    with pytest.raises(SqlError) as caught:  # k twice on the left, as PostgreSQL says
        rewritten("SELECT * FROM (SELECT i, CAST(i AS BIGINT) FROM t) AS q NATURAL JOIN t")
    assert caught.value.sqlstate == "42702"
    # A name not known here (PostgreSQL's ?column?) leaves the join to Spark.
    assert "NATURAL JOIN" in rewritten("SELECT * FROM (SELECT i + 1 FROM t) AS p NATURAL JOIN t")


def test_a_use_of_a_named_window_overriding_its_clauses_is_42p20() -> None:
    for sql, clause in (
        ("SELECT rank() OVER (w ORDER BY i) FROM t WINDOW w AS (ORDER BY s)", "ORDER BY"),
        ("SELECT rank() OVER (w PARTITION BY i) FROM t WINDOW w AS (ORDER BY s)", "PARTITION BY"),
    ):
        assert_refused(sql, "42P20", f'cannot override {clause} clause of window "w"')


def test_postgresql_s_names_of_a_case_a_cast_and_a_length_are_its_own() -> None:
    """PostgreSQL names a CASE after its ELSE's column or function (else ``case``), a
    cast of a CASE after its type, and ``char_length(s)`` ``char_length``, which sqlglot
    reads as ``length``: such columns are joined as PostgreSQL names them, or left to
    Spark where the name is not known here."""
    by_else = rewritten(
        "SELECT * FROM (SELECT CASE WHEN i > 0 THEN 1 ELSE i END FROM t) q NATURAL JOIN t"
    )
    assert "END AS `i`" in by_else and "USING (`i`)" in by_else, by_else
    for sql in (
        "SELECT * FROM (SELECT CAST(CASE WHEN i > 0 THEN 1 END AS INT) FROM t) q NATURAL JOIN t",
        "SELECT * FROM (SELECT i, char_length(s) FROM t) q "
        "NATURAL JOIN (SELECT i, length(s) FROM t) r",
    ):
        assert "NATURAL JOIN" in rewritten(sql), sql


def test_a_natural_join_inside_a_column_s_subquery_is_written_out_too() -> None:
    """The outer side's column was aliased with a copy of itself, which left the inner
    NATURAL join, found before it, in the detached original: Spark then could not
    resolve ``q2.sum``."""
    sql = rewritten(
        "SELECT * FROM (SELECT i, coalesce((SELECT max(q2.sum) FROM (SELECT i, sum(i) FROM t "
        "GROUP BY i) q2 NATURAL JOIN (SELECT i, sum(y) FROM t GROUP BY i) r2), 0) FROM t) q "
        "NATURAL JOIN t"
    )
    assert "NATURAL" not in sql and "USING (`i`, `sum`)" in sql, sql


def test_any_function_s_copy_of_a_named_window_with_an_order_of_its_own_is_written_out() -> None:
    """``sum(i) OVER (w ORDER BY i)`` copies ``w`` and orders it: PostgreSQL answers it,
    Spark cannot parse it. It is written out; what PostgreSQL refuses is its 42P20."""
    assert "SUM(i) OVER (PARTITION BY s ORDER BY i NULLS LAST) AS n" in rewritten(
        "SELECT sum(i) OVER (w ORDER BY i) AS n FROM t WINDOW w AS (PARTITION BY s)"
    )
    assert "OVER w AS n" in rewritten("SELECT sum(i) OVER w AS n FROM t WINDOW w AS (ORDER BY s)")
    refused = {
        "SELECT sum(i) OVER (w ORDER BY i) FROM t WINDOW w AS (ORDER BY s)": (
            'cannot override ORDER BY clause of window "w"'
        ),
        "SELECT sum(i) OVER (w ORDER BY i) FROM t WINDOW w AS (ROWS UNBOUNDED PRECEDING)": (
            'cannot copy window "w" because it has a frame clause'
        ),
    }
    for sql, message in refused.items():
        assert_refused(sql, "42P20", message)


def test_a_definition_of_the_window_clause_is_left_as_written() -> None:
    """A definition naming another (``w2 AS (w ROWS ...)``) was written out too, which
    let a name refer to one defined after it (PostgreSQL: 42704) and moved 42P20s onto
    the wrong name."""
    sql = (
        "SELECT sum(i) OVER w2 FROM t WINDOW w AS (PARTITION BY s), "
        "w2 AS (w ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)"
    )
    assert "w2 AS (w ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)" in rewritten(sql)
