"""The column types and errors a PostgreSQL client sees of a query on serve are
PostgreSQL 15's.

Each query's columns (their names and type OIDs) and rows are pinned as PostgreSQL 15
answers them; :func:`test_postgresql_answers_the_same` asks it over a table of the same
row, and :func:`test_postgresql_refuses_it_with_the_same_sqlstate` checks the errors are
its own.
"""

from __future__ import annotations

import decimal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from tests.integration.test_serve_numeric_cast import postgres_table, served_conn

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("i", pa.int32()), ("s", pa.string())])
ROW = (7, "x")
POSTGRES_TABLE = "CREATE TABLE t (i int4, s text)"

INT4, INT8, NUMERIC, TEXT = 23, 20, 1700, 25
D = decimal.Decimal

#: A query, and its columns (name, type OID) and rows as PostgreSQL answers them.
RANKS = [
    ("SELECT row_number() OVER (ORDER BY i) AS n FROM t", [("n", INT8)], [(1,)]),
    ("SELECT rank() OVER (ORDER BY i) AS n FROM t", [("n", INT8)], [(1,)]),
    ("SELECT dense_rank() OVER (ORDER BY i) AS n FROM t", [("n", INT8)], [(1,)]),
    ("SELECT row_number() OVER (ORDER BY i) + 1 AS n FROM t", [("n", INT8)], [(2,)]),
    ("SELECT ntile(2) OVER (ORDER BY i) AS n FROM t", [("n", INT4)], [(1,)]),
    ("SELECT row_number() OVER () AS n FROM t", [("n", INT8)], [(1,)]),
    ("SELECT rank() OVER (PARTITION BY s) + 1 AS n FROM t", [("n", INT8)], [(2,)]),
    ("SELECT ntile(2) OVER () AS n FROM t", [("n", INT4)], [(1,)]),
]
#: A string constant beside an integer is of the integer's type.
TEXT_OPERANDS = [
    ("SELECT '7' + 2 AS n", [("n", INT4)], [(9,)]),
    ("SELECT i * ' 2 ' AS n FROM t", [("n", INT4)], [(14,)]),
    ("SELECT ('7' - 1) / 4 AS n", [("n", INT4)], [(1,)]),
]
#: A derived table's column aliases name its columns, of their types.
COLUMN_ALIASES = [
    ("SELECT a, b FROM (SELECT 1, 2) AS t(a, b)", [("a", INT4), ("b", INT4)], [(1, 2)]),
    (
        "SELECT a / 2 AS n, b FROM (SELECT 7, 2.5) AS q(a, b)",
        [("n", INT4), ("b", NUMERIC)],
        [(3, D("2.5"))],
    ),
    ("SELECT k / 2 AS n FROM (SELECT i FROM t) AS z(k)", [("n", INT4)], [(3,)]),
    ("WITH z(k) AS (SELECT i FROM t) SELECT k / 2 AS n FROM z", [("n", INT4)], [(3,)]),
    ("SELECT * FROM (SELECT 1 AS x, 2 AS y) AS q(a)", [("a", INT4), ("y", INT4)], [(1, 2)]),
    ("SELECT a FROM (SELECT 1 AS x, s FROM t) AS q(a)", [("a", INT4)], [(1,)]),
    ("SELECT * FROM t AS x(a)", [("a", INT4), ("s", TEXT)], [(7, "x")]),
    ("SELECT x.a, s FROM t AS x(a)", [("a", INT4), ("s", TEXT)], [(7, "x")]),
    ("SELECT a / 2 AS n FROM t AS x(a, b)", [("n", INT4)], [(3,)]),
]
#: The column a join is USING is one, first, of its sides' common type.
USING = [
    ("SELECT i / 2 AS n FROM t JOIN t AS u USING (i)", [("n", INT4)], [(3,)]),
    (
        "SELECT k / 2 AS n FROM (SELECT 7 AS k) a JOIN (SELECT 7 AS k) b USING (k)",
        [("n", INT4)],
        [(3,)],
    ),
    (
        "SELECT * FROM (SELECT 7 AS k, 'a' AS v) a JOIN (SELECT 'b' AS w, 7 AS k) b USING (k)",
        [("k", INT4), ("v", TEXT), ("w", TEXT)],
        [(7, "a", "b")],
    ),
    (
        "SELECT * FROM t JOIN t AS u USING (i)",
        [("i", INT4), ("s", TEXT), ("s", TEXT)],
        [(7, "x", "x")],
    ),
    (
        "SELECT * FROM t JOIN (SELECT 7::int8 AS i, 'y' AS w) AS v USING (i)",
        [("i", INT8), ("s", TEXT), ("w", TEXT)],
        [(7, "x", "y")],
    ),
    (
        "SELECT i, t.i AS l FROM t JOIN (SELECT 7::int8 AS i) AS v USING (i)",
        [("i", INT8), ("l", INT4)],
        [(7, 7)],
    ),
]
#: What the typing rewrites' version 4 answers as PostgreSQL does (Spark refused the
#: window with XX000 and the CTE's aliases with 42802, and typed the NATURAL join's i as
#: one side's int4).
VERSION_4 = [
    (
        "SELECT row_number() OVER w AS n FROM t WINDOW w AS (PARTITION BY s)",
        [("n", INT8)],
        [(1,)],
    ),
    (
        "WITH z AS (SELECT 1 AS k, 2 AS m) SELECT * FROM z AS w(a)",
        [("a", INT4), ("m", INT4)],
        [(1, 2)],
    ),
    (  # PostgreSQL ignores the frame of a ranking or offset window; Spark refused it
        "SELECT row_number() OVER (ORDER BY i ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS n, "
        "lag(i) OVER w AS l FROM t WINDOW w AS (ORDER BY i ROWS UNBOUNDED PRECEDING)",
        [("n", INT8), ("l", INT4)],
        [(1, None)],
    ),
    (  # a copy of a named window, ordered: Spark could not parse it
        "SELECT sum(i) OVER (w ORDER BY i) AS n FROM t WINDOW w AS (PARTITION BY s)",
        [("n", INT8)],
        [(7,)],
    ),
    (  # PostgreSQL names an unnamed sum(i) "sum" and joins on it; Spark joined on i alone
        "SELECT * FROM (SELECT i, sum(i) FROM t GROUP BY i) AS p "
        "NATURAL JOIN (SELECT i, sum(i) - 7 AS sum FROM t GROUP BY i) AS q",
        [("i", INT4), ("sum", INT8)],
        [],
    ),
    (  # the common column of an int4 and an int8 side is an int8, first, once
        "SELECT * FROM t NATURAL JOIN (SELECT 7::int8 AS i, 1 AS z) AS v",
        [("i", INT8), ("s", TEXT), ("z", INT4)],
        [(7, "x", 1)],
    ),
]
#: A string constant compared with a text, in the forms version 4 checks a text and a
#: number in.
TEXT_CONSTANTS = [
    ("SELECT i FROM t WHERE s = ANY (ARRAY['x', '2'])", [("i", INT4)], [(7,)]),
    ("SELECT i FROM t WHERE (i, s) = (7, 'x')", [("i", INT4)], [(7,)]),
    ("SELECT i FROM t WHERE upper(s) = 'X'", [("i", INT4)], [(7,)]),
    (  # version 4: a string constant among integers is of their type (Spark's: an int8)
        "SELECT coalesce(s, 'a') AS a, coalesce(i, '5') AS b FROM t",
        [("a", TEXT), ("b", INT4)],
        [("x", 7)],
    ),
    (
        "SELECT * FROM t JOIN (SELECT 'x' AS s) AS v USING (s)",
        [("s", TEXT), ("i", INT4)],
        [("x", 7)],
    ),
    pytest.param(  # was an internal error (XX000): int() of 5,000 digits
        f"SELECT CASE WHEN i > 0 THEN '{'0' * 4999}1' ELSE 2 END AS n FROM t",
        [("n", INT4)],
        [(1,)],
        id="CASE WHEN i > 0 THEN '<4999 zeros>1' ELSE 2 END",
    ),
]
SAME_AS_POSTGRESQL = RANKS + TEXT_OPERANDS + COLUMN_ALIASES + USING + VERSION_4 + TEXT_CONSTANTS


@pytest.fixture(scope="module")
def conn(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A psycopg connection (autocommit) to a server over shard ``t`` of :data:`ROW`."""
    with served_conn(spark, Path(tmp_path_factory.mktemp("types")), SCHEMA, ROW) as connection:
        yield connection


@pytest.fixture(scope="module")
def postgres(postgres_dsn: str) -> Iterator[Any]:
    with postgres_table(postgres_dsn, POSTGRES_TABLE, ROW) as connection:
        yield connection


def answer(conn: Any, sql: str) -> tuple[list[tuple[str, int]], list[tuple[Any, ...]]]:
    """The columns (name, type OID) and the rows ``sql`` answers."""
    cur = conn.execute(sql)
    assert cur.description is not None
    return [(c.name, c.type_code) for c in cur.description], cur.fetchall()


@pytest.mark.parametrize(("sql", "columns", "rows"), SAME_AS_POSTGRESQL)
def test_a_query_answers_the_columns_and_rows_postgresql_does(
    conn: Any, sql: str, columns: list[tuple[str, int]], rows: list[tuple[Any, ...]]
) -> None:
    assert answer(conn, sql) == (columns, rows)


@pytest.mark.postgres
@pytest.mark.parametrize(("sql", "columns", "rows"), SAME_AS_POSTGRESQL)
def test_postgresql_answers_the_same(
    postgres: Any, sql: str, columns: list[tuple[str, int]], rows: list[tuple[Any, ...]]
) -> None:
    assert answer(postgres, sql) == (columns, rows)


#: A query PostgreSQL refuses, and the psycopg error its SQLSTATE is.
ERRORS = [
    ("SELECT '7.5' / 2 AS n", psycopg.errors.InvalidTextRepresentation),
    ("SELECT i / '7.5' AS n FROM t", psycopg.errors.InvalidTextRepresentation),
    ("SELECT '7.5' + 2 AS n", psycopg.errors.InvalidTextRepresentation),
    ("SELECT 'abc'::int AS n", psycopg.errors.InvalidTextRepresentation),
    ("SELECT '3000000000' / 2 AS n", psycopg.errors.NumericValueOutOfRange),
    # A column's text cast to an integer: Spark's cast failed with 22018 for both.
    ("SELECT s::int AS n FROM t", psycopg.errors.InvalidTextRepresentation),
    ("SELECT (s || '''')::int8 AS n FROM t", psycopg.errors.InvalidTextRepresentation),
    ("SELECT (i || '000000000000')::int AS n FROM t", psycopg.errors.NumericValueOutOfRange),
    (
        "SELECT * FROM (SELECT 1 AS k, 2 AS k) a JOIN (SELECT 1 AS k) b USING (k)",
        psycopg.errors.AmbiguousColumn,
    ),
    ("SELECT * FROM t AS x(a, b, c)", psycopg.errors.InvalidColumnReference),
    # Version 4: Spark cast the text 'x' to an integer and answered 22P02.
    ("SELECT i FROM t WHERE s = 5", psycopg.errors.UndefinedFunction),
    (
        "SELECT sum(i) OVER (w ORDER BY i) AS n FROM t WINDOW w AS (ROWS UNBOUNDED PRECEDING)",
        psycopg.errors.WindowingError,
    ),
    ("SELECT i FROM t WHERE s = i + 1", psycopg.errors.UndefinedFunction),
    ("SELECT i FROM t WHERE s IN ('1', 2)", psycopg.errors.UndefinedFunction),
    ("SELECT i FROM t WHERE s BETWEEN '1' AND 2", psycopg.errors.UndefinedFunction),
    ("SELECT CASE s WHEN 5 THEN 1 END AS n FROM t", psycopg.errors.UndefinedFunction),
    ("SELECT i FROM t WHERE s IS DISTINCT FROM 5", psycopg.errors.UndefinedFunction),
    # Version 4: = ANY/ALL, a row comparison, a text function: Spark cast the text.
    ("SELECT i FROM t WHERE s = ANY (ARRAY[1, 2])", psycopg.errors.UndefinedFunction),
    ("SELECT i FROM t WHERE s = ANY (SELECT 1)", psycopg.errors.UndefinedFunction),
    ("SELECT i FROM t WHERE s > ALL (SELECT i FROM t)", psycopg.errors.UndefinedFunction),
    ("SELECT i FROM t WHERE (s, i) = (1, 2)", psycopg.errors.UndefinedFunction),
    ("SELECT i FROM t WHERE (s, i) IN (SELECT 1, 2)", psycopg.errors.UndefinedFunction),
    ("SELECT i FROM t WHERE upper(s) = 5", psycopg.errors.UndefinedFunction),
    ("SELECT i FROM t WHERE s || 'x' = 5", psycopg.errors.UndefinedFunction),
    ("SELECT i FROM t WHERE substr(s, 1, 2) < 3", psycopg.errors.UndefinedFunction),
    ("SELECT i FROM t WHERE i || 'x' = 5", psycopg.errors.UndefinedFunction),
    # Version 4: a text function of a number, a coalesce of texts: Spark cast them.
    ("SELECT i FROM t WHERE upper(i) = 5", psycopg.errors.UndefinedFunction),
    ("SELECT lower(i) AS n FROM t", psycopg.errors.UndefinedFunction),
    ("SELECT i FROM t WHERE left(i, 1) = '7'", psycopg.errors.UndefinedFunction),
    ("SELECT i FROM t WHERE coalesce(s, 'a') = 5", psycopg.errors.UndefinedFunction),
    ("SELECT i FROM t WHERE greatest(s, 'a') = 5", psycopg.errors.UndefinedFunction),
    ("SELECT i FROM t WHERE CASE WHEN i > 0 THEN s END = 5", psycopg.errors.UndefinedFunction),
    ("SELECT lpad(i, 3, 'x', 'y') AS n FROM t", psycopg.errors.UndefinedFunction),
    ("SELECT trim(LEADING FROM i) AS n FROM t", psycopg.errors.UndefinedFunction),
    # Version 4: a COALESCE, GREATEST, LEAST or CASE of a text and a number: Spark cast
    # the text to a BIGINT (22P02 at 'x'), or refused greatest's with 42K09.
    ("SELECT coalesce(s, i) AS n FROM t", psycopg.errors.DatatypeMismatch),
    ("SELECT greatest(i, s) AS n FROM t", psycopg.errors.DatatypeMismatch),
    ("SELECT CASE WHEN i > 0 THEN s ELSE 5 END AS n FROM t", psycopg.errors.DatatypeMismatch),
    # Version 4 (review k37): PostgreSQL's first error, in the order it reads the query;
    # a number of 5,000 digits among integers (was an internal error, XX000); nvl is no
    # function of PostgreSQL's (was a COALESCE's 42804).
    ("SELECT upper(i) AS a, coalesce(s, i) AS b FROM t", psycopg.errors.UndefinedFunction),
    (
        "SELECT 1 AS n FROM t WHERE s = 5 AND coalesce(s, i) IS NULL",
        psycopg.errors.UndefinedFunction,
    ),
    pytest.param(
        f"SELECT coalesce(i, '{'1' * 5000}') AS n FROM t",
        psycopg.errors.NumericValueOutOfRange,
        id="coalesce(i, '<5000 digits>')",
    ),
    ("SELECT nvl(s, 5) AS n FROM t", psycopg.errors.UndefinedFunction),
    # Version 4: Spark joined a text and a number USING their name, casting the text.
    ("SELECT * FROM t JOIN (SELECT 5 AS s) AS v USING (s)", psycopg.errors.DatatypeMismatch),
    ("SELECT * FROM t NATURAL JOIN (SELECT 5 AS s, 7 AS i) AS v", psycopg.errors.DatatypeMismatch),
    (
        "SELECT t.i FROM t JOIN (SELECT 7 AS i) AS u USING (i) "
        "JOIN (SELECT 5.5 AS s) AS v USING (s)",
        psycopg.errors.DatatypeMismatch,
    ),
    # Version 4: Spark joined on one of the two k columns of the left side.
    (
        "SELECT * FROM (SELECT 1 AS k, 2 AS k) AS a CROSS JOIN LATERAL (SELECT 1 AS m) AS l "
        "JOIN (SELECT 1 AS k) AS b USING (k)",
        psycopg.errors.AmbiguousColumn,
    ),
    (
        "SELECT * FROM ((SELECT 1 AS k, 2 AS k) AS a JOIN (SELECT 1 AS m) AS l ON TRUE) "
        "JOIN (SELECT 1 AS k) AS b USING (k)",
        psycopg.errors.AmbiguousColumn,
    ),
]


@pytest.mark.parametrize(("sql", "error"), ERRORS)
def test_an_error_is_postgresql_s_sqlstate(conn: Any, sql: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        conn.execute(sql)


@pytest.mark.postgres
@pytest.mark.parametrize(("sql", "error"), ERRORS)
def test_postgresql_refuses_it_with_the_same_sqlstate(
    postgres: Any, sql: str, error: type[Exception]
) -> None:
    with pytest.raises(error):
        postgres.execute(sql)
