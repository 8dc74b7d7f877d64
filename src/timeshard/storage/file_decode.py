"""The decoding of one newline-framed record of a FILE source (pure; tasks call it).

:func:`decode_line` makes the row of one line, or an err row for a line that
does not decode (:data:`DECODE_ERRORS`) or is too long; :func:`decode_payload`
decodes a record's bytes in a format (``json``, ``csv``, ``text``, ``bytes``,
and the base64 framing of ``avro``). :func:`arrow_json` decodes many JSON lines
at once with Arrow wherever that gives what :func:`decode_payload` gives. What
each format accepts: :mod:`timeshard.storage.file_source`. Runs in the
executors (the FILE source's read tasks, COPY FROM's tasks, the KAFKA source's
decoding, ``timeshard verify``'s replay tasks).
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import json
import math
import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from timeshard.persist._internal.parts import ERR

_DATUM = "_datum"

#: What decoding raises for bytes that do not decode: such a line is an err row. Anything
#: else (a MemoryError, a bug) is a fault and propagates: it fails the task, never a row.
DECODE_ERRORS: tuple[type[Exception], ...] = (
    ValueError,  # UnicodeDecodeError, JSONDecodeError, binascii.Error, pa.ArrowInvalid
    csv.Error,
    OverflowError,
    RecursionError,  # JSON nested deeper than the interpreter's recursion limit
    pa.ArrowTypeError,
    pa.ArrowNotImplementedError,
)

_BOM = b"\xef\xbb\xbf"

_INT_RANGES = {
    (bits, signed): (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    for bits in (8, 16, 32, 64)
    for signed in (True, False)
}


def decode_line(
    partition: str,
    offset: int,
    line: bytes | None,
    length: int,
    fmt: str,
    schema: pa.Schema,
    max_line_bytes: int,
) -> dict[str, Any]:
    """The row of the line at ``offset`` of file ``partition`` (newline excluded).

    ``line`` is None for a line of ``length`` bytes, more than
    ``max_line_bytes``, which is not decoded. ``schema`` is the source's
    :attr:`~timeshard.storage.file_source.FileSource.line_schema`. A line that does not decode
    (:data:`DECODE_ERRORS`) is an err row: data columns null, ``_err``
    reading ``<file>@<offset>: <error>``; any other exception propagates.
    Pure: the source's tasks and ``timeshard verify`` decode with it.
    """
    row: dict[str, Any] = {"_partition": partition, "_offset": offset, ERR: None}
    try:
        if line is None:
            raise ValueError(
                f"the line has {length} bytes, more than max_line_bytes {max_line_bytes}"
            )
        if offset == 0 and fmt in ("json", "csv"):
            line = line.removeprefix(_BOM)
        row.update(decode_payload(line, fmt, schema))
    except DECODE_ERRORS as e:
        row.update(dict.fromkeys(schema.names))
        row[ERR] = f"{partition}@{offset}: {type(e).__name__}: {str(e)[:300]}"
    return row


#: A blank line: skipped by a line-by-line reader, or an error, never an Arrow row.
_BLANK_LINE = re.compile(rb"(?m)^[ \t\x0b\x0c]*$")

#: A line that does not start as a JSON object does.
_NOT_AN_OBJECT = re.compile(rb"(?m)^[ \t]*[^ \t{]")


def arrow_json_exact(typ: pa.DataType) -> bool:
    """Whether Arrow's JSON reader reads a column of ``typ`` as :func:`decode_payload` does.

    Integers, doubles, booleans and strings: Arrow is then as strict (no
    coercion, integers in range), but for a number too large for a double
    (``2e308``), which it reads as infinity where :func:`decode_payload`
    refuses it; :func:`arrow_json` gives way on any infinity for that.
    """
    t = pa.types
    return bool(t.is_integer(typ) or t.is_float64(typ) or t.is_boolean(typ) or t.is_string(typ))


def arrow_json(text: bytes, rows: int, schema: pa.Schema, *, unknown: str) -> pa.Table | None:
    """``rows`` JSON objects, one per line of ``text``, decoded by Arrow into ``schema``'s
    columns; None wherever the result might differ from :func:`decode_payload`'s.

    ``unknown`` is what a key that is not a column does: ``"ignore"`` it, or
    ``"error"`` (then None). None also for a column type Arrow does not read
    exactly (:func:`arrow_json_exact`), an infinite double (Arrow reads a
    number too large for a double as one; ``Infinity`` is rare enough to be
    left to the caller too), a carriage return, a byte order mark,
    a blank line, a line that does not start with ``{`` (pyarrow 26 reads a
    top-level ``null`` as a row of nulls, and segfaults when it comes
    first), bytes that are not UTF-8 (Arrow does not check them), a line
    that is not exactly one JSON document, a duplicate key, or anything
    Arrow refuses: the caller then decodes line by line, which finds the
    bad rows. Pure: tasks call it.
    """
    import pyarrow.json as pa_json

    if rows == 0 or not all(arrow_json_exact(f.type) for f in schema):
        return None
    if text.count(b"\n") != rows - 1 or b"\r" in text or _BOM in text:
        return None
    if _BLANK_LINE.search(text) or _NOT_AN_OBJECT.search(text):
        return None  # Arrow reads a line ``null`` as a row of nulls (and crashes on a first one)
    if not _utf8(text):
        return None  # Arrow keeps invalid UTF-8 in a string, and ignores it in an unknown key
    try:
        table = pa_json.read_json(
            pa.py_buffer(text),
            read_options=pa_json.ReadOptions(use_threads=False, block_size=len(text) + 1),
            parse_options=pa_json.ParseOptions(
                explicit_schema=schema,
                unexpected_field_behavior=unknown,
                newlines_in_values=False,
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    if table.num_rows != rows:
        return None  # a line that held several JSON documents
    if any(_has_infinity(table.column(f.name)) for f in schema if pa.types.is_floating(f.type)):
        return None  # ``2e308`` read as infinity, which decode_payload refuses
    return table.select(schema.names).combine_chunks()


def _has_infinity(column: pa.ChunkedArray) -> bool:
    return bool(pc.any(pc.is_inf(column)).as_py())


def _utf8(text: bytes) -> bool:
    """Whether ``text`` is valid UTF-8 (ASCII is checked without decoding)."""
    if text.isascii():
        return True
    try:
        text.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def decode_payload(raw: bytes, fmt: str, schema: pa.Schema) -> dict[str, Any]:
    """The columns of one record's bytes in ``fmt`` (json, csv, text, bytes, avro framing).

    Raises one of :data:`DECODE_ERRORS` for bytes that do not decode; the
    caller turns that into an err row. Pure: tasks call it.
    """
    if fmt == "bytes":
        return {"data": raw}
    if fmt == "avro":
        try:
            datum = base64.b64decode(raw.removesuffix(b"\r"), validate=True)
        except binascii.Error as e:
            raise ValueError(f"invalid base64: {e}") from None
        return {_DATUM: datum}
    text = raw.decode("utf-8")
    if fmt == "text":
        return {"text": text}
    if fmt == "json":
        value = json.loads(text, parse_float=_json_float)
        if not isinstance(value, dict):
            raise ValueError(f"expected a JSON object, got {type(value).__name__}")
        return {
            name: _json_value(name, typ, value.get(name))
            for name, typ in zip(schema.names, schema.types, strict=True)
        }
    if len(text) > csv.field_size_limit():  # the process-wide limit must not decide
        csv.field_size_limit(len(text))  # no field is longer than its line
    try:
        rows = list(csv.reader(io.StringIO(text), strict=True))
    except csv.Error as e:
        raise ValueError(f"malformed CSV record: {e}") from None
    if len(rows) != 1:
        raise ValueError(f"expected one CSV record, got {len(rows)}")
    values = rows[0]
    if len(values) != len(schema.names):
        raise ValueError(f"expected {len(schema.names)} fields, got {len(values)}")
    out: dict[str, Any] = {}
    for name, typ, v in zip(schema.names, schema.types, values, strict=True):
        if v == "":
            out[name] = None
        elif pa.types.is_string(typ):
            out[name] = v
        else:
            try:
                out[name] = pa.scalar(v, pa.string()).cast(typ).as_py()
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise ValueError(f"column {name!r} ({typ}): {e}") from None
    return out


class _OutOfRange(float):
    """A JSON number too large for a double (``1e400``): parsed as such, not as infinity."""

    text: str


def _json_float(text: str) -> float:
    """``parse_float`` of :func:`json.loads`: a float, or an :class:`_OutOfRange` marker."""
    value = float(text)
    if math.isinf(value):
        marker = _OutOfRange(value)
        marker.text = text[:40]
        return marker
    return value


def _json_value(name: str, typ: pa.DataType, v: Any) -> Any:
    """The JSON value ``v`` of column ``name`` as a value of ``typ``; ValueError if it is not one.

    Integers take JSON integers in the type's range; floats take JSON numbers
    (and ``NaN``/``Infinity``) whose value fits; booleans take ``true`` and
    ``false``; strings take strings. Nothing is coerced: ``"1"``, ``1.5`` and
    ``true`` are not integers. Other types go through Arrow's conversion.
    """
    if v is None:
        return None
    if isinstance(v, _OutOfRange):
        raise ValueError(f"column {name!r} ({typ}): the number {v.text} is out of range")
    if pa.types.is_integer(typ):
        if not isinstance(v, int) or isinstance(v, bool):
            raise _mismatch(name, typ, "an integer", v)
        lo, hi = _INT_RANGES[typ.bit_width, pa.types.is_signed_integer(typ)]
        if not lo <= v <= hi:
            raise ValueError(f"column {name!r} ({typ}): {v} is out of range [{lo}, {hi}]")
        return v
    if pa.types.is_floating(typ):
        if not isinstance(v, int | float) or isinstance(v, bool):
            raise _mismatch(name, typ, "a number", v)
        try:
            number = float(v)
            fitted = pa.array([number], typ)[0].as_py()
        except (OverflowError, pa.ArrowInvalid) as e:
            raise ValueError(f"column {name!r} ({typ}): {_json_text(v)} is out of range") from e
        if math.isinf(fitted) and not math.isinf(number):
            raise ValueError(f"column {name!r} ({typ}): {_json_text(v)} is out of range")
        return number
    if pa.types.is_boolean(typ):
        if not isinstance(v, bool):
            raise _mismatch(name, typ, "true or false", v)
        return v
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        if not isinstance(v, str):
            raise _mismatch(name, typ, "a string", v)
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as e:  # JSON's \ud800 escapes: no UTF-8 text has them
            raise ValueError(f"column {name!r} ({typ}): a lone surrogate: {e.reason}") from None
        return v
    if _null_map_entry(typ, v):  # pyarrow aborts the process on one (pyarrow 26)
        raise ValueError(f"column {name!r} ({typ}): a map entry is null")
    try:
        return pa.array([v], typ)[0].as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError) as e:
        raise ValueError(f"column {name!r} ({typ}): {e}") from None


def _null_map_entry(typ: pa.DataType, v: Any) -> bool:
    """Whether ``v``, a value for ``typ``, holds a map given as a list of entries with a
    null entry at any depth (``[null]`` for a map column). Arrow's conversion builds
    such a map and then fails a check that aborts the process, not an exception."""
    t = pa.types
    if v is None:
        return False
    if t.is_map(typ):
        if isinstance(v, dict):
            return any(_null_map_entry(typ.item_type, x) for x in v.values())
        if isinstance(v, list):
            if any(entry is None for entry in v):
                return True
            return any(
                _null_map_entry(typ.item_type, entry.get("value"))
                for entry in v
                if isinstance(entry, dict)
            )
        return False
    if t.is_list(typ) or t.is_large_list(typ) or t.is_fixed_size_list(typ):
        return isinstance(v, list) and any(_null_map_entry(typ.value_type, x) for x in v)
    if t.is_struct(typ) and isinstance(v, dict):
        return any(_null_map_entry(f.type, v.get(f.name)) for f in typ)
    return False


def _mismatch(name: str, typ: pa.DataType, expected: str, v: Any) -> ValueError:
    return ValueError(f"column {name!r} ({typ}): expected {expected}, got {_json_text(v)}")


def _json_text(v: Any) -> str:
    """A short JSON rendering of ``v`` for an error message."""
    text = json.dumps(v, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = ["DECODE_ERRORS", "arrow_json", "arrow_json_exact", "decode_line", "decode_payload"]
