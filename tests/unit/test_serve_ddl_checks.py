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


@pytest.mark.parametrize(
    ("sql", "option"),
    [
        ("CREATE SINK k FROM v INTO KAFKA (BROKER 'a:1', BROKERS 'b:1', TOPIC 't')", "BROKERS"),
        ("CREATE SINK d FROM v INTO DELTA (URI '/a', PATH '/b') KEY (k)", "PATH"),
        ("CREATE SINK d FROM v INTO DELTA (TABLE URI '/a', URI '/b') KEY (k)", "URI"),
        ("CREATE SOURCE f FROM FILE '/in' (FORMAT json, PATH '/elsewhere')", "PATH"),
    ],
)
def test_an_option_given_twice_under_another_name_is_refused(sql: str, option: str) -> None:
    """The last of two spellings of one option silently won."""
    with pytest.raises(SqlError, match=f"option {option} is given twice") as refused:
        parse(sql)
    assert refused.value.sqlstate == "42601"


@pytest.mark.parametrize("fmt", ["json", "JSON", "'json'", "'JSON'", "'avro'"])
def test_a_sink_format_is_a_word_or_a_string(fmt: str) -> None:
    """``FORMAT 'json'`` parsed as the format ''."""
    sink = parse(f"CREATE SINK k FROM v INTO KAFKA (BROKER 'a:1', TOPIC 't') FORMAT {fmt}")
    assert sink.options["format"] == fmt.strip("'").lower()  # type: ignore[union-attr]


def test_a_sink_format_that_is_neither_is_refused() -> None:
    with pytest.raises(SqlError, match="FORMAT"):
        parse("CREATE SINK k FROM v INTO KAFKA (BROKER 'a:1', TOPIC 't') FORMAT 1")
