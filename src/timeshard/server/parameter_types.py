"""The types PostgreSQL infers for a statement's undeclared parameters.

A client that prepares ``SELECT $1::int8`` without declaring ``$1`` reads the type of
``$1`` from the Describe of the statement (asyncpg always; psycopg's binary mode), and
sends its value in that type's binary format: described as text (25), a Python ``int``
is refused by the driver (asyncpg: ``expected str, got int``). PostgreSQL infers an
undeclared parameter's type from where it stands; :func:`parameter_types` infers it
where PostgreSQL 15 does, for these places (the first found wins):

* a cast of the parameter itself, ``$n::T`` or ``CAST($n AS T)``: ``T`` (a type serve
  binds: integers, floats, numeric, boolean, text, varchar, bpchar, bytea, uuid, json,
  jsonb, date, timestamp, timestamptz, and interval without fields). Not Spark's
  ``TRY_CAST``, which has no PostgreSQL form;
* one side of a comparison (``=``, ``<>``, ``<``, ``<=``, ``>``, ``>=``), of ``IN`` or
  of ``BETWEEN`` whose other side is typed: that type (a varchar's is text, as
  PostgreSQL compares varchars as text);
* one side of ``+``, ``-``, ``*``, ``/`` (and ``%``, but for a float) whose other side is
  a number: that number's type. A literal's type is PostgreSQL's: an integer that fits
  int4 is int4, a larger one int8, one with a point or an exponent numeric.

A column's type is known where the caller gives the columns of the relations the
statement reads (``columns_of``: a Describe does); without them a parameter beside a
column stays unknown. Every other parameter stays unknown, which a Describe answers as
text (25), as PostgreSQL does for ``SELECT $1`` or ``$1 || 'x'``.

Pure Python, no Spark.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from timeshard.server.dialect import DIALECT

T = exp.DataType.Type

#: sqlglot's types of a cast's target or of an annotated expression, as PostgreSQL's OIDs.
_OIDS = {
    T.BIGINT: 20,
    T.INT: 23,
    T.SMALLINT: 21,
    T.TINYINT: 21,
    T.DOUBLE: 701,
    T.FLOAT: 700,
    T.DECIMAL: 1700,
    T.BOOLEAN: 16,
    T.TEXT: 25,
    T.VARCHAR: 1043,
    T.CHAR: 1042,
    T.VARBINARY: 17,
    T.BINARY: 17,
    T.UUID: 2950,
    T.JSON: 114,
    T.JSONB: 3802,
    T.DATE: 1082,
    T.TIMESTAMP: 1114,
    T.TIMESTAMPNTZ: 1114,
    T.TIMESTAMPTZ: 1184,
    T.TIMESTAMPLTZ: 1184,
    T.INTERVAL: 1186,
}
#: The numbers arithmetic with an unknown operand takes the type of; ``%`` not a float's.
_NUMBERS = frozenset({20, 21, 23, 700, 701, 1700})
_FLOATS = frozenset({700, 701})
_COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)
_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)
_VARCHAR, _TEXT, _INTERVAL = 1043, 25, 1186

#: The columns of the relation a query names so, all of them in its order, by name: their
#: types as sqlglot names them, None where not known here (:func:`arrow_columns`).
ColumnsOf = Callable[[str], Mapping[str, str | None] | None]


def parameter_types(sql: str, columns_of: ColumnsOf | None = None) -> dict[int, int]:
    """The OID PostgreSQL infers for each parameter ``sql`` gives a type by where it
    stands (see the module's docstring), by number; one not in it stays unknown.

    ``columns_of(name)`` gives the column types (sqlglot's type names, None for one not
    known) of the relation ``sql`` names ``name`` (a shard's id, as the engine resolves
    it), None if there is none. Empty if ``sql`` does not parse or has no parameter;
    parses ``sql`` only if it has a ``$``."""
    if "$" not in sql:
        return {}
    try:
        tree = sqlglot.parse_one(sql, read=DIALECT)
    except (SqlglotError, RecursionError):  # no query, or nested past the stack
        return {}
    if tree is None or tree.find(exp.Parameter) is None:
        return {}
    tree = _annotated(tree, columns_of)
    found: dict[int, int] = {}
    settled: set[int] = set()  # decided where they first stand in a typed place
    for param in tree.find_all(exp.Parameter):
        number = _number(param)
        if number is None or number in settled:
            continue
        oid = _inferred(param, found)
        if oid is _UNDECIDED:
            settled.add(number)  # its first such place: PostgreSQL's type, unknown here
        elif oid is not None:
            found[number] = oid
            settled.add(number)
    return found


def _annotated(tree: exp.Expr, columns_of: ColumnsOf | None) -> exp.Expr:
    """``tree`` with its expressions typed (sqlglot's annotation), qualified and its
    columns typed by ``columns_of`` where it can be: a statement sqlglot cannot qualify
    has its columns unknown."""
    from sqlglot.optimizer.annotate_types import annotate_types
    from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
    from sqlglot.optimizer.qualify import qualify
    from sqlglot.schema import MappingSchema

    tree = normalize_identifiers(tree, dialect=DIALECT)  # names as the engine reads them
    schema: dict[tuple[str, ...], dict[str, str]] = {}
    if columns_of is not None:
        ctes = {c.alias for c in tree.find_all(exp.CTE)}
        for table in tree.find_all(exp.Table):
            parts = tuple(p for p in (table.catalog, table.db, table.name) if p)
            columns = None if ".".join(parts) in ctes else columns_of(".".join(parts))
            if columns is not None:  # a column of no known type is a column still
                schema[parts] = {n: kind or "UNKNOWN" for n, kind in columns.items()}
    if schema:
        try:
            known = MappingSchema(_nested(schema), dialect=DIALECT, normalize=False)
            qualified = qualify(
                tree.copy(),
                schema=known,
                dialect=DIALECT,
                validate_qualify_columns=False,
                quote_identifiers=False,
            )
            return annotate_types(qualified, schema=known, dialect=DIALECT)
        except Exception:  # a tree sqlglot cannot qualify: its columns stay unknown
            pass
    try:
        return annotate_types(tree, dialect=DIALECT)
    except Exception:  # a tree sqlglot cannot type: its casts and literals still tell
        return tree


def _nested(schema: dict[tuple[str, ...], dict[str, str]]) -> dict[str, Any]:
    """``schema`` keyed by the parts of each name, as sqlglot's nested schema (catalog,
    db, table): the names of as many parts as the longest one (sqlglot's schema nests
    every table as deep; the columns of the others stay unknown)."""
    depth = max(len(parts) for parts in schema)
    nested: dict[str, Any] = {}
    for parts, columns in schema.items():
        if len(parts) == depth:
            level = nested
            for part in parts[:-1]:
                level = level.setdefault(part, {})
            level[parts[-1]] = columns
    return nested


def _parent(node: exp.Expr) -> exp.Expr | None:
    """``node``'s parent past parentheses."""
    parent = node.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    return parent


def _number(param: exp.Parameter) -> int | None:
    value = param.this
    return int(value.this) if isinstance(value, exp.Literal) and value.is_int else None


def _is_param(node: exp.Expr | None) -> bool:
    return isinstance(node, exp.Parameter) or (isinstance(node, exp.Paren) and _is_param(node.this))


#: :func:`_inferred` of a parameter in a place that gives it a type in PostgreSQL, which is
#: not known here (a column of unknown type beside it): later places must not decide it
#: (PostgreSQL's first such place does).
_UNDECIDED: Any = object()


def _inferred(param: exp.Parameter, found: dict[int, int]) -> Any:
    """The OID ``param`` takes where it stands; None if the place gives it no type,
    :data:`_UNDECIDED` if the place gives it a type not known here."""
    parent = _parent(param)
    if isinstance(parent, exp.Cast) and not isinstance(parent, exp.TryCast):
        return (_cast_oid(parent.to) or _UNDECIDED) if _is_param(parent.this) else None
    if isinstance(parent, (*_COMPARISONS, *_ARITHMETIC)):
        sides = [parent.this, parent.expression]
        others = [s for s in sides if not (_is_param(s) and s.unnest() is param)]
        if len(others) != 1:
            return None
        oid = _oid_of(others[0], found)
        if oid is None:
            return _UNDECIDED
        if isinstance(parent, _COMPARISONS):
            return _TEXT if oid == _VARCHAR else oid
        if oid in _NUMBERS and not (isinstance(parent, exp.Mod) and oid in _FLOATS):
            return oid
        return _UNDECIDED
    if isinstance(parent, (exp.In, exp.Between)) and not _is_param(parent.this):
        oid = _oid_of(parent.this, found)
        return _UNDECIDED if oid is None else _TEXT if oid == _VARCHAR else oid
    return None


def _cast_oid(to: exp.DataType) -> int | None:
    """The OID of a cast's target type, None if serve binds none of it (an array, an
    interval with fields)."""
    if to.this == T.INTERVAL and to.expressions:
        return None
    return _OIDS.get(to.this)  # type: ignore[arg-type]


def _oid_of(node: exp.Expr, found: dict[int, int]) -> int | None:
    """The OID of a typed expression: a literal as PostgreSQL types it, a parameter as
    inferred so far, anything else as annotated; None if unknown (a string literal)."""
    node = node.unnest()
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        node = node.this
    if isinstance(node, exp.Literal):
        if not node.is_number:
            return None
        text = node.this
        if any(c in text for c in ".eE"):
            return 1700
        return 23 if abs(int(text)) < 2**31 else 20 if abs(int(text)) < 2**63 else 1700
    if isinstance(node, exp.Parameter):
        number = _number(node)
        return None if number is None else found.get(number)
    if isinstance(node, exp.Cast):
        return _cast_oid(node.to)
    if isinstance(node, (exp.Any, exp.All, exp.Subquery)):
        return None  # ANY(array), ALL(..), a subquery: sqlglot types the predicate, not it
    if node.type is None or node.type.this == T.UNKNOWN:
        return None
    if node.type.this == T.TIMESTAMP:  # Spark's TIMESTAMP (now(), a column): with time zone
        return 1184
    return _OIDS.get(node.type.this)  # type: ignore[arg-type]


def arrow_columns(schema: pa.Schema) -> dict[str, str | None]:
    """A shard's columns (its Arrow ``schema``), every one in its order, by name: sqlglot's
    name of its type, None for a type not known here (a list, struct, map, time64).

    The one list of a shard's columns that serve's typing reads: a column alias names the
    column at its position among all of them (``FROM t AS x(a, b)``), and a column of no
    known type is never typed as another (review k34)."""
    columns: dict[str, str | None] = {}
    for field in schema:
        name = _ARROW_TYPES.get(str(field.type))
        if name is None and pa.types.is_decimal(field.type):
            name = "DECIMAL"
        elif name is None and pa.types.is_timestamp(field.type):
            name = "TIMESTAMPTZ" if field.type.tz is not None else "TIMESTAMP_NTZ"
        columns[field.name] = name
    return columns


#: Arrow's scalar types as sqlglot's, for :func:`arrow_columns`.
_ARROW_TYPES = {
    "int64": "BIGINT",
    "int32": "INT",
    "int16": "SMALLINT",
    "int8": "TINYINT",
    "double": "DOUBLE",
    "float": "REAL",
    "bool": "BOOLEAN",
    "string": "TEXT",
    "large_string": "TEXT",
    "binary": "VARBINARY",
    "large_binary": "VARBINARY",
    "date32[day]": "DATE",
    "duration[us]": "INTERVAL",
}


__all__ = ["ColumnsOf", "arrow_columns", "parameter_types"]
