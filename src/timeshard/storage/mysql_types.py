"""MySQL/MariaDB values: columns, their Arrow types, one text form, GTID positions.

Pure functions, no server and no Spark: the MySQL source
(:mod:`timeshard.storage.mysql_source`) reads the snapshot as the server's
text and the binlog as the values ``mysql-replication`` decodes; both are
turned into one *text form* per value (:func:`snapshot_text`,
:func:`binlog_text`) and every text is decoded once, by
:func:`decode_text`, so that a row reads the same whichever path it came by.

Types (``information_schema.COLUMNS.DATA_TYPE``) and how they are stored:

=====================================  ==========================================
tinyint, smallint, mediumint, int      int32 (``int unsigned``: int64)
bigint                                 int64 (``bigint unsigned``: decimal(20, 0))
decimal(p, s)                          decimal128(p, s) exactly (p > 38: its text)
float, double                          float32, float64
char, varchar, text types, json        string (MariaDB's JSON is text)
enum, set                              string (a set as ``a,c``, in declared order)
binary, varbinary, blob types          binary
date, datetime(n), timestamp(n)        date32, timestamp(us), timestamp(us, UTC)
time(n)                                string, as the server prints it
year                                   int32
=====================================  ==========================================

Invariants:

1. ``decode_text(snapshot_text(v)) == decode_text(binlog_text(v))`` for a
   value ``v`` read both ways.
2. A value Arrow cannot hold (a zero date ``0000-00-00``, a date with month
   0) decodes to :class:`Undecodable` whose message names the column and
   type but not the value, so the same row read either way is the same
   err row.

A GTID position (``@@gtid_binlog_pos``, ``BINLOG_GTID_POS()``) is the last
GTID per replication domain, ``domain-server-seq``; as a source frontier it
is ``{domain: seq + 1}`` (:func:`gtid_frontier`).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage

#: The text form of a value the binlog decoder could not represent (a zero date).
INVALID = "\x00invalid"

_INTS = {"tinyint": 1, "smallint": 2, "mediumint": 9, "int": 3, "bigint": 8}
_STRINGS = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "json"}
_BINARIES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
#: The binlog column types (``FIELD_TYPE``) a declared type may appear as.
_BINLOG_TYPES: dict[str, frozenset[int]] = {
    **{t: frozenset({code}) for t, code in _INTS.items()},
    "decimal": frozenset({246}),
    "float": frozenset({4}),
    "double": frozenset({5}),
    **{t: frozenset({15, 253, 254}) for t in ("char", "varchar", "binary", "varbinary")},
    **{
        t: frozenset({252})
        for t in (_STRINGS | _BINARIES) - {"char", "varchar", "binary", "varbinary"}
    },
    "enum": frozenset({247, 254}),
    "set": frozenset({248, 254}),
    "date": frozenset({10, 14}),
    "datetime": frozenset({12, 18}),
    "timestamp": frozenset({7, 17}),
    "time": frozenset({11, 19}),
    "year": frozenset({13}),
}


class Undecodable(ValueError):
    """A value that the stored type cannot hold (the row becomes an err row)."""


@dataclass(frozen=True)
class Column:
    """One column of a table, as ``information_schema.COLUMNS`` describes it."""

    name: str
    data_type: str
    unsigned: bool = False
    precision: int | None = None
    scale: int | None = None
    fsp: int = 0
    #: ``binary(n)``: n, the bytes every value has (the binlog drops trailing zero bytes).
    length: int | None = None
    #: The character set of a text column (None: not text). Not compared: a column whose
    #: charset changes holds the same text (the binlog carries each value's charset).
    charset: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.data_type not in _BINLOG_TYPES:
            raise InvalidUsage(
                f"column {self.name!r} has type {self.data_type!r}, which the MySQL source "
                f"cannot read (supported: {sorted(_BINLOG_TYPES)})"
            )

    @property
    def is_binary(self) -> bool:
        return self.data_type in _BINARIES

    def arrow_type(self) -> pa.DataType:
        t = self.data_type
        if t in _INTS:
            if t == "bigint":
                return pa.decimal128(20, 0) if self.unsigned else pa.int64()
            return pa.int64() if t == "int" and self.unsigned else pa.int32()
        if t == "decimal":
            p, s = self.precision or 10, self.scale or 0
            return pa.decimal128(p, s) if p <= 38 else pa.string()
        if t == "float":
            return pa.float32()
        if t == "double":
            return pa.float64()
        if t in _BINARIES:
            return pa.binary()
        if t == "date":
            return pa.date32()
        if t == "datetime":
            return pa.timestamp("us")
        if t == "timestamp":
            return pa.timestamp("us", tz="UTC")
        if t == "year":
            return pa.int32()
        return pa.string()  # strings, json, enum, set, time


def column_from_schema(
    name: str,
    data_type: str,
    column_type: str,
    precision: int | None,
    scale: int | None,
    fsp: int | None,
    charset: str | None = None,
) -> Column:
    """A :class:`Column` from one row of ``information_schema.COLUMNS``."""
    fixed = re.fullmatch(r"binary\((\d+)\)", column_type.strip().lower())
    return Column(
        name,
        data_type.lower(),
        unsigned="unsigned" in column_type.lower(),
        precision=None if precision is None else int(precision),
        scale=None if scale is None else int(scale),
        fsp=int(fsp or 0),
        length=int(fixed.group(1)) if fixed else None,
        charset=None if charset is None else charset.lower(),
    )


def incompatibility(declared: Sequence[Column], binlog: Sequence[Any]) -> str | None:
    """Why a binlog table map's columns cannot be read as ``declared`` (None: they can).

    ``binlog`` are ``mysql-replication`` columns (``name``, ``type``,
    ``unsigned``, ``precision``, ``decimals``, ``fsp``, ``max_length``); new columns are
    fine after the declared ones, which must come first and in their order (a column
    added elsewhere, or columns reordered, is an ALTER that is not known to keep values).
    A changed number of fractional digits, or length of a ``binary(n)``, is not: its
    values would be cut or padded to the declared one.
    """
    by_name = {c.name: c for c in binlog}
    for column in declared:
        now = by_name.get(column.name)
        if now is None:
            return f"column {column.name!r} was dropped"
        if now.type not in _BINLOG_TYPES[column.data_type]:
            return f"column {column.name!r} changed type"
        if column.data_type in _INTS and bool(getattr(now, "unsigned", False)) != column.unsigned:
            return f"column {column.name!r} changed signedness"
        if column.data_type == "decimal" and (
            getattr(now, "precision", None),
            getattr(now, "decimals", None),
        ) != (column.precision, column.scale):
            return f"column {column.name!r} changed precision or scale"
        fsp = getattr(now, "fsp", None)  # TIME2, DATETIME2 and TIMESTAMP2 carry it
        if column.data_type in ("time", "datetime", "timestamp") and fsp not in (None, column.fsp):
            return f"column {column.name!r} changed its fractional digits"
        length = getattr(now, "max_length", None)  # binary(n) is padded to n bytes
        if column.length is not None and length not in (None, column.length):
            return f"column {column.name!r} changed its length"
    names = [c.name for c in declared]
    if [c.name for c in binlog][: len(names)] != names:
        return f"its columns are no longer in the declared order {names}"
    return None


# -- character sets ------------------------------------------------------------------------

#: Python's codec of each MySQL character set it decodes exactly as MariaDB does (checked
#: byte by byte for the single-byte ones: where they differ, MariaDB's conversion has ``?``
#: and Python's codec nothing, so such a byte is :class:`Undecodable`, never another text).
_CODECS = {
    **dict.fromkeys(("utf8mb4", "utf8mb3", "utf8"), "utf-8"),
    "ascii": "ascii",
    "ucs2": "utf-16-be",  # without surrogates (checked below)
    "utf16": "utf-16-be",
    "utf16le": "utf-16-le",
    "utf32": "utf-32-be",
    **{cp: cp for cp in ("cp1250", "cp1251", "cp1257", "cp850", "cp852")},
    **{"latin2": "iso8859_2", "latin5": "iso8859_9", "latin7": "iso8859_13"},
    **{"koi8r": "koi8_r", "macroman": "mac_roman", "macce": "mac_latin2", "tis620": "tis_620"},
}
#: MySQL's latin1 is cp1252 with the five bytes cp1252 leaves undefined mapped to the C1
#: controls of the same number (Python's cp1252, which pymysql uses, fails on them).
_LATIN1 = {
    b: bytes([b]).decode("cp1252")
    for b in range(0x80, 0xA0)
    if b not in (0x81, 0x8D, 0x8F, 0x90, 0x9D)
}
#: The character sets of the columns the MySQL source reads (others are refused).
CHARSETS = frozenset({*_CODECS, "latin1", "binary"})


def charset_text(raw: bytes, charset: str | None, column: Column) -> str:
    """The text of a text column's bytes in ``charset`` (None: utf8mb4), as MySQL reads them.

    Raises :class:`Undecodable`, naming the column and charset, for bytes that are no text in
    that charset and for a charset not in :data:`CHARSETS`.
    """
    name = (charset or "utf8mb4").lower()
    try:
        if name == "latin1":
            return raw.decode("latin-1").translate(_LATIN1)
        text = raw.decode(_CODECS[name])
        if name == "ucs2" and any(ord(ch) > 0xFFFF for ch in text):
            raise ValueError("a surrogate pair in ucs2")
        return text
    except KeyError:
        raise Undecodable(
            f"column {column.name!r} ({column.data_type}) has character set {name!r}, which "
            f"the MySQL source cannot decode (it decodes {sorted(CHARSETS)})"
        ) from None
    except ValueError as e:
        raise Undecodable(
            f"column {column.name!r} ({column.data_type}) holds bytes that are no text in "
            f"character set {name!r}"
        ) from e


# -- one text form -------------------------------------------------------------------------


def snapshot_text(value: str | bytes | None, column: Column) -> str | None:
    """The text form of a value the server printed (a snapshot read without conversions)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.hex() if column.is_binary else value.decode("utf-8")
    return value


def time_text(value: dt.timedelta, fsp: int) -> str:
    """A ``time`` value as the server prints it: ``[-]HH:MM:SS[.fraction]``."""
    micros = value // dt.timedelta(microseconds=1)
    sign = "-" if micros < 0 else ""
    seconds, fraction = divmod(abs(micros), 1_000_000)
    minutes, second = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    text = f"{sign}{hours:02d}:{minute:02d}:{second:02d}"
    if fsp > 0:
        text += "." + f"{fraction:06d}"[:fsp]
    return text


#: The bytes of a TIME2 value of each fsp: 3 of integer part, then the fraction's.
_TIME2_BYTES = (3, 4, 4, 5, 5, 6, 6)


def time2_size(fsp: int) -> int:
    """How many bytes a TIME2 (``time(fsp)``) value takes in a row event."""
    return _TIME2_BYTES[fsp]


def time2_value(raw: bytes, fsp: int) -> dt.timedelta:
    """A TIME2 value from its bytes in a row event, as MySQL's ``my_time_packed_from_binary``
    and ``TIME_from_longlong_time_packed`` read it.

    The packed value is ``(hour << 36 | minute << 30 | second << 24) + microseconds``,
    negated for a negative time, stored as one two's-complement number (biased by
    ``0x800000...``): a negative time's fraction borrows from its integer part, which
    ``mysql-replication`` misses (``-01:02:03.45`` read as ``-01:02:03.55``).

    >>> time2_value(bytes.fromhex("7fef7cd3"), 2)  # -01:02:03.45
    datetime.timedelta(days=-1, seconds=82676, microseconds=550000)
    """
    assert len(raw) == time2_size(fsp), (raw, fsp)
    head = int.from_bytes(raw[:3], "big") - 0x800000
    if fsp in (1, 2, 3, 4):
        width = len(raw) - 3
        fraction = int.from_bytes(raw[3:], "big")
        if head < 0 and fraction:  # the fraction is signed: it borrows from the integer part
            head, fraction = head + 1, fraction - (1 << (8 * width))
        packed = (head << 24) + fraction * (10_000 if width == 1 else 100)
    elif fsp:
        packed = int.from_bytes(raw, "big") - 0x800000000000
    else:
        packed = head << 24
    hms, micros = divmod(abs(packed), 1 << 24)
    hour, minute, second = (hms >> 12) & 0x3FF, (hms >> 6) & 0x3F, hms & 0x3F
    value = dt.timedelta(hours=hour, minutes=minute, seconds=second, microseconds=micros)
    return -value if packed < 0 else value


#: The ``none_source`` of a column the row event does not carry (its columns bitmap, or a
#: partial JSON update): the session logged with ``binlog_row_image`` other than FULL.
_NOT_IN_IMAGE = frozenset({"cols bitmap", "same with before values"})


def binlog_text(
    value: Any,
    column: Column,
    none_source: str | None,
    set_values: Iterable[str] | None,
    charset: str | None = None,
) -> str | None:
    """The text form of a value ``mysql-replication`` decoded from a row event.

    ``none_source`` is why the decoder gave None (``"null"``, ``"empty set"``,
    a value out of range, or a column not in the row image: :class:`Undecodable`,
    so that the table's changes in the transaction are one err row, never an
    update whose before and after images cancel as the same err row);
    ``set_values`` the declared members of a set;
    ``charset`` the table map's character set of a text column, whose value is
    its bytes (:func:`charset_text`: raises :class:`Undecodable`).
    """
    if none_source in _NOT_IN_IMAGE:
        raise Undecodable(
            f"column {column.name!r} ({column.data_type}) is not in the row image: the row "
            "was logged with binlog_row_image other than FULL (set by the session?), so "
            "its old or new value is not known"
        )
    if value is None:
        if none_source == "empty set":
            return ""
        return None if none_source in (None, "null") else INVALID
    t = column.data_type
    if t == "timestamp" and value == dt.datetime(1970, 1, 1):
        return INVALID  # the zero timestamp: stored as 0, which no real timestamp is
    if column.length is not None and isinstance(value, bytes | str):
        raw = value.encode("utf-8") if isinstance(value, str) else value
        return raw.ljust(column.length, b"\x00").hex()  # the server pads binary(n) with zeros
    if isinstance(value, bytes):
        return value.hex() if column.is_binary else charset_text(value, charset, column)
    if isinstance(value, str):
        return value.encode("utf-8").hex() if column.is_binary else value
    if isinstance(value, set | frozenset):
        return ",".join(v for v in (set_values or sorted(value)) if v in value)
    if isinstance(value, dt.timedelta):
        return time_text(value, column.fsp)
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, Decimal):
        return format(value, "f")  # as the server prints it: never exponent form
    if t == "year" and value == 1900:
        return "0"  # the library adds 1900 to the stored byte; 1900 is no YEAR, 0000 is
    return str(value)  # int


def decode_text(text: str, column: Column) -> Any:
    """The stored value of a text form (raises :class:`Undecodable`)."""
    t = column.data_type
    try:
        if text == INVALID:
            raise ValueError(text)
        if t in _INTS:
            return Decimal(text) if t == "bigint" and column.unsigned else int(text)
        if t == "year":
            return int(text)
        if t == "decimal":
            return Decimal(text) if (column.precision or 10) <= 38 else text
        if t in ("float", "double"):
            return float(text)
        if t in _BINARIES:
            return bytes.fromhex(text)
        if t == "date":
            return dt.date.fromisoformat(text)
        if t == "datetime":
            return dt.datetime.fromisoformat(text)
        if t == "timestamp":
            return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)
    except (ValueError, InvalidOperation) as e:
        raise Undecodable(
            f"column {column.name!r} ({t}) holds a value outside the range it is stored in"
        ) from e
    return text


# -- GTID positions ------------------------------------------------------------------------

_GTID = re.compile(r"(\d+)-(\d+)-(\d+)")


def gtid_frontier(position: str) -> dict[str, int]:
    """``{domain: seq + 1}`` of a GTID position such as ``0-1-7,2-1-1``.

    >>> gtid_frontier("0-1-7,2-1-1")
    {'0': 8, '2': 2}
    >>> gtid_frontier("")
    {}
    """
    out: dict[str, int] = {}
    for part in position.replace("\n", "").split(","):
        part = part.strip()
        if not part:
            continue
        m = _GTID.fullmatch(part)
        if m is None:
            raise ValueError(f"not a GTID position: {position!r}")
        domain, seq = m.group(1), int(m.group(3))
        out[domain] = max(out.get(domain, 0), seq + 1)
    return out


def covers(start: Mapping[str, int], lo: Mapping[str, int]) -> bool:
    """Whether a binlog file starting at frontier ``start`` holds every transaction from ``lo``."""
    return all(next_seq <= lo.get(domain, 0) for domain, next_seq in start.items())


__all__ = [
    "CHARSETS",
    "INVALID",
    "Column",
    "Undecodable",
    "binlog_text",
    "charset_text",
    "column_from_schema",
    "covers",
    "decode_text",
    "gtid_frontier",
    "incompatibility",
    "snapshot_text",
    "time2_size",
    "time2_value",
    "time_text",
]
