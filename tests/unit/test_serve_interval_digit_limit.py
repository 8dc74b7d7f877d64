"""An interval field's number of more significant digits than any field in range has is
PostgreSQL's field overflow (22015, checked against PostgreSQL 15 with 40 digits), in
every form: only a time's hours and minutes and a years-months pair were guarded. A
number's whole part of hundreds of thousands of digits took seconds of CPU to convert
(holding the GIL), and one of a million overflowed the decimal context
(``decimal.Overflow``, answered as XX000). An ISO 8601 number past a double's range is
22007 instead (:mod:`tests.unit.test_serve_iso_interval_double_range`)."""

from __future__ import annotations

import pytest

from timeshard.server.intervals import interval_fields
from timeshard.server.sql_tokens import SqlError

#: As many digits as PostgreSQL 15 was checked with: a text of a million is longer than
#: its interval input takes (22007, :mod:`tests.unit.test_serve_interval_text_limit`).
FORTY = "9" * 40


@pytest.mark.parametrize(
    "text",
    [
        f"{FORTY} days",
        f"-{FORTY} years",
        f"{FORTY}.5 hours",
        f"{FORTY}",
        f"@ {FORTY} mins ago",
        f"P{FORTY}D",
        f"P{FORTY}Y",
        f"P1DT{FORTY}S",
        f"PT-{FORTY}.5M",
    ],
)
def test_a_number_of_too_many_digits_is_a_field_overflow(text: str) -> None:
    with pytest.raises(SqlError) as raised:
        interval_fields(text)
    assert raised.value.sqlstate == "22015"


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        ("0" * 100 + "1.5 days", (0, 1, 43_200_000_000)),
        ("999999999999 seconds", (0, 0, 999_999_999_999_000_000)),
        ("0." + "0" * 200 + " days", (0, 0, 0)),
    ],
)
def test_numbers_in_range_are_read(text: str, fields: tuple[int, int, int]) -> None:
    assert interval_fields(text) == fields
