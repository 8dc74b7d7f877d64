"""Queries serve answered otherwise than PostgreSQL 15 until the typing rewrites' version
4 answer the columns, rows and errors PostgreSQL's do.

Each query's columns (their names and type OIDs) and rows are pinned as PostgreSQL 15
answers them, and :func:`test_postgresql_answers_the_same` asks it over a table of the
same row; each error is pinned as its SQLSTATE.
"""

from __future__ import annotations

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

#: A query, and its columns (name, type OID) and rows as PostgreSQL answers them.
SAME_AS_POSTGRESQL = [
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
    (  # the common column of an int4 and an int8 side is an int8, first, once
        "SELECT * FROM t NATURAL JOIN (SELECT 7::int8 AS i, 1 AS z) AS v",
        [("i", INT8), ("s", TEXT), ("z", INT4)],
        [(7, "x", 1)],
    ),
]


@pytest.fixture(scope="module")
def conn(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A psycopg connection (autocommit) to a server over shard ``t`` of :data:`ROW`."""
    with served_conn(spark, Path(tmp_path_factory.mktemp("gaps4")), SCHEMA, ROW) as connection:
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
    # Spark cast the text 'x' to an integer and answered 22P02.
    ("SELECT i FROM t WHERE s = 5", psycopg.errors.UndefinedFunction),
    # Spark joined on one of the two k columns of the left side.
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
