"""The rewrites that give a query's result columns the types PostgreSQL gives them, as
Spark SQL text (no Spark).

``tests/integration/test_serve_postgres_types.py`` runs such queries on serve and on
PostgreSQL and compares what a client sees.
"""

from __future__ import annotations

import pytest
from tests.unit.test_postgres_arithmetic_rewrites import rewritten

from timeshard.server.statements import SqlError


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


def test_a_rank_over_a_window_of_no_order_runs_as_postgresql_s_does() -> None:
    """PostgreSQL numbers the rows of a window of no ORDER BY in an order it picks, and
    ranks them all 1 (all are peers); Spark refused the window (XX000: "requires window
    to be ordered"). ``ORDER BY NULL`` is that: every row a peer, in Spark's order."""
    assert rewritten("SELECT row_number() OVER () AS n FROM t") == (
        "SELECT CAST(ROW_NUMBER() OVER (ORDER BY NULL NULLS LAST) AS BIGINT) AS n FROM t"
    )
    assert rewritten("SELECT rank() OVER (PARTITION BY s) FROM t") == (
        "SELECT CAST(RANK() OVER (PARTITION BY s ORDER BY NULL NULLS LAST) AS BIGINT) FROM t"
    )
    for name in ("percent_rank()", "cume_dist()", "ntile(2)", "lag(i)", "lead(i)"):
        assert "ORDER BY NULL" in rewritten(f"SELECT {name} OVER () FROM t"), name
    # A window of its own order, and an aggregate's, stay as they are.
    assert "BY NULL" not in rewritten("SELECT rank() OVER (ORDER BY i), sum(i) OVER () FROM t")


def test_a_string_side_of_an_integer_operator_has_the_other_side_s_type() -> None:
    """PostgreSQL's ``'7' + 2`` is the int4 9; Spark cast the text to a BIGINT (int8)."""
    assert rewritten("SELECT '7' + 2") == "SELECT CAST('7' AS INT) + 2"
    assert rewritten("SELECT s * ' 7 ' FROM t") == "SELECT s * CAST(' 7 ' AS SMALLINT) FROM t"
    assert rewritten("SELECT ('7' - 1) / 2") == "SELECT CAST((CAST('7' AS INT) - 1) DIV 2 AS INT)"
    for sql in ("SELECT '7' + 2.5", "SELECT '7' + x FROM t", "SELECT NULL + 2", "SELECT '7' + '2'"):
        assert "CAST('7' AS" not in rewritten(sql), sql


def test_text_that_is_no_integer_cast_to_one_is_postgresql_s_error() -> None:
    """PostgreSQL answers 22P02 for text that is no integer and 22003 for one past the
    type's range; Spark's cast answered 22018 for both."""
    refused = {
        "SELECT '7.5' / 2": ("22P02", 'invalid input syntax for type integer: "7.5"'),
        "SELECT i / '7.5' FROM t": ("22P02", 'invalid input syntax for type integer: "7.5"'),
        "SELECT '7.5' + 2": ("22P02", 'invalid input syntax for type integer: "7.5"'),
        "SELECT 'abc'::int8": ("22P02", 'invalid input syntax for type bigint: "abc"'),
        "SELECT '0x10' / 2": ("22P02", 'invalid input syntax for type integer: "0x10"'),
        "SELECT '3000000000' / 2": ("22003", 'value "3000000000" is out of range for type integer'),
        "SELECT '40000'::int2": ("22003", 'value "40000" is out of range for type smallint'),
    }
    for sql, (state, message) in refused.items():
        with pytest.raises(SqlError) as caught:
            rewritten(sql)
        assert (caught.value.sqlstate, str(caught.value)) == (state, message), sql
    assert rewritten("SELECT ' -7 '::int, TRY_CAST('x' AS INT)") == (
        "SELECT CAST(' -7 ' AS INT), TRY_CAST('x' AS INT)"
    )


def test_a_column_alias_of_a_subquery_or_cte_names_its_column_and_keeps_its_type() -> None:
    """PostgreSQL's ``SELECT a / 2 FROM (SELECT 7) AS q(a)`` is the int4 3; the aliased
    column was of no type known here, and its quotient Spark's double 3.5."""
    assert rewritten("SELECT a / 2 FROM (SELECT 7, 2.5) AS q(a, b)") == (
        "SELECT CAST(a DIV 2 AS INT) FROM (SELECT 7, 2.5) AS q(a, b)"
    )
    assert rewritten("SELECT k / 2 FROM (SELECT i FROM t) AS z(k)") == (
        "SELECT CAST(k DIV 2 AS INT) FROM (SELECT i FROM t) AS z(k)"
    )
    assert rewritten("WITH z(k) AS (SELECT i FROM t) SELECT k / 2 FROM z") == (
        "WITH z(k) AS (SELECT i FROM t) SELECT CAST(k DIV 2 AS INT) FROM z"
    )
    assert rewritten("WITH z(k) AS (SELECT i FROM t) SELECT m / 2 FROM z AS w(m)") == (
        "WITH z(k) AS (SELECT i FROM t) SELECT CAST(m DIV 2 AS INT) FROM z AS w(m)"
    )
    # The alias renames: the first list's name of the column is no longer one.
    assert "DIV" not in rewritten("SELECT i / 2 FROM (SELECT i FROM t) AS z(k)")


def test_column_aliases_fewer_than_the_columns_are_completed_with_their_names() -> None:
    """PostgreSQL names the columns past the aliases as the query does; Spark refused
    fewer aliases than columns (42802)."""
    assert rewritten("SELECT * FROM (SELECT 1 AS x, i FROM t) AS q(a)") == (
        "SELECT * FROM (SELECT 1 AS x, i FROM t) AS q(a, i)"
    )
    assert rewritten("WITH z(a) AS (SELECT 1 AS x, 2 AS y) SELECT y / 2 FROM z") == (
        "WITH z(a, y) AS (SELECT 1 AS x, 2 AS y) SELECT CAST(y DIV 2 AS INT) FROM z"
    )
    for sql in ("SELECT * FROM (SELECT 1, 2) AS q(a)", "SELECT * FROM (SELECT * FROM t) AS q(a)"):
        assert rewritten(sql).endswith("AS q(a)"), sql


def test_a_column_a_join_is_using_is_of_both_sides_common_type() -> None:
    """PostgreSQL's ``SELECT i / 2 FROM t JOIN t AS u USING (i)`` is the int4 3: the
    column ``USING`` joins is one, of its sides' common type. Two relations had it, so it
    was of no type known here, and its quotient Spark's double 3.5."""
    assert rewritten("SELECT i / 2 FROM t JOIN t AS u USING (i)") == (
        "SELECT CAST(i DIV 2 AS INT) FROM t JOIN t AS u USING (i)"
    )
    assert rewritten(
        "SELECT k / 2 FROM (SELECT 7 AS k) AS a JOIN (SELECT 7::int8 AS k) AS b USING (k)"
    ) == (
        "SELECT CAST(CAST(k AS BIGINT) DIV 2 AS BIGINT) FROM (SELECT 7 AS k) AS a "
        "JOIN (SELECT CAST(7 AS BIGINT) AS k) AS b USING (k)"
    )
    assert rewritten("SELECT x::int FROM t JOIN t AS u USING (x)") == (
        "SELECT CAST(RINT(x) AS INT) FROM t JOIN t AS u USING (x)"
    )
    # Not joined USING it: a name two relations share is ambiguous (refused by both).
    assert "DIV" not in rewritten("SELECT i / 2 FROM t JOIN t AS u ON t.i = u.i")
    assert "DIV" not in rewritten("SELECT i / 2 FROM t JOIN t AS u USING (s)")


@pytest.mark.parametrize(
    ("sql", "oid"),
    [
        ("SELECT $1::int AS n", 25),  # declared text (pgjdbc's setString: varchar)
        ("SELECT $1::int AS n", 1043),
        ("SELECT $1 + (SELECT max(i) FROM t) AS n", 0),  # undeclared, not inferred
        ("SELECT $1 / 2 AS n", 0),
        ("SELECT i FROM t WHERE i = $1::int", 25),
    ],
)
def test_a_described_statements_string_parameter_passes_the_integer_checks(
    sql: str, oid: int
) -> None:
    """Before: Describe bound a string parameter as the text 'null', which the integer
    checks refused (22P02), so a statement that returns rows was described as returning
    none (NoData) to asyncpg and pgjdbc."""
    from timeshard.server.statements import bind, placeholder

    rewritten(bind(sql, [placeholder(oid)]))  # no SqlError


def test_a_name_a_join_is_using_that_one_side_has_twice_is_postgresql_s_42702() -> None:
    """PostgreSQL refuses such a join (42702); Spark joined on one of the two columns and
    answered ``SELECT *`` with both, a result PostgreSQL never gives."""
    refused = {
        "SELECT * FROM (SELECT 1 AS k, 2 AS k) AS a JOIN (SELECT 1 AS k) AS b USING (k)": "left",
        "SELECT * FROM (SELECT 1 AS k) AS a JOIN (SELECT 1 AS k, 2 AS k) AS b USING (k)": "right",
        "SELECT * FROM t JOIN t AS u ON TRUE JOIN t AS v USING (i)": "left",
        "SELECT * FROM t AS a(k, m) JOIN (SELECT 1 AS k, 2 AS k) AS b USING (k)": "right",
    }
    for sql, side in refused.items():
        with pytest.raises(SqlError) as caught:
            rewritten(sql)
        message = f'common column name "k" appears more than once in {side} table'
        expected = ("42702", message.replace('"k"', '"i"') if "v USING (i)" in sql else message)
        assert (caught.value.sqlstate, str(caught.value)) == expected, sql
    for sql in (
        "SELECT * FROM t JOIN t AS u USING (i) JOIN t AS v USING (i)",  # joined: one column
        "SELECT * FROM (SELECT 1 AS k, 2 AS m, 3 AS m) AS a JOIN (SELECT 1 AS k) AS b USING (k)",
        "SELECT * FROM t JOIN (SELECT 1 AS k, 2 AS k) AS b ON TRUE",
        # A comma binds looser than JOIN: the USING's left side is b alone.
        "SELECT * FROM t AS a(k), t AS b(k) JOIN t AS c(k) USING (k)",
        "SELECT a.m FROM (SELECT 1 AS k, 2 AS m) AS a, (SELECT 1 AS k) AS b "
        "JOIN (SELECT 1 AS k) AS c USING (k)",
    ):
        rewritten(sql)  # no SqlError


def test_a_shard_s_column_aliases_fewer_than_its_columns_are_completed_with_its_names() -> None:
    """PostgreSQL names a shard's columns past its aliases (``t AS x(a)``) as the shard
    does; Spark refused fewer aliases than columns (42802)."""
    assert rewritten("SELECT * FROM t AS x(a)") == "SELECT * FROM t AS x(a, s, y, b, x, r)"
    assert rewritten("SELECT x.d FROM u AS x(d)") == "SELECT x.d FROM u AS x(d)"
    # A CTE of a shard's name is not the shard: the CTE's names complete them.
    assert rewritten("WITH t AS (SELECT 1 AS k, 2 AS m) SELECT * FROM t AS x(a)").endswith(
        "AS x(a, m)"
    )


def test_more_column_aliases_than_columns_are_postgresql_s_42p10() -> None:
    """PostgreSQL refuses them (42P10); Spark's error was 42802."""
    refused = {
        "SELECT * FROM u AS x(a, b)": 'table "x" has 1 columns available but 2 columns specified',
        "SELECT * FROM (SELECT 1) AS q(a, b)": (
            'table "q" has 1 columns available but 2 columns specified'
        ),
        "WITH z(a, b) AS (SELECT 1) SELECT * FROM z": (
            'WITH query "z" has 1 columns available but 2 columns specified'
        ),
    }
    for sql, message in refused.items():
        with pytest.raises(SqlError) as caught:
            rewritten(sql)
        assert (caught.value.sqlstate, str(caught.value)) == ("42P10", message), sql


def test_a_column_a_join_is_using_of_sides_of_two_types_is_of_their_common_type() -> None:
    """PostgreSQL's ``SELECT * FROM t JOIN u USING (i)`` of an int4 ``t.i`` and an int8
    ``u.i`` answers ``i`` as an int8; Spark's is the left side's, an int4."""
    int8 = "(SELECT CAST(7 AS BIGINT) AS i) AS v"
    assert rewritten(f"SELECT * FROM t JOIN {int8} USING (i)") == (
        f"SELECT CAST(i AS BIGINT) AS i, * EXCEPT (i) FROM t JOIN {int8} USING (i)"
    )
    assert rewritten(f"SELECT i, i + 1 AS n FROM t JOIN {int8} USING (i) WHERE i > 0") == (
        f"SELECT CAST(i AS BIGINT) AS i, CAST(i AS BIGINT) + 1 AS n FROM t JOIN {int8} "
        "USING (i) WHERE CAST(i AS BIGINT) > 0"
    )
    # Of one type, or a side's own column, it stays as it is.
    for sql in (
        "SELECT * FROM t JOIN t AS u USING (i)",
        f"SELECT t.i FROM t JOIN {int8} USING (i)",
    ):
        assert rewritten(sql) == sql, sql


def test_a_shard_s_columns_under_column_aliases_are_typed_by_them() -> None:
    """PostgreSQL's ``SELECT a / 2 FROM t AS x(a)`` is the int4 3; the aliased column was
    of no type known here, and its quotient Spark's double 3.5."""
    assert rewritten("SELECT a / 2 FROM t AS x(a)") == (
        "SELECT CAST(a DIV 2 AS INT) FROM t AS x(a, s, y, b, x, r)"
    )
    assert rewritten("SELECT x.k / 2 FROM t AS x(k)").startswith("SELECT CAST(x.k DIV 2 AS INT)")
    # ``d`` of u, a decimal, renamed ``i``: typed by its own type, not by t's ``i``.
    assert rewritten("SELECT i / 2 FROM u AS q(i)") == "SELECT i / 2 FROM u AS q(i)"


def test_a_string_spark_failed_to_cast_to_an_integer_is_postgresql_s_error() -> None:
    """A column's text cast to an integer failed with Spark's 22018 (CAST_INVALID_INPUT)
    whatever the text; PostgreSQL says 22P02 for no integer, 22003 for one out of range."""
    from timeshard.server.rows import _cast_error

    def error(value: str, target: str = '"INT"', **kwargs: str) -> tuple[str, str] | None:
        parameters = {"expression": value, "sourceType": kwargs.get("source", '"STRING"')}
        found = _cast_error(
            kwargs.get("condition", "CAST_INVALID_INPUT"), {**parameters, "targetType": target}
        )
        return None if found is None else (found.sqlstate, str(found))

    assert error("'abc'") == ("22P02", 'invalid input syntax for type integer: "abc"')
    assert error("'it\\'s'", '"BIGINT"') == (
        "22P02",
        'invalid input syntax for type bigint: "it\'s"',
    )
    assert error("'3000000000'") == ("22003", 'value "3000000000" is out of range for type integer')
    assert error("'70000'", '"SMALLINT"') == (
        "22003",
        'value "70000" is out of range for type smallint',
    )
    assert error("' 7 '") is None  # PostgreSQL reads it: Spark's own error stands
    assert error("'7.5'", '"DOUBLE"') is None
    assert error("1.5", source='"DOUBLE"') is None
    assert error("'abc'", condition="DIVIDE_BY_ZERO") is None
