"""PostgreSQL's logical replication messages (pgoutput, protocol 1) and text values, decoded.

Pure functions, run by Spark tasks (:mod:`timeshard.storage.postgres_source`):

* :func:`parse_message` turns one pgoutput message (the payload of an
  XLogData) into a :class:`Begin`, :class:`Commit`, :class:`Relation`,
  :class:`Change` (insert, update, delete) or :class:`Truncate`; other
  messages (origin, type, logical messages) are ``None``.
* :class:`Column` is a column as the catalog declares it (name, type oid,
  type modifier), with its Arrow type (:func:`arrow_type`) and the decoder of
  its text form (:func:`decode_text`). The snapshot reads columns with
  ``::text`` and the stream sends them in text form, under the same session
  settings (:data:`SESSION_SETTINGS`), so one decoder serves both.

Values decode exactly: integers and floats (``NaN``, ``Infinity``), numeric
with a declared precision <= 38 as a decimal of that precision and scale
(any other numeric as its exact text), booleans, dates, ``timestamp`` as
microseconds, ``timestamptz`` as UTC microseconds, ``time``, ``bytea``
(hex), ``json``/``jsonb``/``uuid``/text-like types as text, and
one-dimensional arrays of those as lists (elements may be NULL). A value that
cannot be represented (``infinity`` timestamps, a BC date, a ``NaN`` numeric
for a decimal column, a multi-dimensional array) raises ValueError: the
caller makes the row an err row.
"""

from __future__ import annotations

import datetime as dt
import decimal
import struct
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

#: Session settings of every connection whose text output is decoded.
SESSION_SETTINGS = {
    "TimeZone": "UTC",
    "DateStyle": "ISO, MDY",
    "IntervalStyle": "postgres",
    "extra_float_digits": "3",
    "bytea_output": "hex",
}

BOOL, BYTEA, INT8, INT2, INT4, TEXT, OID, JSON = 16, 17, 20, 21, 23, 25, 26, 114
FLOAT4, FLOAT8, BPCHAR, VARCHAR, DATE, TIME = 700, 701, 1042, 1043, 1082, 1083
TIMESTAMP, TIMESTAMPTZ, NUMERIC, UUID, JSONB, NAME = 1114, 1184, 1700, 2950, 3802, 19

#: Array type oid -> element type oid.
ARRAYS = {
    1000: BOOL,
    1001: BYTEA,
    1005: INT2,
    1007: INT4,
    1016: INT8,
    1009: TEXT,
    1015: VARCHAR,
    1014: BPCHAR,
    1021: FLOAT4,
    1022: FLOAT8,
    1231: NUMERIC,
    1182: DATE,
    1183: TIME,
    1115: TIMESTAMP,
    1185: TIMESTAMPTZ,
    2951: UUID,
    199: JSON,
    3807: JSONB,
    1003: NAME,
    1028: OID,
}

_SCALAR_TYPES: dict[int, pa.DataType] = {
    BOOL: pa.bool_(),
    BYTEA: pa.binary(),
    INT2: pa.int16(),
    INT4: pa.int32(),
    INT8: pa.int64(),
    OID: pa.int64(),
    FLOAT4: pa.float32(),
    FLOAT8: pa.float64(),
    DATE: pa.date32(),
    TIME: pa.time64("us"),
    TIMESTAMP: pa.timestamp("us"),
    TIMESTAMPTZ: pa.timestamp("us", tz="UTC"),
}


@dataclass(frozen=True)
class Column:
    """A column as the catalog declares it; ``attnum`` is its number in the table, which
    a column dropped and added again under its name does not keep (0: not known, as in a
    Relation message)."""

    name: str
    type_oid: int
    typmod: int
    attnum: int = 0

    @property
    def arrow(self) -> pa.DataType:
        return arrow_type(self.type_oid, self.typmod)


def numeric_precision(typmod: int) -> tuple[int, int] | None:
    """``(precision, scale)`` of ``numeric(p, s)``, or None when unconstrained."""
    if typmod < 4:
        return None
    value = typmod - 4
    return (value >> 16) & 0xFFFF, value & 0xFFFF


def arrow_type(type_oid: int, typmod: int = -1) -> pa.DataType:
    """The Arrow type a column of this PostgreSQL type is stored as."""
    if type_oid in ARRAYS:
        return pa.list_(arrow_type(ARRAYS[type_oid], typmod))
    if type_oid == NUMERIC:
        ps = numeric_precision(typmod)
        if ps is not None and 0 < ps[0] <= 38 and ps[1] <= ps[0]:
            return pa.decimal128(ps[0], ps[1])
        return pa.string()
    return _SCALAR_TYPES.get(type_oid, pa.string())


def decode_text(text: str, type_oid: int, typmod: int = -1) -> Any:
    """The Python value of a column's text form (the module doc says which)."""
    if type_oid in ARRAYS:
        return [
            None if item is None else decode_text(item, ARRAYS[type_oid], typmod)
            for item in parse_array(text)
        ]
    if type_oid in (INT2, INT4, INT8, OID):
        return int(text)
    if type_oid in (FLOAT4, FLOAT8):
        return float(text)  # NaN, Infinity and -Infinity parse as Python spells them
    if type_oid == BOOL:
        if text not in ("t", "f"):
            raise ValueError(f"invalid boolean {text!r}")
        return text == "t"
    if type_oid == NUMERIC:
        if not pa.types.is_decimal(arrow_type(type_oid, typmod)):
            return text
        value = decimal.Decimal(text)
        if not value.is_finite():
            raise ValueError(f"numeric {text!r} does not fit a decimal column")
        return value
    if type_oid == BYTEA:
        if not text.startswith("\\x"):
            raise ValueError("bytea not in hex form")
        return bytes.fromhex(text[2:])
    if type_oid == DATE:
        return dt.date.fromisoformat(_finite(text))
    if type_oid == TIME:
        return dt.time.fromisoformat(text)
    if type_oid == TIMESTAMP:
        return dt.datetime.fromisoformat(_finite(text))
    if type_oid == TIMESTAMPTZ:
        stamp = dt.datetime.fromisoformat(_finite(text))
        if stamp.tzinfo is None:
            raise ValueError(f"timestamptz {text!r} has no offset")
        return stamp.astimezone(dt.UTC)
    return text


def _finite(text: str) -> str:
    if text in ("infinity", "-infinity") or text.endswith(" BC"):
        raise ValueError(f"{text!r} is outside the range Arrow timestamps hold")
    return text


def parse_array(text: str) -> list[str | None]:
    """The elements of a one-dimensional PostgreSQL array literal (NULL as None)."""
    if text.startswith("["):  # explicit bounds, e.g. [0:1]={1,2}
        text = text.split("=", 1)[1]
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError(f"not an array literal: {text[:40]!r}")
    body = text[1:-1]
    items: list[str | None] = []
    if not body:
        return items
    i, n = 0, len(body)
    while True:
        if body[i] == "{":
            raise ValueError("multi-dimensional arrays are not supported")
        if body[i] == '"':
            j, chars = i + 1, []
            while body[j] != '"':
                if body[j] == "\\":
                    j += 1
                chars.append(body[j])
                j += 1
            items.append("".join(chars))
            i = j + 1
        else:
            j = body.find(",", i)
            j = n if j < 0 else j
            raw = body[i:j].strip()
            items.append(None if raw == "NULL" else raw)
            i = j
        if i >= n:
            return items
        if body[i] != ",":
            raise ValueError(f"malformed array literal near {body[i : i + 20]!r}")
        i += 1


# -- messages ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Begin:
    final_lsn: int  # the LSN of the transaction's commit record
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: int
    end_lsn: int


@dataclass(frozen=True)
class Relation:
    oid: int
    namespace: str
    name: str
    replica_identity: str
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class Change:
    """An insert (``old`` None), update or delete (``new`` None) of one row, as text values.

    A value is a string, None (NULL) or :data:`UNCHANGED` (a TOASTed value the
    update did not touch: the old row has it). ``key_only`` says that ``old``
    is the replica identity's key columns only (a ``K`` tuple: the other
    values are NULL), not the whole old row (an ``O`` tuple).
    """

    kind: str  # "I", "U" or "D"
    relation: int
    old: tuple[Any, ...] | None
    new: tuple[Any, ...] | None
    key_only: bool = False


@dataclass(frozen=True)
class Truncate:
    relations: tuple[int, ...]


UNCHANGED = object()


class _Reader:
    def __init__(self, data: bytes, encoding: str) -> None:
        self.data, self.pos, self.encoding = data, 0, encoding

    def take(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        end = self.data.index(b"\0", self.pos)
        value = self.data[self.pos : end].decode(self.encoding)
        self.pos = end + 1
        return value

    def tuple_data(self) -> tuple[Any, ...]:
        values: list[Any] = []
        for _ in range(self.take("!h")):
            kind = self.take("!c")
            if kind == b"n":
                values.append(None)
            elif kind == b"u":
                values.append(UNCHANGED)
            elif kind == b"t":
                length = self.take("!i")
                values.append(self.data[self.pos : self.pos + length].decode(self.encoding))
                self.pos += length
            else:
                raise ValueError(f"unexpected tuple value kind {kind!r}")
        return tuple(values)


def parse_message(
    data: bytes, encoding: str = "utf-8"
) -> Begin | Commit | Relation | Change | Truncate | None:
    """One pgoutput message (protocol version 1), or None for one timeshard ignores.

    Names and text values are in the database's encoding (pgoutput does not convert them
    to the client's): ``encoding`` is its Python codec.
    """
    r = _Reader(data, encoding)
    tag = r.take("!c")
    if tag == b"B":
        final_lsn = r.take("!Q")
        r.take("!q")  # commit timestamp
        return Begin(final_lsn, r.take("!I"))
    if tag == b"C":
        r.take("!B")  # flags
        return Commit(r.take("!Q"), r.take("!Q"))
    if tag == b"R":
        oid = r.take("!I")
        namespace, name = r.string(), r.string()
        identity = r.take("!c").decode()
        columns = []
        for _ in range(r.take("!h")):
            r.take("!B")  # flags (part of the key)
            col_name = r.string()
            columns.append(Column(col_name, r.take("!I"), r.take("!i")))
        return Relation(oid, namespace, name, identity, tuple(columns))
    if tag == b"I":
        relation = r.take("!I")
        if r.take("!c") != b"N":
            raise ValueError("insert without a new tuple")
        return Change("I", relation, None, r.tuple_data())
    if tag == b"U":
        relation = r.take("!I")
        kind, old, key_only = r.take("!c"), None, False
        if kind in (b"K", b"O"):
            old, key_only = r.tuple_data(), kind == b"K"
            kind = r.take("!c")
        if kind != b"N":
            raise ValueError("update without a new tuple")
        return Change("U", relation, old, r.tuple_data(), key_only)
    if tag == b"D":
        relation = r.take("!I")
        kind = r.take("!c")
        if kind not in (b"K", b"O"):
            raise ValueError("delete without an old tuple")
        return Change("D", relation, r.tuple_data(), None, kind == b"K")
    if tag == b"T":
        count = r.take("!I")
        r.take("!B")  # options
        return Truncate(tuple(r.take("!I") for _ in range(count)))
    return None


def format_lsn(lsn: int) -> str:
    """``X/Y``, as PostgreSQL writes an LSN."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


__all__ = [
    "ARRAYS",
    "SESSION_SETTINGS",
    "UNCHANGED",
    "Begin",
    "Change",
    "Column",
    "Commit",
    "Relation",
    "Truncate",
    "arrow_type",
    "decode_text",
    "format_lsn",
    "parse_array",
    "parse_lsn",
    "parse_message",
]
