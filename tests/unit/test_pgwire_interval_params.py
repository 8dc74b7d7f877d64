"""Interval parameters sent as text (OID 1186) are bound as Spark intervals.

They were bound as string literals, so ``SELECT TIMESTAMP '...' + $1`` failed in
Spark (42K09: a timestamp plus a string). Now the text is read as PostgreSQL's
interval input reads the forms its output takes (``postgres``, ``postgres_verbose``,
``sql_standard`` and ISO 8601), and bound as a year-month or day-time literal written
from the numbers read. Bad text is 22007, as PostgreSQL answers it; months with days
or time (no Spark interval holds them) 0A000 naming the value.
"""

from __future__ import annotations

import pytest
from tests.unit.test_pgwire_cursor import StandIn, connect

from timeshard.server.intervals import interval_fields, interval_literal, interval_text
from timeshard.server.pgwire import PgServer
from timeshard.server.sql_tokens import SqlError
from timeshard.server.statements import Param, bind, placeholder


@pytest.mark.parametrize(
    ("text", "literal"),
    [
        ("1 day 02:03:04", "INTERVAL '1 02:03:04.000000' DAY TO SECOND"),
        ("3 mons", "INTERVAL '0-3' YEAR TO MONTH"),
        ("-1 days +02:00:00", "INTERVAL '-0 22:00:00.000000' DAY TO SECOND"),
        ("P1DT2H", "INTERVAL '1 02:00:00.000000' DAY TO SECOND"),
        ("@ 1 day ago", "INTERVAL '-1 00:00:00.000000' DAY TO SECOND"),
        ("@ 2 hours 5 mins 6.5 secs", "INTERVAL '0 02:05:06.500000' DAY TO SECOND"),
        ("1-2", "INTERVAL '1-2' YEAR TO MONTH"),
        ("-1 year -2 mons", "INTERVAL '-1-2' YEAR TO MONTH"),
        ("3 04:05:06.000007", "INTERVAL '3 04:05:06.000007' DAY TO SECOND"),
        ("P1Y2M", "INTERVAL '1-2' YEAR TO MONTH"),
        ("PT-1M", "INTERVAL '-0 00:01:00.000000' DAY TO SECOND"),
        ("1.5 days", "INTERVAL '1 12:00:00.000000' DAY TO SECOND"),
        (" 00:00:00 ", "INTERVAL '0 00:00:00.000000' DAY TO SECOND"),
        ("5", "INTERVAL '0 00:00:05.000000' DAY TO SECOND"),
    ],
)
def test_a_text_interval_binds_as_a_spark_interval(text: str, literal: str) -> None:
    assert bind("SELECT $1", [Param(text, 1186)]) == f"SELECT {literal}"


@pytest.mark.parametrize("text", ["", "abc", "1 day 2 days", "P", "1 fortnight", "1' day", "1;"])
def test_bad_interval_text_is_22007(text: str) -> None:
    with pytest.raises(SqlError) as raised:
        bind("SELECT $1", [Param(text, 1186)])
    assert raised.value.sqlstate == "22007", raised.value
    assert repr(text) in str(raised.value)


@pytest.mark.parametrize("text", ["1 mon 1 day", "1 year 00:00:01", "P1MT1S", "1-2 3 04:05:06"])
def test_months_with_days_or_time_are_0a000_naming_the_value(text: str) -> None:
    with pytest.raises(SqlError) as raised:
        bind("SELECT $1", [Param(text, 1186)])
    assert raised.value.sqlstate == "0A000", raised.value
    assert repr(text) in str(raised.value)


@pytest.mark.parametrize(
    ("text", "months"),
    [
        ("1.99 years", 24),
        ("-1.99 years", -24),
        ("P1.99Y", 24),
        ("1.5 years", 18),
        ("1.04 years", 12),
        ("0.125 years", 2),  # 1.5 months, rounded half to even as PostgreSQL's rint
        ("0.99 decades", 119),
        ("0.001 millennia", 12),
    ],
)
def test_a_fraction_of_a_year_is_rounded_to_months(text: str, months: int) -> None:
    """PostgreSQL 15+ rounds fractional parts of units greater than months to whole
    months; they were truncated ('1.99 years' 23 months)."""
    assert interval_fields(text) == (months, 0, 0)


@pytest.mark.parametrize(
    ("text", "micros"), [("00:00:60", 60_000_000), ("00:01:60.5", 120_500_000)]
)
def test_a_sixtieth_second_is_read(text: str, micros: int) -> None:
    """PostgreSQL's time field takes seconds up to 60 (a leap second): it was 22015."""
    assert interval_fields(text) == (0, 0, micros)


@pytest.mark.parametrize("text", ["00:00:61", "00:60:00", "00:00:61.5"])
def test_a_minute_past_59_or_a_second_past_60_is_22015(text: str) -> None:
    with pytest.raises(SqlError) as raised:
        interval_fields(text)
    assert raised.value.sqlstate == "22015", raised.value


@pytest.mark.parametrize("field", ["{d}:00", "00:{d}", "{d}-1", "1-{d}"])
def test_a_field_of_thousands_of_digits_is_refused(field: str) -> None:
    """Python's ``int`` refuses more than 4300 digits: a ValueError, an internal error
    (XX000). PostgreSQL 15 refuses the text, longer than its interval input takes
    (22007); one of 40 digits is its field overflow (22015)."""
    with pytest.raises(SqlError) as raised:
        interval_fields(field.format(d="1" * 5000))
    assert raised.value.sqlstate == "22007"
    with pytest.raises(SqlError) as raised:
        interval_fields(field.format(d="1" * 40))
    assert raised.value.sqlstate == "22015"


@pytest.mark.parametrize(
    ("text", "sqlstate"),
    [
        ("3000000000 days", "22015"),
        ("3000000000 hours", "22015"),
        ("200000000 years", "22008"),
        ("2147483647 mons 1 year", "22008"),
    ],
)
def test_out_of_range_is_22015_or_22008_as_postgresql_answers_it(text: str, sqlstate: str) -> None:
    """PostgreSQL's interval_in: a day or time field past its range overflows while the
    fields are decoded (22015, interval field value out of range); months past theirs
    once years and months are summed (22008, interval out of range). Days were 22008."""
    with pytest.raises(SqlError) as raised:
        bind("SELECT $1", [Param(text, 1186)])
    assert raised.value.sqlstate == sqlstate, (text, raised.value)


def test_past_spark_s_day_time_range_is_22008() -> None:
    with pytest.raises(SqlError) as raised:
        interval_literal(0, 2**31 - 1, 2**63 - 1, "huge")
    assert raised.value.sqlstate == "22008"


def test_a_null_interval_and_the_placeholder_are_day_time() -> None:
    assert bind("SELECT $1", [Param(None, 1186)]) == "SELECT CAST(NULL AS INTERVAL DAY TO SECOND)"
    assert bind("SELECT $1", [placeholder(1186)]) == bind("SELECT $1", [Param(None, 1186)])


def test_the_text_written_reads_back() -> None:
    for fields in [(0, 0, 0), (14, 0, 0), (-3, 0, 0), (0, -1, 7_200_000_000), (1, -2, 3)]:
        assert interval_fields(interval_text(*fields)) == fields, interval_text(*fields)


def test_psycopg_binds_an_interval_declared_as_text(served: tuple[PgServer, StandIn]) -> None:
    server, engine = served
    with connect(server, autocommit=True) as conn:
        assert conn.execute("SELECT %s::interval", ["1 day 02:03:04"]).fetchall()
        pgconn = conn.pgconn
        result = pgconn.exec_params(b"SELECT $1", [b"3 mons"], [1186])
        assert result.status == 2, result.error_message  # TUPLES_OK
        assert "INTERVAL '0-3' YEAR TO MONTH" in str(engine.statements[-1])
        result = pgconn.exec_params(b"SELECT $1", [b"soon"], [1186])
        assert result.error_field(ord("C")) == b"22007"


def test_a_declared_text_sent_in_binary_and_cast_to_interval_is_its_text(
    served: tuple[PgServer, StandIn],
) -> None:
    """A parameter declared text (25), cast to interval, sent in binary (psycopg sends a
    ``str`` so with ``%b``): its bytes are the UTF-8 text Describe's type says, read as an
    interval after. They were read as a binary interval: 22P03 for 5 bytes, and for 16 a
    wrong interval with no error."""
    server, engine = served
    with connect(server, autocommit=True) as conn:
        pgconn = conn.pgconn
        for text, literal in [
            (b"1 day", "INTERVAL '1 00:00:00.000000' DAY TO SECOND"),
            (b"1 day 02:03:04.5", "INTERVAL '1 02:03:04.500000' DAY TO SECOND"),
        ]:
            result = pgconn.exec_params(b"SELECT $1::interval", [text], [25], [1])
            assert result.status == 2, result.error_message  # TUPLES_OK
            assert literal in str(engine.statements[-1]), engine.statements[-1]


def test_a_parameter_try_cast_to_interval_stays_a_string(
    served: tuple[PgServer, StandIn],
) -> None:
    """Spark's ``TRY_CAST(x AS interval)`` of text that is no interval is NULL: a parameter
    there stays the string bound (it was read as an interval at Bind: 22007)."""
    server, engine = served
    with connect(server, autocommit=True) as conn:
        result = conn.pgconn.exec_params(b"SELECT TRY_CAST($1 AS interval)", [b"nonsense"])
        assert result.status == 2, result.error_message  # TUPLES_OK
        assert "'nonsense'" in str(engine.statements[-1]), engine.statements[-1]
