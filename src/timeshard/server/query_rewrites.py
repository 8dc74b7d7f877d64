"""The rewrites of a client's query before Spark runs it: what ``timeshard serve``
refuses in a query (a write, a call of a Java method by name), the literals and casts
it gives PostgreSQL's meaning where Spark's differs (JSON, intervals, integer limits,
a date moved by an interval, an unconstrained ``numeric``, ``timestamp`` without time
zone), and the names of the temporary views its shards are read as
(:meth:`~timeshard.server.engine.Engine.resolve` applies them in order).

Each takes the sqlglot tree of the query, read with :data:`~timeshard.server.dialect.DIALECT`,
and changes it in place or raises :class:`~timeshard.server.sql_tokens.SqlError`.

Pure Python, no Spark.
"""

from __future__ import annotations

import decimal
import functools
import math
import re
import struct
from collections.abc import Mapping

import sqlglot
from sqlglot import exp

from timeshard.server.dialect import DIALECT
from timeshard.server.parameter_types import ColumnsOf
from timeshard.server.statements import (
    MAX_DECIMAL_DIGITS,
    SqlError,
    check_json,
    decimal_digits,
    numeric_text,
)

T = exp.DType

#: Spark SQL functions that call a static Java method by name in the server's JVM
#: (``reflect('java.lang.System', 'exit', 7)`` stops the server).
_JAVA_CALLS = frozenset({"reflect", "java_method", "try_reflect"})


#: The version of the typing rewrites (:func:`_numeric_casts`) a query gets by default; a
#: view's entry records the lowest that resolves its query alike (``engine.TYPED_VIEWS``).
#: 2 added PostgreSQL's int8 ranks, its integer input of string constants, and the types
#: of columns under column aliases and joined ``USING``.
TYPING = 2


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


_UNICODE_ESCAPE = r"(?:(?P<e1>{e}){e}|{e}(?P<four>[0-9a-fA-F]{{4}})|{e}\+(?P<six>[0-9a-fA-F]{{6}}))"


def _string_constant(value: exp.Expr) -> str | None:
    """The text of ``value`` if it is one of PostgreSQL's string constants: a quoted
    string, an escape string (``E'...'``, its escapes read by the parser), a
    dollar-quoted one, or a Unicode one (``U&'...'``, its ``\\XXXX`` and ``\\+XXXXXX``
    escapes read here; SqlError 22025 for a malformed one, as PostgreSQL's); else None."""
    if isinstance(value, exp.Literal):
        return str(value.this) if value.is_string else None
    if isinstance(value, exp.ByteString | exp.RawString):
        return str(value.this)
    if not isinstance(value, exp.UnicodeString):
        return None
    escape = value.args.get("escape")
    mark = escape.name if isinstance(escape, exp.Expr) else "\\"
    pattern = re.compile(_UNICODE_ESCAPE.format(e=re.escape(mark)))
    text = str(value.this)

    def unescaped(match: re.Match[str]) -> str:
        if match["e1"] is not None:
            return mark
        return chr(int(match["four"] or match["six"], 16))

    out = pattern.sub(unescaped, text)
    if mark in pattern.sub("", text):
        raise SqlError(f"invalid Unicode escape in {text!r}", "22025")
    return out


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


#: The digits of Spark's integral types: the DECIMAL(p, 0) that holds each of their values
#: (Spark's own ``DecimalType.forType``).
_INTEGER_DIGITS = {T.TINYINT: 3, T.SMALLINT: 5, T.INT: 10, T.BIGINT: 20}
#: The significant digits PostgreSQL keeps of a float8 and a float4 it casts to numeric
#: (``%.15g`` and ``%.6g``: DBL_DIG and FLT_DIG).
_FLOAT_DIGITS = {T.DOUBLE: 15, T.FLOAT: 6}
_TEXT_TYPES = frozenset({T.TEXT, T.VARCHAR, T.CHAR, T.NVARCHAR, T.NCHAR})
#: The DECIMAL a numeric of no digits known here is (a double, a string, an expression
#: whose Spark type is not known): Spark's ``DecimalType.SYSTEM_DEFAULT``, 20 digits before
#: the point and 18 after it.
_WIDE = (MAX_DECIMAL_DIGITS, 18)


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
    are completed (:func:`_complete_column_aliases`), as PostgreSQL names the rest.

    ``version``: of these rewrites (:data:`TYPING`). At 1 (a view recorded with version
    1 and no resolution, installed again as it was made; or checking that version 1
    resolves a new view's query alike, to record the lowest), ranks stay INTs, string
    constants beside ``+ - * %`` and cast to integers are not typed or checked, and
    columns under column aliases or joined ``USING`` are not typed.

    Two uses of such a cast are as PostgreSQL answers them, not as Spark's decimals do: an
    operand of ``/`` is a DECIMAL of at least 17 digits (:func:`_divisible`), and a cast
    of it to an integral type rounds it first (``1.5::numeric::int`` is 2; Spark's cast
    of a decimal to an integer truncates).

    What PostgreSQL answers that this cannot: a numeric's scale is each value's own in
    PostgreSQL, one column's here, so a double or a string cast to numeric shows 18
    digits after the point (``2.5`` is ``2.500000000000000000``), digits past the 18th
    are rounded, and values past 10**20 are refused (22003)."""
    postgres15 = version >= 2
    columns_of = functools.cache(columns_of)  # a relation's columns are asked once
    _interval_literals(tree)
    if postgres15:
        _complete_column_aliases(tree, columns_of)
    for cast in list(tree.find_all(exp.Cast)):
        for inner in list(cast.to.find_all(exp.DataType)):
            if inner is not cast.to and _unconstrained(inner):
                inner.replace(_decimal(*_WIDE))
    casts = [c for c in tree.find_all(exp.Cast) if _unconstrained(c.to)]
    columns: dict[int, T] = {}
    typed: dict[int, T] = {}  # PostgreSQL's types, of a subquery's and a CTE's columns too
    if any(c.this.find(exp.Column) for c in casts) or _typed_by_columns(tree, postgres15):
        columns, typed = _shard_column_types(tree, columns_of, aliases=postgres15)
    if postgres15:
        _refuse_ambiguous_using(tree, columns_of)
        _untyped_integer_operands(tree, typed)
    _integer_quotients(tree, typed)
    _float_casts_to_integers(tree, typed)
    if postgres15:
        _ordered_windows(tree)
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


#: PostgreSQL's integer types as the Spark types of their values, narrowest first (a
#: shard's TINYINT column is served as int2).
_POSTGRES_INTEGERS = (T.SMALLINT, T.INT, T.BIGINT)


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
    for div in reversed(list(tree.find_all(exp.Div))):
        left, right = _quotient_sides(div, columns)
        if left in _POSTGRES_INTEGERS and right in _POSTGRES_INTEGERS:
            wider = max(left, right, key=_POSTGRES_INTEGERS.index)
            for side, kind in ((div.this, left), (div.expression, right)):
                if _untyped(side):
                    side.replace(exp.Cast(this=side.copy(), to=exp.DataType.build(kind)))
            quotient = exp.Cast(this=exp.IntDiv(), to=exp.DataType.build(wider))
            div.replace(quotient)  # its operands are moved, not copied: ``columns`` holds them
            quotient.this.set("this", div.this)
            quotient.this.set("expression", div.expression)


#: The window functions PostgreSQL answers as an int8 and Spark as an INT (int4).
_RANKS = (exp.RowNumber, exp.Rank, exp.DenseRank)


def _bigint_ranks(tree: exp.Expr) -> None:
    """A window of ``row_number``, ``rank`` or ``dense_rank`` is cast to BIGINT: PostgreSQL
    answers them as int8 (20), Spark as INT, which a client was told was an int4 (23),
    and a sum or product of them stayed an INT where PostgreSQL's is an int8. One that is
    an operand of an integer quotient (:func:`_integer_quotients`, run before this) stays
    as it is: the quotient is cast to BIGINT already."""
    for window in list(tree.find_all(exp.Window)):
        if not isinstance(window.this, _RANKS) or isinstance(window.parent, exp.IntDiv):
            continue
        cast = exp.Cast(this=exp.Null(), to=exp.DataType.build("BIGINT"))
        window.replace(cast)  # moved, not copied, as the rewrites before it move theirs
        cast.set("this", window)


#: The window functions Spark runs only over an ordered window, and PostgreSQL over any.
_ORDERED = (*_RANKS, exp.PercentRank, exp.CumeDist, exp.Ntile, exp.Lag, exp.Lead)


def _ordered_windows(tree: exp.Expr) -> None:
    """A window of :data:`_ORDERED` of no ``ORDER BY`` (``row_number() OVER ()``,
    ``rank() OVER (PARTITION BY p)``) is ordered ``BY NULL``: PostgreSQL numbers such a
    window's rows in an order of its own and ranks them all alike (every row a peer),
    where Spark refused it (XX000, "requires window to be ordered"). Ordered by NULL,
    every row is a peer and Spark numbers them in its order, as PostgreSQL does in its.
    A named window (``OVER w``) is left as it is: its order is in the ``WINDOW`` clause."""
    for window in tree.find_all(exp.Window):
        named = window.args.get("alias") is not None
        if isinstance(window.this, _ORDERED) and not window.args.get("order") and not named:
            window.set("order", exp.Order(expressions=[exp.Ordered(this=exp.Null())]))


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
    for op in reversed(list(tree.find_all(*_INTEGER_OPERATORS))):
        for text, other in ((op.this, op.expression), (op.expression, op.this)):
            if isinstance(text.unnest(), exp.Null) or not _untyped(text) or _untyped(other):
                continue
            kind = _postgres_type(other, columns)
            if kind in _POSTGRES_INTEGERS:
                text.replace(exp.Cast(this=text.copy(), to=exp.DataType.build(kind)))


#: PostgreSQL 15's text of an integer: a sign and decimal digits, whitespace around them.
_INTEGER_TEXT = re.compile(r"\s*([+-]?[0-9]+)\s*", re.ASCII)
#: PostgreSQL's name of each integer type, and the bits of its values.
_INTEGER_NAMES = {T.SMALLINT: ("smallint", 16), T.INT: ("integer", 32), T.BIGINT: ("bigint", 64)}


def _integer_texts(tree: exp.Expr) -> None:
    """A cast (not Spark's ``TRY_CAST``) of a string constant to smallint, integer or
    bigint (``'7.5'::int``, a string side of an integer operator cast by
    :func:`_untyped_integer_operands` or :func:`_integer_quotients`) is checked as
    PostgreSQL 15's integer input reads the text: SqlError 22P02 (invalid input syntax)
    if it is no integer, 22003 if past the type's range, as PostgreSQL answers, where
    Spark's cast failed with 22018 for both. (PostgreSQL 16 reads ``0x10`` and ``1_000``
    too; 15, and Spark, do not.)"""
    for cast in tree.find_all(exp.Cast):
        named = _INTEGER_NAMES.get(cast.to.this)
        text = _string_constant(cast.this.unnest())
        if named is None or text is None or isinstance(cast, exp.TryCast):
            continue
        name, bits = named
        digits = _INTEGER_TEXT.fullmatch(text)
        if digits is None:
            raise SqlError(f'invalid input syntax for type {name}: "{text}"', "22P02")
        if not -(2 ** (bits - 1)) <= int(digits[1]) < 2 ** (bits - 1):
            raise SqlError(f'value "{text}" is out of range for type {name}', "22003")


def _untyped(node: exp.Expr) -> bool:
    """Whether PostgreSQL gives ``node`` its unknown type, which takes the type its use
    wants: ``NULL`` or a string constant (an undeclared parameter's bound value too)."""
    node = node.unnest()
    return isinstance(node, exp.Null) or _string_constant(node) is not None


def _quotient_sides(div: exp.Div, columns: Mapping[int, T]) -> tuple[T | None, T | None]:
    """The types PostgreSQL gives the sides of ``div`` (:func:`_postgres_type`): a side of
    unknown type (:func:`_untyped`) has the other's, as PostgreSQL resolves ``/``."""
    left, right = (
        None if _untyped(side) else _postgres_type(side, columns)
        for side in (div.this, div.expression)
    )
    return (right if _untyped(div.this) else left), (left if _untyped(div.expression) else right)


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
    for cast in list(tree.find_all(exp.Cast)):
        operand = cast.this
        if cast.to.this not in _INTEGER_DIGITS:
            continue
        kind = _postgres_type(operand, columns)
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
    for node in tree.find_all(exp.Div, exp.Cast, *(_INTEGER_OPERATORS if operators else ())):
        if isinstance(node, _INTEGER_OPERATORS):
            sides = [s for s in (node.this, node.expression) if not _untyped(s)]
            if len(sides) != 1:
                continue
        elif isinstance(node, exp.Div):
            sides = [node.this, node.expression]
            kinds = _quotient_sides(node, {})
            if any(k is not None and k not in _POSTGRES_INTEGERS for k in kinds):
                continue
        elif isinstance(node, exp.Cast) and node.to.this in _INTEGER_DIGITS:
            sides = [node.this]
        else:
            continue
        if any(_postgres_type(s, {}) is None and s.find(exp.Column) for s in sides):
            return True
    return False


def _postgres_type(node: exp.Expr, columns: Mapping[int, T]) -> T | None:
    """The type PostgreSQL gives ``node``, as the Spark type of its values, where it is
    known here: SMALLINT, INT and BIGINT for int2, int4 and int8; DOUBLE and FLOAT for
    float8 and float4; DECIMAL for numeric; None for anything else. It is
    :func:`_spark_type` but where PostgreSQL's rules differ: a number literal with a point
    or an exponent is a numeric (Spark's ``1e3`` is a double), a ``sum`` of bigints a
    numeric and an ``avg`` of integers or numerics a numeric (Spark's: a bigint, a
    double), a quotient of integers an integer (Spark's: a double), ``row_number``,
    ``rank`` and ``dense_rank`` an int8 (Spark's: an int), a ``CASE``, ``COALESCE``,
    ``GREATEST`` or ``LEAST`` their branches' common type (:func:`_common_type`), and a
    negated integer literal the type of the negative number (``-2147483648`` an int4, as
    PostgreSQL's parser folds it into one constant; its negation of the int8
    ``2147483648`` was an int8). ``length`` is an int4 and ``count`` an int8 in both."""
    node = node.unnest()
    while isinstance(node, exp.Window | exp.Filter):  # a window's or an aggregate's FILTER
        node = node.this
    if isinstance(node, exp.Select):  # a scalar subquery (unnested): its one column's type
        selected = node.expressions
        return _postgres_type(selected[0].unalias(), columns) if len(selected) == 1 else None
    if isinstance(node, exp.Column | exp.Cast):
        kind = columns.get(id(node)) if isinstance(node, exp.Column) else node.to.this
        return T.SMALLINT if kind == T.TINYINT else kind
    if isinstance(node, exp.Literal):
        kind = _literal_type(node)
        return T.DECIMAL if kind == T.DOUBLE else kind
    if isinstance(node, exp.Neg) and isinstance(node.this.unnest(), exp.Literal):
        digits = node.this.unnest()
        if digits.is_number and str(digits.this).isdigit():  # PostgreSQL's parser folds it
            return _integer_type(-int(str(digits.this)))
    if isinstance(node, exp.Count | exp.RowNumber | exp.Rank | exp.DenseRank):
        return T.BIGINT
    if isinstance(node, exp.Length | exp.Ntile):
        return T.INT
    if isinstance(node, exp.PercentRank | exp.CumeDist):
        return T.DOUBLE
    if isinstance(node, exp.Coalesce | exp.Greatest | exp.Least):
        return _common_type([node.this, *node.expressions], columns)
    if isinstance(node, exp.Case):
        branches = [branch.args.get("true") for branch in node.args.get("ifs") or []]
        return _common_type([*branches, node.args.get("default") or exp.Null()], columns)
    if isinstance(node, exp.Nullif):
        first = _postgres_type(node.this, columns)
        same = _untyped(node.expression) or _postgres_type(node.expression, columns) == first
        return first if same else None
    if isinstance(node, exp.Neg | exp.Abs | exp.Min | exp.Max | exp.Sum | exp.Avg):
        if node.expressions:  # min(a, b), as some dialects read least(): not known here
            return None
        inner = _postgres_type(node.this, columns)
        if isinstance(node, exp.Sum) and inner in _POSTGRES_INTEGERS:
            return T.DECIMAL if inner == T.BIGINT else T.BIGINT
        if isinstance(node, exp.Avg) and inner in (*_POSTGRES_INTEGERS, T.DECIMAL):
            return T.DECIMAL
        if isinstance(node, exp.Avg) and inner in _FLOAT_DIGITS:
            return T.DOUBLE
        return inner
    if isinstance(node, exp.Div):
        return _arithmetic_type(*_quotient_sides(node, columns))
    if isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Mod):
        left = _postgres_type(node.this, columns)
        return _arithmetic_type(left, _postgres_type(node.expression, columns))
    return None


#: PostgreSQL's numeric types in the order its ``CASE``, ``COALESCE``, ``GREATEST`` and
#: ``LEAST`` choose their common type by: each converts implicitly to those after it.
_COMMON_ORDER = (*_POSTGRES_INTEGERS, T.DECIMAL, T.FLOAT, T.DOUBLE)


def _common_type(values: list[exp.Expr | None], columns: Mapping[int, T]) -> T | None:
    """The type PostgreSQL gives a ``CASE``, ``COALESCE``, ``GREATEST`` or ``LEAST`` of
    ``values`` (:func:`_postgres_type` of each): the last in :data:`_COMMON_ORDER` of
    their types (int2 and int4 an int4, an integer and a numeric a numeric, a numeric
    and a float4 a float4), a NULL taking it. None if a value is of no numeric type known
    here, or a string constant (PostgreSQL reads it as of the common type, Spark's
    ``CASE`` as a string), or all are NULL."""
    kinds = []
    for value in values:
        if value is None or isinstance(value.unnest(), exp.Null):
            continue
        kinds.append(_postgres_type(value, columns))
    if not kinds or any(k not in _COMMON_ORDER for k in kinds):
        return None
    return max(kinds, key=lambda k: _COMMON_ORDER.index(k))  # type: ignore[arg-type]


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


#: The text of a float PostgreSQL's float8 input reads (whitespace around it taken).
_FLOAT_TEXT = re.compile(
    r"\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|nan|inf|infinity)\s*",
    re.IGNORECASE | re.ASCII,
)
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


def _number_of(value: exp.Expr, attempt: bool) -> decimal.Decimal | None:
    """The number ``value`` is as written, if it is one PostgreSQL's numeric reads from its
    text: a number literal (negated too), a string constant of a number, or a cast to
    float8 or float4 of either, as PostgreSQL's cast of the float keeps it (``%.15g``,
    ``%.6g``). Else None. A float's NaN or infinity is SqlError 22003 (None if
    ``attempt``)."""
    if isinstance(value, exp.Neg) and isinstance(value.this, exp.Literal):
        number = _number_of(value.this, attempt)
        return None if number is None else -number
    if isinstance(value, exp.Literal) and value.is_number:
        return numeric_text(str(value.this))
    text = _string_constant(value)
    if text is not None:
        return numeric_text(text)
    if not (isinstance(value, exp.Cast) and value.to.this in _FLOAT_DIGITS):
        return None
    inner = value.this.unnest()
    if isinstance(inner, exp.Neg) and isinstance(inner.this, exp.Literal) and inner.this.is_number:
        written: str | None = f"-{inner.this.this}"
    elif isinstance(inner, exp.Literal) and inner.is_number:
        written = str(inner.this)
    else:
        written = _string_constant(inner)
    if written is not None and not _FLOAT_TEXT.fullmatch(written):
        return None  # Python's float() takes '1_000' and other digits than ASCII's; Spark not
    try:
        double = float(written) if written is not None else None
        if double is not None and value.to.this == T.FLOAT:
            (double,) = struct.unpack("f", struct.pack("f", double))  # float4's rounding
    except ValueError:  # no float: Spark's cast of it says so
        return None
    except OverflowError:  # past float4's range: its infinity
        double = math.inf
    if double is None:
        return None
    if not math.isfinite(double):
        if attempt:
            return None
        raise SqlError(
            f"numeric value out of range: {written!r} is NaN or infinite as a float, and "
            "Spark's DECIMAL holds neither",
            "22003",
        )
    return decimal.Decimal(f"{double:.{_FLOAT_DIGITS[value.to.this]}g}")


def _spark_type(node: exp.Expr, columns: Mapping[int, T]) -> T | None:
    """The type Spark gives ``node``, where it is known here: a shard's column (``columns``,
    by the id of its node), a literal, a cast, and a few operators and aggregates of known
    types; None where it is not."""
    node = node.unnest()
    if isinstance(node, exp.Window):
        node = node.this
    if isinstance(node, exp.Column):
        return columns.get(id(node))
    if isinstance(node, exp.Cast):
        return node.to.this  # type: ignore[no-any-return]
    if isinstance(node, exp.Literal):
        return _literal_type(node)
    if isinstance(node, exp.Count):
        return T.BIGINT
    if isinstance(node, exp.Neg | exp.Abs | exp.Min | exp.Max | exp.Sum | exp.Avg):
        if node.expressions:  # min(a, b), as some dialects read least(): not known here
            return None
        inner = _spark_type(node.this, columns)
        if isinstance(node, exp.Sum) and inner in _INTEGER_DIGITS:
            return T.BIGINT
        if isinstance(node, exp.Sum | exp.Avg) and inner in _FLOAT_DIGITS:
            return T.DOUBLE
        if isinstance(node, exp.Avg) and inner in _INTEGER_DIGITS:
            return T.DOUBLE
        return inner
    if isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Mod | exp.Div):
        left, right = _spark_type(node.this, columns), _spark_type(node.expression, columns)
        if isinstance(node, exp.Div) and left in _INTEGER_DIGITS and right in _INTEGER_DIGITS:
            return T.DOUBLE  # Spark's / divides integers as doubles
        return _arithmetic_type(left, right)
    return None


def _literal_type(literal: exp.Literal) -> T | None:
    """A literal's Spark type: a string's, an integer's (INT, else BIGINT, else DECIMAL), a
    number's with a point (DECIMAL) or an exponent (DOUBLE)."""
    text = str(literal.this)
    if literal.is_string:
        return T.TEXT
    if "e" in text.lower():
        return T.DOUBLE
    if "." in text:
        return T.DECIMAL
    return _integer_type(int(text))


def _integer_type(whole: int) -> T:
    """The narrowest of INT, BIGINT and DECIMAL that holds the integer ``whole``."""
    if -(2**31) <= whole < 2**31:
        return T.INT
    return T.BIGINT if -(2**63) <= whole < 2**63 else T.DECIMAL


def _arithmetic_type(left: T | None, right: T | None) -> T | None:
    """The Spark type of ``+ - * %`` of numbers of types ``left`` and ``right``: the wider
    integer; DECIMAL of a decimal and a decimal or integer; a float's (FLOAT of two, else
    DOUBLE); None if either is no number known here."""
    order = list(_INTEGER_DIGITS)
    if left in _INTEGER_DIGITS and right in _INTEGER_DIGITS:
        return max(left, right, key=order.index)
    numbers = {*_INTEGER_DIGITS, T.DECIMAL, *_FLOAT_DIGITS}
    if left not in numbers or right not in numbers:
        return None
    if left == right == T.FLOAT:
        return T.FLOAT
    if left in _FLOAT_DIGITS or right in _FLOAT_DIGITS:
        return T.DOUBLE
    return T.DECIMAL


def _shard_column_types(
    tree: exp.Expr, columns_of: ColumnsOf, aliases: bool = True
) -> tuple[dict[int, T], dict[int, T]]:
    """The types of the columns of ``tree``, by the id of their node: the Spark types of
    those that are a column of a shard it reads, and PostgreSQL's types
    (:func:`_postgres_type`) of those and of the columns of a subquery or CTE it reads.

    A column is a relation's where it is qualified by the relation's name there (its
    alias), or unqualified where the relations the query reads there are shards and
    subqueries or CTEs whose column names are known (no ``*``; a column alias names its
    column, :func:`_derived_branches`), and one of them has the column. A correlated one
    is an outer scope's. ``columns_of`` is asked once for each relation.

    A subquery's or CTE's column has the type of its select-list expression (of a
    ``UNION``, the common type of each branch's, :func:`_common_type`): the innermost
    scopes come first, so the columns that expression reads are typed before it."""
    from sqlglot.errors import OptimizeError
    from sqlglot.optimizer.scope import Scope, traverse_scope

    try:
        scopes = traverse_scope(tree)
    except OptimizeError:
        return {}, {}
    read: dict[str, Mapping[str, str] | None] = {}

    def columns_of_table(table: exp.Table) -> Mapping[str, str] | None:
        name = ".".join(p for p in (table.catalog, table.db, table.name) if p)
        if name not in read:
            read[name] = columns_of(name)
        return read[name]

    def renamed(source: object) -> bool:
        """Whether a shard is read under column aliases (``FROM t AS q(a, b)``): its
        columns' names are then not its own (not typed here)."""
        alias = source.args.get("alias") if isinstance(source, exp.Table) else None
        return isinstance(alias, exp.TableAlias) and bool(alias.columns)

    def names_of(node: exp.Expr, source: object) -> set[str] | None:
        if isinstance(source, exp.Table):
            shard = None if renamed(source) else columns_of_table(source)
            return None if shard is None else {n.lower() for n in shard}
        derived = _derived_branches(node, source, aliases) if isinstance(source, Scope) else None
        return None if derived is None else {n.lower() for n in derived[0]}

    def owner_types(
        node: exp.Expr, source: object, column: exp.Column
    ) -> tuple[T | None, T | None]:
        """The Spark type and PostgreSQL's type of ``column`` of the relation ``source``
        (a shard's: both; a subquery's or CTE's: PostgreSQL's), None where not known."""
        if isinstance(source, Scope):
            derived = _derived_branches(node, source, aliases)
            return (
                None,
                None if derived is None else _branch_type(*derived, column.name, postgres),
            )
        readable = isinstance(source, exp.Table) and not renamed(source)
        shard = columns_of_table(source) if readable and isinstance(source, exp.Table) else None
        name = shard.get(column.name) if shard is not None else None
        if name is None and shard is not None and not column.this.quoted:
            # Spark resolves an unquoted name whatever its case (the tree's are lower).
            same = [t for c, t in shard.items() if c.lower() == column.name.lower()]
            name = same[0] if len(same) == 1 else None
        kind = None if name is None else exp.DataType.build(name, dialect=DIALECT).this
        return kind, kind

    types: dict[int, T] = {}
    postgres: dict[int, T] = {}
    seen: set[int] = set()
    for scope in scopes:  # the innermost first: a subquery's column is its own scope's
        try:
            sources = dict(scope.selected_sources)
        except OptimizeError:  # a name two relations take (FROM t, t): Spark refuses it
            # Its columns are its own: an outer scope, which lists them too, does not type them.
            seen.update(id(c) for c in [*scope.columns, *_grouped_columns(scope)])
            continue
        for column in [*scope.columns, *_grouped_columns(scope)]:
            if id(column) in seen:  # an inner scope's, which an outer one lists too
                continue
            if column.table:
                if column.table not in sources:
                    continue  # correlated: an outer scope's
                seen.add(id(column))
                owners = [sources[column.table]]
            else:
                known = [(pair, names_of(*pair)) for pair in sources.values()]
                if any(names is None for _, names in known):
                    seen.add(id(column))
                    continue  # a relation whose columns are not known here: it may be its
                wanted = column.name.lower()
                owners = [pair for pair, names in known if names is not None and wanted in names]
                if not owners:
                    continue  # none of its relations has it: correlated, an outer scope's
                seen.add(id(column))
            using = _using_names(scope) if aliases else set()
            if len(owners) != 1 and column.name.lower() not in using:
                continue  # ambiguous: Spark and PostgreSQL refuse it
            kinds = [owner_types(node, source, column) for node, source in owners]
            spark = {k for k, _ in kinds}
            only = spark.pop() if len(spark) == 1 else None
            if only is not None:  # a shard's, of one type on every side
                types[id(column)] = only
            kind = _common_type_of([k for _, k in kinds])
            if kind is not None:
                postgres[id(column)] = kind
    return types, postgres


def _using_names(scope: object) -> set[str]:
    """The names (in lower case) of the columns the joins of ``scope``'s SELECT (a sqlglot
    ``Scope``) join ``USING``: an unqualified one is the join's one column, of both
    sides' common type, in PostgreSQL, not a name two relations share."""
    select = getattr(scope, "expression", None)
    if not isinstance(select, exp.Select):
        return set()
    return {
        n.name.lower() for j in select.args.get("joins") or [] for n in j.args.get("using") or []
    }


def _refuse_ambiguous_using(tree: exp.Expr, columns_of: ColumnsOf) -> None:
    """SqlError 42702 if a name a join is ``USING`` is the name of two columns of one of
    its sides, as PostgreSQL refuses it ("common column name appears more than once"):
    Spark joined on one of them and gave ``SELECT *`` both. A join's left side is every
    relation before it, a column an earlier join is ``USING`` counted once.

    Checked where the names of every relation a join reads are known here (a shard's, as
    ``columns_of`` names them, under its column aliases; a subquery's or CTE's,
    :func:`_derived_branches`), up to a ``NATURAL`` join; past it Spark's answer stands."""
    from sqlglot.errors import OptimizeError
    from sqlglot.optimizer.scope import Scope, traverse_scope

    selects = [
        s
        for s in tree.find_all(exp.Select)
        if any(j.args.get("using") for j in s.args.get("joins") or [])
    ]
    if not selects:
        return
    try:
        scopes = {id(scope.expression): scope for scope in traverse_scope(tree)}
        sources = {k: dict(scope.selected_sources) for k, scope in scopes.items()}
    except OptimizeError:  # Spark refuses what sqlglot cannot scope
        return

    def names_of(relation: exp.Expr, select: exp.Select) -> list[str] | None:
        node, source = sources[id(select)].get(relation.alias_or_name, (None, None))
        if isinstance(source, Scope) and node is not None:
            derived = _derived_branches(node, source)
            return None if derived is None else derived[0]
        if not isinstance(source, exp.Table):
            return None
        shard = columns_of(".".join(p for p in (source.catalog, source.db, source.name) if p))
        if shard is None:
            return None
        names = list(shard)
        aliases = _column_aliases(source)
        names[: len(aliases)] = aliases
        return names

    for select in selects:
        first = select.args.get("from_")
        left = names_of(first.this, select) if first is not None and id(select) in sources else None
        for join in select.args.get("joins") or []:
            right = names_of(join.this, select) if left is not None else None
            if left is None or right is None or join.args.get("method"):
                break  # not known here, or NATURAL
            using = [n.name for n in join.args.get("using") or []]
            for name in using:
                for side, names in (("left", left), ("right", right)):
                    if names.count(name) > 1:
                        raise SqlError(
                            f'common column name "{name}" appears more than once in {side} table',
                            "42702",
                        )
            left = using + [n for n in left + right if n not in using]


def _common_type_of(kinds: list[T | None]) -> T | None:
    """The type PostgreSQL gives a column ``USING`` joins of columns of types ``kinds``:
    theirs if one, else the last in :data:`_COMMON_ORDER` of them; None if one is not
    known, or two differ and one is no number."""
    if None in kinds:
        return None
    if len(set(kinds)) == 1:
        return kinds[0]
    numbers = [T.SMALLINT if k == T.TINYINT else k for k in kinds]
    if any(k not in _COMMON_ORDER for k in numbers):
        return None
    return max(numbers, key=lambda k: _COMMON_ORDER.index(k))  # type: ignore[arg-type]


def _grouped_columns(scope: object) -> list[exp.Column]:
    """The unqualified columns of a SELECT's HAVING, DISTINCT ON and ORDER BY that
    ``scope`` (a sqlglot ``Scope``) does not list among its columns: PostgreSQL reads them
    as the input's columns (``HAVING i / 2 = 3`` divides the column ``i``).

    In ORDER BY, not one a select item's alias of another value names: Spark reads the
    output's column there first. In HAVING and DISTINCT ON every one: Spark reads the
    input's column first too (in HAVING, except outside an aggregate and a grouping
    expression, where it falls back to an alias, which PostgreSQL refuses anyway; DISTINCT
    ON becomes a window over the input)."""
    select = getattr(scope, "expression", None)
    if not isinstance(select, exp.Select):
        return []
    listed = {id(c) for c in getattr(scope, "columns", ())}
    aliases = {
        e.alias.lower()
        for e in select.expressions
        if isinstance(e, exp.Alias)
        and not (isinstance(e.this, exp.Column) and e.this.name.lower() == e.alias.lower())
    }
    distinct = select.args.get("distinct")
    on = distinct.args.get("on") if isinstance(distinct, exp.Distinct) else None
    order = select.args.get("order")
    out = []
    for clause in (select.args.get("having"), on, order):
        for column in clause.find_all(exp.Column) if clause is not None else ():
            inner = column.find_ancestor(exp.Select) is not select  # a subquery's own
            if id(column) in listed or column.table or inner:
                continue
            if clause is not order or on is not None or column.name.lower() not in aliases:
                out.append(column)
    return out


def _derived_branches(
    node: exp.Expr, scope: object, aliases: bool = True
) -> tuple[list[str], list[list[exp.Expr]]] | None:
    """The column names and the select lists of the subquery or CTE ``scope`` (a sqlglot
    ``Scope``) that ``node`` reads: one list, or a ``UNION``'s (``INTERSECT``'s,
    ``EXCEPT``'s) each. A column's name is its first list's, or its column alias (``AS
    z(k)``, ``WITH z(k) AS``; the CTE's, then its reader's), PostgreSQL's names of the
    first columns when there are fewer aliases than columns. None where the names are
    not known here: a ``*``, ``VALUES``, more aliases than columns; without ``aliases``
    (the rewrites' version 1), any column alias."""
    query = getattr(scope, "expression", None)
    holders = (query.parent if query is not None else None, node)  # the CTE's first
    if not aliases and any(_column_aliases(h) for h in holders):
        return None
    branches: list[list[exp.Expr]] = []
    pending = [query]
    while pending:
        part = pending.pop(0)
        if isinstance(part, exp.Subquery):
            pending.insert(0, part.this)
        elif isinstance(part, exp.SetOperation):
            pending[:0] = [part.this, part.expression]
        elif isinstance(part, exp.Select) and not any(e.is_star for e in part.expressions):
            branches.append(list(part.expressions))
        else:
            return None
    if len({len(b) for b in branches}) != 1:
        return None
    names = [e.alias_or_name for e in branches[0]]
    for holder in holders:
        named = _column_aliases(holder)
        if len(named) > len(names):
            return None
        names[: len(named)] = named
    return names, branches


def _column_aliases(holder: exp.Expr | None) -> list[str]:
    """The names of the column aliases of ``holder`` (a subquery, a CTE, a table):
    ``a, b`` of ``AS q(a, b)``; none without them."""
    alias = holder.args.get("alias") if holder is not None else None
    if not isinstance(alias, exp.TableAlias):
        return []
    return [c.name for c in alias.columns]


def _branch_type(
    names: list[str], branches: list[list[exp.Expr]], name: str, columns: Mapping[int, T]
) -> T | None:
    """PostgreSQL's type of the column ``name`` of a query of the column names ``names``
    and the select lists ``branches`` (:func:`_derived_branches`); None if not one of
    it."""
    named = [i for i, n in enumerate(names) if n == name]
    if len(named) != 1:
        return None
    values: list[exp.Expr | None] = [b[named[0]].unalias() for b in branches]
    if len(values) == 1:
        return _postgres_type(values[0], columns) if values[0] is not None else None
    return _common_type(values, columns)


def _complete_column_aliases(tree: exp.Expr, columns_of: ColumnsOf) -> None:
    """A relation's column aliases fewer than its columns (a subquery's ``(SELECT 1 AS x,
    2 AS y) AS q(a)``, a CTE's, a shard's ``t AS x(a)``) are completed with the names of
    the rest (``q(a, y)``, ``x(a, s)``), as PostgreSQL names them: Spark refused them
    (42802, ASSIGNMENT_ARITY_MISMATCH). More aliases than columns are SqlError 42P10, as
    PostgreSQL refuses them (Spark's error was 42802).

    Left as they are where the columns are not known here (a ``*``, ``VALUES``, a table
    that names a CTE or no shard), and not completed where a name of the rest is not (an
    expression with no alias, which PostgreSQL and Spark name otherwise): Spark refuses
    them then. ``columns_of`` is asked only for a shard read under column aliases."""
    ctes = {c.alias for c in tree.find_all(exp.CTE)}
    for alias in list(tree.find_all(exp.TableAlias)):
        holder = alias.parent
        names = _relation_names(holder, columns_of, ctes) if alias.columns else None
        if names is None:
            continue
        if len(alias.columns) > len(names):
            what = "WITH query" if isinstance(holder, exp.CTE) else "table"
            raise SqlError(
                f'{what} "{alias.name}" has {len(names)} columns available but '
                f"{len(alias.columns)} columns specified",
                "42P10",
            )
        rest = names[len(alias.columns) :]
        if all(name is not None for name in rest):
            for name in rest:
                alias.append("columns", exp.to_identifier(name))


def _relation_names(
    holder: exp.Expr | None, columns_of: ColumnsOf, ctes: set[str]
) -> list[str | None] | None:
    """The names of the columns of the relation ``holder`` (a subquery, a CTE, a shard's
    table), before its column aliases: None where they are not known here; a name None
    where its expression has no alias."""
    if isinstance(holder, exp.Table):
        if holder.name in ctes and not holder.db:
            return None
        shard = columns_of(".".join(p for p in (holder.catalog, holder.db, holder.name) if p))
        return None if shard is None else list(shard)
    if not isinstance(holder, exp.Subquery | exp.CTE):
        return None
    first = holder.this
    while isinstance(first, exp.SetOperation | exp.Subquery):
        first = first.this
    if not isinstance(first, exp.Select) or any(e.is_star for e in first.expressions):
        return None
    return [
        e.alias_or_name if isinstance(e, exp.Alias | exp.Column) else None
        for e in first.expressions
    ]


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
