"""Parts: the Parquet files a batch is made of.

A part is a Parquet file whose columns are the shard's data columns followed by
``_ts`` (int64, the update's time), ``_diff`` (int64, its signed multiplicity)
and ``_err`` (string, null for ok rows; for an err row it holds the error and
the data columns may be null). Any Parquet reader can read a part.

This module is the pyarrow path: it encodes and decodes parts and consolidates
updates without Spark. It runs wherever it is called: on the driver for small
data, inside Spark tasks (executors) for the parallel path.

Invariants:

1. A part's schema is exactly :func:`updates_schema` of the shard's schema.
2. Consolidation sums ``_diff`` per distinct ``(data, _ts, _err)`` and drops
   zero sums.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from timeshard.errors import InvalidUsage, PartError

TS = "_ts"
DIFF = "_diff"
ERR = "_err"
SYSTEM_COLUMNS = (TS, DIFF, ERR)


@dataclass(frozen=True, slots=True)
class PartMeta:
    """A part as the shard state references it."""

    key: str
    size_in_bytes: int
    num_rows: int
    ts_min: int | None = None
    ts_max: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "size": self.size_in_bytes,
            "rows": self.num_rows,
            "ts_min": self.ts_min,
            "ts_max": self.ts_max,
        }

    @staticmethod
    def from_json(value: Any) -> PartMeta:
        return PartMeta(
            str(value["key"]),
            int(value["size"]),
            int(value["rows"]),
            value.get("ts_min"),
            value.get("ts_max"),
        )


def check_data_schema(schema: pa.Schema) -> pa.Schema:
    """Return ``schema`` if it can be a shard's data schema, else raise InvalidUsage."""
    if not isinstance(schema, pa.Schema):
        raise InvalidUsage(f"a shard schema must be a pyarrow.Schema, got {type(schema).__name__}")
    names = schema.names
    if len(set(names)) != len(names):
        raise InvalidUsage(f"schema has duplicate column names: {names}")
    clash = [n for n in names if n in SYSTEM_COLUMNS]
    if clash:
        raise InvalidUsage(f"schema columns {clash} clash with system columns {SYSTEM_COLUMNS}")
    return schema


def updates_schema(data_schema: pa.Schema) -> pa.Schema:
    """The schema of a part: data columns (nullable) plus ``_ts``, ``_diff``, ``_err``."""
    fields = [f.with_nullable(True) for f in data_schema]
    fields += [
        pa.field(TS, pa.int64(), nullable=False),
        pa.field(DIFF, pa.int64(), nullable=False),
        pa.field(ERR, pa.string(), nullable=True),
    ]
    return pa.schema(fields)


def conform(table: pa.Table, data_schema: pa.Schema) -> pa.Table:
    """Cast ``table`` to the part schema, adding a null ``_err`` if it lacks one.

    Raises InvalidUsage naming the columns when the table does not match.
    """
    target = updates_schema(data_schema)
    if ERR not in table.column_names:
        table = table.append_column(ERR, pa.nulls(table.num_rows, pa.string()))
    if set(table.column_names) != set(target.names):
        raise InvalidUsage(
            f"schema mismatch: updates have columns {table.column_names}, "
            f"the shard expects {target.names}"
        )
    table = table.select(target.names)
    try:
        return table.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise InvalidUsage(
            f"schema mismatch: updates {table.schema} do not cast to {target}: {e}"
        ) from e


def encode_part(table: pa.Table) -> bytes:
    """Serialize a conformed table as Parquet bytes."""
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def decode_part(key: str, data: bytes | None, data_schema: pa.Schema) -> pa.Table:
    """Parse a part's bytes; a missing or corrupt part raises PartError."""
    if data is None:
        raise PartError(key, "missing")
    try:
        table = pq.read_table(pa.BufferReader(data))
    except Exception as e:  # pyarrow raises several types for corrupt input
        raise PartError(key, f"corrupt: {e}") from e
    target = updates_schema(data_schema)
    if table.schema.names != target.names:
        raise PartError(key, f"corrupt: columns {table.schema.names}, expected {target.names}")
    try:
        return table.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise PartError(key, f"corrupt: {e}") from e


def ts_bounds(table: pa.Table) -> tuple[int | None, int | None]:
    """The least and greatest ``_ts`` of ``table`` (None, None if empty)."""
    if table.num_rows == 0:
        return None, None
    mm = pc.min_max(table.column(TS))
    return int(mm["min"].as_py()), int(mm["max"].as_py())


def advance_times(table: pa.Table, as_of: int) -> pa.Table:
    """Keep updates at times ``<= as_of`` and set their time to ``as_of``."""
    kept = table.filter(pc.less_equal(table.column(TS), as_of))
    idx = kept.schema.get_field_index(TS)
    times = pa.repeat(pa.scalar(as_of, pa.int64()), kept.num_rows)
    return kept.set_column(idx, kept.schema.field(TS), times)


def advance_since(table: pa.Table, since: int) -> pa.Table:
    """Advance every time below ``since`` to ``since`` (compaction)."""
    idx = table.schema.get_field_index(TS)
    ts = table.column(TS)
    advanced = pc.max_element_wise(ts, pa.scalar(since, pa.int64()))
    return table.set_column(idx, table.schema.field(TS), advanced)


def consolidate(table: pa.Table) -> pa.Table:
    """Sum ``_diff`` per distinct ``(data, _ts, _err)``, drop zeros, sort by ``_ts``."""
    keys = [n for n in table.column_names if n != DIFF]
    if table.num_rows == 0:
        return table
    try:
        grouped = table.group_by(keys, use_threads=False).aggregate([(DIFF, "sum")])
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return _consolidate_python(table)
    renamed = [DIFF if n == f"{DIFF}_sum" else n for n in grouped.column_names]
    grouped = grouped.rename_columns(renamed).select(table.column_names).cast(table.schema)
    grouped = grouped.filter(pc.not_equal(grouped.column(DIFF), 0))
    return grouped.sort_by([(TS, "ascending")])


def _consolidate_python(table: pa.Table) -> pa.Table:
    """Consolidation for column types Arrow cannot group by (lists, maps, ...)."""
    keys = [n for n in table.column_names if n != DIFF]
    sums: dict[Any, int] = {}
    rows: dict[Any, dict[str, Any]] = {}
    for row in table.to_pylist():
        k = repr([row[n] for n in keys])
        sums[k] = sums.get(k, 0) + int(row[DIFF])
        rows.setdefault(k, row)
    out = []
    for k, total in sums.items():
        if total != 0:
            out.append({**rows[k], DIFF: total})
    out.sort(key=lambda r: r[TS])
    return pa.Table.from_pylist(out, schema=table.schema)


__all__ = [
    "DIFF",
    "ERR",
    "SYSTEM_COLUMNS",
    "TS",
    "PartMeta",
    "advance_since",
    "advance_times",
    "check_data_schema",
    "conform",
    "consolidate",
    "decode_part",
    "encode_part",
    "ts_bounds",
    "updates_schema",
]
