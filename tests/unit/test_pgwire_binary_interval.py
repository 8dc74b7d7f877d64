"""Binary interval parameters (OID 1186: microseconds, days, months), psycopg's default
for a ``timedelta``, are decoded to the SQL standard's text form, which PostgreSQL's
interval input and Spark's casts read alike; they were refused (0A000 "binary
parameters of type OID 1186 are not supported"). A value with months and days or
time, which no Spark interval holds, is refused naming it."""

from __future__ import annotations

import datetime
import random
import re
import struct

import pytest
from tests.unit.test_pgwire_cursor import StandIn, connect

from timeshard.server.pgwire import PgServer, _param_text
from timeshard.server.sql_tokens import SqlError


def interval(micros: int = 0, days: int = 0, months: int = 0) -> bytes:
    return struct.pack("!qii", micros, days, months)


def read_back(text: str) -> datetime.timedelta:
    """A day-time text ``[-]D HH:MM:SS[.ffffff]`` as a timedelta, its sign on every field."""
    match = re.fullmatch(r"(-?)(\d+) (\d\d):(\d\d):(\d\d)(?:\.(\d{6}))?", text)
    assert match, text
    sign, d, h, m, s, f = match.groups()
    value = datetime.timedelta(
        days=int(d), hours=int(h), minutes=int(m), seconds=int(s), microseconds=int(f or 0)
    )
    return -value if sign else value


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (interval(), "0 00:00:00"),
        (interval(micros=7_384_000_005, days=1), "1 02:03:04.000005"),
        (interval(micros=-7_384_000_005, days=-1), "-1 02:03:04.000005"),
        (interval(micros=-3_600_000_000, days=1), "0 23:00:00"),
        (interval(days=400), "400 00:00:00"),
        (interval(months=14), "1-2"),
        (interval(months=-3), "-0-3"),
    ],
)
def test_a_binary_interval_is_its_sql_standard_text(value: bytes, text: str) -> None:
    assert _param_text(value, 1186, binary=True) == text


def test_day_time_intervals_read_back_as_sent() -> None:
    rng = random.Random(1186)
    for _ in range(1000):
        micros = rng.randrange(-(10**15), 10**15)
        days = rng.randrange(-(10**6), 10**6)
        text = _param_text(interval(micros, days), 1186, binary=True)
        assert text is not None
        expected = datetime.timedelta(days=days, microseconds=micros)
        assert read_back(text) == expected, (micros, days, text)


@pytest.mark.parametrize("value", [interval(days=1, months=1), interval(micros=1, months=-1)])
def test_months_with_days_or_time_are_refused_by_name(value: bytes) -> None:
    with pytest.raises(SqlError, match="months") as raised:
        _param_text(value, 1186, binary=True)
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
    assert "'2 00:00:05.000007'" in str(engine.statements[-1]), engine.statements[-1]
