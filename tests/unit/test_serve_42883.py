"""PostgreSQL 15's 42883 ("operator does not exist: text = integer") for a text compared
with a number where the comparison is no bare operator: ``= ANY``/``ALL`` of an array or
a subquery, a row comparison, and a text function's result (``upper(s) = 5``); its 42883
for a text function of a number, naming the call as PostgreSQL does; its 42804 for a
COALESCE, GREATEST, LEAST or CASE of a text and a number (``coalesce(s, i)``). Each
refusal here was checked against PostgreSQL 15 (the integration file
``test_serve_postgres_types.py`` asks it); Spark cast the text and answered.

No Spark: :func:`~timeshard.server.query_rewrites._numeric_casts` is run on the tree.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlglot
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from timeshard.server import query_calls, query_comparisons
from timeshard.server.dialect import DIALECT
from timeshard.server.query_rewrites import TYPING, _numeric_casts
from timeshard.server.statements import SqlError

SHARDS = {"t": {"i": "INT", "s": "TEXT"}, "u": {"i": "INT", "s": "INT", "b": "BINARY"}}


def typed(sql: str, version: int = TYPING) -> str:
    tree = normalize_identifiers(sqlglot.parse_one(sql, read=DIALECT), dialect=DIALECT)
    _numeric_casts(tree, SHARDS.get, version)
    return tree.sql("spark")


def refusal(sql: str) -> tuple[str, str]:
    with pytest.raises(SqlError) as caught:
        typed(sql)
    return caught.value.sqlstate, str(caught.value)


#: Per query, the operator PostgreSQL 15 names in its 42883.
ANY_ALL = {
    "SELECT i FROM t WHERE s = ANY (ARRAY[1, 2])": "text = integer",
    "SELECT i FROM t WHERE s = ANY (ARRAY['1', 2])": "text = integer",
    "SELECT i FROM t WHERE s = ANY (ARRAY[1, 2.5])": "text = numeric",
    "SELECT i FROM t WHERE 5 = ANY (ARRAY[s])": "integer = text",
    "SELECT i FROM t WHERE s = ANY (SELECT 1)": "text = integer",
    "SELECT i FROM t WHERE s = SOME (SELECT 1)": "text = integer",
    "SELECT i FROM t WHERE s <> SOME (ARRAY[1, 2])": "text <> integer",
    "SELECT i FROM t WHERE s <> ALL (ARRAY[1, 2])": "text <> integer",
    "SELECT i FROM t WHERE s > ALL (SELECT i FROM t)": "text > integer",
    "SELECT i FROM t WHERE i = ANY (SELECT s FROM t)": "integer = text",
    "SELECT i FROM t WHERE i = ANY (ARRAY['1', s])": "integer = text",
}
ROWS = {
    "SELECT i FROM t WHERE (s, i) = (1, 2)": "text = integer",
    "SELECT i FROM t WHERE (i, s) < (1, 2)": "text < integer",
    "SELECT i FROM t WHERE (s, i) <> (1, 2)": "text <> integer",
    "SELECT i FROM t WHERE ROW(s, i) = ROW(1, 2)": "text = integer",
    "SELECT i FROM t WHERE (s, i) IN ((1, 2))": "text = integer",
    "SELECT i FROM t WHERE (s, i) IN (SELECT 1, 2)": "text = integer",
    "SELECT i FROM t WHERE (s, i) IS DISTINCT FROM (1, 2)": "text = integer",
    "SELECT i FROM t WHERE (i, s) = (SELECT 1, 2)": "text = integer",
    "SELECT i FROM t WHERE (s, i) = ANY (SELECT 1, 2)": "text = integer",
}
TEXT_FUNCTIONS = {
    "SELECT i FROM t WHERE upper(s) = 5": "text = integer",
    "SELECT i FROM t WHERE s || 'x' = 5": "text = integer",
    "SELECT i FROM t WHERE substr(s, 1, 2) < 3": "text < integer",
    "SELECT i FROM t WHERE substring(s FROM 1 FOR 2) = 5": "text = integer",
    "SELECT i FROM t WHERE lower(s) = 5": "text = integer",
    "SELECT i FROM t WHERE initcap(s) = 5": "text = integer",
    "SELECT i FROM t WHERE trim(s) = 5 OR ltrim(s) = 5 OR rtrim(s) = 5": "text = integer",
    "SELECT i FROM t WHERE left(s, 1) = 5 OR right(s, 1) = 5": "text = integer",
    "SELECT i FROM t WHERE lpad(s, 3) = 5 OR rpad(s, 3) = 5": "text = integer",
    "SELECT i FROM t WHERE replace(s, 'a', 'b') = 5": "text = integer",
    "SELECT i FROM t WHERE reverse(s) = 5": "text = integer",
    "SELECT i FROM t WHERE repeat(s, 2) = 5": "text = integer",
    "SELECT i FROM t WHERE translate(s, 'a', 'b') = 5": "text = integer",
    "SELECT i FROM t WHERE split_part(s, ',', 1) = 5": "text = integer",
    "SELECT i FROM t WHERE md5(s) = 5": "text = integer",
    "SELECT i FROM t WHERE concat(i) = 5": "text = integer",
    "SELECT i FROM t WHERE concat_ws(',', i) = 5": "text = integer",
    "SELECT i FROM t WHERE i || 'x' = 5": "text = integer",
    "SELECT i FROM t WHERE 'a' || i = 5": "text = integer",
    "SELECT i FROM t WHERE upper(s) || i = 5": "text = integer",
    "SELECT i FROM t WHERE upper(upper(s)) < 5.5": "text < numeric",
    "SELECT i FROM t WHERE upper('a') = 5": "text = integer",
    "SELECT i FROM t WHERE upper(s) IN (1, 2)": "text = integer",
    "SELECT i FROM t WHERE (upper(s), i) = (1, 2)": "text = integer",
    "SELECT i FROM t WHERE lower(s) = ANY (SELECT i FROM t)": "text = integer",
}

#: A ``COALESCE``, ``GREATEST`` or ``LEAST`` of texts and string constants (or of string
#: constants and NULLs only) is a text, the first text's type (PostgreSQL's common type).
COMMON_TEXTS = {
    "SELECT i FROM t WHERE coalesce(s, 'a') = 5": "text = integer",
    "SELECT i FROM t WHERE coalesce('a', s) = 5": "text = integer",
    "SELECT i FROM t WHERE coalesce(NULL, s, s) = 5": "text = integer",
    "SELECT i FROM t WHERE coalesce('a', 'b') = 5": "text = integer",
    "SELECT i FROM t WHERE coalesce(NULL, NULL) = 5": "text = integer",
    "SELECT i FROM t WHERE coalesce(s::varchar, 'a') = 5": "character varying = integer",
    "SELECT i FROM t WHERE coalesce(s::varchar, s) = 5": "character varying = integer",
    "SELECT i FROM t WHERE coalesce(upper(s), 'a') = 5": "text = integer",
    "SELECT i FROM t WHERE upper(coalesce(s, 'a')) = 5": "text = integer",
    "SELECT i FROM t WHERE coalesce(s, 'a') IN (1, 2)": "text = integer",
    "SELECT i FROM t WHERE greatest(s, 'a') = 5": "text = integer",
    "SELECT i FROM t WHERE least(s, 'a') < 5": "text < integer",
    # A CASE of texts: its values are its ELSE (NULL without one) and its THENs.
    "SELECT i FROM t WHERE CASE WHEN i > 0 THEN s ELSE 'x' END = 5": "text = integer",
    "SELECT i FROM t WHERE CASE WHEN i > 0 THEN 'y' ELSE 'x' END = 5": "text = integer",
    "SELECT i FROM t WHERE CASE WHEN i > 0 THEN NULL ELSE 'x' END = 5": "text = integer",
    "SELECT i FROM t WHERE CASE WHEN i > 0 THEN s END = 5": "text = integer",
    "SELECT i FROM t WHERE CASE i WHEN 1 THEN s END < 5.5": "text < numeric",
    "SELECT i FROM t WHERE 5 IN (CASE WHEN i > 0 THEN upper(s) END)": "integer = text",
    # Of integers and string constants: an integer.
    "SELECT i FROM t WHERE coalesce(i, '5') = s": "integer = text",
    "SELECT i FROM t WHERE s < CASE WHEN i > 0 THEN 2::int8 ELSE '7' END": "text < bigint",
}
#: Per query, PostgreSQL 15's 42804 of a COALESCE, GREATEST, LEAST or CASE of a text and
#: a number. It reads the values in order (a CASE's ELSE first, NULL without one, then
#: its THENs), passing string constants and NULLs, and names the type so far (the first
#: text's, the widest number's) and the first value's of the other kind.
COMMON_TYPES = {
    "SELECT coalesce(s, i) FROM t": "COALESCE types text and integer",
    "SELECT coalesce(i, s) FROM t": "COALESCE types integer and text",
    "SELECT greatest(s, i) FROM t": "GREATEST types text and integer",
    "SELECT least(i, s) FROM t": "LEAST types integer and text",
    "SELECT coalesce(s, 5) FROM t": "COALESCE types text and integer",
    "SELECT coalesce(s, NULL, 'a', i) FROM t": "COALESCE types text and integer",
    "SELECT coalesce(NULL, i, s) FROM t": "COALESCE types integer and text",
    "SELECT coalesce(i, 1.5, s) FROM t": "COALESCE types numeric and text",
    "SELECT coalesce(1.5, i, s) FROM t": "COALESCE types numeric and text",
    "SELECT coalesce(s, 1.5) FROM t": "COALESCE types text and numeric",
    "SELECT coalesce(s, 1e3) FROM t": "COALESCE types text and numeric",
    "SELECT coalesce(s, 2::float8) FROM t": "COALESCE types text and double precision",
    "SELECT coalesce(s, count(*)) FROM t GROUP BY s": "COALESCE types text and bigint",
    "SELECT coalesce(s::varchar, s, i) FROM t": "COALESCE types character varying and integer",
    "SELECT coalesce(upper(s), i) FROM t": "COALESCE types text and integer",
    "SELECT coalesce(coalesce(s, 'a'), i) FROM t": "COALESCE types text and integer",
    "SELECT coalesce(s, i) = 5 FROM t": "COALESCE types text and integer",
    "SELECT upper(coalesce(i, s)) FROM t": "COALESCE types integer and text",
    "SELECT t.i FROM t, u WHERE coalesce(t.s, u.i) = 'a'": "COALESCE types text and integer",
    "SELECT CASE WHEN i > 0 THEN s ELSE i END FROM t": "CASE types integer and text",
    "SELECT CASE WHEN i > 0 THEN i ELSE s END FROM t": "CASE types text and integer",
    "SELECT CASE WHEN i > 0 THEN s WHEN i < 0 THEN 5 END FROM t": "CASE types text and integer",
    "SELECT CASE WHEN i > 0 THEN 'a' WHEN i < 0 THEN 5 ELSE s END FROM t": (
        "CASE types text and integer"
    ),
    "SELECT CASE WHEN i > 0 THEN 1 WHEN i < 0 THEN s WHEN i = 0 THEN 1.5 END FROM t": (
        "CASE types integer and text"
    ),
    "SELECT CASE i WHEN 1 THEN s ELSE 2 END FROM t": "CASE types integer and text",
}
#: Per query, PostgreSQL 15's error for a string constant among integers, which it reads
#: as their common type when it plans the query (Spark cast the text to a BIGINT).
INTEGER_TEXTS = {
    "SELECT coalesce(i, 'a') FROM t": ("22P02", 'invalid input syntax for type integer: "a"'),
    "SELECT greatest(2::int8, 'x') FROM t": ("22P02", 'invalid input syntax for type bigint: "x"'),
    "SELECT CASE WHEN i > 0 THEN 'a' ELSE 5 END FROM t": (
        "22P02",
        'invalid input syntax for type integer: "a"',
    ),
    "SELECT coalesce(i, '3000000000') FROM t": (
        "22003",
        'value "3000000000" is out of range for type integer',
    ),
    "SELECT greatest(least(1, 'a'), s) FROM t": (
        "22P02",
        'invalid input syntax for type integer: "a"',
    ),
}
#: A text function of a number: PostgreSQL has none (its message names the function as
#: called; here, where it differs, as sqlglot names it).
NUMBER_ARGUMENTS = {
    "SELECT i FROM t WHERE upper(i) = 5": "upper(integer)",
    "SELECT i FROM t WHERE upper(i) = '5'": "upper(integer)",
    "SELECT upper(i) FROM t": "upper(integer)",
    "SELECT i FROM t WHERE lower(i) = 5": "lower(integer)",
    "SELECT i FROM t WHERE upper(5) = 5": "upper(integer)",
    "SELECT i FROM t WHERE upper(1.5) = 5": "upper(numeric)",
    "SELECT i FROM t WHERE initcap(i) = 5": "initcap(integer)",
    "SELECT i FROM t WHERE reverse(i) = 5": "reverse(integer)",
    "SELECT i FROM t WHERE md5(i) = 5": "md5(integer)",
    "SELECT i FROM t WHERE left(i, 1) = 5": "left(integer, integer)",
    "SELECT i FROM t WHERE repeat(i, 1) = 5": "repeat(integer, integer)",
    "SELECT i FROM t WHERE replace(i, 'a', 'b') = 5": "replace(integer, unknown, unknown)",
    "SELECT i FROM t WHERE translate(i, 'a', 'b') = 5": "translate(integer, unknown, unknown)",
    "SELECT i FROM t WHERE split_part(i, ',', 1) = 5": "split_part(integer, unknown, integer)",
    "SELECT i FROM t WHERE lpad(i, 3) = 5": "lpad(integer, integer)",
    "SELECT lower(u.i) FROM u": "lower(integer)",
    "SELECT upper(q.n) FROM (SELECT count(*) AS n FROM t) AS q": "upper(bigint)",
    # Named as PostgreSQL 15 names them (review k35): an array, the trims by their side.
    "SELECT upper(coalesce(i, '5')) FROM t": "upper(integer)",
    "SELECT upper(ARRAY[1])": "upper(integer[])",
    "SELECT upper(ARRAY[1.5, 2])": "upper(numeric[])",
    "SELECT upper(ARRAY[i]) FROM t": "upper(integer[])",
    "SELECT ltrim(i) FROM t": "ltrim(integer)",
    "SELECT rtrim(i, 'x') FROM t": "rtrim(integer, unknown)",
    "SELECT btrim(i) FROM t": "btrim(integer)",
    # Every argument given, those sqlglot's node drops too (lpad's fourth, initcap's second).
    "SELECT lpad(i, 3, 'x', 'y') FROM t": "lpad(integer, integer, unknown, unknown)",
    "SELECT rpad(i, 3, 'x', 'y') FROM t": "rpad(integer, integer, unknown, unknown)",
    "SELECT lpad(i, 3, s) FROM t": "lpad(integer, integer, text)",
    "SELECT initcap(i, 'x') FROM t": "initcap(integer, unknown)",
    "SELECT ltrim(i, 'x', 'y') FROM t": "ltrim(integer, unknown, unknown)",
    "SELECT btrim(i, 'x', 'y') FROM t": "btrim(integer, unknown, unknown)",
    "SELECT substr(i, 1, 2, 3) FROM t": "substr(integer, integer, integer, integer)",
    "SELECT split_part(i, ',', 1, 2) FROM t": "split_part(integer, unknown, integer, integer)",
    "SELECT left(i, 1, 2) FROM t": "left(integer, integer, integer)",
    # By the name called (substr), and pg_catalog's for the standard's syntax.
    "SELECT i FROM t WHERE substr(i, 1) = 5": "substr(integer, integer)",
    "SELECT substring(i, 1, 2) FROM t": "substring(integer, integer, integer)",
    "SELECT substring(i FROM 1 FOR 2) FROM t": "pg_catalog.substring(integer, integer, integer)",
    "SELECT substring(i FOR 2) FROM t": "pg_catalog.substring(integer, integer, integer)",
    "SELECT substring(i FROM 1) FROM t": "pg_catalog.substring(integer, integer)",
    "SELECT overlay(i PLACING 'x' FROM 1) FROM t": "pg_catalog.overlay(integer, unknown, integer)",
    "SELECT overlay(i, 'x', 1, 2) FROM t": "overlay(integer, unknown, integer, integer)",
    "SELECT i FROM t WHERE trim(i) = 5": "pg_catalog.btrim(integer)",
    "SELECT trim(BOTH FROM i) FROM t": "pg_catalog.btrim(integer)",
    "SELECT trim(LEADING FROM i) FROM t": "pg_catalog.ltrim(integer)",
    "SELECT trim(TRAILING 'x' FROM i) FROM t": "pg_catalog.rtrim(integer, unknown)",
    "SELECT trim('x' FROM i) FROM t": "pg_catalog.btrim(integer, unknown)",
    "SELECT trim(i, 'x') FROM t": "pg_catalog.btrim(integer, unknown)",
}


@pytest.mark.parametrize("sql", sorted(COMMON_TEXTS))
def test_a_coalesce_of_texts_compared_with_a_number_is_42883(sql: str) -> None:
    """Spark compared the coalesce's text, casting it: rows, or 22P02 at one no number."""
    assert refusal(sql) == ("42883", f"operator does not exist: {COMMON_TEXTS[sql]}")


@pytest.mark.parametrize("sql", sorted(COMMON_TYPES))
def test_a_common_type_of_a_text_and_a_number_is_42804(sql: str) -> None:
    """Spark cast the text to a BIGINT: ``coalesce(s, i)`` answered 22P02 at the text 'x'."""
    assert refusal(sql) == ("42804", f"{COMMON_TYPES[sql]} cannot be matched")


@pytest.mark.parametrize(
    ("sql", "spark"),
    [
        ("SELECT coalesce(i, '5') AS n FROM t", "SELECT COALESCE(i, CAST('5' AS INT)) AS n FROM t"),
        (
            "SELECT greatest(2::int8, i, ' 7 ', NULL) AS n FROM t",
            "SELECT GREATEST(CAST(2 AS BIGINT), i, CAST(' 7 ' AS BIGINT), NULL) AS n FROM t",
        ),
        (
            "SELECT CASE WHEN i > 0 THEN '5' ELSE 2::int2 END AS n FROM t",
            "SELECT CASE WHEN i > 0 THEN CAST('5' AS SMALLINT) ELSE CAST(2 AS SMALLINT) END "
            "AS n FROM t",
        ),
        (
            "SELECT coalesce(i, '5') / 2 AS n FROM t",
            "SELECT CAST(COALESCE(i, CAST('5' AS INT)) DIV 2 AS INT) AS n FROM t",
        ),
    ],
)
def test_a_string_constant_among_integers_is_of_their_type(sql: str, spark: str) -> None:
    """PostgreSQL's ``coalesce(i, '5')`` is an int4 (and ``/ 2`` of it an integer
    quotient); Spark's was an int8, the text cast to a BIGINT."""
    assert typed(sql) == spark


@pytest.mark.parametrize("sql", sorted(INTEGER_TEXTS))
def test_a_string_constant_among_integers_is_read_as_one(sql: str) -> None:
    assert refusal(sql) == INTEGER_TEXTS[sql]


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        # What is in a construct is refused first, as PostgreSQL reads it before.
        (
            "SELECT coalesce(upper(i), s) FROM t",
            ("42883", "function upper(integer) does not exist"),
        ),
        (
            "SELECT CASE WHEN s = 5 THEN s ELSE i END FROM t",
            ("42883", "operator does not exist: text = integer"),
        ),
        (
            "SELECT coalesce(coalesce(i, s), 5) FROM t",
            ("42804", "COALESCE types integer and text cannot be matched"),
        ),
    ],
)
def test_what_is_in_a_construct_is_refused_first(sql: str, expected: tuple[str, str]) -> None:
    assert refusal(sql) == expected


@pytest.mark.parametrize("sql", sorted(NUMBER_ARGUMENTS))
def test_a_text_function_of_a_number_is_42883(sql: str) -> None:
    """Spark cast the number to a string: ``upper(i) = 5`` answered rows."""
    message = f"function {NUMBER_ARGUMENTS[sql]} does not exist"
    assert refusal(sql) == ("42883", message)


@pytest.mark.parametrize(
    "call",
    [
        "lpad(s, 3, 'x', 'y')",
        "ltrim(s, 'x', 'y')",
        "btrim(s, 'x', 'y')",
        "substr(s, 1, 2, 3)",
        "initcap(s, 'x', 'y')",
        "trim(LEADING 'x' FROM s)",
        "substring((SELECT s FROM t) FROM 1 FOR 2)",
        "overlay(s PLACING 'x' FROM 1)",
    ],
)
def test_a_call_kept_for_its_name_runs_as_sqlglot_reads_it(call: str) -> None:
    """The parser keeps a call's name and arguments beside its node: the tree, and the
    Spark SQL it runs as, are sqlglot's (a view recorded before reads alike)."""
    served = sqlglot.parse_one(f"SELECT {call} FROM t", read=DIALECT)
    stock = sqlglot.parse_one(f"SELECT {call} FROM t", read="postgres")
    assert served == stock
    assert served.sql("spark") == stock.sql("spark")


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT upper(q.i) FROM (SELECT * FROM t) AS q",
        "SELECT i FROM (SELECT * FROM t) AS q WHERE coalesce(q.s, 'a') = 5",
        "SELECT upper(b) FROM u",
        "SELECT coalesce(u.b, 5) FROM u",
        "SELECT coalesce(q.s, 5) FROM (SELECT * FROM t) AS q",
        # PostgreSQL's 22P02 (its input of a numeric is not checked here): Spark's.
        "SELECT i FROM t WHERE coalesce(1.5, 'a') = s",
    ],
)
def test_a_function_of_a_type_not_known_here_is_left_to_spark(sql: str) -> None:
    """PostgreSQL refuses these too (42883, 42804), but the type of a value is not known
    here (a column of a ``*``, a bytea): nothing is refused on a guess."""
    typed(sql)  # no SqlError


@pytest.mark.parametrize("sql", ["SELECT initcap()", "SELECT i FROM t WHERE initcap() = 'a'"])
def test_a_text_function_of_no_argument_is_postgresqls_42883(sql: str) -> None:
    """sqlglot parses ``initcap()`` with no first argument: PostgreSQL 15's 42883 (of no
    ``initcap`` of no argument: ``test_serve_arities.py``), not an AttributeError in the
    server (review k35); at version 3, Spark's error."""
    assert refusal(sql) == ("42883", "function initcap() does not exist")
    typed(sql, 3)  # no SqlError


@pytest.mark.parametrize("sql", sorted(ANY_ALL))
def test_any_or_all_of_a_text_and_numbers_is_42883(sql: str) -> None:
    """Spark compared each element or row, casting the text."""
    assert refusal(sql) == ("42883", f"operator does not exist: {ANY_ALL[sql]}")


@pytest.mark.parametrize("sql", sorted(ROWS))
def test_a_row_comparison_of_a_text_and_a_number_is_42883(sql: str) -> None:
    """PostgreSQL resolves a row comparison's operator for each pair of its columns."""
    assert refusal(sql) == ("42883", f"operator does not exist: {ROWS[sql]}")


@pytest.mark.parametrize("sql", sorted(TEXT_FUNCTIONS))
def test_a_text_function_compared_with_a_number_is_42883(sql: str) -> None:
    """A text function of a text (``upper``, ``substr``, ``||`` ...) is a text."""
    assert refusal(sql) == ("42883", f"operator does not exist: {TEXT_FUNCTIONS[sql]}")


#: What PostgreSQL 15 answers: a string constant takes the other side's type, a
#: function whose type is not known here (or not text: ``length``, ``lower`` of a range,
#: ``substring`` of a bytea) is left to Spark.
PASSED = [
    "SELECT i FROM t WHERE s = ANY (ARRAY['1', '2']) AND s = ANY (SELECT '1')",
    "SELECT i FROM t WHERE s = ANY ('{1,2}') AND i = ANY (ARRAY[1, 2])",
    "SELECT i FROM t WHERE (s, i) = ('1', 2) AND (i, s) = (7, 'x')",
    "SELECT i FROM t WHERE upper(s) = '5' AND length(s) = 5 AND upper(s) = s",
    "SELECT i FROM t WHERE quote_ident(s) = 5",
    "SELECT i FROM u WHERE substring(b FROM 1 FOR 1) = 5",
    # An array's concatenation is an array (int[]), not a text (review k34).
    "SELECT i FROM t WHERE ARRAY[1, 2] || '{3,4}' = ARRAY[1, 2, 3, 4]",
    "SELECT i FROM t WHERE i = ANY (ARRAY[1, 2] || '{3}') AND '{0}' || ARRAY[1] = ARRAY[0, 1]",
    # A coalesce of numbers, or compared with a string constant; a text function of a
    # text (a number cast to one), of NULL, or of a column of a type not known here.
    "SELECT i FROM t WHERE coalesce(i, 5) = 5 AND coalesce(s, 'a') = '5'",
    "SELECT i FROM t WHERE upper(i::text) = '5' AND upper(NULL) = 'A'",
    # A string constant or NULL beside a text or a number takes its type; numbers of
    # several types have the widest; a value of a type not known here is Spark's.
    "SELECT coalesce(s, 'a'), coalesce(i, '5'), greatest(i, NULL, '7'), least('a', s) FROM t",
    "SELECT coalesce(t.i, 1.5, 2::int8, 3e0), greatest(t.i, u.s) FROM t, u",
    "SELECT CASE WHEN i > 0 THEN s ELSE 'x' END, CASE WHEN i > 0 THEN i END FROM t",
    "SELECT CASE WHEN i > 0 THEN 'a' ELSE NULL END = 'b', coalesce(NULL, NULL) FROM t",
    "SELECT coalesce(i, ' 5 '), least(i, '-7'), greatest(2::int8, '3000000000') FROM t",
]


@pytest.mark.parametrize("sql", PASSED)
def test_what_postgresql_answers_passes(sql: str) -> None:
    typed(sql)  # no SqlError


@pytest.mark.parametrize(
    "sql",
    sorted(
        {**ANY_ALL, **ROWS, **TEXT_FUNCTIONS, **COMMON_TEXTS, **NUMBER_ARGUMENTS}.keys()
        | COMMON_TYPES.keys()
        | INTEGER_TEXTS.keys()
    ),
)
def test_version_3_leaves_them_to_spark(sql: str) -> None:
    """A view recorded at version 3 resolves as it did."""
    typed(sql, 3)  # no SqlError


#: Per join, the types PostgreSQL 15 names in its 42804 ("JOIN/USING types text and
#: integer cannot be matched"): it resolves the common column's ``=`` when it plans.
USING = {
    "SELECT * FROM t JOIN u USING (s)": "text and integer",
    "SELECT * FROM t LEFT JOIN u USING (s)": "text and integer",
    "SELECT * FROM t FULL JOIN u USING (i, s)": "text and integer",
    "SELECT * FROM t NATURAL JOIN u": "text and integer",
    "SELECT * FROM t JOIN (SELECT 5 AS s) AS v USING (s)": "text and integer",
    "SELECT * FROM (SELECT 5 AS s) AS v JOIN t USING (s)": "integer and text",
    "SELECT * FROM t JOIN (SELECT 5.5 AS s) AS v USING (s)": "text and numeric",
    "SELECT * FROM t NATURAL JOIN (SELECT 5::int8 AS s) AS v": "text and bigint",
    "SELECT 1 FROM t JOIN (SELECT 5::int2 AS s) AS v USING (s)": "text and smallint",
    "SELECT 1 FROM t JOIN (SELECT i AS s FROM t) AS v USING (s)": "text and integer",
    "SELECT 1 FROM t JOIN (SELECT 5 AS s UNION SELECT 6) AS v USING (s)": "text and integer",
    "WITH w AS (SELECT 5 AS s) SELECT 1 AS n FROM t JOIN w USING (s)": "text and integer",
    "SELECT * FROM (SELECT 5 AS k) AS a JOIN (SELECT '5' AS k) AS b USING (k)": (
        "integer and text"
    ),
    "SELECT t.i FROM t JOIN (SELECT 7 AS i) AS u USING (i) JOIN (SELECT 5.5 AS s) AS v "
    "USING (s)": "text and numeric",
}


@pytest.mark.parametrize("sql", sorted(USING))
def test_a_join_using_a_text_and_a_number_is_42804(sql: str) -> None:
    """Spark joined them casting the text (22P02 at the row 'x')."""
    assert refusal(sql) == ("42804", f"JOIN/USING types {USING[sql]} cannot be matched")


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM t JOIN (SELECT '5' AS s) AS v USING (s)",
        "SELECT * FROM t JOIN (SELECT 5 AS s) AS v ON TRUE JOIN u USING (i)",
        "SELECT 1 FROM t, (SELECT 5 AS s) AS v JOIN u USING (s)",
        "SELECT * FROM t JOIN (SELECT 7::int8 AS i, 'y' AS s) AS v USING (i, s)",
    ],
)
def test_a_join_using_what_postgresql_matches_passes(sql: str) -> None:
    typed(sql)  # no SqlError


@pytest.mark.parametrize("sql", sorted(USING))
def test_version_3_leaves_a_join_using_to_spark(sql: str) -> None:
    typed(sql, 3)  # no SqlError


#: Review k37, each checked against PostgreSQL 15: an array is of its own type, not its
#: elements' (those only for ``= ANY``); a string constant beside one is its text.
ARRAYS_PASSED = [
    "SELECT coalesce(ARRAY[t.i], '{}') FROM t",
    "SELECT CASE WHEN t.i > 0 THEN ARRAY[t.i] ELSE '{}' END FROM t",
    "SELECT coalesce(ARRAY(SELECT i FROM t), '{}')",
    "SELECT greatest(ARRAY[1], '{2}')",
    "SELECT coalesce(ARRAY[1], '{1}') = ARRAY[1]",
    "SELECT coalesce(ARRAY[1], ARRAY[1.5])",
]


@pytest.mark.parametrize("sql", ARRAYS_PASSED)
def test_a_common_type_of_an_array_and_its_text_passes(sql: str) -> None:
    typed(sql)  # no SqlError (was 22P02 'invalid input syntax for type integer: "{}"')


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT coalesce(ARRAY[1], t.s) FROM t", "COALESCE types integer[] and text"),
        ("SELECT coalesce(ARRAY[1], 5)", "COALESCE types integer[] and integer"),
        ("SELECT coalesce(5, ARRAY[1])", "COALESCE types integer and integer[]"),
    ],
)
def test_a_common_type_of_an_array_and_a_scalar_names_the_array(sql: str, expected: str) -> None:
    assert refusal(sql) == ("42804", f"{expected} cannot be matched")


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT upper(coalesce(ARRAY[1], ARRAY[2]))", "function upper(integer[]) does not exist"),
        (
            "SELECT t.s = coalesce(ARRAY[1], '{1}') FROM t",
            "operator does not exist: text = integer[]",
        ),
        (
            "SELECT t.s = ANY (coalesce(ARRAY[1], '{1}')) FROM t",
            "operator does not exist: text = integer",
        ),
    ],
)
def test_an_array_is_named_as_one(sql: str, expected: str) -> None:
    assert refusal(sql) == ("42883", expected)


def test_a_string_constant_beside_an_array_is_not_cast_to_its_elements() -> None:
    assert typed("SELECT coalesce(ARRAY[1], '5')") == "SELECT COALESCE(ARRAY(1), '5')"


#: Per query, PostgreSQL 15's first error: it reads a construct's arguments before it,
#: siblings left to right, the select list before WHERE (review k37).
FIRST_ERRORS = {
    "SELECT upper(t.i), coalesce(t.s, t.i) FROM t": (
        "42883",
        "function upper(integer) does not exist",
    ),
    "SELECT upper(t.i) FROM t WHERE coalesce(t.s, t.i) IS NULL": (
        "42883",
        "function upper(integer) does not exist",
    ),
    "SELECT 1 FROM t WHERE t.s = 5 AND coalesce(t.s, t.i) IS NULL": (
        "42883",
        "operator does not exist: text = integer",
    ),
    "SELECT CASE WHEN t.s = 5 THEN 1 ELSE coalesce(t.i, t.s) END FROM t": (
        "42883",
        "operator does not exist: text = integer",
    ),
    "SELECT coalesce(upper(t.i), coalesce(t.i, t.s)) FROM t": (
        "42883",
        "function upper(integer) does not exist",
    ),
    "SELECT t.i + 'a', coalesce(t.i, 'b') FROM t": (
        "22P02",
        'invalid input syntax for type integer: "a"',
    ),
}


@pytest.mark.parametrize("sql", sorted(FIRST_ERRORS))
def test_the_first_error_is_postgresqls(sql: str) -> None:
    assert refusal(sql) == FIRST_ERRORS[sql]


def test_a_long_string_constant_among_integers_is_read_as_postgresql_reads_it() -> None:
    """int() of more than 4,300 digits was a ValueError (XX000) in the server."""
    typed(f"SELECT CASE WHEN t.i > 0 THEN '{'0' * 4999}1' ELSE 2 END FROM t")
    typed(f"SELECT t.i + '{'0' * 4999}1' FROM t")
    for sql in (
        f"SELECT coalesce(t.i, '{'1' * 5000}') FROM t",
        f"SELECT t.i + '{'1' * 5000}' FROM t",
    ):
        assert refusal(sql) == ("22003", f'value "{"1" * 5000}" is out of range for type integer')


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT nvl(t.s, 5) FROM t", "function nvl(text, integer) does not exist"),
        ("SELECT ifnull(t.s, 5) FROM t", "function ifnull(text, integer) does not exist"),
        ("SELECT nvl(t.i, 'a') FROM t", "function nvl(integer, unknown) does not exist"),
        (
            "SELECT overlay(\"placing\", 'x', 1) FROM (SELECT 5 AS placing) AS q",
            "function overlay(integer, unknown, integer) does not exist",
        ),
        ('SELECT "SUBSTR"(i, 1) FROM t', "function SUBSTR(integer, integer) does not exist"),
        ("SELECT SUBSTR(i, 1) FROM t", "function substr(integer, integer) does not exist"),
    ],
)
def test_a_call_is_named_as_written(sql: str, expected: str) -> None:
    """sqlglot reads nvl and ifnull as COALESCE (was "COALESCE types text and integer")."""
    assert refusal(sql) == ("42883", expected)


def test_nvl_postgresql_refuses_but_serve_does_not_is_spark_s() -> None:
    typed("SELECT nvl(t.i, 5) FROM t")  # no SqlError


def test_the_checks_read_each_value_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A CASE nested in a CASE's ELSE was typed again by each around it (review k37: 200
    deep took 1.1 s): the reads of a value's type (the calls of the helpers each reading
    of a value makes) grow as the query does, not as its square. Counted, not timed."""
    calls = [0]
    for module, name in (
        (query_comparisons, "_untyped"),
        (query_calls, "_untyped"),  # the checks of calls, in their own module
        (query_comparisons, "_string_constant"),
        (query_comparisons, "_postgres_type"),
    ):
        helper = getattr(module, name)

        def counted(*args: object, helper: Any = helper) -> Any:
            calls[0] += 1
            return helper(*args)

        monkeypatch.setattr(module, name, counted)

    def reads(depth: int) -> int:
        sql = "t.s"
        for k in range(depth):
            sql = f"CASE WHEN t.i > {k} THEN upper(t.s) ELSE {sql} END"
        calls[0] = 0
        typed(f"SELECT {sql} FROM t")
        return calls[0]

    small, large = reads(10), reads(40)  # 4 times as deep: 4 times the reads, not 16
    assert 0 < large <= 5 * small, (small, large)


#: Per query, PostgreSQL 15's first error where it reads a part after what follows it
#: in the query (review k42): a SELECT's window specs after all else in it (after
#: LIMIT), its named WINDOW clauses first, each spec's ORDER BY before its PARTITION BY;
#: an IN's or = ANY's subquery before its left side; a BETWEEN's x >= low before its
#: high; OFFSET before LIMIT; the WITH of a UNION before its branches.
READ_LATER = {
    "SELECT sum(t.i) OVER (PARTITION BY upper(t.i)), lower(t.i) FROM t": (
        "42883",
        "function lower(integer) does not exist",
    ),
    "SELECT rank() OVER (PARTITION BY t.s = 1 ORDER BY upper(t.i)) FROM t": (
        "42883",
        "function upper(integer) does not exist",
    ),
    "SELECT rank() OVER (ORDER BY upper(t.i)) FROM t LIMIT length(lower(1))": (
        "42883",
        "function lower(integer) does not exist",
    ),
    "SELECT rank() OVER (PARTITION BY upper(t.i)) FROM t WINDOW w AS (ORDER BY lower(t.i))": (
        "42883",
        "function lower(integer) does not exist",
    ),
    "SELECT 1 FROM t WHERE upper(t.i) IN (SELECT coalesce(t.s, 1) FROM t)": (
        "42804",
        "COALESCE types text and integer cannot be matched",
    ),
    "SELECT 1 FROM t WHERE upper(t.i) = ANY (SELECT coalesce(t.s, 1) FROM t)": (
        "42804",
        "COALESCE types text and integer cannot be matched",
    ),
    "SELECT t.s BETWEEN 1 AND upper(t.i) FROM t": (
        "42883",
        "operator does not exist: text >= integer",
    ),
    "SELECT 1 FROM t LIMIT length(upper(1)) OFFSET length(lower(2))": (
        "42883",
        "function lower(integer) does not exist",
    ),
    "WITH c AS (SELECT upper(t.i) AS x FROM t) SELECT 1 UNION SELECT coalesce(t.s, t.i) FROM t": (
        "42883",
        "function upper(integer) does not exist",
    ),
}


@pytest.mark.parametrize("sql", sorted(READ_LATER))
def test_what_postgresql_reads_later_is_refused_later(sql: str) -> None:
    assert refusal(sql) == READ_LATER[sql]


@pytest.mark.parametrize("sql", sorted(READ_LATER))
def test_version_3_leaves_what_postgresql_reads_later_to_spark(sql: str) -> None:
    typed(sql, 3)  # no SqlError
