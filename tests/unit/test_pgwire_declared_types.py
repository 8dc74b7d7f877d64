"""A result column that is a json, jsonb or varchar parameter itself (``$1`` declared so,
or ``$1::json``) is described with that type, as PostgreSQL describes it; Spark, which
has no such types, answers text (25), and was all RowDescription said. Any other
expression keeps Spark's type: it is not guessed."""

from __future__ import annotations

import pytest

from timeshard.server.pgtypes import declared_columns, type_oid, with_declared


@pytest.mark.parametrize(
    ("sql", "oids", "declared"),
    [
        ("SELECT $1", [114], {0: "json"}),
        ("SELECT $1 AS j, $2", [3802, 1043], {0: "jsonb", 1: "varchar"}),
        ("SELECT 1, $1::json AS j FROM t", [0], {1: "json"}),
        ("SELECT CAST($1 AS jsonb), $2::varchar(3)", [25, 0], {0: "jsonb", 1: "varchar"}),
        ("SELECT $2", [114, 25], {}),
        ("SELECT $1", [25], {}),
        ("SELECT $1 || 'x', upper($2)", [1043, 1043], {}),
        ("SELECT * FROM t WHERE x = $1", [114], {}),
        ("SELECT $1 UNION SELECT $2", [114, 114], {}),
        ("SELECT '{}'::json", [], {}),
        ("SELECT *, $1 FROM t", [114], {-1: "json"}),
        ("SELECT t.*, $1::json FROM t", [0], {-1: "json"}),
        ("SELECT $1, *, $2, 1 FROM t", [114, 3802], {-2: "jsonb"}),
        ("SELECT $1, t.* FROM t", [114], {}),
    ],
)
def test_columns_of_a_parameter_keep_its_type(
    sql: str, oids: list[int], declared: dict[int, str]
) -> None:
    assert declared_columns(sql, oids) == declared


def test_only_a_string_column_takes_the_declared_type() -> None:
    columns = [("a", "string"), ("b", "long"), ("c", "string")]
    kept = with_declared(columns, {0: "json", 1: "json"})
    assert [type_oid(t) for _, t in kept] == [114, 20, 25]


def test_a_column_after_a_star_is_numbered_from_the_end() -> None:
    """``SELECT *, $1`` over a table of one text column: the star is that column, and
    ``$1`` the second, which described the table's text column as json (114)."""
    columns = [("s", "string"), ("t", "string"), ("j", "string")]
    kept = with_declared(columns, declared_columns("SELECT *, $1 FROM t", [114]))
    assert [type_oid(t) for _, t in kept] == [25, 25, 114]
