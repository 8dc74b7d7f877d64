"""An interval field's leading zeros count for nothing, as PostgreSQL reads them: a time
or years-months field of more than 30 digits, mostly leading zeros, was refused (22015,
a guard against thousands of digits that counted the zeros too). PostgreSQL 15 reads
each text here as the fields given."""

from __future__ import annotations

import pytest

from timeshard.server.intervals import interval_fields
from timeshard.server.sql_tokens import SqlError
from timeshard.server.statements import Param, bind

ZEROS = "0" * 40


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        (f"{ZEROS}1 day", (0, 1, 0)),
        (f"{ZEROS}1:{ZEROS}2", (0, 0, 3_720_000_000)),
        (f"{ZEROS}1-{ZEROS}2", (14, 0, 0)),
        (f"-{ZEROS}1-{ZEROS}11", (-23, 0, 0)),
        (f"{ZEROS}3 {ZEROS}4:05:06", (0, 3, 14_706_000_000)),
        (f"P{ZEROS}1Y{ZEROS}2M", (14, 0, 0)),
        ("0" * 251 + "1:00", (0, 0, 3_600_000_000)),  # the longest field PostgreSQL takes
    ],
)
def test_leading_zeros_are_read_as_postgresql_reads_them(
    text: str, fields: tuple[int, int, int]
) -> None:
    assert interval_fields(text) == fields


def test_a_bound_parameter_of_them_is_its_value() -> None:
    bound = bind("SELECT $1", [Param(f"{ZEROS}1-{ZEROS}2", 1186)])
    assert bound == "SELECT INTERVAL '1-2' YEAR TO MONTH"


@pytest.mark.parametrize("text", ["1" * 31 + ":00", "0" * 10 + "9" * 40 + "-1"])
def test_many_significant_digits_are_still_22015(text: str) -> None:
    with pytest.raises(SqlError) as raised:
        interval_fields(text)
    assert raised.value.sqlstate == "22015"
