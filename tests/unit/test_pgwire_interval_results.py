"""A day-time interval column (Spark's DayTimeIntervalType, a ``timedelta`` in Python)
is described as PostgreSQL's interval (1186) and written as PostgreSQL writes one
(``1 day 02:03:04``); it was text (25) holding Python's ``str`` of the timedelta
(``1 day, 2:03:04``), which no driver reads as an interval."""

from __future__ import annotations

import datetime

import pytest
from pyspark.sql.types import ArrayType, DayTimeIntervalType, YearMonthIntervalType

from timeshard.server.intervals import interval_fields
from timeshard.server.pgtypes import column_type, encode_value, type_oid

DAY_TIME = column_type(DayTimeIntervalType())


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (datetime.timedelta(days=1, hours=2, minutes=3, seconds=4), b"1 day 02:03:04"),
        (datetime.timedelta(seconds=-1.5), b"-00:00:01.5"),
        (datetime.timedelta(days=-2, hours=-1), b"-2 days -01:00:00"),
        (datetime.timedelta(0), b"00:00:00"),
    ],
)
def test_a_day_time_interval_is_written_as_postgresql_writes_one(
    value: datetime.timedelta, text: bytes
) -> None:
    assert type_oid(DAY_TIME) == 1186
    assert encode_value(value, DAY_TIME) == text
    months, days, micros = interval_fields(text.decode())
    assert months == 0
    assert datetime.timedelta(days=days, microseconds=micros) == value


def test_an_array_of_them_is_an_interval_array() -> None:
    name = column_type(ArrayType(DayTimeIntervalType()))
    assert type_oid(name) == 1187
    values = [datetime.timedelta(hours=1), datetime.timedelta(days=1), None]
    assert encode_value(values, name) == b'{01:00:00,"1 day",NULL}'


@pytest.mark.parametrize(
    ("months", "text"),
    [(14, b"1 year 2 mons"), (3, b"3 mons"), (-14, b"-1 years -2 mons"), (0, b"00:00:00")],
)
def test_a_year_month_interval_is_written_from_its_months(months: int, text: bytes) -> None:
    """The engine collects a year-month interval column as its whole months (PySpark
    collects no year-month interval): they are written as PostgreSQL writes them."""
    name = column_type(YearMonthIntervalType())
    assert type_oid(name) == 1186
    assert encode_value(months, name) == text
    assert interval_fields(text.decode()) == (months, 0, 0)
