"""An ISO 8601 interval's field whose number is past a double's range is PostgreSQL's
invalid syntax (22007), not a field overflow (22015): PostgreSQL 15's
``ParseISO8601Number`` reads each number with ``strtod`` and refuses its ERANGE (past
about 1.8e308, some 309 digits, or nonzero below the smallest normal double) as a bad
format, before it checks the field's range. Every expected SQLSTATE below is PostgreSQL
15's for ``SELECT '<text>'::interval``."""

from __future__ import annotations

import pytest

from timeshard.server.intervals import interval_fields
from timeshard.server.sql_tokens import SqlError


@pytest.mark.parametrize(
    ("text", "sqlstate"),
    [
        ("P" + "1" * 308 + "D", "22015"),
        ("P1" + "0" * 308 + "D", "22015"),  # 1e308
        ("P" + "1" * 308 + ".5D", "22015"),
        ("P1797" + "0" * 305 + "D", "22015"),  # 1.797e308 < the largest double
        ("P1798" + "0" * 305 + "D", "22007"),  # past it
        ("P" + "9" * 309 + "D", "22007"),
        ("P" + "1" * 310 + "D", "22007"),
        ("P" + "1" * 400 + "Y", "22007"),
        ("PT" + "1" * 310 + "S", "22007"),
        ("P-" + "1" * 310 + "D", "22007"),
        ("P1DT" + "9" * 1_000_000 + "S", "22007"),
        ("PT-" + "9" * 1_000_000 + ".5M", "22007"),
        ("P0." + "0" * 300 + "1D", None),  # 1e-301: a double, read as nothing
        ("P0." + "0" * 307 + "1D", "22007"),  # 1e-308: below the smallest normal double
        ("P0." + "0" * 400 + "D", None),  # zero
        ("P0" + "0" * 400 + "1D", None),  # leading zeros
    ],
)
def test_an_iso_number_past_a_double_is_invalid_syntax(text: str, sqlstate: str | None) -> None:
    if sqlstate is None:
        interval_fields(text)
        return
    with pytest.raises(SqlError) as raised:
        interval_fields(text)
    assert raised.value.sqlstate == sqlstate
