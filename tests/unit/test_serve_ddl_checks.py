"""What ``timeshard serve``'s DDL and parameters refuse, and what they take, as PostgreSQL
does. Pure parsing: no Spark, no location."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from timeshard.server.statements import Param, SqlError, bind, parse

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


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("NaN", "NaN"),
        ("nan", "NaN"),
        ("Infinity", "Infinity"),
        ("-Infinity", "-Infinity"),
        ("+infinity", "Infinity"),
        ("inf", "Infinity"),
        ("-INF", "-Infinity"),
    ],
)
@pytest.mark.parametrize(("oid", "type_sql"), [(700, "REAL"), (701, "DOUBLE PRECISION")])
def test_a_float_parameter_may_be_nan_or_infinite(
    text: str, want: str, oid: int, type_sql: str
) -> None:
    """PostgreSQL takes them for float4 and float8; they were refused with 22P02."""
    bound = bind("SELECT $1 AS x", [Param(text, oid)])
    assert bound == f"SELECT CAST('{want}' AS {type_sql}) AS x"
    tree = sqlglot.parse_one(bound, read="postgres")
    assert tree.find(exp.Cast) is not None and tree.find(exp.Identifier).name == "x"  # type: ignore[union-attr]


@pytest.mark.parametrize("oid", [20, 23, 1700])
@pytest.mark.parametrize("text", ["NaN", "Infinity", "-inf"])
def test_an_integer_or_numeric_parameter_is_never_nan_or_infinite(text: str, oid: int) -> None:
    """Spark's integers and decimals have no such value."""
    with pytest.raises(SqlError) as refused:
        bind("SELECT $1", [Param(text, oid)])
    assert refused.value.sqlstate == "22P02" and repr(text) in str(refused.value)
