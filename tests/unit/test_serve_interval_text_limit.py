"""Interval text longer than PostgreSQL's interval input takes is refused (22007), as
PostgreSQL 15 refuses it: its ``interval_in`` splits the text into fields in a buffer of
256 bytes (each field's characters and a NUL; spaces take none) and takes at most 25
fields, then tries the ISO 8601 form, which has no such limit. serve took text of any
length (a million digits of a day were a field overflow, 22015, where PostgreSQL answers
22007). Every case was checked against PostgreSQL 15."""

from __future__ import annotations

import pytest

from timeshard.server.intervals import interval_fields
from timeshard.server.sql_tokens import SqlError

UNITS = "year mon week day hour minute second millisecond microsecond decade century millennium"
#: 25 fields, each unit once, and ``ago``: PostgreSQL takes it.
ALL_UNITS = " ".join(f"1 {unit}" for unit in UNITS.split()) + " ago"


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        ("0" * 250 + "1 day", (0, 1, 0)),  # 252 + 4 bytes
        ("-" + "0" * 249 + "1 day", (0, -1, 0)),
        ("@ " + "0" * 246 + "1 day ago", (0, -1, 0)),
        ("1.5" + "0" * 248 + " day", (0, 1, 43_200_000_000)),
        ("1 day " + "0" * 242 + "1:02:03", (0, 1, 3_723_000_000)),
        ("0" * 251 + "1:00", (0, 0, 3_600_000_000)),
        ("1" + " " * 1000 + "day", (0, 1, 0)),
        ("P" + "0" * 1000 + "1D", (0, 1, 0)),
        (ALL_UNITS, (-13_333, -8, -3_661_001_001)),
    ],
)
def test_text_postgresql_takes_is_read(text: str, fields: tuple[int, int, int]) -> None:
    assert interval_fields(text) == fields


@pytest.mark.parametrize(
    "text",
    [
        "0" * 251 + "1 day",  # 253 + 4 bytes
        "-" + "0" * 250 + "1 day",
        "@ " + "0" * 247 + "1 day ago",
        "1.5" + "0" * 249 + " day",
        "1 day " + "0" * 243 + "1:02:03",
        "0" * 252 + "1:00",
        "0" * 5000 + "1:00",
        "1 DAY " + "0" * 246 + "1 Hour",
        "9" * 1_000_000 + " days",
        "@ " + "9" * 1_000_000 + " mins ago",
        ALL_UNITS.replace(" ago", " 1-2 01:02:03 ago"),  # 28 fields
    ],
)
def test_text_past_postgresql_s_buffer_or_fields_is_refused(text: str) -> None:
    with pytest.raises(SqlError) as raised:
        interval_fields(text)
    assert raised.value.sqlstate == "22007"
    assert "invalid input syntax for type interval" in str(raised.value)
