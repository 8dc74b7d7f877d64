"""Interval parameters out of range answer the SQLSTATE PostgreSQL's ``interval_in``
answers, checked against PostgreSQL 15: a field past its type's range (years, months
and days are int32, time int64 microseconds) is 22015 (interval field value out of
range) as it is added; years and months that, summed, are past int32 months are 22008
(interval out of range). A months field past int32 was 22008, and the least months
(``-2147483648 mons``, a binary interval's least) were refused; a years-months pair's
months past 11 (``0-12``) were read as more years, where PostgreSQL answers 22015.

Fields are added right to left, each number times its unit checked before it is
added, as PostgreSQL's ``DecodeInterval`` adds them: added left to right, a sum past
a field's range on the way was refused where PostgreSQL's order never passes it, and
another field's error was answered first."""

from __future__ import annotations

import struct

import pytest
from tests.unit.test_pgwire_cursor import StandIn, connect

from timeshard.server.intervals import interval_fields
from timeshard.server.pgwire import PgServer, _param_text
from timeshard.server.sql_tokens import SqlError
from timeshard.server.statements import Param, bind


@pytest.mark.parametrize(
    ("text", "sqlstate"),
    [
        ("2147483648 months", "22015"),
        ("-2147483649 mons", "22015"),
        ("2147483648.5 months", "22015"),
        ("2147483648 years", "22015"),
        ("214748365 decades -3 years", "22015"),
        ("0.5 years 2147483647 months", "22015"),
        ("P2147483648M", "22015"),
        ("178956970-8", "22015"),
        ("0-12", "22015"),
        ("-2147483648 mons ago", "22015"),
        ("-2147483648 days ago", "22015"),
        ("178956971 years", "22008"),
        ("178956970 years 8 mons", "22008"),
        ("214748364 decades 7 years", "22008"),
        ("P178956971Y", "22008"),
        ("1 year 2147483647 mons", "22008"),
        # 3000000000 years first: past int32 (left to right, years summed in range, then
        # their months past it: 22008)
        ("-1000000000 years 300000000 decades", "22015"),
        # 2147483647 days, then a week past them, before the week given twice (22007)
        ("-1 weeks 1 weeks 2147483647 days", "22015"),
        ("-1 days 306783379 weeks", "22015"),
    ],
)
def test_out_of_range_answers_postgresql_s_sqlstate(text: str, sqlstate: str) -> None:
    with pytest.raises(SqlError) as raised:
        bind("SELECT $1", [Param(text, 1186)])
    assert raised.value.sqlstate == sqlstate, (text, raised.value)
    assert repr(text) in str(raised.value)


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        ("2147483647 months", (2**31 - 1, 0, 0)),
        ("-2147483648 mons", (-(2**31), 0, 0)),
        ("-178956970 years -8 mons", (-(2**31), 0, 0)),
        ("-178956970-8", (-(2**31), 0, 0)),
        ("-2147483648 days", (0, -(2**31), 0)),
        # -60 months, then +6, then 2147483647: 178956966 years 1 mon
        ("2147483647 months 0.5 years -0.5 decades", (2_147_483_593, 0, 0)),
        ("300000000 weeks -1 days", (0, 2_099_999_999, 0)),
        ("9223372036854775807 microseconds", (0, 0, 9_223_372_036_854_775_807)),
    ],
)
def test_in_range_reads_as_postgresql_reads_it(text: str, fields: tuple[int, int, int]) -> None:
    assert interval_fields(text) == fields


def test_the_least_binary_months_bind() -> None:
    least = struct.pack("!qii", 0, 0, -(2**31))
    text = _param_text(least, 1186, binary=True)
    assert bind("SELECT $1", [Param(text, 1186)]) == (
        "SELECT INTERVAL '-178956970-8' YEAR TO MONTH"
    )


def test_a_client_gets_22015_for_a_months_field_past_int32(
    served: tuple[PgServer, StandIn],
) -> None:
    server, _ = served
    with connect(server, autocommit=True) as conn:
        result = conn.pgconn.exec_params(b"SELECT $1", [b"2147483648 months"], [1186])
        assert result.error_field(ord("C")) == b"22015", result.error_message
        result = conn.pgconn.exec_params(b"SELECT $1", [b"178956971 years"], [1186])
        assert result.error_field(ord("C")) == b"22008", result.error_message
