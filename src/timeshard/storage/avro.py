"""Avro datums decoded by spark-avro on the JVM: a record schema's columns, and the plan.

The FILE source (format ``avro``) and the KAFKA source (``key_format`` /
``value_format`` ``avro``) share this module. Both hand it a binary column
of Avro binary datums and get back the declared columns, or null where a
datum does not decode.

Schemas. A *reader* schema is Avro JSON text: a record whose fields are
``boolean``, ``int``, ``long``, ``float``, ``double``, ``string``,
``bytes``, a ``fixed`` (a binary column) or an ``enum`` (a string column,
the symbol), an ``array`` (a list column), a
``map`` (a map with string keys) or a ``record`` (a struct) of those written
inline, to any depth, or a union of ``null`` and one of those. Its fields, in
order, are the columns (:func:`avro_payload_schema`), all nullable. A datum is written
with a *writer* schema, which may differ from the reader schema as far as
Avro's schema resolution allows: a field the reader lacks is skipped, a
reader field the writer lacks takes its ``default``, ``int`` widens to
``long``, ``float`` and ``double`` and so on. A datum that does not resolve
fails to decode like a corrupt one.

Logical types, as spark-avro maps them (:func:`logical_arrow_type`):
``decimal`` on ``bytes`` or ``fixed`` is a ``decimal128(precision, scale)``
column, ``date`` on ``int`` a ``date32``, ``timestamp-millis`` and
``timestamp-micros`` on ``long`` a ``timestamp("us", "UTC")``, and
``local-timestamp-millis`` and ``-micros`` on ``long`` a ``timestamp("us")``
without a time zone. Every other logical type (``uuid``, ``time-millis``,
``time-micros``, ``duration``, ``timestamp-nanos``, one Avro does not know)
and one on another underlying type is read as its underlying type, as is one
whose attributes Java Avro finds invalid (it ignores the logical type then,
and so does spark-avro): a ``decimal`` whose ``precision`` is not a positive
int, whose ``scale`` (0 if absent) is not an int in ``0..precision``, or
whose precision a ``fixed`` of its size cannot hold. A valid decimal with
precision above 38 is InvalidUsage: Spark holds none, and every read would
fail.

Decoding. :func:`decode_datum` appends the 8 bytes :data:`DATUM_END` to
each datum and plans ``from_avro`` in ``PERMISSIVE`` mode (dates and
timestamps read in the proleptic Gregorian calendar, as Avro writes them,
never rebased: ``datetimeRebaseMode`` ``CORRECTED`` whatever the session's
``spark.sql.avro.datetimeRebaseModeInRead``) with the writer
record followed by an 8-byte ``fixed`` field (:func:`framed_schema`), the
reader schema framed alike passed as the ``avroSchema`` option when it
differs. In ``PERMISSIVE`` mode a datum that fails to decode comes back as
a struct of nulls, which a datum whose fields are all null also is; and a
datum with bytes left over after the record decodes without complaint. The
marker tells both apart: a datum decoded only if its marker reads back as
:data:`DATUM_END` (:func:`datum_ok`).

What runs where: the functions here build Column expressions on the driver
(where a session without the spark-avro jar fails, before any job:
:func:`~timeshard.spark.session.requires_spark_avro`); ``from_avro`` runs in
the executors' JVMs, in the job that reads the bytes.

Invariants:

1. The columns of a reader schema are a pure function of its text.
2. A datum decodes to its columns only if its marker reads back; otherwise
   every column is null and the caller writes an err row.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from typing import Any, TypeGuard

import pyarrow as pa

from timeshard.errors import InvalidUsage
from timeshard.persist._internal.parts import DIFF, ERR, TS

AVRO_TYPES: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "bytes": pa.binary(),
}
DATUM_END = b"\x00tsh-end"
AVRO_DECODE_ERROR = (
    "the datum does not decode with the declared avro_schema (corrupt, truncated, too long, "
    "or a value outside its logical type's range)"
)
_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
FIELD_ORDERS = ("ascending", "descending", "ignore")
_RESERVED = ("_partition", "_offset", TS, DIFF, ERR)
_NAMED = ("record", "error", "enum", "fixed")
#: The largest decimal precision Spark holds (``DecimalType.MAX_PRECISION``).
MAX_DECIMAL_PRECISION = 38
#: The logical types spark-avro reads as a type of their own, but ``decimal``, by the
#: underlying type they are valid on (module doc).
_TIME_TYPES: dict[tuple[str, str], pa.DataType] = {
    ("int", "date"): pa.date32(),
    ("long", "timestamp-millis"): pa.timestamp("us", tz="UTC"),
    ("long", "timestamp-micros"): pa.timestamp("us", tz="UTC"),
    ("long", "local-timestamp-millis"): pa.timestamp("us"),
    ("long", "local-timestamp-micros"): pa.timestamp("us"),
}


def avro_payload_schema(avro_schema: str) -> pa.Schema:
    """The Arrow columns of an Avro record schema given as JSON text (driver).

    Every column is nullable (err rows have null data), and so is every nested
    value. Raises InvalidUsage for text that is not a record schema, for a
    field whose type has no column form (module doc), or whose ``default``
    is not a value of its type (spark-avro fails the whole job when it
    resolves a writer without the field), naming the field, and for a schema
    spark-avro cannot parse (:func:`avro_schema_problem`: every read would
    fail before decoding a datum), or nested past Python's recursion limit.
    """
    try:
        return _payload_schema(avro_schema)
    except RecursionError:
        raise InvalidUsage("avro_schema is nested too deeply to read") from None


def _payload_schema(avro_schema: str) -> pa.Schema:
    try:
        record = json.loads(avro_schema)
    except (TypeError, json.JSONDecodeError) as e:
        raise InvalidUsage(f"avro_schema is not JSON text: {e}: {avro_schema!r}") from None
    if not isinstance(record, dict) or record.get("type") != "record":
        raise InvalidUsage(f"avro_schema must be an Avro record schema, got {avro_schema!r}")
    name, fields = record.get("name"), record.get("fields")
    if not isinstance(name, str) or not name:
        raise InvalidUsage(f"avro_schema: a record needs a name, got {name!r}")
    if not isinstance(fields, list) or not fields:
        raise InvalidUsage(f"avro_schema: record {name!r} needs a non-empty fields list")
    columns: list[pa.Field] = []
    for field in fields:
        fname = field.get("name") if isinstance(field, dict) else None
        if not isinstance(fname, str) or not _AVRO_NAME.fullmatch(fname):
            raise InvalidUsage(f"avro_schema: {field!r} is not a field with an Avro name")
        if fname in _RESERVED:
            raise InvalidUsage(f"avro_schema: field name {fname!r} is reserved: {_RESERVED}")
        if fname in [c.name for c in columns]:
            raise InvalidUsage(f"avro_schema: field name {fname!r} is repeated")
        columns.append(pa.field(fname, _avro_field_type(fname, field.get("type"))))
        if "default" in field and not _reader_default_fits(field["type"], field["default"]):
            raise InvalidUsage(
                f"avro_schema: field {fname!r} has default {json.dumps(field['default'])}, "
                f"which is not a value of its type {json.dumps(field['type'])}"
            )
    problem = avro_schema_problem(record)
    if problem is not None:
        raise InvalidUsage(f"avro_schema is not a valid Avro schema: {problem}")
    return pa.schema(columns)


def avro_schema_problem(schema: Any) -> str | None:
    """Why Avro's Java parser, which spark-avro runs, would refuse ``schema`` (parsed
    JSON) as a datum's schema, None if it would not.

    fastavro parses the schema framed as :func:`decode_datum` hands it to spark-avro
    (so a name that collides with the frame's is refused too). Then what fastavro
    does not check is checked as Java Avro does: every named type's name, namespace
    and aliases, and every field's name, against Java Avro's name grammar (a letter
    or ``_``, then letters, digits or ``_``, in each dotted component of a full name
    or namespace); no record repeats a field name; a fixed's size is a non-negative
    int; no union holds a union, or two branches of one type (two ``long``, two
    arrays, two maps, a named type and a reference to it); and a field's default is
    a value of its type (:func:`_default_fits`, where the type is made of
    primitives, arrays, maps and records only). A logical type never makes a schema
    invalid: Java Avro ignores one whose attributes it finds invalid (fastavro refuses
    some, so it parses the schema without them).
    """
    import fastavro

    try:
        plain = json.dumps(_without_logical_types(schema))
        fastavro.parse_schema(json.loads(framed_schema(plain)))
    except Exception as e:  # fastavro raises several types for a bad schema
        return f"{type(e).__name__}: {e}"
    return _java_problem(schema, "")


def _without_logical_types(schema: Any) -> Any:
    """``schema`` (parsed JSON) without the ``logicalType`` of any type in it (a copy)."""
    if isinstance(schema, list):
        return [_without_logical_types(branch) for branch in schema]
    if not isinstance(schema, dict):
        return schema
    plain = {k: v for k, v in schema.items() if k != "logicalType"}
    for key in ("type", "items", "values"):
        if isinstance(plain.get(key), (dict, list)):
            plain[key] = _without_logical_types(plain[key])
    if isinstance(plain.get("fields"), list):
        plain["fields"] = [
            {**f, "type": _without_logical_types(f.get("type"))} if isinstance(f, dict) else f
            for f in plain["fields"]
        ]
    return plain


def _java_problem(schema: Any, space: str) -> str | None:
    """Why Java Avro refuses ``schema`` that fastavro took, in namespace ``space``."""
    if isinstance(schema, list):
        branches = (_java_problem(branch, space) for branch in schema)
        return _union_problem(schema, space) or next(filter(None, branches), None)
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if kind in _NAMED:
        problem = _named_problem(kind, schema)
        if problem is not None:
            return problem
        space = _full_name(schema, space).rpartition(".")[0]
    if kind in ("record", "error"):
        return _fields_problem(schema, space)
    if kind in ("array", "map"):
        return _java_problem(schema.get("items" if kind == "array" else "values"), space)
    return _java_problem(kind, space)


def _full_name(named: dict[str, Any], space: str) -> str:
    """The full name of a named type defined in namespace ``space``."""
    name, namespace = named["name"], named.get("namespace")
    if "." in name:
        return str(name)
    space = namespace if isinstance(namespace, str) else space
    return f"{space}.{name}" if space else str(name)


def _named_problem(kind: str, schema: dict[str, Any]) -> str | None:
    name, namespace = schema.get("name"), schema.get("namespace")
    if not isinstance(name, str) or not all(map(_java_name, name.split("."))):
        return f"{kind} name {name!r} is not an Avro name"
    dotted = namespace.split(".") if isinstance(namespace, str) else [""]
    if "." not in name and namespace not in (None, "") and not all(map(_java_name, dotted)):
        return f"{kind} {name!r} has namespace {namespace!r}, not an Avro namespace"
    aliases = schema.get("aliases")
    for alias in aliases if isinstance(aliases, list) else ():
        if not isinstance(alias, str) or not all(map(_java_name, alias.split("."))):
            return f"{kind} {name!r} has alias {alias!r}, not an Avro name"
    size = schema.get("size")
    if kind == "fixed" and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        return f"fixed {name!r} has size {size!r}, not a non-negative int"
    return None


def _fields_problem(record: dict[str, Any], space: str) -> str | None:
    names: list[str] = []
    for field in record.get("fields", ()):
        fname = field.get("name")
        if not isinstance(fname, str) or not _java_name(fname):
            return f"field name {fname!r} of record {record.get('name')!r} is not an Avro name"
        if fname in names:
            return f"field name {fname!r} is repeated in record {record.get('name')!r}"
        names.append(fname)
        if str(field.get("order", "ascending")).lower() not in FIELD_ORDERS:
            return f"field {fname!r} has order {field['order']!r}, not one of {FIELD_ORDERS}"
        avro_type = field.get("type")
        default = field.get("default")
        if "default" in field and _checkable(avro_type) and not _default_fits(avro_type, default):
            return (
                f"field {fname!r} of record {record.get('name')!r} has default "
                f"{json.dumps(default)}, not a value of its type"
            )
        problem = _java_problem(avro_type, space)
        if problem is not None:
            return problem
    return None


def _union_problem(branches: list[Any], space: str) -> str | None:
    """Why Java Avro refuses the union ``branches`` itself (its branches aside), in
    namespace ``space``: a branch that is a union, or two of one type (an unnamed type's
    kind, a named type's full name; a reference is taken as the name in ``space``)."""
    kinds: list[str] = []
    for branch in branches:
        if isinstance(branch, list):
            return f"the union {json.dumps(branches)} holds a union"
        kind = branch.get("type") if isinstance(branch, dict) else branch
        if kind in _NAMED:
            kind = _full_name(branch, space)
        elif isinstance(kind, str) and kind not in ("array", "map", "null", *AVRO_TYPES):
            kind = kind if "." in kind or not space else f"{space}.{kind}"  # a reference
        if isinstance(kind, str) and kind in kinds:
            return f"the union {json.dumps(branches)} holds two branches of type {kind!r}"
        kinds.append(str(kind))
    return None


def _checkable(avro_type: Any) -> bool:
    """Whether :func:`_default_fits` decides for ``avro_type``: made of primitives (a
    logical type or not: a default is a value of the underlying type), fixeds, arrays,
    maps and records written inline, and unions of them."""
    if isinstance(avro_type, list):
        return all(map(_checkable, avro_type))
    if isinstance(avro_type, str):
        return avro_type in AVRO_TYPES or avro_type == "null"
    if not isinstance(avro_type, dict):
        return False
    kind = avro_type.get("type")
    if kind == "fixed":
        return True
    if kind == "array":
        return _checkable(avro_type.get("items"))
    if kind == "map":
        return _checkable(avro_type.get("values"))
    if kind in ("record", "error"):
        fields = avro_type.get("fields", ())
        return all(isinstance(f, dict) and _checkable(f.get("type")) for f in fields)
    return isinstance(kind, str) and _checkable(kind)


def _java_name(name: str) -> bool:
    """Whether Java Avro takes ``name`` as a name (a letter or ``_``, then letters,
    digits or ``_``; letters and digits as Java's ``Character`` has them)."""
    categories = [unicodedata.category(c) for c in name]
    return (
        bool(name)
        and (categories[0].startswith("L") or name[0] == "_")
        and all(
            k.startswith("L") or k == "Nd" or c == "_"
            for c, k in zip(name, categories, strict=True)
        )
    )


def _default_fits(avro_type: Any, default: Any) -> bool:
    """Whether Java Avro takes ``default`` for a field of ``avro_type``: for a union, a
    value of any branch; for an array, a list of its items' values; for a map, an object
    of its values'; for a record, an object with a value of each field's type, or
    without the field where the field has a default; for a fixed, a string (Java Avro
    pads or cuts its bytes to the size); for an enum, one of its symbols (Java Avro
    takes any string, then fails to resolve every datum written without the field). A
    logical type's default is a value of its underlying type."""
    if isinstance(avro_type, list):
        return any(_default_fits(b, default) for b in avro_type)
    primitive = _avro_primitive(avro_type)
    if primitive is not None or not isinstance(avro_type, dict):
        return _fits(primitive, default)
    kind = avro_type.get("type")
    if kind == "fixed":
        return isinstance(default, str)
    if kind == "enum":
        return isinstance(default, str) and default in avro_type.get("symbols", ())
    if kind == "array":
        return isinstance(default, list) and all(
            _default_fits(avro_type.get("items"), v) for v in default
        )
    if kind == "map":
        return isinstance(default, dict) and all(
            _default_fits(avro_type.get("values"), v) for v in default.values()
        )
    if kind == "record":
        return isinstance(default, dict) and all(
            _default_fits(f["type"], default[f["name"]]) if f["name"] in default else "default" in f
            for f in avro_type.get("fields", ())
        )
    return False


def _reader_default_fits(avro_type: Any, default: Any) -> bool:
    """Whether a reader field's ``default`` is a value of its ``avro_type`` that spark-avro
    reads: :func:`_default_fits`, and :func:`_spark_reads` (else every datum written
    without the field fails to decode, an err row)."""
    return _default_fits(avro_type, default) and _spark_reads(avro_type, default)


def _spark_reads(avro_type: Any, default: Any) -> bool:
    """Whether spark-avro reads the value Java Avro makes of ``default`` (a value of
    ``avro_type``) by its logical types: Java encodes a union's default with the first
    branch it fits (it takes a default of any branch), the text of ``bytes`` or a
    ``fixed`` as ISO-8859-1 (a ``fixed``'s padded or cut to its size); spark-avro
    refuses a decimal of no bytes or of more digits than its precision, and a
    ``*timestamp-millis`` whose microseconds overflow a long."""
    if isinstance(avro_type, list):
        branch = next((b for b in avro_type if _default_fits(b, default)), None)
        return branch is None or _spark_reads(branch, default)
    if not isinstance(avro_type, dict):
        return True
    kind, logical = avro_type.get("type"), avro_type.get("logicalType")
    decimal = _java_decimal(avro_type) if logical == "decimal" else None
    if decimal is not None and isinstance(default, str):
        raw = default.encode("latin-1", errors="replace")
        if kind == "fixed":
            raw = raw[: avro_type["size"]].ljust(avro_type["size"], b"\0")
        unscaled = int.from_bytes(raw, "big", signed=True)
        return bool(raw) and len(str(abs(unscaled))) <= decimal[0]
    if kind == "long" and logical in ("timestamp-millis", "local-timestamp-millis"):
        return not _fits("long", default) or _fits("long", default * 1000)
    if kind == "array" and isinstance(default, list):
        return all(_spark_reads(avro_type.get("items"), v) for v in default)
    if kind == "map" and isinstance(default, dict):
        return all(_spark_reads(avro_type.get("values"), v) for v in default.values())
    if kind in ("record", "error") and isinstance(default, dict):
        return all(
            _spark_reads(f.get("type"), default.get(f["name"], f.get("default")))
            for f in avro_type.get("fields", ())
            if isinstance(f, dict) and isinstance(f.get("name"), str)
        )
    return True


def _fits(primitive: str | None, value: Any) -> bool:
    integral = isinstance(value, int) and not isinstance(value, bool)
    if primitive == "null":
        return value is None
    if primitive == "boolean":
        return isinstance(value, bool)
    if primitive == "int":
        return integral and -(2**31) <= value < 2**31
    if primitive == "long":
        return integral and -(2**63) <= value < 2**63
    if primitive in ("float", "double"):
        return integral or isinstance(value, float) or value in ("NaN", "Infinity", "-Infinity")
    return primitive in ("string", "bytes") and isinstance(value, str)


def _avro_field_type(name: str, avro_type: Any) -> pa.DataType:
    found = _arrow_type_of(name, avro_type)
    if found is not None:
        return found
    raise InvalidUsage(
        f"avro_schema: field {name!r} has type {json.dumps(avro_type)}; supported are "
        f"{sorted(AVRO_TYPES)}, 'fixed' (with their logical types) and 'enum', arrays, maps and "
        "records of them (written inline, to any depth), and unions of 'null' with one of them"
    )


def _arrow_type_of(name: str, avro_type: Any) -> pa.DataType | None:
    """The Arrow type of the values of ``avro_type`` (of the field or path ``name``), None
    if it has none here. InvalidUsage for a nested field that is no field, or whose
    default is not a value of its type."""
    branches = avro_type if isinstance(avro_type, list) else [avro_type]
    values = [b for b in branches if _avro_primitive(b) != "null"]
    if len(branches) > 2 or len(values) != 1:
        return None
    (one,) = values
    logical = logical_arrow_type(name, one)
    if logical is not None:
        return logical
    primitive = _avro_primitive(one)
    if primitive is not None:
        _check_catalyst_type(name, primitive, one)
        return AVRO_TYPES[primitive]
    if not isinstance(one, dict):
        return None
    kind = one.get("type")
    if kind == "fixed":
        return pa.binary()
    if kind == "enum":
        return pa.string()
    if kind == "array":
        items = _arrow_type_of(f"{name}.items", one.get("items"))
        return None if items is None else pa.list_(items)
    if kind == "map":
        item = _arrow_type_of(f"{name}.values", one.get("values"))
        return None if item is None else pa.map_(pa.string(), item)
    if kind == "record" and isinstance(one.get("fields"), list):
        return _struct_of(name, one["fields"])
    return None


#: The property spark-avro reads an ``int`` or ``long`` by, as the Spark type it names (its
#: own ``to_avro`` writes it for intervals), and the names of each one's own Spark type.
_CATALYST_TYPE = "spark.sql.catalyst.type"
_CATALYST_SAME = {"int": ("int", "integer"), "long": ("bigint", "long")}


def _check_catalyst_type(name: str, primitive: str, avro_type: Any) -> None:
    """InvalidUsage naming the field if ``avro_type`` (an ``int`` or ``long`` without a
    logical type spark-avro reads) carries a :data:`_CATALYST_TYPE` of another type:
    spark-avro would read it as that type, not the declared column's."""
    declared = avro_type.get(_CATALYST_TYPE) if isinstance(avro_type, dict) else None
    if declared is None or primitive not in _CATALYST_SAME:
        return
    if str(declared).strip().lower() not in _CATALYST_SAME[primitive]:
        raise InvalidUsage(
            f"avro_schema: field {name!r} is an Avro {primitive} with {_CATALYST_TYPE} "
            f"{declared!r}, which spark-avro reads as that Spark type; a source reads the "
            f"{primitive} itself: drop the property"
        )


def _struct_of(name: str, fields: list[Any]) -> pa.DataType | None:
    if not fields:  # Avro takes it; a Parquet part holds no struct without fields
        raise InvalidUsage(f"avro_schema: the record at {name!r} needs a non-empty fields list")
    children: list[pa.Field] = []
    for field in fields:
        fname = field.get("name") if isinstance(field, dict) else None
        if not isinstance(fname, str) or not _AVRO_NAME.fullmatch(fname):
            raise InvalidUsage(
                f"avro_schema: {field!r} in {name!r} is not a field with an Avro name"
            )
        if fname in [c.name for c in children]:
            raise InvalidUsage(f"avro_schema: field name {fname!r} is repeated in {name!r}")
        child = _arrow_type_of(f"{name}.{fname}", field.get("type"))
        if child is None:
            return None
        if "default" in field and not _reader_default_fits(field["type"], field["default"]):
            raise InvalidUsage(
                f"avro_schema: field {name}.{fname} has default {json.dumps(field['default'])}, "
                f"which is not a value of its type {json.dumps(field['type'])}"
            )
        children.append(pa.field(fname, child))
    return pa.struct(children)


def logical_arrow_type(name: str, avro_type: Any) -> pa.DataType | None:
    """The Arrow type of ``avro_type`` (of the field or path ``name``) by its logical type,
    None if spark-avro reads it as its underlying type (module doc). InvalidUsage for a
    valid decimal of a precision Spark cannot hold."""
    if not isinstance(avro_type, dict):
        return None
    kind, logical = avro_type.get("type"), avro_type.get("logicalType")
    if not isinstance(kind, str) or not isinstance(logical, str):
        return None
    if logical != "decimal":
        return _TIME_TYPES.get((kind, logical))
    decimal = _java_decimal(avro_type)
    if decimal is None:
        return None
    precision, scale = decimal
    if precision > MAX_DECIMAL_PRECISION:
        raise InvalidUsage(
            f"avro_schema: field {name!r} is a decimal of precision {precision}; Spark holds "
            f"decimals of precision up to {MAX_DECIMAL_PRECISION}"
        )
    return pa.decimal128(precision, scale)


def _java_decimal(avro_type: dict[str, Any]) -> tuple[int, int] | None:
    """``(precision, scale)`` of a ``decimal`` logical type that Java Avro takes as valid,
    None where it ignores the logical type: on a type other than ``bytes`` or ``fixed``, a
    precision or a scale that is no JSON int in int32 range (absent precision included; an
    absent scale is 0), precision below 1, scale below 0 or above precision, or a precision
    above what a ``fixed`` of its size holds (``floor(log10(2) * (8 * size - 1))``)."""
    kind = avro_type.get("type")
    precision, scale = avro_type.get("precision"), avro_type.get("scale", 0)
    if kind not in ("bytes", "fixed") or not (_java_int(precision) and _java_int(scale)):
        return None
    if precision < 1 or not 0 <= scale <= precision:
        return None
    if kind == "fixed":
        size = avro_type.get("size")
        if not _java_int(size) or precision > math.floor(math.log10(2) * (8 * size - 1)):
            return None
    return precision, scale


def _java_int(value: Any) -> TypeGuard[int]:
    """Whether Jackson reads ``value`` (parsed JSON) as an ``Integer``."""
    return isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31


def _avro_primitive(avro_type: Any) -> str | None:
    """The primitive an Avro type names (``"long"`` or ``{"type": "long"}``, with a logical
    type or without), else None."""
    if isinstance(avro_type, dict):
        avro_type = avro_type.get("type")
    if isinstance(avro_type, str) and (avro_type in AVRO_TYPES or avro_type == "null"):
        return avro_type
    return None


def framed_schema(avro_schema: str) -> str:
    """The schema ``from_avro`` decodes a framed datum with: the record, then the end marker."""
    end = {"type": "fixed", "name": "TimeshardDatumEnd", "size": len(DATUM_END)}
    framed = {
        "type": "record",
        "name": "TimeshardFramedDatum",
        "namespace": "timeshard.avro",
        "fields": [
            {"name": "value", "type": json.loads(avro_schema)},
            {"name": "end", "type": end},
        ],
    }
    return json.dumps(framed)


def decode_datum(datum: Any, writer: str, reader: str | None = None) -> Any:
    """A struct Column ``{value, end}``: ``datum`` (binary) decoded by ``from_avro`` (a plan).

    ``writer`` is the schema the datum was written with, ``reader`` the one
    whose fields are the columns (None: the writer's). Call inside
    :func:`~timeshard.spark.session.requires_spark_avro`.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    # Avro's dates and timestamps are of the proleptic Gregorian calendar: read as they are,
    # whatever the session's spark.sql.avro.datetimeRebaseModeInRead says.
    options = {"mode": "PERMISSIVE", "datetimeRebaseMode": "CORRECTED"}
    if reader is not None and reader != writer:
        options["avroSchema"] = framed_schema(reader)
    framed = F.concat(datum, F.lit(DATUM_END))
    return from_avro(framed, framed_schema(writer), options)


def datum_ok(decoded: Any) -> Any:
    """True where :func:`decode_datum` decoded the whole datum, else False (never null)."""
    from pyspark.sql import functions as F

    return F.coalesce(decoded.getField("end") == F.lit(DATUM_END), F.lit(False))


def record_columns(decoded: Any, keep: Any, columns: pa.Schema) -> list[Any]:
    """The ``columns`` of a decoded struct where ``keep`` holds, else null, typed as declared."""
    from pyspark.sql import functions as F

    from timeshard.spark.session import arrow_to_spark_schema

    record = decoded.getField("value")
    return [
        F.when(keep, record.getField(f.name)).cast(f.dataType).alias(f.name)
        for f in arrow_to_spark_schema(columns)
    ]


__all__ = [
    "AVRO_DECODE_ERROR",
    "AVRO_TYPES",
    "DATUM_END",
    "MAX_DECIMAL_PRECISION",
    "avro_payload_schema",
    "avro_schema_problem",
    "datum_ok",
    "decode_datum",
    "framed_schema",
    "logical_arrow_type",
    "record_columns",
]


# -- writing (the KAFKA export) -------------------------------------------------------------


def avro_record_schema(name: str, columns: pa.Schema) -> dict[str, Any]:
    """The Avro record schema a row of ``columns`` is written with (the KAFKA export).

    Every field is a union of ``null`` and the column's type, default null:
    integers up to 32 bits are ``int``, ``int64`` and ``uint32`` ``long``,
    floats ``float``/``double``, strings ``string``, binaries ``bytes``,
    ``decimal128(p, s)`` ``bytes`` with logical type ``decimal``, ``date32``
    ``int``/``date``, a timestamp with a time zone ``long``/
    ``timestamp-millis`` or ``-micros``, without one ``local-timestamp-*``.

    Nested types, to any depth, as Materialize writes them: a list is an
    ``array``, a struct a ``record``, a map with string keys a ``map``; an
    array's items, a map's values and a record's fields are each a union of
    ``null`` and their type, as the columns are. A nested record is named
    after its path from ``name``, which makes its full name unique in the
    schema and a pure function of the columns: the struct column ``s`` is
    ``{name}.s``, its struct field ``t`` ``{name}.s.t``, the struct items of
    a list column ``l`` ``{name}.l.items`` and the struct values of a map
    column ``m`` ``{name}.m.values``.

    InvalidUsage names a column of any other type (or holding one, or a map
    whose keys are not strings), or whose name, or a nested field's, Avro
    does not allow.
    """
    fields = []
    for f in columns:
        if not _AVRO_NAME.fullmatch(f.name):
            raise InvalidUsage(f"column {f.name!r} is not an Avro name ([A-Za-z_][A-Za-z0-9_]*)")
        avro_type = _avro_type_of(f.type, f"{name}.{f.name}", f.name, f.name)
        fields.append({"name": f.name, "type": ["null", avro_type], "default": None})
    return {"type": "record", "name": name, "fields": fields}


def _avro_type_of(typ: pa.DataType, name: str, column: str, where: str) -> Any:
    """The Avro type of the values of ``typ`` at ``where`` (the path from ``column`` on,
    as ``s.t.items``) in ``column``, a record there named ``name``."""
    t = pa.types
    if t.is_list(typ) or t.is_large_list(typ) or t.is_fixed_size_list(typ):
        items = _avro_type_of(typ.value_type, f"{name}.items", column, f"{where}.items")
        return {"type": "array", "items": ["null", items]}
    if t.is_map(typ):
        if not (t.is_string(typ.key_type) or t.is_large_string(typ.key_type)):
            raise InvalidUsage(
                f"column {column!r} holds a map with keys of type {typ.key_type} at {where}: "
                "an Avro map's keys are strings"
            )
        values = _avro_type_of(typ.item_type, f"{name}.values", column, f"{where}.values")
        return {"type": "map", "values": ["null", values]}
    if t.is_struct(typ):
        fields: list[dict[str, Any]] = []
        for f in typ:
            if not _AVRO_NAME.fullmatch(f.name) or f.name in [g["name"] for g in fields]:
                raise InvalidUsage(
                    f"column {column!r} has field {f.name!r} at {where}, which is not an Avro "
                    "name ([A-Za-z_][A-Za-z0-9_]*) unique in its struct"
                )
            avro_type = _avro_type_of(f.type, f"{name}.{f.name}", column, f"{where}.{f.name}")
            fields.append({"name": f.name, "type": ["null", avro_type], "default": None})
        return {"type": "record", "name": name, "fields": fields}
    primitive = _avro_primitive_of(typ)
    if primitive is None:
        at = "" if where == column else f" at {where}"
        raise InvalidUsage(f"column {column!r} of type {typ}{at} has no Avro form here")
    return primitive


def _avro_primitive_of(typ: pa.DataType) -> Any:
    t = pa.types
    if t.is_boolean(typ):
        return "boolean"
    if t.is_integer(typ) and typ.bit_width <= 32 and not (t.is_uint32(typ)):
        return "int"
    if t.is_int64(typ) or t.is_uint32(typ):
        return "long"
    if t.is_float32(typ):
        return "float"
    if t.is_float64(typ):
        return "double"
    if t.is_string(typ) or t.is_large_string(typ):
        return "string"
    if t.is_binary(typ) or t.is_large_binary(typ):
        return "bytes"
    if t.is_decimal128(typ):
        return {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": typ.precision,
            "scale": typ.scale,
        }
    if t.is_date32(typ):
        return {"type": "int", "logicalType": "date"}
    if t.is_timestamp(typ) and typ.unit in ("ms", "us"):
        unit = "millis" if typ.unit == "ms" else "micros"
        local = "" if typ.tz is not None else "local-"
        return {"type": "long", "logicalType": f"{local}timestamp-{unit}"}
    return None
