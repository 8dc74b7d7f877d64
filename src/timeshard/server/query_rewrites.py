"""The rewrites of a client's query before Spark runs it: what ``timeshard serve``
refuses in a query (a write, a call of a Java method by name), the literals and casts
it gives PostgreSQL's meaning where Spark's differs (JSON, intervals, integer limits,
a date moved by an interval, an unconstrained ``numeric``, ``timestamp`` without time
zone), and the names of the temporary views its shards are read as
(:meth:`~timeshard.server.engine.Engine.resolve` applies them in order).

Each takes the sqlglot tree of the query, read with :data:`~timeshard.server.dialect.DIALECT`,
and changes it in place or raises :class:`~timeshard.server.sql_tokens.SqlError`. The types
they give PostgreSQL's meaning by (of an expression, of a relation's column) are
:mod:`timeshard.server.query_types`'s, which changes nothing.

Pure Python, no Spark.
"""

from __future__ import annotations

import decimal
import functools
import re
from collections.abc import Mapping

import sqlglot
from sqlglot import exp

from timeshard.server.dialect import DIALECT
from timeshard.server.parameter_types import ColumnsOf
from timeshard.server.query_calls import _spell_out_wrong_arities
from timeshard.server.query_comparisons import (
    _COMMON_TYPED,
    _INTEGER_BITS,
    _checks_columns,
    _common_typed_values,
    _refuse_mismatched_using,
    _refuse_text_number_mixes,
    _Typer,
)
from timeshard.server.query_relations import (
    _complete_column_aliases,
    _complete_subquery_aliases,
    _joined_columns,
    _resolve_joins_using,
    _using_stars,
)
from timeshard.server.query_types import (
    _FLOAT_DIGITS,
    _INTEGER_DIGITS,
    _POSTGRES_INTEGERS,
    TypeMemo,
    _number_of,
    _postgres_type,
    _quotient_sides,
    _shard_column_types,
    _spark_type,
    _string_constant,
    _untyped,
)
from timeshard.server.query_windows import _bigint_ranks, _ordered_windows
from timeshard.server.sql_tokens import integer_input_error
from timeshard.server.statements import (
    MAX_DECIMAL_DIGITS,
    SqlError,
    check_json,
    decimal_digits,
)

T = exp.DType

#: Spark SQL functions that call a static Java method by name in the server's JVM
#: (``reflect('java.lang.System', 'exit', 7)`` stops the server).
_JAVA_CALLS = frozenset({"reflect", "java_method", "try_reflect"})


#: The version of the typing rewrites (:func:`_numeric_casts`) a query gets by default; a
#: view's entry records the lowest that resolves its query alike (``engine.TYPED_VIEWS``).
#: 2 added PostgreSQL's int8 ranks, its integer input of string constants, and the types
#: of columns under column aliases and joined ``USING``; 3 the types of a shard's columns
#: under column aliases, and of a column joined ``USING`` of sides of different types,
#: a shard's column aliases fewer than its columns, PostgreSQL's 42P10 for more, its
#: 42702 for a ``USING`` name twice on one side, and a ranking or offset window with no
#: ORDER BY (each of these only changes queries Spark refused or answered wrongly, but a
#: server of version 2 would resolve them otherwise); 4 a named window of no ORDER BY
#: (:func:`~timeshard.server.query_windows._ordered_windows`) and a CTE's reader's column
#: aliases fewer than its columns, PostgreSQL's 42883 for a text compared with a number
#: (and 42804 for one joined ``USING`` with a number),
#: and its 42702 past a ``LATERAL`` subquery or a parenthesized join, and a shard's columns
#: of a type not known here (a list, struct, map, time64) among those its column aliases
#: name by position (:func:`_typed_columns` before; review k34), and its 42883 for a
#: text function of a number (``upper(i)``) and for a coalesce, greatest, least or case
#: of texts compared with a number, and its 42804 for one of a text and a number, and
#: the integer type of a string constant among integers there (:func:`_untyped_common_values`),
#: and its 42883 for a call of more or fewer arguments than its function takes (sqlglot
#: dropped the extra ones: ``lpad(s, 3, 'x', 'y')`` ran as ``LPAD(s, 3, 'x')``;
#: :func:`~timeshard.server.query_calls._spell_out_wrong_arities`), of a function
#: by a quoted name of upper case (``"UPPER"(s)``, ``"SUM"(i)``, ``"NOW"()``), and of a
#: text function of an array of texts (``reverse(ARRAY[s])``: Spark reversed the array);
#: and serve's 0A000 for a call PostgreSQL answers that Spark would run without an
#: argument (``trunc(1.999, 2)`` ran as ``CAST(1.999 AS BIGINT)``:
#: :data:`~timeshard.server.query_calls._UNSUPPORTED_FORMS`) or otherwise
#: (``regexp_replace(s, 'a', 'b')``: PostgreSQL replaces the first match, Spark every
#: one; its form of a constant 'g' flag runs as Spark's), or of a unit not a constant
#: (``date_trunc(s, ts)`` ran as ``DATE_TRUNC('S', ts)``, ``date_part(s, ts)`` as
#: seconds; :func:`~timeshard.server.query_calls._unit_not_constant`).
TYPING = 4


def _refuse_java_calls(tree: exp.Expr) -> None:
    """SqlError 42501 if ``tree`` calls a function of :data:`_JAVA_CALLS` anywhere.

    A client's SQL runs in the server's JVM: such a call could stop the server or
    change what every other session sees. Case is ignored, as Spark ignores it, and
    so is a qualifier (``builtin.reflect``). A run file's views are the operator's
    own SQL and are not checked.
    """
    for func in tree.find_all(exp.Func):
        if isinstance(func, exp.Anonymous | exp.AnonymousAggFunc):
            name = func.name
        else:
            name = func.sql_name()
        if name.lower() in _JAVA_CALLS:
            raise SqlError(
                f"function {name.lower()}() is not allowed: it calls Java methods in the "
                "server's JVM",
                "42501",
            )


def _json_literals(tree: exp.Expr) -> None:
    """A string literal cast to json or jsonb (``'{"a": 1}'::json``, a bound ``$1::json``)
    that is a whole result column of the query's SELECT list (aliased or not) is the
    string: Spark has no JSON type, and writes a cast to one as ``to_json``, which takes
    no string. Text that is not JSON (or nested past Python's recursion limit) is
    SqlError 22P02, as PostgreSQL's cast.

    Anywhere else such a cast is SqlError 0A000: as a string it would compare, add and
    match as text (``'{"a":1}'::jsonb = '{"a": 1}'::jsonb`` false, ``'1'::json + 1``
    2), where PostgreSQL compares JSON or refuses. A text NULL cast to json or jsonb (a
    json parameter's NULL bound, ``CAST(NULL AS TEXT)``) as a whole column is the NULL
    string."""
    json_types = (exp.DataType.Type.JSON, exp.DataType.Type.JSONB)
    columns = set()
    if isinstance(tree, exp.Select):
        columns = {id(c.unalias().unnest()) for c in tree.expressions}
    for cast in list(tree.find_all(exp.Cast)):
        text = cast.this
        if cast.to.this in json_types and id(cast) in columns and _text_null(text):
            cast.replace(text.copy())  # a bound NULL of json (a text NULL): the NULL string
            continue
        if cast.to.this not in json_types or not (isinstance(text, exp.Literal) and text.is_string):
            continue
        if id(cast) not in columns:
            raise SqlError(
                f"a value of type {cast.to.sql('postgres').lower()} is read here only as a "
                "whole column of the query's result: Spark has no JSON type to compare or "
                "compute with it",
                "0A000",
            )
        check_json(text.this)
        cast.replace(text.copy())


def _text_null(value: exp.Expr) -> bool:
    """Whether ``value`` is ``CAST(NULL AS TEXT)``, as a json parameter's NULL is bound."""
    return (
        isinstance(value, exp.Cast)
        and isinstance(value.this, exp.Null)
        and value.to.this == exp.DataType.Type.TEXT
    )


def _interval_casts(tree: exp.Expr) -> None:
    """A cast to ``interval`` of what is already a Spark year-month or day-time interval
    (a bound ``$1::interval``: ``INTERVAL '3 00:00:00' DAY TO SECOND::interval``, or its
    NULL ``CAST(NULL AS INTERVAL DAY TO SECOND)``) is that interval: Spark casts neither
    to its calendar ``INTERVAL`` (42K09), and PostgreSQL's cast of an interval to
    interval changes nothing.

    A cast of a string literal (``'1 day'::interval``) is the value PostgreSQL's interval
    input reads (:func:`_interval_value`), its errors PostgreSQL's: Spark's cast of the
    text makes a calendar interval, which PySpark cannot collect (XX000), and reads
    PostgreSQL's ``mon`` as nothing (NULL). Any of PostgreSQL's string constants is such
    a string (``E'1 day'``, ``$$1 day$$``, ``U&'1\\0020day'``); a ``TRY_CAST`` of text
    that is no interval is NULL.

    A cast of NULL (``NULL::interval``, an undeclared or text ``$1`` bound to NULL) is a
    day-time NULL: Spark's calendar NULL is not collectable either."""
    for cast in list(tree.find_all(exp.Cast)):
        value = cast.this.unnest()
        if cast.to.this != exp.DataType.Type.INTERVAL or cast.to.expressions:
            continue
        typed = isinstance(value, exp.Cast) and isinstance(value.to.this, exp.Interval)
        text = _string_constant(value)
        if isinstance(value, exp.Interval) or typed:
            cast.replace(cast.this.copy())
        elif isinstance(value, exp.Null) or (
            isinstance(value, exp.Cast) and isinstance(value.this.unnest(), exp.Null)
        ):
            cast.replace(_null_interval())
        elif text is not None:
            try:
                cast.replace(_interval_value(text))
            except SqlError:
                if not isinstance(cast, exp.TryCast):
                    raise
                cast.replace(_null_interval())


def _interval_literals(tree: exp.Expr) -> None:
    """A typed interval literal whose text sqlglot's reader left whole (``interval
    '03:04:05'``, ``interval '1 03:04:05'``, ``interval '1 mon 2 days'``: no unit after
    the text, none taken from it) is the value PostgreSQL's interval input reads
    (:func:`_interval_value`), as its cast (``'03:04:05'::interval``) is: Spark's parser
    refused the first two (42604) and made the third a calendar interval, which PySpark
    cannot collect. A literal with its unit (``interval '1' day``, ``interval '2 hours'``,
    read as ``'2'`` and ``HOURS``) is Spark's as it is.

    sqlglot's reader splits a text of one number and a unit and something more (``'1 day
    03:04:05'``, ``'-1 day +02:00:00'``) into the number and the unit, and drops the
    rest: that is lost before this sees the tree."""
    for interval in list(tree.find_all(exp.Interval)):
        text = _string_constant(interval.this)
        if interval.args.get("unit") is None and text is not None:
            interval.replace(_interval_value(text))


def _dates_moved_by_intervals(tree: exp.Expr) -> None:
    """A date plus or minus an interval (``DATE '2026-01-01' + INTERVAL '1 day'``, a bound
    ``CAST('2026-01-01' AS DATE) + $1``, ``INTERVAL '1' HOUR + CURRENT_DATE``) is that
    date as a TIMESTAMP_NTZ moved by it: PostgreSQL's is a timestamp without time zone
    (1114) whatever the interval, where Spark's is a DATE for whole days or months (1082)
    and else its TIMESTAMP (timestamptz, 1184). Run after :func:`_interval_casts`, which
    makes a string cast to interval a Spark interval.

    A date and an interval are told by their syntax (a cast to DATE, ``CURRENT_DATE``;
    an interval literal, ``make_interval``, a cast to an interval type, each negated or
    parenthesized too): a column's type is not known here, and a date column moved by an
    interval keeps Spark's type."""
    timestamp = exp.DataType.build("TIMESTAMP_NTZ", dialect="spark")
    for op in list(tree.find_all(exp.Add, exp.Sub)):
        date = op.this if _is_interval(op.expression) else None
        if isinstance(op, exp.Add) and date is None and _is_interval(op.this):
            date = op.expression
        if date is not None and _is_date(date):
            date.replace(exp.Cast(this=date.copy(), to=timestamp.copy()))


def _is_date(value: exp.Expr) -> bool:
    value = value.unnest()
    if isinstance(value, exp.Cast):  # TRY_CAST too
        return bool(value.to.this == exp.DataType.Type.DATE)
    return isinstance(value, exp.CurrentDate)


def _is_interval(value: exp.Expr) -> bool:
    value = value.unnest()
    if isinstance(value, exp.Neg):
        return _is_interval(value.this)
    if isinstance(value, exp.Cast):
        kind = value.to.this
        return bool(kind == exp.DataType.Type.INTERVAL or isinstance(kind, exp.Interval))
    return isinstance(value, exp.Interval | exp.MakeInterval)


def _null_interval() -> exp.Expr:
    return sqlglot.parse_one("CAST(NULL AS INTERVAL DAY TO SECOND)", read="spark")


#: The greatest microseconds a calendar interval's seconds hold (``make_interval``'s
#: DECIMAL(18, 6)), exclusive.
_CALENDAR_MICROS = 10**18


def _interval_value(text: str) -> exp.Expr:
    """The interval ``text`` reads as (:func:`~timeshard.server.intervals.interval_fields`),
    as a Spark value: a year-month or day-time interval literal; one of months and days
    or time, which neither holds, a calendar interval of its three fields
    (``make_interval``), which moves a date or timestamp as PostgreSQL's does."""
    from timeshard.server.intervals import interval_fields, interval_literal

    months, days, micros = interval_fields(text)
    if not (months and (days or micros)):
        return sqlglot.parse_one(interval_literal(months, days, micros, text), read=DIALECT)
    if abs(micros) >= _CALENDAR_MICROS:
        raise SqlError(
            f"interval out of range: {text!r} is past Spark's calendar intervals", "22008"
        )
    seconds = format(decimal.Decimal(micros).scaleb(-6), "f")
    return sqlglot.parse_one(
        f"MAKE_INTERVAL(0, {months}, 0, {days}, 0, 0, CAST('{seconds}' AS DECIMAL(18, 6)))",
        read=DIALECT,
    )


_INTEGER_TYPES = (
    exp.DataType.Type.BIGINT,
    exp.DataType.Type.INT,
    exp.DataType.Type.SMALLINT,
    exp.DataType.Type.TINYINT,
)


def _int_limits(tree: exp.Expr) -> None:
    """A LIMIT or OFFSET that casts to an integer type, or to a DECIMAL of scale 0, casts
    to INT: PostgreSQL takes a bigint or a whole numeric there (a bound parameter, ``LIMIT
    $1``, is ``CAST(5 AS BIGINT)`` or ``CAST(5 AS DECIMAL(1, 0))``), Spark only an INT (a
    value past its range is Spark's cast error)."""
    for clause in tree.find_all(exp.Limit, exp.Offset):
        count = clause.expression
        if not isinstance(count, exp.Cast):
            continue
        scale = count.to.expressions[1:2]  # a bound numeric: CAST(2 AS DECIMAL(1, 0))
        whole = count.to.this == exp.DataType.Type.DECIMAL and [e.sql() for e in scale] == ["0"]
        if count.to.this in _INTEGER_TYPES or whole:
            count.set("to", exp.DataType.build("INT"))


_TEXT_TYPES = frozenset({T.TEXT, T.VARCHAR, T.CHAR, T.NVARCHAR, T.NCHAR})
#: The DECIMAL a numeric of no digits known here is (a double, a string, an expression
#: whose Spark type is not known): Spark's ``DecimalType.SYSTEM_DEFAULT``, 20 digits before
#: the point and 18 after it.
_WIDE = (MAX_DECIMAL_DIGITS, 18)


def _typed_columns(columns_of: ColumnsOf) -> ColumnsOf:
    """``columns_of`` without a shard's columns of a type not known here (a list, struct,
    map, time64): the columns the typing rewrites before version 4 read, kept so that a
    query resolves at those versions as it did. Their column aliases named a shard's
    columns by position among these (review k34): at 3 a shard of such a column read
    under column aliases was refused (42P10, or Spark's 42802 for aliases it did not
    complete), so no view of one was recorded there."""

    def typed(name: str) -> Mapping[str, str | None] | None:
        columns = columns_of(name)
        return None if columns is None else {n: t for n, t in columns.items() if t is not None}

    return typed


def _numeric_casts(tree: exp.Expr, columns_of: ColumnsOf, version: int = TYPING) -> None:
    """A cast to ``numeric`` (or ``decimal``) with no precision, which PostgreSQL reads as
    unconstrained, is a cast to the Spark DECIMAL that holds its operand exactly: Spark
    reads a bare DECIMAL as DECIMAL(10, 0), which rounded ``1.5::numeric`` to 2 and failed
    past 10 digits. Its operand decides, by what it is:

    * a number literal, a string constant of a number (``'1.25'``, an undeclared
      parameter's bound value), or a float8 or float4 cast of either (a bound ``float8``
      parameter): the DECIMAL(p, s) of its digits as PostgreSQL reads them (of a float,
      its ``%.15g`` or ``%.6g``, as PostgreSQL's cast keeps); ``NULL``: DECIMAL(1, 0);
    * of an integral type: DECIMAL(p, 0), p the type's digits (:data:`_INTEGER_DIGITS`);
    * of a DECIMAL type (a bound numeric parameter, a decimal column): itself, unchanged;
    * a double or a real: DECIMAL(38, 18) of its ``%.15g`` or ``%.6g`` (its NaN or
      infinity is Spark's error 22018, never NULL as Spark's own cast makes it);
    * a string: DECIMAL(38, 18) of it (Spark's cast: text that is no number is 22018);
    * anything else, whose Spark type is not known here: DECIMAL(38, 18) of its text, so
      a value is never NULL for lack of a type (Spark's cast of a NaN double is NULL).

    The type of an operand is known where it is a column of a shard the query reads
    (``columns_of(shard)``: its columns' types, as
    :func:`~timeshard.server.parameter_types.arrow_columns` names them), a literal, a
    cast, or ``+ - * / %``, ``-``, ``count``, ``sum``, ``avg``, ``min``, ``max``, ``abs``
    of known types, as Spark types them (:func:`_spark_type`); ``columns_of`` is asked
    only if a cast's operand has a column, or a ``/`` or a cast to an integer type needs
    a column's type (:func:`_typed_by_columns`), once for each relation.

    A literal (or bound value) of more than 38 digits, or a float literal's NaN or
    infinity, is SqlError 22003 (no DECIMAL holds it); a DECIMAL(38, 18) past its 20
    integer digits is Spark's 22003. A ``TRY_CAST`` (Spark's) is NULL for them. A bare
    DECIMAL inside a cast's array, map or struct type is DECIMAL(38, 18).

    Before them, a quotient of integers is an integer (:func:`_integer_quotients`) and a
    float's cast to an integer rounds (:func:`_float_casts_to_integers`), as PostgreSQL
    answers them: both are here to share the one read of each shard's columns. After
    them, ``row_number``, ``rank`` and ``dense_rank`` are int8s (:func:`_bigint_ranks`),
    and a ranking window of no order is ordered by NULL (:func:`_ordered_windows`).

    Before them too, a subquery's, CTE's or shard's column aliases fewer than its columns
    are completed (:func:`_complete_column_aliases`), as PostgreSQL names the rest, and
    more are 42P10; a name a join is ``USING`` twice on one side is 42702
    (:func:`_resolve_joins_using`).

    ``version``: of these rewrites (:data:`TYPING`). At 1 (a view recorded with version
    1 and no resolution, installed again as it was made; or checking that version 1
    resolves a new view's query alike, to record the lowest), ranks stay INTs, string
    constants beside ``+ - * %`` and cast to integers are not typed or checked, and
    columns under column aliases or joined ``USING`` are not typed. At 2, a shard's
    columns under column aliases are not typed, and a column joined ``USING`` keeps
    Spark's type, one side's (:func:`_joined_columns`); only a subquery's or CTE's
    column aliases are completed (:func:`_complete_subquery_aliases`), and there is no
    42P10, no 42702 and no ordering of a window of no order. At 3, a named window of no
    order is not ordered, a CTE's reader's column aliases are not completed, a text
    compared with a number, joined ``USING`` with one or given a common type with one
    is Spark's (:func:`_refuse_text_number_mixes`, :func:`_refuse_mismatched_using`),
    so is a string constant among a ``COALESCE``'s integers
    (:func:`_untyped_common_values`), the 42702 check stops at a ``LATERAL`` subquery or
    a parenthesized join, and a ``NATURAL`` join stays one (its common column keeps one
    side's type). Before 4, a shard's columns are its columns of known types only
    (:func:`_typed_columns`).

    Two uses of such a cast are as PostgreSQL answers them, not as Spark's decimals do: an
    operand of ``/`` is a DECIMAL of at least 17 digits (:func:`_divisible`), and a cast
    of it to an integral type rounds it first (``1.5::numeric::int`` is 2; Spark's cast
    of a decimal to an integer truncates).

    What PostgreSQL answers that this cannot: a numeric's scale is each value's own in
    PostgreSQL, one column's here, so a double or a string cast to numeric shows 18
    digits after the point (``2.5`` is ``2.500000000000000000``), digits past the 18th
    are rounded, and values past 10**20 are refused (22003)."""
    postgres15 = version >= 2
    if version < 4:
        columns_of = _typed_columns(columns_of)
    columns_of = functools.cache(columns_of)  # a relation's columns are asked once
    if version >= 4:  # refused, in PostgreSQL's order, by _refuse_text_number_mixes
        _spell_out_wrong_arities(tree)
    _interval_literals(tree)
    if version >= 3:
        _complete_column_aliases(tree, columns_of, cte_readers=version >= 4)
    elif postgres15:
        _complete_subquery_aliases(tree)
    if version >= 4:  # before the stars of joins USING are read: a NATURAL join is one
        _resolve_joins_using(tree, columns_of, nested=True, natural=True)
    for cast in list(tree.find_all(exp.Cast)):
        for inner in list(cast.to.find_all(exp.DataType)):
            if inner is not cast.to and _unconstrained(inner):
                inner.replace(_decimal(*_WIDE))
    casts = [c for c in tree.find_all(exp.Cast) if _unconstrained(c.to)]
    columns: dict[int, T] = {}
    typed: dict[int, T] = {}  # PostgreSQL's types, of a subquery's and a CTE's columns too
    joined: dict[int, T] = {}
    stars = _using_stars(tree) if version >= 3 else []
    if (
        any(c.this.find(exp.Column) for c in casts)
        or _typed_by_columns(tree, postgres15)
        or (version >= 3 and any(j.args.get("using") for j in tree.find_all(exp.Join)))
        or (version >= 4 and _checks_columns(tree))
    ):
        columns, typed = _shard_column_types(
            tree, columns_of, aliases=postgres15, renames=version >= 3, joined=joined
        )
    if version >= 3:
        _joined_columns(tree, joined, stars)
    if version == 3:
        _resolve_joins_using(tree, columns_of)
    if version >= 4:
        _refuse_mismatched_using(tree, columns_of, typed)
        _refuse_text_number_mixes(tree, typed)
        _untyped_common_values(tree, typed)
    if postgres15:
        _untyped_integer_operands(tree, typed)
    _integer_quotients(tree, typed)
    _float_casts_to_integers(tree, typed)
    if version >= 3:
        _ordered_windows(tree, named=version >= 4)
    if postgres15:
        _bigint_ranks(tree)
        _integer_texts(tree)
    casts = [c for c in tree.find_all(exp.Cast) if _unconstrained(c.to)]
    if not casts:
        return
    kinds = [_spark_type(c.this, columns) for c in casts]
    values: list[exp.Expr] = []
    for cast, kind in reversed(list(zip(casts, kinds, strict=True))):  # the inner ones first
        value = _numeric_value(cast, kind)
        cast.replace(value)
        values.append(value)
    numeric = {id(v) for v in values}

    def has_numeric(node: exp.Expr) -> bool:
        return any(id(n) in numeric for n in node.walk())

    for div in list(tree.find_all(exp.Div)):
        if has_numeric(div.this) or has_numeric(div.expression):
            for side in (div.this.unnest(), div.expression.unnest()):
                widened = _divisible(side, _spark_type(side, columns))
                if widened is not side:
                    side.replace(widened)
                    numeric.add(id(widened))
    for cast in list(tree.find_all(exp.Cast)):
        operand = cast.this
        if (
            cast.to.this in _INTEGER_DIGITS
            and has_numeric(operand)
            and _spark_type(operand, columns) == T.DECIMAL
        ):
            operand.replace(exp.Round(this=operand.copy(), decimals=exp.Literal.number(0)))


def _integer_quotients(tree: exp.Expr, columns: Mapping[int, T]) -> None:
    """A ``/`` of two integers (:func:`_postgres_type`) is their integer quotient, of the
    wider of their types: PostgreSQL's ``7 / 2`` is 3 and ``-7 / 2`` is -3 (truncated
    toward zero), where Spark's ``/`` answers the double 3.5. Spark's ``DIV`` truncates
    toward zero too, and answers a BIGINT, cast here to the wider type, so a quotient
    past it (``(-32768)::int2 / -1::int2``) is Spark's 22003 as PostgreSQL's is. Its
    division by zero is Spark's DIVIDE_BY_ZERO (22012), as its ``/`` answers it. A ``/``
    with a numeric or a float side, or a side whose type is not known here, stays
    Spark's. The inner ones first, so a quotient of quotients is one too.

    A side of PostgreSQL's unknown type (:func:`_untyped`: ``NULL``, a string constant)
    has the other side's type, as PostgreSQL resolves the operator, and is cast to it
    here (``'7' / 2`` is 3, ``NULL / 2`` an int4 NULL; Spark divided them as doubles)."""
    memo: TypeMemo = {}  # the inner ones first: none typed before changes
    for div in reversed(list(tree.find_all(exp.Div))):
        left, right = _quotient_sides(div, columns, memo)
        if left in _POSTGRES_INTEGERS and right in _POSTGRES_INTEGERS:
            wider = max(left, right, key=_POSTGRES_INTEGERS.index)
            for side, kind in ((div.this, left), (div.expression, right)):
                if _untyped(side):
                    side.replace(exp.Cast(this=side.copy(), to=exp.DataType.build(kind)))
            quotient = exp.Cast(this=exp.IntDiv(), to=exp.DataType.build(wider))
            div.replace(quotient)  # its operands are moved, not copied: ``columns`` holds them
            quotient.this.set("this", div.this)
            quotient.this.set("expression", div.expression)


#: The operators other than ``/`` whose side of PostgreSQL's unknown type takes the other
#: side's integer type (:func:`_untyped_integer_operands`).
_INTEGER_OPERATORS = (exp.Add, exp.Sub, exp.Mul, exp.Mod)


def _untyped_integer_operands(tree: exp.Expr, columns: Mapping[int, T]) -> None:
    """A string constant (:func:`_untyped`, not ``NULL``) that is a side of ``+ - * %``
    whose other side is an integer (:func:`_postgres_type`) is cast to that side's type,
    as PostgreSQL resolves the operator: its ``'7' + 2`` is the int4 9, and ``'7.5' + 2``
    refuses the text as an integer (22P02, :func:`_integer_texts`), where Spark cast the
    text to a BIGINT (an int8 9, and 22018). The inner ones first, so the sum is typed
    for the operator around it."""
    memo: TypeMemo = {}  # the inner ones first: none typed before changes
    for op in reversed(list(tree.find_all(*_INTEGER_OPERATORS))):
        for text, other in ((op.this, op.expression), (op.expression, op.this)):
            if isinstance(text.unnest(), exp.Null) or not _untyped(text) or _untyped(other):
                continue
            kind = _postgres_type(other, columns, memo)
            if kind in _POSTGRES_INTEGERS:
                text.replace(exp.Cast(this=text.copy(), to=exp.DataType.build(kind)))


def _untyped_common_values(tree: exp.Expr, columns: Mapping[int, T]) -> None:
    """A string constant among the values of a ``COALESCE``, ``GREATEST``, ``LEAST`` or
    ``CASE`` of integers (:meth:`~timeshard.server.query_comparisons._Typer.kind`)
    is cast to their common type, as PostgreSQL reads it: its ``coalesce(i, '5')`` is an
    int4, where Spark cast the text to a BIGINT (an int8), and ``coalesce(i, '5') / 2``
    an integer quotient (:func:`_integer_quotients`). Its text is an integer of that type
    (:func:`~timeshard.server.query_comparisons._refuse_text_number_mixes` refused
    it before otherwise)."""
    typer = _Typer(columns)  # every type read before the tree changes
    typed = [(node, typer.kind(node)) for node in tree.find_all(*_COMMON_TYPED)]
    for node, kind in typed:
        if not isinstance(kind, exp.DType) or kind not in _INTEGER_BITS:
            continue
        for value in _common_typed_values(node):
            if _string_constant(value.unnest()) is not None:
                value.replace(exp.Cast(this=value.copy(), to=exp.DataType.build(kind)))


#: PostgreSQL's name of each integer type, and the bits of its values.
_INTEGER_NAMES = {T.SMALLINT: ("smallint", 16), T.INT: ("integer", 32), T.BIGINT: ("bigint", 64)}


def _integer_texts(tree: exp.Expr) -> None:
    """A cast (not Spark's ``TRY_CAST``) of a string constant to smallint, integer or
    bigint (``'7.5'::int``, a string side of an integer operator cast by
    :func:`_untyped_integer_operands` or :func:`_integer_quotients`) is checked as
    PostgreSQL 15's integer input reads the text: SqlError 22P02 (invalid input syntax)
    if it is no integer, 22003 if past the type's range, as PostgreSQL answers, where
    Spark's cast failed with 22018 for both (:func:`~timeshard.server.sql_tokens.
    integer_input_error`; a column's text is checked where Spark's cast fails:
    :func:`~timeshard.server.rows.spark_error`)."""
    for cast in tree.find_all(exp.Cast):
        named = _INTEGER_NAMES.get(cast.to.this)
        text = _string_constant(cast.this.unnest())
        if named is None or text is None or isinstance(cast, exp.TryCast):
            continue
        error = integer_input_error(text, *named)
        if error is not None:
            raise error


def _float_casts_to_integers(tree: exp.Expr, columns: Mapping[int, T]) -> None:
    """A cast of a float8 or float4 (:func:`_postgres_type`) to an integer type rounds it
    to the nearest integer, half to even, before Spark's cast truncates it: PostgreSQL's
    cast is ``rint`` (``2.5::float8::int`` is 2, ``3.5::float8::int`` 4,
    ``(-2.7)::float8::int`` -3), Spark's truncates (2, 3, -2). Spark's ``rint`` is the
    same function; a value past the type's range, NaN or an infinity is Spark's cast
    error 22003, as PostgreSQL's "integer out of range". (PostgreSQL refuses
    ``2.0 ** 63`` as a bigint; Spark's cast makes it the greatest bigint.)

    A numeric's cast to an integer type (a decimal column, ``1.5``, ``avg(i)``) rounds
    half away from zero in PostgreSQL (``1.5::int`` is 2, ``(-2.5)::int`` -3): the
    operand is ``ROUND(x, 0)`` first, which is that (of a decimal, and of the double
    Spark's ``avg`` is)."""
    memo: TypeMemo = {}  # what changes is a cast's operand: its cast's type is its own
    for cast in list(tree.find_all(exp.Cast)):
        operand = cast.this
        if cast.to.this not in _INTEGER_DIGITS:
            continue
        kind = _postgres_type(operand, columns, memo)
        if kind in _FLOAT_DIGITS:
            rounded: exp.Expr = exp.Anonymous(this="rint", expressions=[])
            operand.replace(rounded)  # moved, not copied: ``columns`` holds its columns
            rounded.set("expressions", [operand])
        elif kind == T.DECIMAL:
            rounded = exp.Round(this=exp.Null(), decimals=exp.Literal.number(0))
            operand.replace(rounded)
            rounded.set("this", operand)


def _typed_by_columns(tree: exp.Expr, operators: bool = True) -> bool:
    """Whether :func:`_untyped_integer_operands`, :func:`_integer_quotients` or
    :func:`_float_casts_to_integers` need the type of a column of ``tree``
    (:func:`_shard_column_types`): a ``/`` none of whose sides is known to be no integer,
    a ``+ - * %`` of a string constant, or a cast to an integer type, with a column whose
    type the rest does not tell."""
    memo: TypeMemo = {}
    for node in tree.find_all(exp.Div, exp.Cast, *(_INTEGER_OPERATORS if operators else ())):
        if isinstance(node, _INTEGER_OPERATORS):
            sides = [s for s in (node.this, node.expression) if not _untyped(s)]
            if len(sides) != 1:
                continue
        elif isinstance(node, exp.Div):
            sides = [node.this, node.expression]
            kinds = _quotient_sides(node, {}, memo)
            if any(k is not None and k not in _POSTGRES_INTEGERS for k in kinds):
                continue
        elif isinstance(node, exp.Cast) and node.to.this in _INTEGER_DIGITS:
            sides = [node.this]
        else:
            continue
        if any(_postgres_type(s, {}, memo) is None and s.find(exp.Column) for s in sides):
            return True
    return False


def _divisible(operand: exp.Expr, kind: T | None) -> exp.Expr:
    """``operand`` of a ``/`` with a numeric cast's value on either side, of Spark type
    ``kind``, as a DECIMAL of at least :data:`_DIVIDED_DIGITS` digits where it is a DECIMAL
    cast of fewer (its scale kept) or of an integral type: Spark gives a decimal quotient
    ``max(6, s1 + p2 + 1)`` digits after the point (an integer literal is a DECIMAL(1, 0)
    there), so ``1::numeric / 3`` was 0.333333, where PostgreSQL gives at least 16
    significant digits. Anything else stays as it is."""
    if isinstance(operand, exp.Cast) and operand.to.this == T.DECIMAL and operand.to.expressions:
        precision, scale = (int(e.this.this) for e in operand.to.expressions)
        if precision >= _DIVIDED_DIGITS:
            return operand
        return _cast_as(operand, operand.this, _decimal(min(_DIVIDED_DIGITS + scale, 38), scale))
    if kind in _INTEGER_DIGITS:
        digits = max(_INTEGER_DIGITS[kind], _DIVIDED_DIGITS)
        return exp.Cast(this=operand.copy(), to=_decimal(digits, 0))
    return operand


#: The digits a numeric cast that is an operand of ``/`` has at least (:func:`_divisible`).
_DIVIDED_DIGITS = 17


def _unconstrained(data_type: exp.DataType) -> bool:
    return data_type.this == T.DECIMAL and not data_type.expressions


def _decimal(precision: int, scale: int) -> exp.DataType:
    return exp.DataType.build(f"DECIMAL({precision}, {scale})")


def _numeric_value(cast: exp.Cast, kind: T | None) -> exp.Expr:
    """``cast``, an unconstrained numeric cast of an operand of Spark type ``kind`` (None:
    unknown), as the value it is (:func:`_numeric_casts`)."""
    operand: exp.Expr = cast.this
    value = operand.unnest()
    attempt = isinstance(cast, exp.TryCast)  # Spark's TRY_CAST: NULL where no value is
    if isinstance(value, exp.Null):
        return exp.Cast(this=exp.Null(), to=_decimal(1, 0))
    number = _number_of(value, attempt)
    if number is not None:
        precision, scale = decimal_digits(number)
        if precision <= MAX_DECIMAL_DIGITS:
            digits = sqlglot.parse_one(f"{number:f}", read="spark")
            return exp.Cast(this=digits, to=_decimal(precision, scale))
        if attempt:
            return exp.Cast(this=exp.Null(), to=_decimal(*_WIDE))
        raise SqlError(
            f"numeric value out of range: {number} needs {precision} digits, and Spark's "
            f"DECIMAL holds {MAX_DECIMAL_DIGITS}",
            "22003",
        )
    if kind == T.DECIMAL:
        return operand
    if kind in _INTEGER_DIGITS:
        return _cast_as(cast, operand, _decimal(_INTEGER_DIGITS[kind], 0))
    if kind in _FLOAT_DIGITS:
        shown = exp.Literal.string(f"%.{_FLOAT_DIGITS[kind]}g")
        text: exp.Expr = exp.Anonymous(this="format_string", expressions=[shown, operand])
    elif kind in _TEXT_TYPES:
        text = operand
    else:
        text = exp.Cast(this=operand, to=exp.DataType.build("TEXT"))
    return _cast_as(cast, text, _decimal(*_WIDE))


def _cast_as(cast: exp.Cast, value: exp.Expr, to: exp.DataType) -> exp.Expr:
    """``cast`` (a CAST or TRY_CAST, as it is) of ``value`` to ``to``."""
    out = cast.copy()
    out.set("this", value)
    out.set("to", to)
    return out


def _naive_timestamps(tree: exp.Expr) -> None:
    """A cast to ``timestamp`` (``'2024-01-02 03:04:05'::timestamp``, ``TIMESTAMP
    '...'``, a column's ``::timestamp``), PostgreSQL's timestamp without time zone (1114),
    is a cast to Spark's TIMESTAMP_NTZ: sqlglot writes it as Spark's TIMESTAMP, an instant
    (timestamptz, 1184), which a client read as an aware datetime in UTC. A
    ``timestamptz`` (``timestamp with time zone``) stays Spark's TIMESTAMP; so does a bound
    timestamptz parameter, written ``TIMESTAMPTZ`` for it
    (:func:`~timeshard.server.statements.bind`). Inside an array's type too."""
    for cast in list(tree.find_all(exp.Cast)):
        for data_type in list(cast.to.find_all(exp.DataType)):
            if data_type.this == T.TIMESTAMP:
                data_type.replace(exp.DataType.build("TIMESTAMP_NTZ", dialect="spark"))


def _refuse_writes(tree: exp.Expr) -> None:
    """SqlError 0A000 unless ``tree`` is a query that writes nothing: Spark would run
    ``SELECT ... INTO t`` (a table created in the server's warehouse), an INSERT, or a
    data-modifying CTE."""
    write = tree.find(exp.Into, exp.DML)
    if not isinstance(tree, exp.Query | exp.Values) or write is not None:
        what = type(write or tree).__name__.upper()
        raise SqlError(f"only a query that writes nothing is read here, not {what}", "0A000")


def _cte_references(tree: exp.Expr, ctes: set[str]) -> set[int]:
    """The ids of the tables in ``tree`` that name a CTE where they stand (its scope).

    A CTE shadows a relation of its name only inside its own query: ``kv`` in
    ``SELECT * FROM kv WHERE k IN (WITH kv AS (...) SELECT k FROM kv)`` is
    the shard outside the subquery and the CTE inside it.
    """
    from sqlglot.errors import OptimizeError
    from sqlglot.optimizer.scope import traverse_scope

    if not ctes:
        return set()
    try:
        scopes = traverse_scope(tree)
    except OptimizeError as e:
        raise SqlError(f"cannot tell which names are CTEs: {str(e).splitlines()[0]}") from None
    found = {
        id(table)
        for scope in scopes
        for table in scope.tables
        if not table.db and table.name in scope.cte_sources
    }
    seen = {id(t) for scope in scopes for t in scope.tables}
    for table in tree.find_all(exp.Table):
        if id(table) not in seen and not table.db and table.name in ctes:
            raise SqlError(f"cannot tell whether {table.name!r} names the CTE or a relation")
    return found


def _alias(shard: str, taken: set[str]) -> str:
    """A temp view name for ``shard`` unlike every name in ``taken``, ignoring case (Spark
    SQL does: the aliases of ``KV`` and ``kv`` were one view, read for both).

    It is an identifier Spark's parser takes bare, as a temp view's name is parsed:
    letters, digits and ``_``, not starting with a digit (``123``, ``1e5`` and ``12L``
    are numbers to it; a shard ``123`` has the alias ``r_123``).
    """
    base = re.sub(r"\W", "_", shard, flags=re.ASCII)
    if not re.match(r"[A-Za-z_]", base):
        base = f"r_{base}"
    alias, n = base, 1
    folded = {t.lower() for t in taken}
    while alias.lower() in folded:
        n += 1
        alias = f"{base}_{n}"
    return alias
