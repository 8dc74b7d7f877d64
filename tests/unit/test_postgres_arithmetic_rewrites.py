"""The rewrites of a quotient of integers, a float's cast to an integer and a typed interval
literal, as Spark SQL text (no Spark).

``tests/integration/test_serve_postgres_arithmetic.py`` runs the rewritten queries on Spark
and against PostgreSQL; these pin which operands are integers or floats as PostgreSQL types
them, and that a shard's columns are read once, and only where a type is wanted.
"""

from __future__ import annotations

from types import SimpleNamespace

import sqlglot
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from timeshard.location import Location
from timeshard.location.memory import MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient
from timeshard.server.dialect import DIALECT
from timeshard.server.engine import Engine
from timeshard.server.query_rewrites import _numeric_casts

COLUMNS = {
    "t": {"i": "INT", "s": "SMALLINT", "y": "TINYINT", "b": "BIGINT", "x": "DOUBLE", "r": "REAL"},
    "u": {"d": "DECIMAL(10, 3)"},
}


def rewritten(sql: str, reads: list[str] | None = None) -> str:
    """``sql`` as :func:`_numeric_casts` rewrites it; each relation whose columns it asks
    for is appended to ``reads``."""
    asked = [] if reads is None else reads

    def columns_of(name: str) -> dict[str, str] | None:
        asked.append(name)
        return COLUMNS.get(name)

    tree = normalize_identifiers(sqlglot.parse_one(sql, read=DIALECT), dialect=DIALECT)
    _numeric_casts(tree, columns_of)
    return tree.sql("spark")


def test_a_quotient_of_integers_is_their_integer_quotient_of_the_wider_type() -> None:
    """(Spark's ``/`` divided them as doubles: ``7 / 2`` was 3.5.)"""
    assert rewritten("SELECT 7 / 2") == "SELECT CAST(7 DIV 2 AS INT)"
    assert rewritten("SELECT -7 / 2") == "SELECT CAST(-7 DIV 2 AS INT)"
    assert rewritten("SELECT 7 / 2 / 2") == "SELECT CAST(CAST(7 DIV 2 AS INT) DIV 2 AS INT)"
    assert rewritten("SELECT 3000000000 / 2") == "SELECT CAST(3000000000 DIV 2 AS BIGINT)"
    assert rewritten("SELECT s / y FROM t") == "SELECT CAST(s DIV y AS SMALLINT) FROM t"
    assert rewritten("SELECT b / i FROM t") == "SELECT CAST(b DIV i AS BIGINT) FROM t"
    assert rewritten("SELECT (i + 1) / (s - 1) FROM t") == (
        "SELECT CAST((i + 1) DIV (s - 1) AS INT) FROM t"
    )
    assert rewritten("SELECT sum(i) / count(*) FROM t") == (
        "SELECT CAST(SUM(i) DIV COUNT(*) AS BIGINT) FROM t"
    )
    assert rewritten("SELECT (SELECT max(i) FROM t) / 2") == (
        "SELECT CAST((SELECT MAX(i) FROM t) DIV 2 AS INT)"
    )
    # It is an integer to a numeric cast of it: PostgreSQL's (7 / 2)::numeric is 3.
    assert rewritten("SELECT (7 / 2)::numeric") == (
        "SELECT CAST((CAST(7 DIV 2 AS INT)) AS DECIMAL(10, 0))"
    )


def test_a_quotient_with_a_side_postgresql_types_as_no_integer_stays_spark_s() -> None:
    """A float, a numeric (``2.0``, ``1e3``, a ``sum`` of bigints, an ``avg``) or a type not
    known here (a column of a CTE's ``*``)."""
    for sql in (
        "SELECT x / 2 FROM t",
        "SELECT d / 2 FROM u",
        "SELECT 7 / 2.0",
        "SELECT 7 / 1e3",
        "SELECT sum(b) / 2 FROM t",
        "SELECT avg(i) / 2 FROM t",
        "WITH c AS (SELECT * FROM t) SELECT i / 2 FROM c",
    ):
        assert "DIV" not in rewritten(sql), sql
    assert rewritten("SELECT 1::numeric / 3") == (
        "SELECT CAST(1 AS DECIMAL(17, 0)) / CAST(3 AS DECIMAL(17, 0))"
    )


def test_a_float_s_cast_to_an_integer_rounds_half_to_even_first() -> None:
    """(Spark's cast truncates: ``2.7::float8::int`` was 2, PostgreSQL's rint gives 3.)"""
    assert rewritten("SELECT 2.5::float8::int") == "SELECT CAST(RINT(CAST(2.5 AS DOUBLE)) AS INT)"
    assert rewritten("SELECT '2.5'::float8::int") == (
        "SELECT CAST(RINT(CAST('2.5' AS DOUBLE)) AS INT)"
    )
    assert rewritten("SELECT x::bigint, r::smallint FROM t") == (
        "SELECT CAST(RINT(x) AS BIGINT), CAST(RINT(r) AS SMALLINT) FROM t"
    )
    assert rewritten("SELECT (x * 2)::int FROM t") == "SELECT CAST(RINT((x * 2)) AS INT) FROM t"
    assert rewritten("SELECT i::bigint FROM t") == "SELECT CAST(i AS BIGINT) FROM t"
    # A numeric keeps its rounding half away from zero; a float cast of one is a float.
    assert rewritten("SELECT 1.5::numeric::int") == (
        "SELECT CAST(ROUND(CAST(1.5 AS DECIMAL(2, 1)), 0) AS INT)"
    )
    assert rewritten("SELECT 1.5::numeric::float8::int") == (
        "SELECT CAST(RINT(CAST(CAST(1.5 AS DECIMAL(2, 1)) AS DOUBLE)) AS INT)"
    )


def test_a_shard_s_columns_are_read_once_and_only_for_a_type_a_rewrite_wants() -> None:
    reads: list[str] = []
    rewritten("SELECT 7 / 2, x / 2.0, i::text FROM t", reads)
    assert reads == []
    rewritten("SELECT i / 2, x::int, i / s FROM t", reads)
    assert reads == ["t"]


def test_a_typed_interval_literal_left_whole_is_postgresql_s_interval() -> None:
    """(Spark's parser refused ``INTERVAL '03:04:05'`` with no unit: 42604.)"""
    assert rewritten("SELECT interval '03:04:05'") == (
        "SELECT INTERVAL '0 03:04:05.000000' DAY TO SECOND"
    )
    assert rewritten("SELECT interval '1 03:04:05'") == (
        "SELECT INTERVAL '1 03:04:05.000000' DAY TO SECOND"
    )
    assert rewritten("SELECT interval '1' day, interval '2 hours'") == (
        "SELECT INTERVAL '1' DAY, INTERVAL '2' HOURS"
    )


def test_a_view_s_query_keeps_spark_s_quotients_casts_and_intervals() -> None:
    """A materialized view's query is recorded and re-read as its shard's schema: a view
    recorded before these rewrites restores as it was."""
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    engine = Engine(SimpleNamespace(), client, follow_s=3600)  # no Spark: resolve only
    sql = "SELECT 7 / 2 AS q, 2.5::float8::int AS n, interval '1 mon 2 days' AS i"
    assert engine.resolve(sql, stored=True)[0] == (
        "SELECT 7 / 2 AS q, CAST(CAST(2.5 AS DOUBLE) AS INT) AS n, INTERVAL '1 mon 2 days' AS i"
    )
    assert engine.resolve(sql)[0] == (
        "SELECT CAST(7 DIV 2 AS INT) AS q, CAST(RINT(CAST(2.5 AS DOUBLE)) AS INT) AS n, "
        "MAKE_INTERVAL(0, 1, 0, 2, 0, 0, CAST('0.000000' AS DECIMAL(18, 6))) AS i"
    )


def test_a_negated_integer_literal_is_typed_as_the_negative_number_postgresql_folds() -> None:
    """PostgreSQL reads ``-2147483648`` as one int4 constant, so its quotient by -1 is past
    int4 (22003); typed as the int8 ``2147483648`` negated it was 2147483648. And
    ``-9223372036854775808`` is an int8, where ``9223372036854775808`` is a numeric."""
    assert rewritten("SELECT -2147483648 / -1") == "SELECT CAST(-2147483648 DIV -1 AS INT)"
    assert rewritten("SELECT -(2147483648) / -1") == "SELECT CAST(-(2147483648) DIV -1 AS INT)"
    assert rewritten("SELECT -2147483649 / 2") == "SELECT CAST(-2147483649 DIV 2 AS BIGINT)"
    assert rewritten("SELECT -9223372036854775808 / 2") == (
        "SELECT CAST(-9223372036854775808 DIV 2 AS BIGINT)"
    )
    assert "DIV" not in rewritten("SELECT -9223372036854775809 / 2")


def test_a_null_or_a_string_side_of_a_quotient_has_the_other_side_s_integer_type() -> None:
    """PostgreSQL's ``NULL / 2`` is an int4 NULL and ``'7' / 2`` the int4 3: a literal of
    unknown type takes the other side's type. Spark divided them as doubles."""
    assert rewritten("SELECT NULL / 2") == "SELECT CAST(CAST(NULL AS INT) DIV 2 AS INT)"
    assert rewritten("SELECT '7' / 2") == "SELECT CAST(CAST('7' AS INT) DIV 2 AS INT)"
    assert rewritten("SELECT 7 / ('2')") == "SELECT CAST(7 DIV CAST(('2') AS INT) AS INT)"
    assert rewritten("SELECT '7' / s FROM t") == (
        "SELECT CAST(CAST('7' AS SMALLINT) DIV s AS SMALLINT) FROM t"
    )
    assert rewritten("SELECT '7' / 2 / 2") == (
        "SELECT CAST(CAST(CAST('7' AS INT) DIV 2 AS INT) DIV 2 AS INT)"
    )
    for sql in ("SELECT '7' / 2.0", "SELECT NULL / x FROM t", "SELECT NULL / '7'"):
        assert "DIV" not in rewritten(sql), sql


def test_a_quotient_of_a_case_coalesce_length_or_window_function_is_postgresql_s() -> None:
    """A ``CASE``, ``COALESCE``, ``GREATEST`` or ``LEAST`` is of its branches' common type,
    ``length`` an int4, ``row_number`` and ``rank`` an int8, an aggregate with a FILTER its
    aggregate's type: their quotient of integers was Spark's double (``coalesce(i, 0) /
    2`` was 3.5 for 7, PostgreSQL's 3)."""
    cases = {
        "coalesce(i, 0)": "COALESCE(i, 0)",
        "coalesce(NULL, s)": "COALESCE(NULL, s)",
        "CASE WHEN i > 0 THEN i ELSE 0 END": "CASE WHEN i > 0 THEN i ELSE 0 END",
        "CASE WHEN i > 0 THEN b END": "CASE WHEN i > 0 THEN b END",
        "greatest(i, 1)": "GREATEST(i, 1)",
        "least(s, y)": "LEAST(s, y)",
        "nullif(i, 1)": "NULLIF(i, 1)",
        "length('abc')": "LENGTH('abc')",
        "row_number() OVER ()": "ROW_NUMBER() OVER (ORDER BY NULL NULLS LAST)",
        "rank() OVER (ORDER BY i)": "RANK() OVER (ORDER BY i NULLS LAST)",
        "count(*) FILTER (WHERE i > 0)": "COUNT(*) FILTER(WHERE i > 0)",
        "sum(i) FILTER (WHERE i > 0)": "SUM(i) FILTER(WHERE i > 0)",
    }
    kinds: dict[str, str] = {}
    for bigint in ("CASE WHEN i > 0 THEN b END", "row_number", "rank", "count", "sum"):
        kinds.update({k: "BIGINT" for k in cases if k.startswith(bigint)})
    for written, spark in cases.items():
        expected = f"SELECT CAST({spark} DIV 2 AS {kinds.get(written, 'INT')}) FROM t"
        assert rewritten(f"SELECT {written} / 2 FROM t") == expected, written
    assert rewritten("SELECT least(s, y) / s FROM t") == (
        "SELECT CAST(LEAST(s, y) DIV s AS SMALLINT) FROM t"
    )
    for sql in (
        "SELECT coalesce(i, 0.0) / 2 FROM t",
        "SELECT coalesce(i, x) / 2 FROM t",
        "SELECT greatest(i, r) / 2 FROM t",
        "SELECT nullif(i, b) / 2 FROM t",
        "SELECT percent_rank() OVER (ORDER BY i) / 2 FROM t",
    ):
        assert "DIV" not in rewritten(sql), sql
    # A string constant among integers is of their type (typing version 4), as in PostgreSQL
    # 15, where this CASE is an integer and its quotient 3 for i = 5; at version 3, and
    # before, Spark's CASE of a string and a number was left to Spark's division.
    case = "SELECT CASE WHEN i > 0 THEN '7' ELSE 1 END / 2 FROM t"
    assert rewritten(case) == (
        "SELECT CAST(CASE WHEN i > 0 THEN CAST('7' AS INT) ELSE 1 END DIV 2 AS INT) FROM t"
    )
    tree = normalize_identifiers(sqlglot.parse_one(case, read=DIALECT), dialect=DIALECT)
    _numeric_casts(tree, COLUMNS.get, version=3)
    assert "DIV" not in tree.sql("spark")


def test_a_float_case_or_coalesce_cast_to_an_integer_rounds_first() -> None:
    assert rewritten("SELECT coalesce(x, 0)::int FROM t") == (
        "SELECT CAST(RINT(COALESCE(x, 0)) AS INT) FROM t"
    )
    assert rewritten("SELECT greatest(i, 0.5)::int FROM t") == (
        "SELECT CAST(ROUND(GREATEST(i, 0.5), 0) AS INT) FROM t"
    )


def test_a_column_of_a_subquery_or_cte_has_the_type_of_its_expression() -> None:
    """PostgreSQL's ``SELECT i / 2 FROM (SELECT i FROM t) z`` is the int4 3 for 7, as
    ``SELECT i / 2 FROM t``; the column of a subquery or CTE was of no type known here,
    and its quotient Spark's double 3.5. The shard's columns are read once."""
    reads: list[str] = []
    assert rewritten("SELECT i / 2 FROM (SELECT i FROM t) z", reads) == (
        "SELECT CAST(i DIV 2 AS INT) FROM (SELECT i FROM t) AS z"
    )
    assert reads == ["t"]
    assert rewritten("WITH z AS (SELECT i FROM t) SELECT i / 2 FROM z") == (
        "WITH z AS (SELECT i FROM t) SELECT CAST(i DIV 2 AS INT) FROM z"
    )
    assert rewritten("WITH c AS (SELECT 7 AS n) SELECT c.n / 2 FROM c") == (
        "WITH c AS (SELECT 7 AS n) SELECT CAST(c.n DIV 2 AS INT) FROM c"
    )
    assert rewritten("SELECT n / 2 FROM (SELECT count(*) AS n FROM t) z, u") == (
        "SELECT CAST(n DIV 2 AS BIGINT) FROM (SELECT COUNT(*) AS n FROM t) AS z, u"
    )
    assert rewritten("SELECT q / 2 FROM (SELECT i / 2 AS q FROM t) z") == (
        "SELECT CAST(q DIV 2 AS INT) FROM (SELECT CAST(i DIV 2 AS INT) AS q FROM t) AS z"
    )
    assert rewritten("SELECT k / 2 FROM (SELECT s AS k FROM t UNION ALL SELECT b FROM t) z") == (
        "SELECT CAST(k DIV 2 AS BIGINT) FROM (SELECT s AS k FROM t UNION ALL SELECT b FROM t) AS z"
    )
    assert rewritten("SELECT x::int FROM (SELECT x FROM t) z") == (
        "SELECT CAST(RINT(x) AS INT) FROM (SELECT x FROM t) AS z"
    )
    for sql in (
        "SELECT n / 2 FROM (SELECT sum(b) AS n FROM t) z",  # a numeric
        "SELECT i / 2 FROM (SELECT * FROM t) z",
        "SELECT k / 2 FROM (SELECT i AS k FROM t UNION ALL SELECT x FROM t) z",
        "SELECT d / 2 FROM (SELECT d FROM u) z",
        "SELECT i / 2 FROM (SELECT i FROM t) z, (SELECT i FROM t) w",  # ambiguous
    ):
        assert "DIV" not in rewritten(sql), sql


def test_a_view_s_query_resolves_to_the_same_sql_every_time() -> None:
    """The rewrites keep no state between queries: a view's query resolved twice is one
    query, and its column types do not depend on how it is spelled."""
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    engine = Engine(SimpleNamespace(), client, follow_s=3600)  # no Spark: resolve only
    sql = "WITH z AS (SELECT 7 AS i) SELECT coalesce(i, 0) / 2 AS q, NULL / 2 AS n FROM z"
    first = engine.resolve(sql)[0]
    assert engine.resolve(sql)[0] == first
    assert first == (
        "WITH z AS (SELECT 7 AS i) SELECT CAST(COALESCE(i, 0) DIV 2 AS INT) AS q, "
        "CAST(CAST(NULL AS INT) DIV 2 AS INT) AS n FROM z"
    )


def test_a_column_in_having_or_order_by_is_typed_as_the_input_s() -> None:
    """sqlglot's scope leaves these columns out of its list: ``HAVING i / 2 = 3`` divided
    as doubles (3.5, so the group of 7 was left out, where PostgreSQL keeps it)."""
    assert rewritten("SELECT count(*) FROM t GROUP BY i HAVING i / 2 = 3") == (
        "SELECT COUNT(*) FROM t GROUP BY i HAVING CAST(i DIV 2 AS INT) = 3"
    )
    assert rewritten("SELECT i FROM t ORDER BY i / 2 DESC, i") == (
        "SELECT i FROM t ORDER BY CAST(i DIV 2 AS INT) DESC NULLS FIRST, i NULLS LAST"
    )
    # A select item's alias of another value is not the input's column.
    assert rewritten("SELECT x AS i FROM t ORDER BY i / 2") == (
        "SELECT x AS i FROM t ORDER BY i / 2 NULLS LAST"
    )


def test_a_shard_read_under_column_aliases_is_typed_by_them_and_one_read_twice_is_not() -> None:
    """``FROM t AS q(d)`` names t's int ``i`` ``d``: typed by t's own names, ``d`` was not
    known; ``FROM t, t`` failed with an internal error (sqlglot's OptimizeError)."""
    assert rewritten("SELECT d / 2 FROM t AS q(d)") == (
        "SELECT CAST(d DIV 2 AS INT) FROM t AS q(d, s, y, b, x, r)"
    )
    assert rewritten("SELECT i / 2 FROM t, t") == "SELECT i / 2 FROM t, t"


def test_a_having_column_spark_reads_as_the_input_s_is_typed_despite_an_alias() -> None:
    """In HAVING, a GROUP BY column or an aggregate's argument is the input's column in
    Spark as in PostgreSQL, whatever a select item's alias of the name: left as doubles,
    ``HAVING i / 2 = 3`` dropped the group of 7."""
    assert rewritten("SELECT sum(s) AS i FROM t GROUP BY i HAVING i / 2 = 3") == (
        "SELECT SUM(s) AS i FROM t GROUP BY i HAVING CAST(i DIV 2 AS INT) = 3"
    )
    assert rewritten("SELECT s AS i FROM t GROUP BY s HAVING sum(i) / 2 > 3") == (
        "SELECT s AS i FROM t GROUP BY s HAVING CAST(SUM(i) DIV 2 AS BIGINT) > 3"
    )


def test_a_distinct_on_column_is_typed_as_the_input_s() -> None:
    """sqlglot's scope leaves DISTINCT ON's columns out too: ``DISTINCT ON (i / 2)`` put 6
    and 7 apart (3.0 and 3.5), where PostgreSQL keeps one row of the two."""
    sql = rewritten("SELECT DISTINCT ON (i / 2) i, s FROM t ORDER BY i / 2, s")
    assert "i / 2" not in sql and sql.count("CAST(i DIV 2 AS INT)") >= 2


def test_every_having_and_distinct_on_column_is_the_input_s_whatever_the_aliases() -> None:
    """A GROUP BY of ROLLUP, a qualified GROUP BY column and an aggregate's FILTER left the
    HAVING column untyped; DISTINCT ON (a window over the input) took an alias's name for
    the output's."""
    assert rewritten("SELECT sum(s) AS i FROM t GROUP BY ROLLUP(i) HAVING i / 2 = 3").endswith(
        "HAVING CAST(i DIV 2 AS INT) = 3"
    )
    assert rewritten("SELECT sum(s) AS i FROM t GROUP BY t.i HAVING i / 2 = 3").endswith(
        "HAVING CAST(i DIV 2 AS INT) = 3"
    )
    filtered = "SELECT count(*) AS i FROM t GROUP BY s HAVING sum(s) FILTER (WHERE i / 2 = 3) > 0"
    assert "FILTER(WHERE CAST(i DIV 2 AS INT) = 3)" in rewritten(filtered)
    on = rewritten("SELECT DISTINCT ON (i / 2) s AS i FROM t ORDER BY i / 2")
    assert "i / 2" not in on
