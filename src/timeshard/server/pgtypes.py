"""Values in PostgreSQL's text format, and the types they are described as, for
``timeshard serve``'s wire protocol (:mod:`timeshard.server.pgwire`).

A column is described by a type name (:func:`column_type`): a scalar Spark
type by its name, an array, map or struct by its JSON. A one-dimensional
array of a scalar type is sent as PostgreSQL's array of that type, a
struct, a map and any other array as ``json``, so drivers read lists and
objects, not Python's repr of them.
"""

from __future__ import annotations

import datetime
import decimal
import functools
import json
import math
import re
from typing import Any

#: Spark / Arrow type names to PostgreSQL type OIDs (text format); others are text.
#: Spark's TIMESTAMP is an instant (timestamptz, sent in UTC); TIMESTAMP_NTZ is a
#: wall-clock time without a zone (timestamp, sent as it is).
TYPE_OIDS = {
    "long": 20,
    "integer": 23,
    "short": 21,
    "byte": 21,
    "double": 701,
    "float": 700,
    "boolean": 16,
    "binary": 17,
    "string": 25,
    "decimal": 1700,
    "date": 1082,
    "timestamp": 1184,
    "timestamp_ntz": 1114,
    "daytimeinterval": 1186,
    # its values whole months (PySpark collects none of it): see the engine's query rows
    "yearmonthinterval": 1186,
    # Spark's calendar interval: its values Spark's text of it, for the same reason
    "interval": 1186,
    # Spark has none of these: a column made of a parameter declared so is described so
    # (:func:`declared_columns`), its values strings
    "json": 114,
    "jsonb": 3802,
    "varchar": 1043,
}

#: The OIDs of PostgreSQL's one-dimensional arrays of the types of :data:`TYPE_OIDS`.
ARRAY_OIDS = {
    "long": 1016,
    "integer": 1007,
    "short": 1005,
    "byte": 1005,
    "double": 1022,
    "float": 1021,
    "boolean": 1000,
    "binary": 1001,
    "string": 1009,
    "decimal": 1231,
    "date": 1182,
    "timestamp": 1185,
    "timestamp_ntz": 1115,
    "daytimeinterval": 1187,
    "yearmonthinterval": 1187,
    "interval": 1187,
}

#: PostgreSQL's ``json``: a struct, a map, and an array of anything but the types above.
JSON_OID = 114


def column_type(data_type: Any) -> str:
    """How a Spark column of ``data_type`` is described to :func:`encode_value`: a scalar
    type by its name (``long``), an array, map or struct by its JSON (the types inside
    it decide how its values are written)."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(data_type, ArrayType | MapType | StructType):
        return str(data_type.json())
    return str(data_type.typeName())


@functools.lru_cache(maxsize=256)
def _nested(type_name: str) -> Any:
    """The Spark array, map or struct type :func:`column_type` described as ``type_name``."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    described = json.loads(type_name)
    kinds: dict[str, Any] = {"array": ArrayType, "map": MapType, "struct": StructType}
    return kinds[described["type"]].fromJson(described)


def _array_of(type_name: str) -> str | None:
    """The element type's name if ``type_name`` is an array PostgreSQL has an array type
    of (one dimension, elements of a scalar type of :data:`ARRAY_OIDS`), else None."""
    from pyspark.sql.types import ArrayType

    if not type_name.startswith("{"):
        return None
    data_type = _nested(type_name)
    if not isinstance(data_type, ArrayType):
        return None
    element = str(data_type.elementType.typeName())
    return element if element in ARRAY_OIDS else None


#: The declared types of a parameter that a result column of it keeps: Spark has no type
#: of them (their values are strings), so what Spark describes would be text.
_KEPT_OIDS = {114: "json", 3802: "jsonb", 1043: "varchar"}


def declared_columns(sql: str, oids: list[int]) -> dict[int, str]:
    """The result columns of the query ``sql`` that are one of its parameters itself, of a
    type Spark has not (json, jsonb, varchar): their index -> that type's name. A column
    is one if it is ``$n`` declared (``oids``) so, or a cast of ``$n`` to one of them
    (``$1::json``), aliased or not, as PostgreSQL describes it; any other expression,
    and a query that is not one SELECT, has none (its type is not guessed).

    A star (``*``, ``t.*``) stands for as many columns as its relation has, unknown here:
    a column after the last star is numbered from the end (-1 is the last), one before it
    not at all.

    Parses ``sql`` (:func:`parameter_columns`) unless it can have no such column: a
    prepared statement keeps that parse and asks :func:`kept_columns` at each Bind."""
    return kept_columns(parameter_columns(sql, oids), oids)


def kept_columns(found: tuple[tuple[int, str | int], ...], oids: list[int]) -> dict[int, str]:
    """:func:`declared_columns` of a query whose :func:`parameter_columns` are ``found``,
    its parameters declared ``oids``: no SQL is parsed."""
    out = {}
    for i, kept in found:
        if isinstance(kept, int):
            name = _KEPT_OIDS.get(oids[kept - 1]) if 1 <= kept <= len(oids) else None
        else:
            name = kept
        if name is not None:
            out[i] = name
    return out


def parameter_columns(sql: str, oids: list[int]) -> tuple[tuple[int, str | int], ...]:
    """The columns of the query ``sql`` that may be a parameter of a kept type: their
    index (see :func:`declared_columns`) and the type name a cast gives them (``$1::json``)
    or the parameter's number (a bare ``$n``). ``sql`` is parsed only if a parameter is
    declared (``oids``) of a kept type or its text may cast to one: nothing is memoized
    here (a prepared statement keeps its own, and lets go of it when closed)."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    from timeshard.server.dialect import DIALECT

    if not any(o in _KEPT_OIDS for o in oids) and not _CASTS_KEPT.search(sql):
        return ()
    try:
        tree = sqlglot.parse_one(sql, read=DIALECT)
    except (SqlglotError, RecursionError):  # no query, or nested past the stack
        return ()
    if not isinstance(tree, exp.Select):
        return ()
    kept = {
        exp.DataType.Type.JSON: "json",
        exp.DataType.Type.JSONB: "jsonb",
        exp.DataType.Type.VARCHAR: "varchar",
    }
    stars = [i for i, column in enumerate(tree.expressions) if _is_star(column)]
    after = stars[-1] + 1 if stars else 0
    out: list[tuple[int, str | int]] = []
    for i, column in enumerate(tree.expressions[after:], start=after):
        value = column.this if isinstance(column, exp.Alias) else column
        what: str | int | None = None
        if isinstance(value, exp.Cast) and isinstance(value.this, exp.Parameter):
            what = kept.get(value.to.this)
        elif isinstance(value, exp.Parameter) and value.this.is_int:
            what = int(value.this.this)
        if what is not None:
            out.append((i - len(tree.expressions) if stars else i, what))
    return tuple(out)


def _is_star(column: Any) -> bool:
    """Whether the select expression ``column`` is ``*`` or ``t.*``."""
    from sqlglot import exp

    return isinstance(column, exp.Star) or (
        isinstance(column, exp.Column) and isinstance(column.this, exp.Star)
    )


_CASTS_KEPT = re.compile(r"json|char", re.IGNORECASE)


def with_declared(
    columns: list[tuple[str, str]], declared: dict[int, str]
) -> list[tuple[str, str]]:
    """``columns`` with the type :func:`declared_columns` found of each of them that Spark
    answers as a string; a negative index counts from the end."""
    n = len(columns)
    return [
        (name, declared.get(i, declared.get(i - n, t)) if t == "string" else t)
        for i, (name, t) in enumerate(columns)
    ]


def type_oid(type_name: str) -> int:
    """The OID of the PostgreSQL type a column described as ``type_name`` is sent as."""
    if type_name.startswith("{"):
        element = _array_of(type_name)
        return JSON_OID if element is None else ARRAY_OIDS[element]
    return TYPE_OIDS.get(type_name, 25)


def encode_value(value: Any, type_name: str = "") -> bytes | None:
    """A value in PostgreSQL's text format, of a column of Spark type ``type_name``.

    A TIMESTAMP is an instant: PySpark's ``collect`` gives it as a naive
    datetime in the Python process's local time zone, which ``astimezone``
    reads as local time; it is sent in UTC with ``+00``, as timestamptz. A
    TIMESTAMP_NTZ's naive datetime is its value, sent unconverted. The two
    cannot be told apart by the value: the column's type says which.

    An array of a scalar type is a PostgreSQL array (``{1,2,NULL}``); a
    struct, a map and any other array are JSON (:func:`column_type`).
    """
    if value is None:
        return None
    if type_name.startswith("{"):
        element = _array_of(type_name)
        if element is None:
            return _json(value, _nested(type_name)).encode("utf-8")
        return _pg_array(value, element).encode("utf-8")
    if type_name == "timestamp" and isinstance(value, datetime.datetime):
        utc = value.astimezone(datetime.UTC).replace(tzinfo=None)
        return f"{utc}+00".encode("ascii")
    if isinstance(value, datetime.timedelta):  # a day-time interval, as PostgreSQL's text
        return _interval(value).encode("ascii")
    if type_name == "yearmonthinterval" and isinstance(value, int):  # its whole months
        from timeshard.server.intervals import interval_text

        return interval_text(value, 0, 0).encode("ascii")
    if type_name == "interval" and isinstance(value, str):  # Spark's text of a calendar one
        from timeshard.server.intervals import interval_fields, interval_text

        return interval_text(*interval_fields(value)).encode("ascii")
    if isinstance(value, bool):
        return b"t" if value else b"f"
    if isinstance(value, bytes | bytearray):
        return b"\\x" + bytes(value).hex().encode()
    if isinstance(value, float) and not math.isfinite(value):  # as PostgreSQL writes them
        return b"NaN" if math.isnan(value) else b"Infinity" if value > 0 else b"-Infinity"
    if isinstance(value, decimal.Decimal):  # numeric's text has no exponent: 100, not 1E+2
        return format(value, "f").encode("ascii")
    return str(value).encode("utf-8")


def _interval(value: datetime.timedelta) -> str:
    """A day-time interval as PostgreSQL writes an interval (``1 day 02:03:04``,
    ``-00:00:01.5``): its days and time, both of its sign (a day is 24 hours)."""
    from timeshard.server.intervals import interval_text

    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    days, rest = divmod(abs(micros), 86_400_000_000)
    sign = -1 if micros < 0 else 1
    return interval_text(0, sign * days, sign * rest)


def _pg_array(values: Any, element: str) -> str:
    """``values`` in PostgreSQL's array text format, elements of type ``element``: an
    element is double-quoted (with ``\\`` before ``"`` and ``\\``) when it is empty, is
    ``NULL`` spelled out, or holds a delimiter, a brace, a quote, a backslash or a space."""
    texts = []
    for value in values:
        encoded = encode_value(value, element)
        if encoded is None:
            texts.append("NULL")
            continue
        text = encoded.decode("utf-8")
        if (
            not text
            or text.upper() == "NULL"
            or any(c in _ARRAY_SPECIAL or c.isspace() for c in text)
        ):
            text = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
        texts.append(text)
    return "{" + ",".join(texts) + "}"


_ARRAY_SPECIAL = frozenset('{},"\\')


def _json(value: Any, data_type: Any) -> str:
    """``value``, of Spark type ``data_type``, as JSON text, as PostgreSQL's ``to_json``
    writes it: a struct an object of its fields in order, a map an object (its keys as
    text), numbers exact (a decimal's digits), a float that is not finite, a binary
    (``\\x`` and hex), a date and a timestamp (ISO 8601; an instant in UTC) strings.

    A struct's value is a Row (``collect``) or a dict (Arrow's ``as_py``); a map's a
    dict or a list of pairs.
    """
    from pyspark.sql.types import (
        ArrayType,
        MapType,
        StructType,
        TimestampType,
        YearMonthIntervalType,
    )

    if value is None:
        return "null"
    if isinstance(data_type, StructType):
        fields = data_type.fields
        values = [value[f.name] for f in fields] if isinstance(value, dict) else list(value)
        pairs = (
            f"{json.dumps(f.name)}:{_json(v, f.dataType)}"
            for f, v in zip(fields, values, strict=True)
        )
        return "{" + ",".join(pairs) + "}"
    if isinstance(data_type, MapType):
        items = value.items() if isinstance(value, dict) else value
        pairs = (
            f"{json.dumps(_key_text(k, data_type.keyType))}:{_json(v, data_type.valueType)}"
            for k, v in items
        )
        return "{" + ",".join(pairs) + "}"
    if isinstance(data_type, ArrayType):
        return "[" + ",".join(_json(v, data_type.elementType) for v in value) + "]"
    if isinstance(data_type, YearMonthIntervalType):  # its whole months, as the text
        # PostgreSQL's to_json writes of an interval (a day-time one's is too, below)
        encoded = encode_value(value, "yearmonthinterval")
        assert encoded is not None
        return json.dumps(encoded.decode("ascii"))
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return repr(value)
    if isinstance(value, decimal.Decimal) and value.is_finite():
        return format(value, "f")
    if isinstance(value, datetime.datetime):
        if isinstance(data_type, TimestampType):
            return json.dumps(value.astimezone(datetime.UTC).isoformat())
        return json.dumps(value.isoformat())
    if isinstance(value, datetime.date):
        return json.dumps(value.isoformat())
    encoded = encode_value(value, str(data_type.typeName()))
    assert encoded is not None
    return json.dumps(encoded.decode("utf-8"))


def _key_text(key: Any, data_type: Any) -> str:
    """A map key as the text of a JSON object's key."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(data_type, ArrayType | MapType | StructType):
        return _json(key, data_type)
    encoded = encode_value(key, str(data_type.typeName()))
    return "null" if encoded is None else encoded.decode("utf-8")


__all__ = [
    "ARRAY_OIDS",
    "JSON_OID",
    "TYPE_OIDS",
    "column_type",
    "declared_columns",
    "encode_value",
    "kept_columns",
    "parameter_columns",
    "type_oid",
    "with_declared",
]
