"""The types PostgreSQL and Spark give the expressions of a client's query, and the
columns of the relations it reads: which relation a column is of, by what name, and of
what type. The rewrites of :mod:`timeshard.server.query_rewrites` read them to give a
result PostgreSQL's type (:func:`~timeshard.server.query_rewrites._numeric_casts`).

Nothing here changes the query's tree. A type is a sqlglot ``DataType.Type``: Spark's
type of the values, PostgreSQL's named by it (SMALLINT for int2, DOUBLE for float8,
DECIMAL for numeric), None where it is not known here.

Pure Python, no Spark.
"""

from __future__ import annotations

import decimal
import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from sqlglot import exp

from timeshard.server.dialect import DIALECT
from timeshard.server.parameter_types import ColumnsOf
from timeshard.server.statements import SqlError, numeric_text

T = exp.DType


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


#: The digits of Spark's integral types: the DECIMAL(p, 0) that holds each of their values
#: (Spark's own ``DecimalType.forType``).
_INTEGER_DIGITS = {T.TINYINT: 3, T.SMALLINT: 5, T.INT: 10, T.BIGINT: 20}


#: The significant digits PostgreSQL keeps of a float8 and a float4 it casts to numeric
#: (``%.15g`` and ``%.6g``: DBL_DIG and FLT_DIG).
_FLOAT_DIGITS = {T.DOUBLE: 15, T.FLOAT: 6}


#: PostgreSQL's integer types as the Spark types of their values, narrowest first (a
#: shard's TINYINT column is served as int2).
_POSTGRES_INTEGERS = (T.SMALLINT, T.INT, T.BIGINT)


def _untyped(node: exp.Expr) -> bool:
    """Whether PostgreSQL gives ``node`` its unknown type, which takes the type its use
    wants: ``NULL`` or a string constant (an undeclared parameter's bound value too)."""
    node = node.unnest()
    return isinstance(node, exp.Null) or _string_constant(node) is not None


#: What one reading of a tree knows of the types :func:`_postgres_type` gave its nodes: per
#: node's id, the node (held, so that the id is no other node's while the memo is) and its
#: type. A memo is valid while no node it holds changes type: a pass that changes the tree
#: keeps one only where it changes no node typed before (its inner nodes first, or a
#: cast's operand, whose cast's type is its own).
TypeMemo = dict[int, tuple[exp.Expr, "T | None"]]


def _quotient_sides(
    div: exp.Div, columns: Mapping[int, T], memo: TypeMemo | None = None
) -> tuple[T | None, T | None]:
    """The types PostgreSQL gives the sides of ``div`` (:func:`_postgres_type`): a side of
    unknown type (:func:`_untyped`) has the other's, as PostgreSQL resolves ``/``."""
    left, right = (
        None if _untyped(side) else _postgres_type(side, columns, memo)
        for side in (div.this, div.expression)
    )
    return (right if _untyped(div.this) else left), (left if _untyped(div.expression) else right)


def _postgres_type(
    node: exp.Expr, columns: Mapping[int, T], memo: TypeMemo | None = None
) -> T | None:
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
    ``2147483648`` was an int8). ``length`` is an int4 and ``count`` an int8 in both.

    ``memo``: the types given so far in one reading of the tree (:data:`TypeMemo`), each
    node typed once in it: a pass typing each ``+`` of a chain of them read the chain
    again at each (review: quadratic in the chain's length)."""
    if memo is None:
        memo = {}
    known = memo.get(id(node))
    if known is not None and known[0] is node:
        return known[1]
    for operand in _left_spine(node, memo):  # the innermost first: each finds its left typed
        memo[id(operand)] = (operand, _postgres_type_of(operand, columns, memo))
    kind = _postgres_type_of(node, columns, memo)
    memo[id(node)] = (node, kind)
    return kind


#: The operators whose type :func:`_postgres_type` reads of their left operand first.
_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Mod, exp.Div)


def _left_spine(node: exp.Expr, memo: TypeMemo) -> list[exp.Expr]:
    """The left operands below ``node`` of a chain of arithmetic operators (``a + b + c``
    is ``(a + b) + c``: ``a + b``, then its own left ones), not yet typed in ``memo``, the
    innermost first. :func:`_postgres_type` types them so before ``node``: a chain of n
    operators then costs a few frames of the stack, not a few for each of them (a chain
    of 600 ran past Python's recursion limit)."""
    spine: list[exp.Expr] = []
    inner = node.unnest()
    while isinstance(inner, _ARITHMETIC):
        left = inner.this
        known = memo.get(id(left))
        if not isinstance(left, exp.Expr) or (known is not None and known[0] is left):
            break
        spine.append(left)
        inner = left.unnest()
    return spine[::-1]


def _postgres_type_of(node: exp.Expr, columns: Mapping[int, T], memo: TypeMemo) -> T | None:
    """:func:`_postgres_type` of ``node``, what is in it typed through ``memo``."""
    node = node.unnest()
    while isinstance(node, exp.Window | exp.Filter):  # a window's or an aggregate's FILTER
        node = node.this
    if isinstance(node, exp.Select):  # a scalar subquery (unnested): its one column's type
        selected = node.expressions
        return _postgres_type(selected[0].unalias(), columns, memo) if len(selected) == 1 else None
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
        return _common_type([node.this, *node.expressions], columns, memo)
    if isinstance(node, exp.Case):
        branches = [branch.args.get("true") for branch in node.args.get("ifs") or []]
        return _common_type([*branches, node.args.get("default") or exp.Null()], columns, memo)
    if isinstance(node, exp.Nullif):
        first = _postgres_type(node.this, columns, memo)
        same = _untyped(node.expression) or _postgres_type(node.expression, columns, memo) == first
        return first if same else None
    if isinstance(node, exp.Neg | exp.Abs | exp.Min | exp.Max | exp.Sum | exp.Avg):
        if node.expressions:  # min(a, b), as some dialects read least(): not known here
            return None
        inner = _postgres_type(node.this, columns, memo)
        if isinstance(node, exp.Sum) and inner in _POSTGRES_INTEGERS:
            return T.DECIMAL if inner == T.BIGINT else T.BIGINT
        if isinstance(node, exp.Avg) and inner in (*_POSTGRES_INTEGERS, T.DECIMAL):
            return T.DECIMAL
        if isinstance(node, exp.Avg) and inner in _FLOAT_DIGITS:
            return T.DOUBLE
        return inner
    if isinstance(node, exp.Div):
        return _arithmetic_type(*_quotient_sides(node, columns, memo))
    if isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Mod):
        left = _postgres_type(node.this, columns, memo)
        return _arithmetic_type(left, _postgres_type(node.expression, columns, memo))
    return None


#: PostgreSQL's numeric types in the order its ``CASE``, ``COALESCE``, ``GREATEST`` and
#: ``LEAST`` choose their common type by: each converts implicitly to those after it.
_COMMON_ORDER = (*_POSTGRES_INTEGERS, T.DECIMAL, T.FLOAT, T.DOUBLE)


def _common_type(
    values: list[exp.Expr | None], columns: Mapping[int, T], memo: TypeMemo | None = None
) -> T | None:
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
        kinds.append(_postgres_type(value, columns, memo))
    if not kinds or any(k not in _COMMON_ORDER for k in kinds):
        return None
    return max(kinds, key=lambda k: _COMMON_ORDER.index(k))  # type: ignore[arg-type]


#: The text of a float PostgreSQL's float8 input reads (whitespace around it taken).
_FLOAT_TEXT = re.compile(
    r"\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|nan|inf|infinity)\s*",
    re.IGNORECASE | re.ASCII,
)


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
    tree: exp.Expr,
    columns_of: ColumnsOf,
    aliases: bool = True,
    renames: bool = False,
    joined: dict[int, T] | None = None,
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
    scopes come first, so the columns that expression reads are typed before it.

    A shard read under column aliases (``FROM t AS x(a, b)``) has columns of its own types
    under those names with ``renames`` (the rewrites' version 3), none known here
    without. ``joined``, if given, is filled with the unqualified columns a join is
    ``USING`` whose sides are of different types, known: PostgreSQL's common type of
    them (:func:`_common_type_of`), where Spark's is one side's."""
    from sqlglot.errors import OptimizeError
    from sqlglot.optimizer.scope import Scope, traverse_scope

    try:
        scopes = traverse_scope(tree)
    except OptimizeError:
        return {}, {}
    read: dict[str, Mapping[str, str | None] | None] = {}

    def columns_of_table(table: exp.Table) -> Mapping[str, str | None] | None:
        name = ".".join(p for p in (table.catalog, table.db, table.name) if p)
        if name not in read:
            read[name] = columns_of(name)
        return read[name]

    def shard_of(source: object) -> Mapping[str, str | None] | None:
        """The columns of the shard ``source`` reads, by the names it reads them by: its
        column aliases' (``FROM t AS q(a, b)``), and its own past them; None if they are
        not known, or renamed and not ``renames``. A column's type is None where not
        known here (:func:`~timeshard.server.parameter_types.arrow_columns`)."""
        if not isinstance(source, exp.Table):
            return None
        shard = columns_of_table(source)
        named = _column_aliases(source)
        if shard is None or not named:
            return shard
        if not renames or len(named) > len(shard):
            return None
        renamed: dict[str, str | None] = {}
        for name, kind in zip(_aliased_names(source, shard), shard.values(), strict=True):
            renamed[name] = None if name in renamed else kind  # twice: ambiguous, not typed
        return renamed

    def names_of(node: exp.Expr, source: object) -> set[str] | None:
        if isinstance(source, exp.Table):
            shard = shard_of(source)
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
        shard = shard_of(source)
        name = shard.get(column.name) if shard is not None else None
        if name is None and shard is not None and not column.this.quoted:
            # Spark resolves an unquoted name whatever its case (the tree's are lower).
            same = [t for c, t in shard.items() if c.lower() == column.name.lower()]
            name = same[0] if len(same) == 1 else None
        kind = _type_named(name)
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
            if joined is not None and kind is not None and len({k for _, k in kinds}) > 1:
                joined[id(column)] = kind
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


def _aliased_names(source: exp.Table, shard: Mapping[str, str | None]) -> list[str]:
    """The names ``source`` reads its shard's columns (``shard``: all of them, in order,
    :func:`~timeshard.server.parameter_types.arrow_columns`) by: its column aliases'
    (``FROM t AS q(a, b)``), then the shard's own past them, in the shard's order (a name
    may come twice). More aliases than columns give the aliases (PostgreSQL's 42P10)."""
    names = list(shard)
    aliases = _column_aliases(source)
    names[: len(aliases)] = aliases
    return names


def _type_named(name: str | None) -> T | None:
    """The type sqlglot names ``name`` (a shard's column's, as
    :func:`~timeshard.server.parameter_types.arrow_columns` gives it); None for None, a
    column of a type not known here."""
    return None if name is None else exp.DataType.build(name, dialect=DIALECT).this


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


#: PostgreSQL's name of each of its types of text and numbers, by the Spark type of its values.
_TYPE_NAMES = {
    T.TEXT: "text",
    T.VARCHAR: "character varying",
    T.SMALLINT: "smallint",
    T.INT: "integer",
    T.BIGINT: "bigint",
    T.DECIMAL: "numeric",
    T.DOUBLE: "double precision",
    T.FLOAT: "real",
}


@dataclass(frozen=True, slots=True)
class _ArrayOf:
    """PostgreSQL's type of an array of ``element``\\ s (``ARRAY[i]``: ``integer[]``), None
    where not known here. An array is neither a text nor a number: a string constant
    beside one is an array's text (``coalesce(ARRAY[i], '{}')``), a text or a number
    beside one PostgreSQL's 42804 ("COALESCE types integer[] and text")."""

    element: T | None


#: A value's type as :class:`~timeshard.server.query_comparisons._Typer` knows it: one of
#: :data:`_TYPE_NAMES`, an array's (:class:`_ArrayOf`), another Spark type (not known
#: here), or None.
Kind = T | _ArrayOf | None


def _type_name(kind: Kind) -> str | None:
    """PostgreSQL's name of ``kind`` (``integer``, ``integer[]``); None if not known here."""
    if isinstance(kind, _ArrayOf):
        element = None if kind.element is None else _TYPE_NAMES.get(kind.element)
        return None if element is None else f"{element}[]"
    return None if kind is None else _TYPE_NAMES.get(kind)
