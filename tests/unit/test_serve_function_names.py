"""How PostgreSQL 15's 42883 and 42804 name a call and its arguments: a quoted name as
written (no function of PostgreSQL's has upper case: ``"UPPER"(s)`` is its 42883 of a
text too, and ``"SUM"(i)`` or ``"MyFunc"(s)`` of any function), an array of ``character
varying`` as one (the first text's type, as PostgreSQL's common type of texts is), every
argument's type where known here (``substr(5, t.s)``: "substr(integer, text)"); and a
text function of an array of texts is its 42883 too (``reverse(ARRAY[s])``: Spark
reversed the array). Each checked against PostgreSQL 15. At the typing rewrites'
version 4 only.
"""

from __future__ import annotations

import pytest
from tests.unit.test_serve_42883 import refusal, typed

#: Per query, PostgreSQL 15's SQLSTATE and message.
NAMED = {
    'SELECT "UPPER"(s) FROM t': ("42883", "function UPPER(text) does not exist"),
    'SELECT "UPPER"(i) FROM t': ("42883", "function UPPER(integer) does not exist"),
    'SELECT "UPPER"(5) FROM t': ("42883", "function UPPER(integer) does not exist"),
    'SELECT "LTRIM"(s) FROM t': ("42883", "function LTRIM(text) does not exist"),
    'SELECT "LTRIM"(i) FROM t': ("42883", "function LTRIM(integer) does not exist"),
    "SELECT \"Ltrim\"(i, 'x') FROM t": ("42883", "function Ltrim(integer, unknown) does not exist"),
    'SELECT "SUBSTR"(s, 1) FROM t': ("42883", "function SUBSTR(text, integer) does not exist"),
    'SELECT "ROUND"(1.5) FROM t': ("42883", "function ROUND(numeric) does not exist"),
    'SELECT "Coalesce"(s, i) FROM t': ("42883", "function Coalesce(text, integer) does not exist"),
    'SELECT "GREATEST"(i, 2) FROM t': (
        "42883",
        "function GREATEST(integer, integer) does not exist",
    ),
    "SELECT \"LPAD\"(s, 3, 'x', 'y') FROM t": (
        "42883",
        "function LPAD(text, integer, unknown, unknown) does not exist",
    ),
    'SELECT "UPPER"(upper(i)) FROM t': ("42883", "function upper(integer) does not exist"),
    'SELECT upper("UPPER"(i)) FROM t': ("42883", "function UPPER(integer) does not exist"),
    # Every argument typed, a column's too.
    "SELECT substr(5, t.s) FROM t": ("42883", "function substr(integer, text) does not exist"),
    "SELECT substr(5, s, i) FROM t": (
        "42883",
        "function substr(integer, text, integer) does not exist",
    ),
    "SELECT lpad(5, 3, s) FROM t": (
        "42883",
        "function lpad(integer, integer, text) does not exist",
    ),
    # An array of varchar, and of texts: the first's type.
    "SELECT upper(ARRAY[s::varchar]) FROM t": (
        "42883",
        "function upper(character varying[]) does not exist",
    ),
    "SELECT upper(ARRAY[s::varchar, s]) FROM t": (
        "42883",
        "function upper(character varying[]) does not exist",
    ),
    "SELECT upper(ARRAY[s, s::varchar]) FROM t": (
        "42883",
        "function upper(text[]) does not exist",
    ),
    "SELECT upper(ARRAY[s::varchar, 'a']) FROM t": (
        "42883",
        "function upper(character varying[]) does not exist",
    ),
    "SELECT upper(ARRAY[NULL::varchar, s]) FROM t": (
        "42883",
        "function upper(character varying[]) does not exist",
    ),
    "SELECT reverse(ARRAY[s]) FROM t": ("42883", "function reverse(text[]) does not exist"),
    "SELECT left(ARRAY[s], 1) FROM t": ("42883", "function left(text[], integer) does not exist"),
    "SELECT coalesce(ARRAY[s::varchar], 5) FROM t": (
        "42804",
        "COALESCE types character varying[] and integer cannot be matched",
    ),
    "SELECT coalesce(ARRAY[s::varchar(3)], 5) FROM t": (
        "42804",
        "COALESCE types character varying[] and integer cannot be matched",
    ),
    "SELECT coalesce(ARRAY[s, s::varchar], 5) FROM t": (
        "42804",
        "COALESCE types text[] and integer cannot be matched",
    ),
    # Of any function, not only those whose arities are known here (review k42: they ran).
    'SELECT "SUM"(i) FROM t': ("42883", "function SUM(integer) does not exist"),
    'SELECT "SUM"(i) OVER () FROM t': ("42883", "function SUM(integer) does not exist"),
    'SELECT "SUM"(DISTINCT i) FROM t': ("42883", "function SUM(integer) does not exist"),
    'SELECT "COUNT"(*) FROM t': ("42883", "function COUNT() does not exist"),
    'SELECT "COUNT"(i) FROM t': ("42883", "function COUNT(integer) does not exist"),
    'SELECT "Max"(i) FROM t': ("42883", "function Max(integer) does not exist"),
    'SELECT "NOW"() FROM t': ("42883", "function NOW() does not exist"),
    'SELECT "CURRENT_DATE"() FROM t': ("42883", "function CURRENT_DATE() does not exist"),
    'SELECT "ROW_NUMBER"() OVER () FROM t': ("42883", "function ROW_NUMBER() does not exist"),
    'SELECT "TRIM"(s) FROM t': ("42883", "function TRIM(text) does not exist"),
    'SELECT "UCASE"(s) FROM t': ("42883", "function UCASE(text) does not exist"),
    'SELECT "LENGTH"(s) FROM t': ("42883", "function LENGTH(text) does not exist"),
    'SELECT "Abs"(-1) FROM t': ("42883", "function Abs(integer) does not exist"),
    'SELECT "MyFunc"(s) FROM t': ("42883", "function MyFunc(text) does not exist"),
    "SELECT \"Date_Format\"(s, 'y') FROM t": (
        "42883",
        "function Date_Format(text, unknown) does not exist",
    ),
}


@pytest.mark.parametrize("sql", sorted(NAMED))
def test_named_as_postgresql_names_it(sql: str) -> None:
    assert refusal(sql) == NAMED[sql]


@pytest.mark.parametrize("sql", sorted(NAMED))
def test_version_3_leaves_them_to_spark(sql: str) -> None:
    typed(sql, 3)  # no SqlError


@pytest.mark.parametrize(
    "sql",
    [
        'SELECT "lower"(s), "myfunc"(s), "date_format"(now(), \'y\') FROM t',
        "SELECT UPPER(s), Lower(s), LTRIM(s), Date_Format(now(), 'y') FROM t",
        'SELECT "sum"(i), SUM(i), "count"(*) FROM t',
    ],
)
def test_a_name_postgresql_has_or_does_not_know_passes(sql: str) -> None:
    """A quoted lower-case name is PostgreSQL's function, an unquoted one of any case too;
    one it has not is Spark's (a quoted name of upper case is none: 42883)."""
    typed(sql)  # no SqlError
