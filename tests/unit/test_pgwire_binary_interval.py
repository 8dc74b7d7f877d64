"""Binary interval parameters (OID 1186: microseconds, days, months), psycopg's default
for a ``timedelta``, are decoded to PostgreSQL's text form of them, and bound from there
as a text parameter is: a Spark interval literal of the numbers read (they were bound as
strings, which Spark cannot add to a timestamp). A value with months and days or time,
which no Spark interval holds, is refused naming it."""

from __future__ import annotations

import datetime
import random
import struct

import pytest
from tests.unit.test_pgwire_cursor import StandIn, connect

from timeshard.server.intervals import interval_fields
from timeshard.server.pgwire import PgServer, _param_text
from timeshard.server.sql_tokens import SqlError
from timeshard.server.statements import Param, bind


def interval(micros: int = 0, days: int = 0, months: int = 0) -> bytes:
    return struct.pack("!qii", micros, days, months)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (interval(), "00:00:00"),
        (interval(micros=7_384_000_005, days=1), "1 day 02:03:04.000005"),
        (interval(micros=-7_384_000_005, days=-1), "-1 days -02:03:04.000005"),
        (interval(micros=-3_600_000_000, days=1), "1 day -01:00:00"),
        (interval(days=400), "400 days"),
        (interval(months=14), "1 year 2 mons"),
        (interval(months=-3), "-3 mons"),
    ],
)
def test_a_binary_interval_is_its_postgresql_text(value: bytes, text: str) -> None:
    assert _param_text(value, 1186, binary=True) == text


def test_binary_intervals_read_back_as_sent() -> None:
    rng = random.Random(1186)
    for _ in range(1000):
        micros = rng.randrange(-(10**15), 10**15)
        days = rng.randrange(-(10**6), 10**6)
        months = rng.choice([0, rng.randrange(-(10**4), 10**4)])
        text = _param_text(interval(micros, days, months), 1186, binary=True)
        assert text is not None
        assert interval_fields(text) == (months, days, micros), (micros, days, months, text)


def test_a_day_time_interval_binds_as_its_spark_literal() -> None:
    text = _param_text(interval(micros=-3_600_000_000, days=1), 1186, binary=True)
    assert bind("SELECT $1", [Param(text, 1186)]) == (
        "SELECT INTERVAL '0 23:00:00.000000' DAY TO SECOND"
    )


@pytest.mark.parametrize("value", [interval(days=1, months=1), interval(micros=1, months=-1)])
def test_months_with_days_or_time_are_refused_by_name(value: bytes) -> None:
    text = _param_text(value, 1186, binary=True)
    with pytest.raises(SqlError, match="months") as raised:
        bind("SELECT $1", [Param(text, 1186)])
    assert raised.value.sqlstate == "0A000"


def test_a_bad_length_is_22p03() -> None:
    with pytest.raises(SqlError) as raised:
        _param_text(b"\0" * 8, 1186, binary=True)
    assert raised.value.sqlstate == "22P03"


def test_psycopg_binds_a_timedelta(served: tuple[PgServer, StandIn]) -> None:
    server, engine = served
    with connect(server, autocommit=True) as conn:
        delta = datetime.timedelta(days=2, seconds=5, microseconds=7)
        assert conn.execute("SELECT %s", [delta]).fetchall()
    assert "INTERVAL '2 00:00:05.000007' DAY TO SECOND" in str(engine.statements[-1])
