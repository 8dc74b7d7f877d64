"""FILE sources: an append-only file, or a directory of newline-framed records.

Each file is a partition, named by its path relative to the source root; its
FromTime is a byte offset. ``upper()`` is, per file, the offset just past its
last complete line, so a line being written is not read until its newline
arrives; lines appended later are picked up by the next read, and new files
in the directory become new partitions.

``read`` splits the byte ranges over Spark tasks (one per file range); each
task reads its bytes, splits lines, and decodes them:

* ``json``: an object per line, fields by the declared schema;
* ``csv``: comma-separated values in schema order (no header);
* ``text``: the line as column ``text``; ``bytes``: the raw line as ``data``;
* ``avro``: one Avro binary datum per line, **base64-encoded** (standard
  alphabet, padded; a trailing carriage return is ignored). Raw Avro binary
  cannot be newline-framed: any byte, the newline included, may occur inside
  a datum, and one corrupt datum would lose the framing of all after it.
  The writer's schema is declared as Avro JSON text (``avro_schema``): a
  record whose fields are ``boolean``, ``int``, ``long``, ``float``,
  ``double``, ``string`` or ``bytes``, or a union of ``null`` and one of
  those; the columns are its fields, in order (:func:`avro_payload_schema`).

A line that cannot be decoded (malformed JSON, a wrong field type, a wrong
number of CSV fields, invalid UTF-8, invalid base64, an Avro datum that does
not decode with the declared schema) becomes an err row: data columns null,
``_err`` naming the file, the byte offset and the error. It is kept, and the
source goes on.

Avro datums are decoded by spark-avro on the JVM, not in Python: the tasks
only split lines and base64-decode them into a binary column (invalid base64
is an err row right there), each datum followed by the 8 bytes
:data:`DATUM_END`; then ``from_avro`` in ``PERMISSIVE`` mode decodes that
column with the record followed by an 8-byte ``fixed`` field. In
``PERMISSIVE`` mode a datum that fails to decode comes back as a struct of
nulls, which a datum whose fields are all null also is; and a datum with
bytes left over after the record decodes without complaint. The marker tells
both apart: a row is good only if its marker reads back as :data:`DATUM_END`,
otherwise it becomes an err row ``<file>@<offset>: AvroDecodeError: ...``.
The session must have the spark-avro jar
(:func:`timeshard.spark.session.spark_avro_package`); ``read`` raises
InvalidUsage naming the package when it does not.

Reads are deterministic: the same byte range always yields the same rows.

What runs where: the driver lists files and sizes and builds the plan (where a
session without spark-avro fails, before any job); the executors read, split
and decode (``from_avro`` runs in the executors' JVMs, in the same job). The
task function closes over plain values (root path, line schema as Arrow IPC
bytes, format name).
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage
from timeshard.persist._internal.parts import DIFF, ERR, TS
from timeshard.storage.reclock import SourceFrontier

FORMATS = ("json", "csv", "text", "bytes", "avro")
AVRO_TYPES: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "bytes": pa.binary(),
}
_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESERVED = ("_partition", "_offset", TS, DIFF, ERR)
_DATUM = "_datum"
_VALUE = "_value"
DATUM_END = b"\x00tsh-end"
AVRO_DECODE_ERROR = (
    "the datum does not decode with the declared avro_schema (corrupt, truncated, or too long)"
)


class FileSource:
    """A directory (or one file) of newline-delimited records."""

    def __init__(
        self,
        name: str,
        path: str | Path,
        fmt: str,
        schema: pa.Schema | None = None,
        avro_schema: str | None = None,
    ) -> None:
        if fmt not in FORMATS:
            raise InvalidUsage(f"FILE format must be one of {FORMATS}, got {fmt!r}")
        if fmt in ("json", "csv") and schema is None:
            raise InvalidUsage(f"FILE format {fmt!r} needs a declared schema")
        if (fmt == "avro") != (avro_schema is not None):
            raise InvalidUsage(
                f"FILE format {fmt!r}: avro_schema goes with format 'avro' and only with it, "
                f"got avro_schema={avro_schema!r}"
            )
        if fmt == "avro" and schema is not None:
            raise InvalidUsage(
                f"FILE format 'avro' takes its columns from avro_schema; got a schema too: {schema}"
            )
        self.name = name
        self.path = Path(path).resolve()
        self.format = fmt
        self.avro_schema = avro_schema
        if fmt == "text":
            schema = pa.schema([("text", pa.string())])
        elif fmt == "bytes":
            schema = pa.schema([("data", pa.binary())])
        elif avro_schema is not None:
            schema = avro_payload_schema(avro_schema)
        assert schema is not None
        self.schema = schema

    def payload_schema(self) -> pa.Schema:
        return self.schema

    def tick(self) -> None:
        return None

    def _files(self) -> list[Path]:
        if self.path.is_file():
            return [self.path]
        if not self.path.is_dir():
            return []
        return sorted(p for p in self.path.rglob("*") if p.is_file() and not p.name.startswith("."))

    def _partition(self, file: Path) -> str:
        if self.path.is_file():
            return file.name
        return file.relative_to(self.path).as_posix()

    def upper(self) -> SourceFrontier:
        out: SourceFrontier = {}
        for f in self._files():
            out[self._partition(f)] = _complete_prefix(f)
        return out

    def read(self, spark: Any, start: SourceFrontier, end: SourceFrontier) -> Any:
        """The records in ``[start, end)`` (driver: plans; executors: decode).

        Raises InvalidUsage for format ``avro`` if ``spark`` lacks spark-avro.
        """
        if self.avro_schema is None:
            return self._lines(spark, start, end, self.schema)
        lines = self._lines(spark, start, end, pa.schema([(_DATUM, pa.binary())]))
        return _from_avro(lines, self.avro_schema, self.schema)

    def _lines(
        self, spark: Any, start: SourceFrontier, end: SourceFrontier, line_schema: pa.Schema
    ) -> Any:
        """The lines of ``[start, end)`` decoded by the tasks into ``line_schema``."""
        base = self.path if self.path.is_dir() else self.path.parent
        ranges = [(p, start.get(p, 0), hi) for p, hi in sorted(end.items()) if hi > start.get(p, 0)]
        fields = [
            ("_partition", pa.string()),
            ("_offset", pa.int64()),
            *zip(line_schema.names, line_schema.types, strict=True),
            (ERR, pa.string()),
        ]
        out_schema = pa.schema(fields)
        from timeshard.spark.session import arrow_to_spark_schema

        spark_schema = arrow_to_spark_schema(out_schema)
        if not ranges:
            return spark.createDataFrame([], spark_schema)
        seeds = spark.createDataFrame(ranges, "p string, lo long, hi long").repartition(len(ranges))
        return seeds.mapInArrow(
            _decoder(str(base), self.format, line_schema.serialize().to_pybytes()),
            spark_schema,
        )


def avro_payload_schema(avro_schema: str) -> pa.Schema:
    """The Arrow columns of an Avro record schema given as JSON text (driver).

    Every column is nullable (err rows have null data). Raises InvalidUsage
    for text that is not a record schema, and for a field whose type is not
    a primitive or a union of ``null`` and one primitive, naming the field.
    """
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
    return pa.schema(columns)


def _avro_field_type(name: str, avro_type: Any) -> pa.DataType:
    branches = avro_type if isinstance(avro_type, list) else [avro_type]
    values = [p for p in map(_avro_primitive, branches) if p != "null"]
    if len(branches) <= 2 and len(values) == 1 and values[0] is not None:
        return AVRO_TYPES[values[0]]
    raise InvalidUsage(
        f"avro_schema: field {name!r} has type {json.dumps(avro_type)}; supported are "
        f"{sorted(AVRO_TYPES)} and unions of 'null' with one of them"
    )


def _avro_primitive(avro_type: Any) -> str | None:
    """The primitive an Avro type names (``"long"`` or ``{"type": "long"}``), else None."""
    if isinstance(avro_type, dict) and "logicalType" not in avro_type:
        avro_type = avro_type.get("type")
    if isinstance(avro_type, str) and (avro_type in AVRO_TYPES or avro_type == "null"):
        return avro_type
    return None


def _framed_schema(avro_schema: str) -> str:
    """The schema ``from_avro`` decodes a framed datum with: the record, then the end marker."""
    end = {"type": "fixed", "name": "TimeshardDatumEnd", "size": len(DATUM_END)}
    framed = {
        "type": "record",
        "name": "TimeshardFramedDatum",
        "namespace": "timeshard.file_source",
        "fields": [
            {"name": "value", "type": json.loads(avro_schema)},
            {"name": "end", "type": end},
        ],
    }
    return json.dumps(framed)


def _from_avro(lines: Any, avro_schema: str, payload: pa.Schema) -> Any:
    """Decode the framed ``_datum`` column of ``lines`` with spark-avro (a plan; runs in the JVM).

    A row whose ``end`` is not :data:`DATUM_END` (all fields null: ``from_avro``
    failed; another value: bytes were left over) becomes an err row at its
    position, data columns null.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    from timeshard.spark.session import arrow_to_spark_schema, requires_spark_avro

    with requires_spark_avro():  # the plan is analysed here, on the driver
        value = from_avro(F.col(_DATUM), _framed_schema(avro_schema), {"mode": "PERMISSIVE"})
        decoded = lines.withColumn(_VALUE, value)
    ok = F.coalesce(F.col(_VALUE).getField("end") == F.lit(DATUM_END), F.lit(False))
    message = F.concat(
        F.col("_partition"),
        F.lit("@"),
        F.col("_offset").cast("string"),
        F.lit(f": AvroDecodeError: {AVRO_DECODE_ERROR}"),
    )
    err = F.when(F.col(ERR).isNull() & ~ok, message).otherwise(F.col(ERR))
    record = F.col(_VALUE).getField("value")
    columns = [
        F.when(ok, record.getField(f.name)).cast(f.dataType).alias(f.name)
        for f in arrow_to_spark_schema(payload)
    ]
    return decoded.select("_partition", "_offset", *columns, err.alias(ERR))


def _complete_prefix(file: Path) -> int:
    """Bytes up to and including the last newline of ``file``."""
    size = file.stat().st_size
    if size == 0:
        return 0
    with open(file, "rb") as f:
        block = 1 << 16
        pos = size
        while pos > 0:
            step = min(block, pos)
            f.seek(pos - step)
            chunk = f.read(step)
            i = chunk.rfind(b"\n")
            if i >= 0:
                return pos - step + i + 1
            pos -= step
    return 0


def _decoder(base: str, fmt: str, schema_ipc: bytes) -> Any:
    """The task function (executors): read byte ranges, split lines, decode."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema = pa.ipc.read_schema(pa.py_buffer(schema_ipc))
        out_fields = [
            pa.field("_partition", pa.string()),
            pa.field("_offset", pa.int64()),
            *schema,
            pa.field(ERR, pa.string()),
        ]
        out_schema = pa.schema(out_fields)
        for batch in batches:
            for seed in batch.to_pylist():
                rows = list(_decode_range(base, seed["p"], seed["lo"], seed["hi"], fmt, schema))
                if rows:
                    yield pa.RecordBatch.from_pylist(rows, schema=out_schema)

    return run


def _decode_range(
    base: str, partition: str, lo: int, hi: int, fmt: str, schema: pa.Schema
) -> Iterator[dict[str, Any]]:
    path = os.path.join(base, partition)
    with open(path, "rb") as f:
        f.seek(lo)
        data = f.read(hi - lo)
    offset = lo
    for raw in data.split(b"\n")[:-1]:
        row = {"_partition": partition, "_offset": offset, ERR: None}
        try:
            row.update(_decode_line(raw, fmt, schema))
        except Exception as e:  # every decode failure becomes an err row
            row.update(dict.fromkeys(schema.names))
            row[ERR] = f"{partition}@{offset}: {type(e).__name__}: {str(e)[:300]}"
        offset += len(raw) + 1
        yield row


def _decode_line(raw: bytes, fmt: str, schema: pa.Schema) -> dict[str, Any]:
    if fmt == "bytes":
        return {"data": raw}
    if fmt == "avro":
        try:
            datum = base64.b64decode(raw.removesuffix(b"\r"), validate=True)
        except binascii.Error as e:
            raise ValueError(f"invalid base64: {e}") from None
        return {_DATUM: datum + DATUM_END}
    text = raw.decode("utf-8")
    if fmt == "text":
        return {"text": text}
    if fmt == "json":
        value = json.loads(text)
        if not isinstance(value, dict):
            raise ValueError(f"expected a JSON object, got {type(value).__name__}")
        values: list[Any] = [value.get(n) for n in schema.names]
    else:
        [fields] = list(csv.reader(io.StringIO(text)))
        values = list(fields)
        if len(values) != len(schema.names):
            raise ValueError(f"expected {len(schema.names)} fields, got {len(values)}")
    out: dict[str, Any] = {}
    for name, typ, v in zip(schema.names, schema.types, values, strict=True):
        if v is None or (fmt == "csv" and v == ""):
            out[name] = None
            continue
        if fmt == "csv" and not pa.types.is_string(typ):
            out[name] = pa.scalar(v, pa.string()).cast(typ).as_py()
        else:
            out[name] = pa.array([v], typ)[0].as_py()
    return out


__all__ = [
    "AVRO_DECODE_ERROR",
    "AVRO_TYPES",
    "DATUM_END",
    "FORMATS",
    "FileSource",
    "avro_payload_schema",
]
