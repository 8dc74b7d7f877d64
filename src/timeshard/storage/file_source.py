"""FILE sources: an append-only file, or a directory of JSON-lines or CSV files.

Each file is a partition, named by its path relative to the source root; its
FromTime is a byte offset. ``upper()`` is, per file, the offset just past its
last complete line, so a line being written is not read until its newline
arrives; lines appended later are picked up by the next read, and new files
in the directory become new partitions.

``read`` splits the byte ranges over Spark tasks (one per file range); each
task reads its bytes, splits lines, and decodes them:

* ``json``: an object per line, fields by the declared schema;
* ``csv``: comma-separated values in schema order (no header);
* ``text``: the line as column ``text``; ``bytes``: the raw line as ``data``.

A line that cannot be decoded (malformed JSON, a wrong field type, a wrong
number of CSV fields, invalid UTF-8) becomes an err row: data columns null,
``_err`` naming the file, the byte offset and the error. It is kept, and the
source goes on.

What runs where: the driver lists files and sizes; the executors read and
decode. The task function closes over plain values (root path, schema as
Arrow IPC bytes, format name).
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage
from timeshard.persist._internal.parts import ERR
from timeshard.storage.reclock import SourceFrontier

FORMATS = ("json", "csv", "text", "bytes")


class FileSource:
    """A directory (or one file) of newline-delimited records."""

    def __init__(
        self, name: str, path: str | Path, fmt: str, schema: pa.Schema | None = None
    ) -> None:
        if fmt not in FORMATS:
            raise InvalidUsage(f"FILE format must be one of {FORMATS}, got {fmt!r}")
        if fmt in ("json", "csv") and schema is None:
            raise InvalidUsage(f"FILE format {fmt!r} needs a declared schema")
        self.name = name
        self.path = Path(path).resolve()
        self.format = fmt
        if fmt == "text":
            schema = pa.schema([("text", pa.string())])
        elif fmt == "bytes":
            schema = pa.schema([("data", pa.binary())])
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
        base = self.path if self.path.is_dir() else self.path.parent
        ranges = [(p, start.get(p, 0), hi) for p, hi in sorted(end.items()) if hi > start.get(p, 0)]
        fields = [
            ("_partition", pa.string()),
            ("_offset", pa.int64()),
            *zip(self.schema.names, self.schema.types, strict=True),
            (ERR, pa.string()),
        ]
        out_schema = pa.schema(fields)
        from timeshard.spark.session import arrow_to_spark_schema

        spark_schema = arrow_to_spark_schema(out_schema)
        if not ranges:
            return spark.createDataFrame([], spark_schema)
        seeds = spark.createDataFrame(ranges, "p string, lo long, hi long").repartition(len(ranges))
        return seeds.mapInArrow(
            _decoder(str(base), self.format, self.schema.serialize().to_pybytes()),
            spark_schema,
        )


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


__all__ = ["FORMATS", "FileSource"]
