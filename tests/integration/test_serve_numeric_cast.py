"""An unconstrained numeric cast keeps its operand's value; ``timestamp`` has no zone.

PostgreSQL's ``numeric`` with no precision is unconstrained: ``1.5::numeric`` is
``1.5``, a bound ``$1::numeric`` of ``'1.25'`` is ``1.25``, a cast of an int column
keeps the integer and of a numeric(10, 3) column its three digits. serve wrote such a
cast as Spark's bare DECIMAL, which is DECIMAL(10, 0): every form (``::numeric``,
``CAST(... AS numeric)``, ``::decimal``; in the select list and in WHERE; of literals,
bound parameters and shard columns) rounded to a whole number (1.5 was 2, ``WHERE
d::numeric = 1234.567`` matched no row), and a value of more than 10 integer digits
was Spark's overflow. Now the cast is to the DECIMAL that holds its operand exactly
(:func:`~timeshard.server.query_rewrites._numeric_casts`); a double or a string, whose
digits no type tells, is DECIMAL(38, 18). A value no DECIMAL(38) holds is 22003.

PostgreSQL's ``timestamp`` is without time zone (1114): ``$1::timestamp``,
``'...'::timestamp`` and ``TIMESTAMP '...'`` were Spark's TIMESTAMP, an instant
(timestamptz, 1184), which psycopg read as an aware datetime.

The expected values are PostgreSQL 15's; :func:`test_the_answer_is_postgresql_s` asks
it over a table of the same row.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg.types.string import StrDumper
from pyspark.sql import SparkSession
from tests.integration.test_serve_time_params_spark import served_pgconn

from timeshard.location import Location
from timeshard.location.memory import MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient
from timeshard.server.engine import Engine

pytestmark = pytest.mark.spark

D = decimal.Decimal
NAIVE = datetime.datetime(2024, 1, 2, 3, 4, 5)
SCHEMA = pa.schema(
    [
        ("i", pa.int32()),
        ("b", pa.int64()),
        ("d", pa.decimal128(10, 3)),
        ("f", pa.float64()),
        ("r", pa.float32()),
        ("s", pa.string()),
        ("ts", pa.timestamp("us")),
    ]
)
ROW = (7, 12345678901234, D("1234.567"), 2.5, 0.1, "3.75", NAIVE)
POSTGRES_TABLE = (
    "CREATE TABLE t (i int4, b int8, d numeric(10, 3), f float8, r float4, s text, ts timestamp)"
)


@contextmanager
def served_conn(
    spark: SparkSession, path: Path, schema: pa.Schema, row: tuple[Any, ...]
) -> Iterator[Any]:
    """A psycopg connection (autocommit) to a server over shard ``t`` of one ``row``."""
    with (
        served_pgconn(spark, path, schema, row) as pgconn,
        psycopg.connect(
            host="127.0.0.1", port=int(pgconn.port), user="me", dbname="x", autocommit=True
        ) as connection,
    ):
        yield connection


@contextmanager
def postgres_table(dsn: str, create: str, row: tuple[Any, ...]) -> Iterator[Any]:
    """A psycopg connection (autocommit) to PostgreSQL, its table ``t`` made by ``create``
    and holding ``row``."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("DROP TABLE IF EXISTS t")
        connection.execute(create)
        connection.execute(f"INSERT INTO t VALUES ({', '.join(['%s'] * len(row))})", row)
        yield connection


@pytest.fixture(scope="module")
def conn(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A psycopg connection (autocommit) to a server over shard ``t`` of :data:`ROW`."""
    with served_conn(spark, Path(tmp_path_factory.mktemp("numeric")), SCHEMA, ROW) as connection:
        yield connection


@pytest.fixture(scope="module")
def postgres(postgres_dsn: str) -> Iterator[Any]:
    with postgres_table(postgres_dsn, POSTGRES_TABLE, ROW) as connection:
        yield connection


def answer(conn: Any, sql: str, params: list[Any] | None, prepare: bool) -> tuple[int, Any]:
    """The type OID and value of the one column of the one row ``sql`` answers."""
    cur = conn.execute(sql, params, prepare=prepare)
    assert cur.description is not None
    ((value,),) = cur.fetchall()
    return cur.description[0].type_code, value


def exactly(value: Any) -> Any:
    """``value`` with a Decimal's digits as written (``Decimal('1.50') != Decimal('1.5')``
    by this), a datetime with whether it has a zone."""
    if isinstance(value, D):
        return ("numeric", str(value))
    if isinstance(value, datetime.datetime):
        return (value.replace(tzinfo=None), value.utcoffset())
    return value


NUMERIC, BIGINT, INT4, TIMESTAMP, TIMESTAMPTZ = 1700, 20, 23, 1114, 1184
UTC = NAIVE.replace(tzinfo=datetime.UTC)

#: Query, parameters, the OID of its one column and the value of its one row (None: one
#: not spelled out here, or NULL where the query says so); PostgreSQL answers each so
#: (:func:`test_the_answer_is_postgresql_s`).
SAME_AS_POSTGRESQL = [
    ("SELECT 1.5::numeric AS x", None, NUMERIC, D("1.5")),
    ("SELECT CAST(1.5 AS numeric) AS x", None, NUMERIC, D("1.5")),
    ("SELECT 1.5::decimal AS x", None, NUMERIC, D("1.5")),
    ("SELECT 1.50::numeric AS x", None, NUMERIC, D("1.50")),
    ("SELECT (-1.5)::numeric AS x", None, NUMERIC, D("-1.5")),
    ("SELECT 1e3::numeric AS x", None, NUMERIC, D("1000")),
    ("SELECT 12345678901234.5::numeric AS x", None, NUMERIC, D("12345678901234.5")),
    ("SELECT 0.12345678901234567890123456789012345678::numeric AS x", None, NUMERIC, None),
    ("SELECT '1.25'::numeric AS x", None, NUMERIC, D("1.25")),
    ("SELECT ' 1e3 '::numeric AS x", None, NUMERIC, D("1000")),
    ("SELECT NULL::numeric AS x", None, NUMERIC, None),
    ("SELECT 1e-5::float8::numeric AS x", None, NUMERIC, D("0.00001")),
    ("SELECT 0.1::float8::numeric AS x", None, NUMERIC, D("0.1")),
    ("SELECT 123456.7::real::numeric AS x", None, NUMERIC, D("123457")),
    ("SELECT %s::numeric AS x", [D("1.25")], NUMERIC, D("1.25")),
    ("SELECT CAST(%s AS numeric) AS x", [D("1.25")], NUMERIC, D("1.25")),
    ("SELECT %s::decimal AS x", [D("1.25")], NUMERIC, D("1.25")),
    ("SELECT %s::numeric AS x", ["1.25"], NUMERIC, D("1.25")),
    ("SELECT %s::numeric AS x", [1.25], NUMERIC, D("1.25")),
    ("SELECT %s::numeric AS x", [12345678901234], NUMERIC, D("12345678901234")),
    ("SELECT %s::numeric AS x", [D("123456789012345678901234.5")], NUMERIC, None),
    ("SELECT %s::numeric AS x", [None], NUMERIC, None),
    ("SELECT i::numeric AS x FROM t", None, NUMERIC, D("7")),
    ("SELECT b::numeric AS x FROM t", None, NUMERIC, D("12345678901234")),
    ("SELECT d::numeric AS x FROM t", None, NUMERIC, D("1234.567")),
    ("SELECT CAST(d AS numeric) AS x FROM t", None, NUMERIC, D("1234.567")),
    ("SELECT d::decimal AS x FROM t", None, NUMERIC, D("1234.567")),
    ("SELECT u.b::numeric AS x FROM t AS u", None, NUMERIC, D("12345678901234")),
    ("SELECT (b * 1000)::numeric AS x FROM t", None, NUMERIC, D("12345678901234000")),
    ("SELECT count(*)::numeric AS x FROM t", None, NUMERIC, D("1")),
    ("SELECT sum(d)::numeric AS x FROM t", None, NUMERIC, D("1234.567")),
    ("SELECT count(*) FROM t WHERE 1.5::numeric = 1.5", None, BIGINT, 1),
    ("SELECT count(*) FROM t WHERE 1.4::numeric = 1", None, BIGINT, 0),
    ("SELECT count(*) FROM t WHERE d::numeric = 1234.567", None, BIGINT, 1),
    ("SELECT count(*) FROM t WHERE CAST(d AS decimal) = 1234.567", None, BIGINT, 1),
    ("SELECT count(*) FROM t WHERE f::numeric = 2.5", None, BIGINT, 1),
    ("SELECT count(*) FROM t WHERE s::numeric = 3.75", None, BIGINT, 1),
    ("SELECT count(*) FROM t WHERE b::numeric = 12345678901234", None, BIGINT, 1),
    ("SELECT count(*) FROM t WHERE %s::numeric = 1.25", [D("1.25")], BIGINT, 1),
    ("SELECT count(*) FROM t WHERE d = %s::numeric", [D("1234.567")], BIGINT, 1),
    ("SELECT count(*) FROM t WHERE d = %s::numeric", ["1234.567"], BIGINT, 1),
    ("SELECT count(*) FROM t WHERE %s::numeric > 1", [1.5], BIGINT, 1),
    # A cast of it to an integer rounds, as PostgreSQL's numeric does (Spark's truncates).
    ("SELECT 1.5::numeric::int AS x", None, INT4, 2),
    ("SELECT (-2.5)::numeric::int AS x", None, INT4, -3),
    ("SELECT d::numeric::int AS x FROM t", None, INT4, 1235),
    ("SELECT f::numeric::bigint AS x FROM t", None, BIGINT, 3),
    ("SELECT %s::numeric::int AS x", [D("1.5")], INT4, 2),
    ("SELECT (2.5::numeric)::int AS x", None, INT4, 3),
    ("SELECT (5::numeric / 2)::int AS x", None, INT4, 3),
    ("SELECT %s::timestamp AS x", ["2024-01-02 03:04:05"], TIMESTAMP, NAIVE),
    ("SELECT %s::timestamp AS x", [NAIVE], TIMESTAMP, NAIVE),
    ("SELECT '2024-01-02 03:04:05'::timestamp AS x", None, TIMESTAMP, NAIVE),
    ("SELECT CAST('2024-01-02 03:04:05' AS timestamp) AS x", None, TIMESTAMP, NAIVE),
    ("SELECT TIMESTAMP '2024-01-02 03:04:05' AS x", None, TIMESTAMP, NAIVE),
    ("SELECT '2024-01-02 03:04:05'::timestamp without time zone", None, TIMESTAMP, NAIVE),
    ("SELECT ts AS x FROM t", None, TIMESTAMP, NAIVE),
    ("SELECT ts::timestamp AS x FROM t", None, TIMESTAMP, NAIVE),
    ("SELECT '2024-01-01'::timestamp + '1 day 03:04:05'::interval", None, TIMESTAMP, NAIVE),
    ("SELECT count(*) FROM t WHERE ts = '2024-01-02 03:04:05'::timestamp", None, BIGINT, 1),
    ("SELECT count(*) FROM t WHERE ts = %s::timestamp", [NAIVE], BIGINT, 1),
    ("SELECT '2024-01-02 03:04:05'::timestamptz AS x", None, TIMESTAMPTZ, UTC),
    ("SELECT %s::timestamptz AS x", [UTC], TIMESTAMPTZ, UTC),
]


@pytest.mark.parametrize("prepare", [False, True])
@pytest.mark.parametrize(("sql", "params", "oid", "value"), SAME_AS_POSTGRESQL)
def test_a_cast_keeps_its_operand_s_value(
    conn: Any, sql: str, params: list[Any] | None, oid: int, value: Any, prepare: bool
) -> None:
    """With psycopg's extended protocol, its statement prepared (``prepare=True``: Parse,
    Describe, then Bind and Execute) or not."""
    got_oid, got = answer(conn, sql, params, prepare)
    assert got_oid == oid
    if value is not None or "NULL" in sql or params == [None]:
        assert exactly(got) == exactly(value)


@pytest.mark.postgres
@pytest.mark.parametrize(("sql", "params", "oid", "value"), SAME_AS_POSTGRESQL)
def test_the_answer_is_postgresql_s(
    conn: Any, postgres: Any, sql: str, params: list[Any] | None, oid: int, value: Any
) -> None:
    assert exactly(answer(conn, sql, params, False)) == exactly(
        answer(postgres, sql, params, False)
    )


@pytest.mark.parametrize("prepare", [False, True])
@pytest.mark.parametrize(
    ("sql", "value", "shown_by_postgresql"),
    [
        ("SELECT f::numeric AS x FROM t", "2.500000000000000000", "2.5"),
        ("SELECT r::numeric AS x FROM t", "0.100000000000000000", "0.1"),
        ("SELECT (f + 0.1::float8)::numeric AS x FROM t", "2.600000000000000000", "2.6"),
        ("SELECT (0.1::float8 + 0.2::float8)::numeric AS x", "0.300000000000000000", "0.3"),
        ("SELECT s::numeric AS x FROM t", "3.750000000000000000", "3.75"),
        ("SELECT ARRAY[1.5, 2.25]::numeric[] AS x", None, None),
    ],
)
def test_a_double_or_a_string_is_a_numeric_of_18_digits_after_the_point(
    conn: Any, sql: str, value: str | None, shown_by_postgresql: str | None, prepare: bool
) -> None:
    """A numeric column has one scale in Spark, each value its own in PostgreSQL: a double
    or a string cast to numeric (PostgreSQL: the float's 15 significant digits, the
    string's as written) is DECIMAL(38, 18), its value PostgreSQL's, written with 18
    digits after the point."""
    oid, got = answer(conn, sql, None, prepare)
    if value is None:
        assert (oid, got) == (1231, [D("1.5"), D("2.25")])  # numeric[]
        assert [str(v) for v in got] == ["1.500000000000000000", "2.250000000000000000"]
        return
    assert shown_by_postgresql is not None
    assert (oid, str(got)) == (1700, value)
    assert got == D(shown_by_postgresql)


@pytest.mark.parametrize("prepare", [False, True])
@pytest.mark.parametrize(
    ("sql", "params", "value", "shown_by_postgresql"),
    [
        (
            "SELECT 1::numeric / 3::numeric AS x",
            None,
            "0.333333333333333333",
            "0.33333333333333333333",
        ),
        (
            "SELECT 100::numeric / 7::numeric AS x",
            None,
            "14.285714285714285714",
            "14.2857142857142857",
        ),
        ("SELECT %s::numeric / %s::numeric AS x", [D(1), D(3)], "0.333333333333333333", None),
        ("SELECT 1::numeric / 3 AS x", None, "0.333333333333333333", "0.33333333333333333333"),
        ("SELECT 1::numeric / (3::numeric) AS x", None, "0.333333333333333333", None),
    ],
)
def test_a_quotient_of_numeric_casts_has_18_digits_after_the_point(
    conn: Any,
    sql: str,
    params: list[Any] | None,
    value: str,
    shown_by_postgresql: str | None,
    prepare: bool,
) -> None:
    """PostgreSQL gives a quotient at least 16 significant digits; here 18 after the point.
    (The casts' tight DECIMALs gave Spark's 6: ``1::numeric / 3::numeric`` was 0.333333.)"""
    oid, got = answer(conn, sql, params, prepare)
    assert (oid, str(got)) == (1700, value)
    if shown_by_postgresql is not None:
        assert abs(got - D(shown_by_postgresql)) < D("1e-16")  # its last digit, rounded


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        ("SELECT 123456789012345678901234567890123456789.5::numeric AS x", None),
        ("SELECT 1e-40::numeric AS x", None),
        ("SELECT 1e300::float8::numeric AS x", None),
        ("SELECT 'NaN'::float8::numeric AS x", None),
        ("SELECT 'Infinity'::float8::numeric AS x", None),
        ("SELECT %s::numeric AS x", [float("nan")]),
        ("SELECT %s::numeric AS x", [float("inf")]),
        ("SELECT %s::numeric AS x", [1e25]),  # 26 digits: a DECIMAL(26, 0)...
        ("SELECT %s::numeric AS x", [D("1.5E+40")]),
        ("SELECT (f * 1e25)::numeric AS x FROM t", None),  # ...but a double's is (38, 18)
        ("SELECT (s || 'e25')::numeric AS x FROM t", None),  # 3.75e25: the same
    ],
)
def test_a_value_no_spark_decimal_holds_is_22003(
    conn: Any, sql: str, params: list[Any] | None
) -> None:
    """Never NULL nor rounded: Spark's own cast of a NaN or infinite double to a DECIMAL
    is NULL."""
    if params == [1e25]:
        assert answer(conn, sql, params, False) == (1700, D("1E+25"))
        return
    with pytest.raises(psycopg.errors.NumericValueOutOfRange):
        answer(conn, sql, params, False)


def test_a_nan_double_column_is_an_error_never_null(conn: Any) -> None:
    """A double's NaN or infinity comes to the cast as Spark's text of it, which no
    DECIMAL reads (22018, the value named); Spark's cast of the double is NULL."""
    for sql in (
        "SELECT (f * 'NaN'::float8)::numeric AS x FROM t",
        "SELECT (f * 1e308 * 10)::numeric AS x FROM t",
    ):
        with pytest.raises(psycopg.errors.InvalidCharacterValueForCast):
            answer(conn, sql, None, False)


def test_a_text_parameter_is_described_as_numeric(conn: Any) -> None:
    """A parameter declared text (25) stands as a string in the statement's Describe: the
    cast of it to numeric is described as numeric, and its value bound is the number."""
    cur = conn.cursor()
    cur.adapters.register_dumper(str, StrDumper)  # str as text (25), not unknown (0)
    for prepare in (False, True):
        cur.execute("SELECT %s::numeric AS x", ["1.25"], prepare=prepare)
        assert cur.description is not None and cur.description[0].type_code == 1700
        assert exactly(cur.fetchone()[0]) == exactly(D("1.25"))  # type: ignore[index]
        with pytest.raises(psycopg.errors.InvalidCharacterValueForCast):  # PostgreSQL: 22P02
            cur.execute("SELECT %s::numeric AS x", ["abc"], prepare=prepare)


def test_try_cast_of_what_no_decimal_holds_is_null(conn: Any) -> None:
    """Spark's TRY_CAST is NULL where no value is, as its casts are."""
    assert answer(conn, "SELECT TRY_CAST('abc' AS numeric) AS x", None, False) == (1700, None)
    big = "SELECT TRY_CAST(123456789012345678901234567890123456789.5 AS numeric) AS x"
    assert answer(conn, big, None, False) == (1700, None)
    assert answer(conn, "SELECT TRY_CAST(f * 1e25 AS numeric) AS x FROM t", None, False) == (
        1700,
        None,
    )


def test_a_view_s_query_keeps_spark_s_types() -> None:
    """The query of a view recorded before serve typed views' queries (``stored``) keeps
    Spark's DECIMAL(10, 0) and TIMESTAMP, its shard's schema, so it restores as it was
    (``test_serve_view_types_spark.py``: a new view is typed as this ad-hoc query)."""
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    engine = Engine(SimpleNamespace(), client, follow_s=3600)  # no Spark: resolve only
    sql = "SELECT 1.5::numeric AS x, '2024-01-02'::timestamp AS y"
    assert engine.resolve(sql)[0] == (
        "SELECT CAST(1.5 AS DECIMAL(2, 1)) AS x, CAST('2024-01-02' AS TIMESTAMP_NTZ) AS y"
    )
    assert engine.resolve(sql, stored=True)[0] == (
        "SELECT CAST(1.5 AS DECIMAL) AS x, CAST('2024-01-02' AS TIMESTAMP) AS y"
    )


@pytest.mark.postgres
def test_regexp_replace_of_the_g_flag_is_postgresql_s_and_of_three_arguments_refused(
    conn: Any, postgres: Any
) -> None:
    """Of the constant 'g' flag, Spark's REGEXP_REPLACE of three arguments replaces every
    match, as PostgreSQL 15 does ('3.75' is '3_7_'); of three arguments PostgreSQL replaces
    the first only ('3_75'), which serve refuses (0A000) rather than answer Spark's."""
    sql = "SELECT regexp_replace(s, '[.5]', '_', 'g') AS x FROM t"
    assert conn.execute(sql).fetchall() == postgres.execute(sql).fetchall() == [("3_7_",)]
    three = "SELECT regexp_replace(s, '[.5]', '_') AS x FROM t"
    assert postgres.execute(three).fetchall() == [("3_75",)]
    with pytest.raises(psycopg.errors.FeatureNotSupported, match="'g'\\) is supported"):
        conn.execute(three)


@pytest.mark.postgres
def test_a_unit_of_a_column_is_refused_where_spark_s_units_are_not_postgresql_s(
    conn: Any, postgres: Any, spark: SparkSession
) -> None:
    """sqlglot read ``date_trunc(s, ts)``'s column as the unit 'S' (and ``date_part(s,
    ts)`` as seconds). Spark's DATE_TRUNC of a column answers as PostgreSQL 15 does for
    'day' to 'second', but NULL for its 'millennium', 'century', 'decade',
    'milliseconds', 'microseconds', 's' and 'd' (and an unknown unit, PostgreSQL's
    22023): serve refuses a unit not a constant (0A000) at typing version 4."""
    units = ["day", "hour", "month", "year", "week", "quarter", "minute", "second"]
    others = ["millennium", "century", "decade", "milliseconds", "microseconds", "s", "d"]
    of_unit = "SELECT CAST(date_trunc(u, ts) AS {}) FROM (SELECT '{}' AS u, {} AS ts{}) q"
    for unit in units + others:
        at = "TIMESTAMP_NTZ'2024-01-02 03:04:05'"
        spark_s = spark.sql(of_unit.format("STRING", unit, at, "")).collect()[0][0]
        postgresql_s = postgres.execute(of_unit.format("text", unit, "ts", " FROM t")).fetchall()
        assert (spark_s == postgresql_s[0][0]) is (unit in units), (unit, spark_s, postgresql_s)
    for sql in ("SELECT date_trunc(s, ts) FROM t", "SELECT date_part(s, ts) FROM t"):
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="its unit not a constant"):
            conn.execute(sql)
    # (Of timestamp's type, served date_trunc's value is an aware datetime: not this test's.)
    sql = "SELECT date_trunc('day', ts)::text AS x, extract(s FROM ts) AS y FROM t"
    assert conn.execute(sql).fetchall() == postgres.execute(sql).fetchall()
