"""SQL with intervals through ``timeshard serve``, as PostgreSQL 15 answers it: intervals
nested in arrays, maps and structs; a prepared statement's rows of the types its Describe
answered, whatever interval is bound; string casts to interval read as PostgreSQL reads
the text (literals, parameters, TRY_CAST, NULL, every string constant form); Spark's
calendar intervals sent as PostgreSQL's interval. One served location for all (a table
``t`` of one row)."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from tests.integration.test_serve_declared_types_spark import describe_prepared
from tests.integration.test_serve_time_params_spark import served_pgconn

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def pgconn(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    path = Path(tmp_path_factory.mktemp("interval_sql"))
    with served_pgconn(spark, path, pa.schema([("one", pa.int64())]), (1,)) as conn:
        yield conn


# --- nested intervals ---
# A year-month or calendar interval inside an array, map or struct is sent as a day-time
# one nested the same way is: an array of them as PostgreSQL's ``interval[]``
# (``{"1 year",...}``), a struct or map as JSON holding each interval's text. PySpark
# collects neither, and only a top-level column of them was turned into its months or
# text: a nested one failed the query (XX000, ``...fromInternal is not implemented``).


@pytest.mark.parametrize(
    ("sql", "oid", "text"),
    [
        (
            b"SELECT array(INTERVAL '1' YEAR, INTERVAL '-14' MONTH, NULL) FROM t",
            1187,
            b'{"1 year","-1 years -2 mons",NULL}',
        ),
        (b"SELECT array(INTERVAL '3' DAY) FROM t", 1187, b'{"3 days"}'),
        (
            b"SELECT named_struct('a', INTERVAL '2-3' YEAR TO MONTH, 'b', "
            b"array(INTERVAL '5' MONTH)) FROM t",
            114,
            b'{"a":"2 years 3 mons","b":["5 mons"]}',
        ),
        (b"SELECT named_struct('a', INTERVAL '2' DAY) FROM t", 114, b'{"a":"2 days"}'),
        (
            b"SELECT map_from_arrays(array(INTERVAL '1' YEAR), array(INTERVAL '1' MONTH)) FROM t",
            114,
            b'{"1 year":"1 mon"}',
        ),
        (b"SELECT array(array(INTERVAL '1' YEAR)) FROM t", 114, b'[["1 year"]]'),
        # calendar intervals (months with days or time) nested so, which failed the query
        # (XX000, ``CalendarIntervalType.fromInternal is not implemented``)
        (b"SELECT array('1 mon 1 day'::interval, NULL) FROM t", 1187, b'{"1 mon 1 day",NULL}'),
        (
            b"SELECT named_struct('a', make_interval(0, 1), 'b', "
            b"array(make_interval(0, 0, 0, 1, 2))) FROM t",
            114,
            b'{"a":"1 mon","b":["1 day 02:00:00"]}',
        ),
        (b"SELECT map('k', '-1 mon 1 day'::interval) FROM t", 114, b'{"k":"-1 mons +1 day"}'),
        # Spark's map(k, v, ...), which sqlglot's PostgreSQL reader made map_from_arrays
        # (42K09: its keys are no array)
        (b"SELECT map('a', INTERVAL '1' YEAR, 'b', NULL) FROM t", 114, b'{"a":"1 year","b":null}'),
        (b"SELECT map(one, INTERVAL '2' DAY) FROM t", 114, b'{"1":"2 days"}'),
    ],
)
def test_a_nested_interval_is_sent_as_a_day_time_one_nested_so(
    pgconn: Any, sql: bytes, oid: int, text: bytes
) -> None:
    result = pgconn.exec_params(sql, [])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert (result.ftype(0), result.get_value(0, 0)) == (oid, text)
    assert pgconn.prepare(b"", sql, []).status == psycopg.pq.ExecStatus.COMMAND_OK
    assert describe_prepared(pgconn).ftype(0) == oid


# --- interval describe ---
# A prepared statement's rows are sent as its Describe described them, whatever kind
# of interval a parameter binds: ``DATE '2020-01-01' + $1`` (``$1`` an interval) is
# described as a TIMESTAMP (its placeholder a day-time interval), and a year-month value
# made the rows DATEs (1082) under that description. They are now the TIMESTAMP
# described, as PostgreSQL's ``date + interval`` is a timestamp whatever the interval: a
# timestamp without time zone (1114), which Spark's TIMESTAMP (timestamptz, 1184) was not.

DATE_PLUS = b"SELECT DATE '2020-01-01' + $1 AS d, $1 AS i FROM t"


@pytest.mark.parametrize(
    ("value", "row"),
    [
        (b"1 day", [b"2020-01-02 00:00:00", b"1 day"]),
        (b"1 year", [b"2021-01-01 00:00:00", b"1 year"]),
        (b"-2 mons", [b"2019-11-01 00:00:00", b"-2 mons"]),
        (None, [None, None]),
    ],
)
def test_the_rows_have_the_types_described(
    pgconn: Any, value: bytes | None, row: list[bytes | None]
) -> None:
    assert pgconn.prepare(b"", DATE_PLUS, [1186]).status == psycopg.pq.ExecStatus.COMMAND_OK
    described = describe_prepared(pgconn)
    described_types = [described.ftype(i) for i in range(described.nfields)]
    result = pgconn.exec_prepared(b"", [value])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    sent_types = [result.ftype(i) for i in range(result.nfields)]
    assert (described_types, sent_types) == ([1114, 1186], [1114, 1186])
    assert [result.get_value(0, i) for i in range(result.nfields)] == row


def test_an_unprepared_statement_of_a_year_month_value_is_described_so(pgconn: Any) -> None:
    """libpq's exec_params: Parse, Bind, a Describe of the portal, Execute."""
    result = pgconn.exec_params(DATE_PLUS, [b"1 year"], [1186])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert (result.ftype(0), result.get_value(0, 0)) == (1114, b"2021-01-01 00:00:00")


@pytest.mark.parametrize(
    ("sql", "value"),
    [
        (b"SELECT DATE '2026-01-01' + INTERVAL '1 day' FROM t", b"2026-01-02 00:00:00"),
        (b"SELECT DATE '2026-01-31' + INTERVAL '1' MONTH FROM t", b"2026-02-28 00:00:00"),
        (b"SELECT DATE '2026-01-01' - '1 mon 1 day'::interval FROM t", b"2025-11-30 00:00:00"),
        (b"SELECT INTERVAL '1 hour' + DATE '2026-01-01' FROM t", b"2026-01-01 01:00:00"),
        (b"SELECT CAST('2026-01-01' AS DATE) - (-INTERVAL '2' DAY) FROM t", b"2026-01-03 00:00:00"),
        # the cast is the string's, not a sum of intervals' (as sqlglot read it)
        (b"SELECT INTERVAL '1 day' + '2020-01-01'::date FROM t", b"2020-01-02 00:00:00"),
    ],
)
def test_a_date_moved_by_an_interval_is_a_timestamp_without_time_zone(
    pgconn: Any, sql: bytes, value: bytes
) -> None:
    """PostgreSQL's ``date + interval`` and ``date - interval`` are a timestamp (1114)
    whatever the interval; Spark's were a DATE (1082) for whole days or months, else its
    TIMESTAMP (1184)."""
    result = pgconn.exec_params(sql, [])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert (result.ftype(0), result.get_value(0, 0)) == (1114, value)
    assert pgconn.prepare(b"", sql, []).status == psycopg.pq.ExecStatus.COMMAND_OK
    assert describe_prepared(pgconn).ftype(0) == 1114


# --- interval literals ---
# A string cast to interval (``'1 day'::interval``, ``CAST('2 mons' AS interval)``) is
# the interval PostgreSQL's input reads: Spark's own cast of the text made a calendar
# interval, which PySpark cannot collect (XX000, ``CalendarIntervalType.fromInternal is
# not implemented``), and read PostgreSQL's ``mon`` as nothing, so a timestamp moved by
# ``'1 mon 1 day'::interval`` was NULL. Text PostgreSQL refuses answers its SQLSTATE.


@pytest.mark.parametrize(
    ("sql", "value"),
    [
        (b"SELECT '1 day 02:03:04'::interval FROM t", b"1 day 02:03:04"),
        (b"SELECT CAST('2 years 3 mons' AS interval) FROM t", b"2 years 3 mons"),
        (b"SELECT '1 day'::interval + '2 hours'::interval FROM t", b"1 day 02:00:00"),
        (
            b"SELECT CAST(TIMESTAMP '2026-01-01 00:00:00' - '1 mon 1 day'::interval AS STRING)"
            b" FROM t",
            b"2025-11-30 00:00:00",
        ),
        (
            b"SELECT CAST(TIMESTAMP '2026-01-01 00:00:00' + '1 mon 00:00:01.5'::interval AS "
            b"STRING) FROM t",
            b"2026-02-01 00:00:01.5",
        ),
    ],
)
def test_a_string_cast_to_interval_is_postgresql_s_interval(
    pgconn: Any, sql: bytes, value: bytes
) -> None:
    result = pgconn.exec_params(sql, [])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert result.get_value(0, 0) == value


@pytest.mark.parametrize(
    ("text", "sqlstate"),
    [(b"soon", b"22007"), (b"2147483648 months", b"22015"), (b"178956971 years", b"22008")],
)
def test_text_postgresql_refuses_answers_its_sqlstate(
    pgconn: Any, text: bytes, sqlstate: bytes
) -> None:
    result = pgconn.exec_params(b"SELECT '" + text + b"'::interval FROM t", [])
    assert result.error_field(ord("C")) == sqlstate, result.error_message


# --- interval param cast ---
# A string parameter a prepared statement casts to interval itself (``$1::interval``,
# undeclared or text) is described as PostgreSQL describes it: an undeclared one is an
# interval (1186), as PostgreSQL infers it, and the statement's columns are those its
# Execute sends. Its Describe placeholder was the string ``'null'``, which the string cast
# to interval read as an error (22007): the statement was described as answering no rows
# (NoData) while its Execute sent rows.


@pytest.mark.parametrize(
    ("sql", "types", "value", "described", "row"),
    [
        (
            b"SELECT TIMESTAMP '2026-01-01 00:00:00' - $1::interval AS x FROM t",
            [],
            b"1 day",
            ([1186], [1114]),  # PostgreSQL's TIMESTAMP '...' is without time zone
            [b"2025-12-31 00:00:00"],
        ),
        (
            b"SELECT CAST(($1) AS interval) AS i FROM t",
            [0],
            b"2 mons",
            ([1186], [1186]),
            [b"2 mons"],
        ),
        (b"SELECT $1::interval AS i FROM t", [25], b"1 day", ([25], [1186]), [b"1 day"]),
        (
            b"SELECT DATE '2020-01-01' + $1::interval AS d FROM t",
            [],
            b"1 year",
            ([1186], [1114]),
            [b"2021-01-01 00:00:00"],
        ),
    ],
)
def test_a_string_cast_to_interval_is_described_as_execute_sends_it(
    pgconn: Any,
    sql: bytes,
    types: list[int],
    value: bytes,
    described: tuple[list[int], list[int]],
    row: list[bytes],
) -> None:
    assert pgconn.prepare(b"", sql, types).status == psycopg.pq.ExecStatus.COMMAND_OK
    answer = describe_prepared(pgconn)
    params = [answer.param_type(i) for i in range(answer.nparams)]
    assert (params, [answer.ftype(i) for i in range(answer.nfields)]) == described
    result = pgconn.exec_prepared(b"", [value])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert [result.ftype(i) for i in range(result.nfields)] == described[1]
    assert [result.get_value(0, i) for i in range(result.nfields)] == row


# --- interval string forms ---
# The string cast to interval (``'1 day'::interval``, read as PostgreSQL's input) left
# gaps that went to Spark's calendar cast, whose value PySpark cannot collect (XX000,
# ``CalendarIntervalType.fromInternal is not implemented``): a NULL cast to interval
# (``NULL::interval``, an undeclared ``$1::interval`` bound to NULL), and PostgreSQL's
# other string constants (``E'...'``, ``$$...$$``, ``U&'...'``). A ``TRY_CAST`` of text
# that is no interval answered 22007 where a try_cast is NULL. Each is now a day-time
# NULL or the interval its text reads as.


@pytest.mark.parametrize(
    ("sql", "params", "value"),
    [
        (b"SELECT TRY_CAST('x' AS interval) AS i FROM t", [], None),
        (b"SELECT TRY_CAST('2 days' AS interval) AS i FROM t", [], b"2 days"),
        (b"SELECT NULL::interval AS i FROM t", [], None),
        (b"SELECT $1::interval AS i FROM t", [None], None),
        (b"SELECT E'1 day'::interval AS i FROM t", [], b"1 day"),
        (b"SELECT $$1 day$$::interval AS i FROM t", [], b"1 day"),
        (b"SELECT U&'1\\0020day'::interval AS i FROM t", [], b"1 day"),
    ],
)
def test_each_is_postgresql_s_interval(
    pgconn: Any, sql: bytes, params: list[bytes | None], value: bytes | None
) -> None:
    result = pgconn.exec_params(sql, params)
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert (result.ftype(0), result.get_value(0, 0)) == (1186, value)


# --- calendar interval columns ---
# A column of Spark's calendar interval (months with days or time: ``'1 mon 1 day'::
# interval``, ``make_interval(1)``) is PostgreSQL's interval (1186), written as its
# ``postgres`` output writes it (checked against PostgreSQL 15), in a Describe of the
# statement and in its rows alike. PySpark could not collect one (XX000,
# ``CalendarIntervalType.fromInternal is not implemented``), and it was described as
# text (25).


@pytest.mark.parametrize(
    ("sql", "value"),
    [
        (b"SELECT '1 mon 1 day'::interval AS i FROM t", b"1 mon 1 day"),
        (b"SELECT make_interval(1) AS i FROM t", b"1 year"),
        (
            b"SELECT '-1 mon -2 days -03:04:05.5'::interval AS i FROM t",
            b"-1 mons -2 days -03:04:05.5",
        ),
        (
            b"SELECT '1 year 2 mons 3 days 00:00:00.000001'::interval AS i FROM t",
            b"1 year 2 mons 3 days 00:00:00.000001",
        ),
        (b"SELECT CAST(NULL AS INTERVAL) AS i FROM t", None),
    ],
)
def test_a_calendar_interval_column_is_postgresql_s_interval(
    pgconn: Any, sql: bytes, value: bytes | None
) -> None:
    assert pgconn.prepare(b"", sql, []).status == psycopg.pq.ExecStatus.COMMAND_OK
    described = describe_prepared(pgconn)
    result = pgconn.exec_prepared(b"", [])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert (described.ftype(0), result.ftype(0), result.get_value(0, 0)) == (1186, 1186, value)


# --- nested intervals, read by a driver (last: it shares the connection) ---


def test_a_driver_reads_an_array_of_them_as_intervals(pgconn: Any) -> None:
    """psycopg's ``interval[]`` loader reads it (its ``timedelta`` takes a year as 365 days)."""
    conn = psycopg.Connection(pgconn)
    conn.autocommit = True  # the module's other tests share the connection
    row = conn.execute("SELECT array(INTERVAL '1' YEAR, INTERVAL '2' MONTH) FROM t").fetchone()
    assert row == ([datetime.timedelta(days=365), datetime.timedelta(days=60)],)
