"""A string after ``INTERVAL '...' +`` that is cast (``'2020-01-01'::date``), indexed,
multiplied or divided is an operand of the ``+``, as PostgreSQL 15 reads it
(``INTERVAL '1 day' + '2020-01-01'::date`` is ``2020-01-02 00:00:00``): sqlglot's
PostgreSQL reader took it for another interval to sum with the first, and the cast for
the sum's (``CAST(INTERVAL '1' DAY + INTERVAL '2020-01-01' AS DATE)``). A bare string
there stays an interval summed, as PostgreSQL reads it too."""

from __future__ import annotations

import pytest
import sqlglot

from timeshard.server.dialect import DIALECT


@pytest.mark.parametrize(
    ("sql", "spark"),
    [
        (
            "SELECT INTERVAL '1 day' + '2020-01-01'::date",
            "SELECT INTERVAL '1' DAY + CAST('2020-01-01' AS DATE)",
        ),
        (
            "SELECT INTERVAL '1' day + '2020-01-01'::date + INTERVAL '1 hour'",
            "SELECT INTERVAL '1' DAY + CAST('2020-01-01' AS DATE) + INTERVAL '1' HOUR",
        ),
        ("SELECT INTERVAL '1 day' + '2' * 3", "SELECT INTERVAL '1' DAY + '2' * 3"),
        ("SELECT INTERVAL '1 day' + '2 hours'", "SELECT INTERVAL '1' DAY + INTERVAL '2' HOURS"),
        ("SELECT INTERVAL '1 day' * 2", "SELECT INTERVAL '1' DAY * 2"),
    ],
)
def test_an_interval_sums_only_a_bare_string(sql: str, spark: str) -> None:
    assert sqlglot.parse_one(sql, read=DIALECT).sql("spark") == spark
