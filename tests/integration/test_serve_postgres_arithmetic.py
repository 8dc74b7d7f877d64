"""A quotient of integers, a float cast to an integer and a typed interval literal answer
as PostgreSQL's do.

PostgreSQL's ``/`` of two integers is an integer, truncated toward zero (``7 / 2`` is 3,
``-7 / 2`` is -3); Spark's is a double (3.5). PostgreSQL's cast of a float to an integer
rounds half to even (``2.5::float8::int`` is 2, ``3.5::float8::int`` 4); Spark's
truncates. PostgreSQL reads ``interval '03:04:05'`` as three hours, four minutes and five
seconds; Spark's parser refused it (42604).

The expected values are PostgreSQL 15's; :func:`test_the_answer_is_postgresql_s` asks it
over a table of the same row, and :func:`test_postgresql_refuses_it_with_the_same_sqlstate`
checks the errors are its own.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from tests.integration.test_serve_numeric_cast import answer, postgres_table, served_conn

pytestmark = pytest.mark.spark

D = decimal.Decimal
SCHEMA = pa.schema(
    [
        ("i", pa.int32()),
        ("s", pa.int16()),
        ("b", pa.int64()),
        ("f", pa.float64()),
        ("r", pa.float32()),
        ("d", pa.decimal128(10, 3)),
    ]
)
ROW = (7, 7, -7, 2.5, 3.5, D("1234.567"))
POSTGRES_TABLE = "CREATE TABLE t (i int4, s int2, b int8, f float8, r float4, d numeric(10, 3))"


@pytest.fixture(scope="module")
def conn(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A psycopg connection (autocommit) to a server over shard ``t`` of :data:`ROW`."""
    path = Path(tmp_path_factory.mktemp("arithmetic"))
    with served_conn(spark, path, SCHEMA, ROW) as connection:
        yield connection


@pytest.fixture(scope="module")
def postgres(postgres_dsn: str) -> Iterator[Any]:
    with postgres_table(postgres_dsn, POSTGRES_TABLE, ROW) as connection:
        yield connection


INT2, INT4, INT8, FLOAT8, NUMERIC, INTERVAL = 21, 23, 20, 701, 1700, 1186
HMS = datetime.timedelta(hours=3, minutes=4, seconds=5)

#: Query, parameters, the OID of its one column and the value of its one row, as
#: PostgreSQL answers each (:func:`test_the_answer_is_postgresql_s`).
QUOTIENTS = [
    ("SELECT 7 / 2 AS x", None, INT4, 3),
    ("SELECT -7 / 2 AS x", None, INT4, -3),
    ("SELECT 7 / -2 AS x", None, INT4, -3),
    ("SELECT 7 / 2 / 2 AS x", None, INT4, 1),
    ("SELECT i / 2 AS x FROM t", None, INT4, 3),
    ("SELECT b / 2 AS x FROM t", None, INT8, -3),
    ("SELECT s / 2::int2 AS x FROM t", None, INT2, 3),
    ("SELECT i / s AS x FROM t", None, INT4, 1),
    ("SELECT (i + 1) / 3 AS x FROM t", None, INT4, 2),
    ("SELECT count(*) / 2 AS x FROM t", None, INT8, 0),
    ("SELECT (SELECT max(i) FROM t) / 2 AS x", None, INT4, 3),
    ("SELECT sum(i) / 2 AS x FROM t", None, INT8, 3),
    ("SELECT 3000000000 / 2 AS x", None, INT8, 1500000000),
    ("SELECT (7 / 2)::numeric AS x", None, NUMERIC, D("3")),
    ("SELECT %s::int4 / 2 AS x", [7], INT4, 3),
    ("SELECT f / 2 AS x FROM t", None, FLOAT8, 1.25),
    # The input's column in HAVING (3.5 = 3 left the group out: no row).
    ("SELECT count(*) AS x FROM t GROUP BY i HAVING i / 2 = 3", None, INT8, 1),
    # Of its branches' common type; length is an int4, row_number and rank int8s.
    ("SELECT coalesce(i, 0) / 2 AS x FROM t", None, INT4, 3),
    ("SELECT coalesce(s, b) / 2 AS x FROM t", None, INT8, 3),
    ("SELECT coalesce(i, 0.0) / 2 AS x FROM t", None, NUMERIC, D("3.5000000000000000")),
    ("SELECT CASE WHEN i > 0 THEN i ELSE 0 END / 2 AS x FROM t", None, INT4, 3),
    ("SELECT CASE WHEN i > 0 THEN f END / 2 AS x FROM t", None, FLOAT8, 1.25),
    ("SELECT greatest(i, 1) / 2 AS x FROM t", None, INT4, 3),
    ("SELECT least(s, s) / s AS x FROM t", None, INT2, 1),
    ("SELECT nullif(i, 1) / 2 AS x FROM t", None, INT4, 3),
    ("SELECT length('abcdefg') / 2 AS x", None, INT4, 3),
    ("SELECT row_number() OVER (ORDER BY i) / 2 AS x FROM t", None, INT8, 0),
    ("SELECT rank() OVER (ORDER BY i) / 2 AS x FROM t", None, INT8, 0),
    ("SELECT count(*) FILTER (WHERE i > 0) / 2 AS x FROM t", None, INT8, 0),
    ("SELECT sum(i) FILTER (WHERE i > 0) / 2 AS x FROM t", None, INT8, 3),
    ("SELECT abs(b) / 2 AS x FROM t", None, INT8, 3),
    ("SELECT coalesce(f, 0)::int AS x FROM t", None, INT4, 2),
    # A column of a subquery or a CTE has its expression's type.
    ("SELECT i / 2 AS x FROM (SELECT i FROM t) z", None, INT4, 3),
    ("WITH z AS (SELECT i FROM t) SELECT i / 2 AS x FROM z", None, INT4, 3),
    ("SELECT z.n / 2 AS x FROM (SELECT count(*) + 6 AS n FROM t) z", None, INT8, 3),
    ("SELECT g::int AS x FROM (SELECT f + 1 AS g FROM t) z", None, INT4, 4),
    # NULL and a string constant are of unknown type: the other side's (Spark's: 3.5).
    ("SELECT NULL / 2 AS x", None, INT4, None),
    ("SELECT '7' / 2 AS x", None, INT4, 3),
    ("SELECT '7' / s AS x FROM t", None, INT2, 1),
    # PostgreSQL folds the minus into the constant: an int8, not a numeric negated.
    ("SELECT -9223372036854775808 / 2 AS x", None, INT8, -4611686018427387904),
]
FLOAT_CASTS = [
    ("SELECT 2.5::float8::int AS x", None, INT4, 2),
    ("SELECT 3.5::float8::int AS x", None, INT4, 4),
    ("SELECT (-2.7)::float8::int4 AS x", None, INT4, -3),
    ("SELECT '2.5'::float8::int AS x", None, INT4, 2),
    ("SELECT f::int AS x FROM t", None, INT4, 2),
    ("SELECT CAST(f AS integer) AS x FROM t", None, INT4, 2),
    ("SELECT r::bigint AS x FROM t", None, INT8, 4),
    ("SELECT (f * 3)::smallint AS x FROM t", None, INT2, 8),
    ("SELECT %s::float8::int AS x", [2.5], INT4, 2),
    # A numeric's rounds half away from zero (Spark's cast truncated: 1, -2, 1234, 2).
    ("SELECT 1.5::int AS x", None, INT4, 2),
    ("SELECT (-2.5)::int AS x", None, INT4, -3),
    ("SELECT d::int AS x FROM t", None, INT4, 1235),
    ("SELECT (i + 0.5)::int AS x FROM t", None, INT4, 8),
    ("SELECT avg(i + 1)::bigint AS x FROM t", None, INT8, 8),
]
INTERVALS = [
    ("SELECT interval '03:04:05' AS x", None, INTERVAL, HMS),
    ("SELECT interval '1 03:04:05' AS x", None, INTERVAL, HMS + datetime.timedelta(days=1)),
    ("SELECT '1 day 03:04:05'::interval AS x", None, INTERVAL, HMS + datetime.timedelta(days=1)),
    # sqlglot's reader kept '1 day' of these and dropped the rest; the dialect keeps them.
    ("SELECT interval '1 day 03:04:05' AS x", None, INTERVAL, HMS + datetime.timedelta(days=1)),
    (
        "SELECT interval '1 day 03:04' AS x",
        None,
        INTERVAL,
        datetime.timedelta(days=1, hours=3, minutes=4),
    ),
    ("SELECT interval '-1 day +02:00:00' AS x", None, INTERVAL, datetime.timedelta(hours=-22)),
]
SAME_AS_POSTGRESQL = QUOTIENTS + FLOAT_CASTS + INTERVALS


@pytest.mark.parametrize("prepare", [False, True])
@pytest.mark.parametrize(("sql", "params", "oid", "value"), SAME_AS_POSTGRESQL)
def test_a_query_answers_as_postgresql_does(
    conn: Any, sql: str, params: list[Any] | None, oid: int, value: Any, prepare: bool
) -> None:
    """With psycopg's extended protocol, its statement prepared or not."""
    assert answer(conn, sql, params, prepare) == (oid, value)


@pytest.mark.postgres
@pytest.mark.parametrize(("sql", "params", "oid", "value"), SAME_AS_POSTGRESQL)
def test_the_answer_is_postgresql_s(
    conn: Any, postgres: Any, sql: str, params: list[Any] | None, oid: int, value: Any
) -> None:
    assert answer(conn, sql, params, False) == answer(postgres, sql, params, False)


#: A query PostgreSQL refuses, and the psycopg error its SQLSTATE is.
ERRORS = [
    ("SELECT 7 / 0 AS x", psycopg.errors.DivisionByZero),
    ("SELECT i / (s - 7) AS x FROM t", psycopg.errors.DivisionByZero),
    ("SELECT (-2147483648)::int4 / -1 AS x", psycopg.errors.NumericValueOutOfRange),
    ("SELECT -2147483648 / -1 AS x", psycopg.errors.NumericValueOutOfRange),
    ("SELECT 3e9::float8::int AS x", psycopg.errors.NumericValueOutOfRange),
    ("SELECT 'NaN'::float8::int AS x", psycopg.errors.NumericValueOutOfRange),
    ("SELECT 32767.5::float8::int2 AS x", psycopg.errors.NumericValueOutOfRange),
]


@pytest.mark.parametrize(("sql", "error"), ERRORS)
def test_an_error_is_postgresql_s_sqlstate(conn: Any, sql: str, error: type[Exception]) -> None:
    """(``32767.5`` rounds to 32768, past int2; Spark's truncating cast made it 32767.)"""
    with pytest.raises(error):
        answer(conn, sql, None, False)


@pytest.mark.postgres
@pytest.mark.parametrize(("sql", "error"), ERRORS)
def test_postgresql_refuses_it_with_the_same_sqlstate(
    conn: Any, postgres: Any, sql: str, error: type[Exception]
) -> None:
    with pytest.raises(error):
        answer(postgres, sql, None, False)
