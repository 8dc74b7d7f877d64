"""An interval's fields are added right to left, each checked as it is added, as
PostgreSQL's ``DecodeInterval`` adds them: added left to right, a sum past a field's
range on the way was refused where PostgreSQL's order never passes it, and the error
of another field was answered first. Each answer here is PostgreSQL 15's."""

from __future__ import annotations

import pytest

from timeshard.server.intervals import interval_fields
from timeshard.server.sql_tokens import SqlError


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        # -60 months, then +6, then 2147483647: 178956966 years 1 mon
        ("2147483647 months 0.5 years -0.5 decades", (2_147_483_593, 0, 0)),
        ("300000000 weeks -1 days", (0, 2_099_999_999, 0)),
        ("9223372036854775807 microseconds", (0, 0, 9_223_372_036_854_775_807)),
    ],
)
def test_a_sum_in_range_in_postgresql_s_order_is_read(
    text: str, fields: tuple[int, int, int]
) -> None:
    assert interval_fields(text) == fields


@pytest.mark.parametrize(
    ("text", "sqlstate"),
    [
        # 3000000000 years first: past int32 (left to right, years summed in range, then
        # their months past it: 22008)
        ("-1000000000 years 300000000 decades", "22015"),
        # 2147483647 days, then a week past them, before the week given twice (22007)
        ("-1 weeks 1 weeks 2147483647 days", "22015"),
        # a number times its unit is checked before it is added: 2147483650 years
        ("214748365 decades -3 years", "22015"),
        ("-1 days 306783379 weeks", "22015"),
    ],
)
def test_the_first_error_in_postgresql_s_order_is_answered(text: str, sqlstate: str) -> None:
    with pytest.raises(SqlError) as raised:
        interval_fields(text)
    assert raised.value.sqlstate == sqlstate
