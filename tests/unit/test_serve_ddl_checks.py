"""What ``timeshard serve``'s DDL and parameters refuse, and what they take, as PostgreSQL
does. Pure parsing: no Spark, no location."""

from __future__ import annotations

import pytest

from timeshard.server.statements import SqlError, parse

FILE = "CREATE SOURCE s {columns} FROM FILE '/in' (FORMAT json)"


@pytest.mark.parametrize(
    ("sql", "column"),
    [
        (FILE.format(columns="(id bigint, ID text)"), "id"),
        (FILE.format(columns='(id bigint, name text, "id" text)'), "id"),
        (FILE.format(columns='(id bigint, "ID" text)'), "ID"),  # one column to Spark
        (
            "CREATE SOURCE k (v text) FROM KAFKA (BROKER 'b:9092', TOPIC 't') "
            "KEY FORMAT JSON (k bigint, K text) VALUE FORMAT JSON",
            "k",
        ),
    ],
)
def test_a_column_named_twice_is_refused(sql: str, column: str) -> None:
    """``(id bigint, ID text)`` was one column ``id`` of type text: every row whose id was
    a number became an err row."""
    with pytest.raises(SqlError) as refused:
        parse(sql)
    assert refused.value.sqlstate == "42701", refused.value
    assert f"column {column!r}" in str(refused.value)
