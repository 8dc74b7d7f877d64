"""Binary date, timestamp, timestamptz and bytea parameters (psycopg's default for its
dates, datetimes and bytes) are decoded to the text forms the same values have when sent
as text; they were refused (0A000 "binary parameters ... not supported")."""

from __future__ import annotations

import datetime
import struct

import pytest

from timeshard.server.pgwire import _param_text
from timeshard.server.sql_tokens import SqlError

EPOCH = datetime.datetime(2000, 1, 1)


def days(d: datetime.date) -> bytes:
    return struct.pack("!i", (d - EPOCH.date()).days)


def micros(t: datetime.datetime) -> bytes:
    return struct.pack("!q", (t - EPOCH) // datetime.timedelta(microseconds=1))


@pytest.mark.parametrize(
    ("value", "oid", "text"),
    [
        (days(datetime.date(2020, 1, 2)), 1082, "2020-01-02"),
        (days(datetime.date(1999, 12, 31)), 1082, "1999-12-31"),
        (days(datetime.date(1, 1, 1)), 1082, "0001-01-01"),
        (micros(datetime.datetime(2020, 1, 2, 3, 4, 5)), 1114, "2020-01-02 03:04:05"),
        (
            micros(datetime.datetime(1970, 1, 1, 0, 0, 0, 123456)),
            1114,
            "1970-01-01 00:00:00.123456",
        ),
        (micros(datetime.datetime(2020, 1, 2, 3, 4, 5)), 1184, "2020-01-02 03:04:05+00:00"),
        (b"\x00\xffab", 17, "\\x00ff6162"),
    ],
)
def test_binary_time_and_bytea_parameters_are_their_text(value: bytes, oid: int, text: str) -> None:
    assert _param_text(value, oid, binary=True) == text


@pytest.mark.parametrize(
    ("value", "oid"),
    [
        (struct.pack("!i", 0x7FFFFFFF), 1082),  # infinity
        (struct.pack("!i", -0x80000000), 1082),  # -infinity
        (struct.pack("!q", 0x7FFFFFFFFFFFFFFF), 1114),
        (struct.pack("!q", -0x8000000000000000), 1184),
    ],
)
def test_infinite_times_are_out_of_range(value: bytes, oid: int) -> None:
    with pytest.raises(SqlError) as raised:
        _param_text(value, oid, binary=True)
    assert raised.value.sqlstate == "22008"


def test_a_binary_time_of_the_wrong_length_is_22p03() -> None:
    with pytest.raises(SqlError) as raised:
        _param_text(b"\x00\x01", 1082, binary=True)
    assert raised.value.sqlstate == "22P03"
