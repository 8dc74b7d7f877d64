"""The rewrites of a client's query before Spark runs it: what ``timeshard serve``
refuses in a query (a write, a call of a Java method by name), the literals and casts
it gives PostgreSQL's meaning where Spark's differs (JSON, intervals, integer limits,
a date moved by an interval), and the names of the temporary views its shards are read
as (:meth:`~timeshard.server.engine.Engine.resolve` applies them in order).

Each takes the sqlglot tree of the query, read with :data:`~timeshard.server.dialect.DIALECT`,
and changes it in place or raises :class:`~timeshard.server.sql_tokens.SqlError`.

Pure Python, no Spark.
"""

from __future__ import annotations

import decimal
import re

import sqlglot
from sqlglot import exp

from timeshard.server.dialect import DIALECT
from timeshard.server.statements import SqlError, check_json

#: Spark SQL functions that call a static Java method by name in the server's JVM
#: (``reflect('java.lang.System', 'exit', 7)`` stops the server).
_JAVA_CALLS = frozenset({"reflect", "java_method", "try_reflect"})


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
