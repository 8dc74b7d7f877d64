"""Parts: the Parquet files a batch is made of.

A part is a Parquet file whose columns are the shard's data columns followed by
``_ts`` (int64, the update's time), ``_diff`` (int64, its signed multiplicity)
and ``_err`` (string, null for ok rows; for an err row it holds the error and
the data columns may be null). Any Parquet reader can read a part.

This module is the pyarrow path: it encodes and decodes parts and consolidates
updates without Spark. It runs wherever it is called: on the driver for small
data, inside Spark tasks (executors) for the parallel path.

Integrity. The state records each part's size and the SHA-256 of its bytes,
whether it was written through this module (:func:`encode_part`, then
``blobio.write_part``) or by a Spark task; every part carries Parquet page
checksums. Before decoding, :func:`check_part_bytes` compares the bytes with
what the state recorded, so a part that was truncated, extended or had any
byte flipped raises PartError naming it instead of decoding into other data;
Spark's reader verifies the page checksums. Parts that Spark tasks wrote
before they recorded a digest are checked by their size, Parquet's own
structure and a full validation of the decoded arrays (UTF-8 included) only.

Times. Every part records the least and greatest ``_ts`` of its rows
(``ts_min``/``ts_max``) and, when it has at most :data:`MAX_PART_TIMES`
distinct times, all of them (``times``). Readers answer "which times in
``[lower, upper)`` have updates" from this metadata alone
(:meth:`PartMeta.times_in`, :meth:`PartMeta.has_update_in`), and read a part's
``_ts`` column only when the metadata cannot tell: a part from a state written
before ``times`` existed, or with more distinct times than the bound.

Errors. Every part written now also records how many of its rows are err rows
(``err_rows``), so a reader knows a snapshot has no error without reading it
(a point SELECT of ``timeshard serve``).

Invariants:

1. A part's schema is exactly :func:`updates_schema` of the shard's schema.
2. Consolidation sums ``_diff`` per distinct ``(data, _ts, _err)`` exactly
   and drops zero sums; a sum beyond int64 raises :class:`DiffOverflow`
   naming the update, it never wraps (Arrow's grouped sum wraps, so it is used
   only where ``rows * max |diff|`` bounds every sum inside int64).
3. A part that is missing, or whose bytes do not match its recorded size and
   digest, or that does not decode to valid arrays of the part schema, raises
   PartError naming its key; it is never skipped and never decoded leniently.
4. A part's recorded ``times``, when present, are exactly the distinct ``_ts``
   of its rows, ascending; each lies in ``[ts_min, ts_max]``.
5. A part's recorded ``err_rows``, when present, is exactly the number of its
   rows whose ``_err`` is set.
"""

from __future__ import annotations

import hashlib
import io
import re
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from timeshard.errors import InvalidUsage, PartError, TimeshardError
from timeshard.location.blob import check_blob_key

TS = "_ts"
DIFF = "_diff"
ERR = "_err"
SYSTEM_COLUMNS = (TS, DIFF, ERR)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


_INT64 = 2**63


class DiffOverflow(TimeshardError, OverflowError):
    """The diffs of one update sum beyond int64, the type ``_diff`` is stored as.

    A data error, not a fault: retrying cannot help, and a wrapped sum (a diff
    of the other sign) must never be read or written back by compaction. The
    writers of the shard appended multiplicities that do not fit.
    """


MAX_PART_TIMES = 64
"""How many distinct ``_ts`` a part records in :attr:`PartMeta.times`, at most.

A part with more distinct times records only its bounds; a reader that needs
its times in an interval the bounds do not settle reads its ``_ts`` column.
The bound keeps the state document small: a part adds at most this many
integers to it. Decoding accepts any number, so the bound may change.
"""


@dataclass(frozen=True, slots=True)
class PartMeta:
    """A part as the shard state references it.

    ``sha256`` is the hex digest of the part's bytes, or None for a part whose
    writer recorded none (parts written by Spark tasks); it is stored only when
    known, so states written before it existed decode unchanged.

    ``times`` are the distinct ``_ts`` of the part's rows, ascending, or None
    when they are not recorded (more than :data:`MAX_PART_TIMES`, or a part
    from a state written before they existed); stored only when recorded.
    ``ts_min``/``ts_max`` are None only for parts of such older states.

    ``err_rows`` is how many of the part's rows are err rows (``_err`` set),
    or None when not recorded (a part from a state written before it
    existed); stored only when recorded. A reader that finds 0 in every part
    of a snapshot knows the snapshot holds no error without reading it.
    """

    key: str
    size_in_bytes: int
    num_rows: int
    ts_min: int | None = None
    ts_max: int | None = None
    sha256: str | None = None
    times: tuple[int, ...] | None = None
    err_rows: int | None = None

    @property
    def may_hold_errors(self) -> bool:
        """Whether the part may have an err row (reads nothing): False only when it has
        no row or its recorded ``err_rows`` is 0."""
        return self.num_rows > 0 and self.err_rows != 0

    def times_in(self, lower: int, upper: int) -> tuple[int, ...] | None:
        """The part's distinct times in ``[lower, upper)``, or None if its metadata cannot tell.

        Reads nothing. It can tell when the part has no rows, when its bounds
        lie outside the interval, when it has a single time, or when its
        ``times`` are recorded.
        """
        if self.num_rows == 0 or lower >= upper:
            return ()
        if self.times is not None:
            return tuple(t for t in self.times if lower <= t < upper)
        if self.ts_min is None or self.ts_max is None:
            return None
        if self.ts_max < lower or self.ts_min >= upper:
            return ()
        if self.ts_min == self.ts_max:
            return (self.ts_min,)
        return None

    def has_update_in(self, lower: int, upper: int) -> bool | None:
        """Whether the part has a row at a time in ``[lower, upper)``; None if its metadata
        cannot tell (its bounds straddle the interval and its times are not recorded)."""
        times = self.times_in(lower, upper)
        if times is not None:
            return bool(times)
        bounds = (self.ts_min, self.ts_max)
        if any(t is not None and lower <= t < upper for t in bounds):
            return True
        return None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "key": self.key,
            "size": self.size_in_bytes,
            "rows": self.num_rows,
            "ts_min": self.ts_min,
            "ts_max": self.ts_max,
        }
        if self.sha256 is not None:
            doc["sha256"] = self.sha256
        if self.times is not None:
            doc["times"] = list(self.times)
        if self.err_rows is not None:
            doc["err_rows"] = self.err_rows
        return doc

    @staticmethod
    def from_json(value: Any) -> PartMeta:
        """Decode a stored part; ValueError, KeyError or TypeError if it is malformed."""
        key = value["key"]
        if not isinstance(key, str):
            raise TypeError(f"part key must be a string, got {key!r}")
        check_blob_key(key)
        sha256 = value.get("sha256")
        if sha256 is not None and not (isinstance(sha256, str) and _SHA256.match(sha256)):
            raise ValueError(f"part {key!r}: sha256 must be 64 hex digits, got {sha256!r}")
        part = PartMeta(
            key,
            _count(value["size"], "size", key),
            _count(value["rows"], "rows", key),
            _optional_int(value.get("ts_min"), "ts_min", key),
            _optional_int(value.get("ts_max"), "ts_max", key),
            sha256,
            err_rows=_err_rows(value.get("err_rows"), value["rows"], key),
        )
        times = value.get("times")
        if times is None:
            return part
        return replace(part, times=_times(times, part))


def _err_rows(value: Any, rows: int, key: str) -> int | None:
    """A recorded err row count (at most the part's rows), else ValueError naming the part."""
    if value is None:
        return None
    count = _count(value, "err_rows", key)
    if count > rows:
        raise ValueError(f"part {key!r}: err_rows {count} is more than its {rows} rows")
    return count


def _times(value: Any, part: PartMeta) -> tuple[int, ...]:
    """Recorded times as invariant 4 has them, else ValueError naming the part."""
    key = part.key
    if not isinstance(value, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in value
    ):
        raise ValueError(f"part {key!r}: times must be a list of integers, got {value!r}")
    times = tuple(value)
    if any(a >= b for a, b in pairwise(times)):
        raise ValueError(f"part {key!r}: times must be ascending and distinct, got {value!r}")
    if len(times) > part.num_rows or (part.num_rows > 0) != bool(times):
        raise ValueError(f"part {key!r}: {len(times)} times for {part.num_rows} rows")
    if times and not (
        part.ts_min is not None
        and part.ts_max is not None
        and part.ts_min <= times[0]
        and times[-1] <= part.ts_max
    ):
        raise ValueError(
            f"part {key!r}: times {times[0]}..{times[-1]} are not within "
            f"[ts_min, ts_max] = [{part.ts_min}, {part.ts_max}]"
        )
    return times


def err_row_count(table: pa.Table) -> int:
    """How many rows of ``table`` (with an ``_err`` column) are err rows, as
    :attr:`PartMeta.err_rows` records it."""
    column = table.column(ERR)
    return int(len(column) - column.null_count)


def distinct_times(
    ts: pa.Array | pa.ChunkedArray, known: tuple[int, ...] | None = ()
) -> tuple[int, ...] | None:
    """The distinct non-null values of ``ts`` and ``known``, ascending, as
    :attr:`PartMeta.times` records them: None if there are more than
    :data:`MAX_PART_TIMES`, or if ``known`` is None (already too many)."""
    if known is None:
        return None
    unique = pc.unique(pc.drop_null(ts))
    if len(unique) > MAX_PART_TIMES:
        return None
    merged = set(known).union(int(t) for t in unique.to_pylist())
    return tuple(sorted(merged)) if len(merged) <= MAX_PART_TIMES else None


def _count(value: Any, what: str, key: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"part {key!r}: {what} must be a non-negative integer, got {value!r}")
    return value


def _optional_int(value: Any, what: str, key: str) -> int | None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise ValueError(f"part {key!r}: {what} must be an integer or null, got {value!r}")
    return value


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


def check_spark_readable(schema: pa.Schema) -> pa.Schema:
    """Return ``schema`` if Spark reads its parts back as written, else raise InvalidUsage.

    For a new shard's schema (a stored one is only :func:`check_data_schema`'s): Spark
    reads no nanosecond timestamps and no times of day (they failed as corrupt parts),
    and tells no column names apart by case.
    """
    folded: dict[str, str] = {}
    for name in schema.names:
        other = folded.setdefault(name.lower(), name)
        if other != name:
            raise InvalidUsage(
                f"schema columns {other!r} and {name!r} differ only in case, and Spark "
                "does not tell them apart: rename one"
            )
    for field in schema:
        for inner in _types_in(field.type):
            if pa.types.is_timestamp(inner) and inner.unit == "ns":
                raise InvalidUsage(
                    f"column {field.name!r} is {field.type}: Spark reads no nanosecond "
                    "timestamps; use microseconds (pa.timestamp('us'))"
                )
            if pa.types.is_time(inner):
                raise InvalidUsage(
                    f"column {field.name!r} is {field.type}: Spark reads no time of day; "
                    "store it as a string or a duration"
                )
    return schema


def _types_in(t: pa.DataType) -> list[pa.DataType]:
    """``t`` and every type nested in it."""
    out = [t]
    for i in range(t.num_fields):
        out += _types_in(t.field(i).type)
    return out


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

    Raises InvalidUsage naming the columns when the table does not match, or
    ``_ts`` or ``_diff`` holds a null.
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
    for name in (TS, DIFF):
        nulls = table.column(name).null_count
        if nulls:
            raise InvalidUsage(
                f"column {name} is null in {nulls} of {table.num_rows} rows: every update "
                "needs a time and a diff"
            )
    try:
        return table.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise InvalidUsage(
            f"schema mismatch: updates {table.schema} do not cast to {target}: {e}"
        ) from e


def encode_part(table: pa.Table) -> bytes:
    """Serialize a conformed table as Parquet bytes, with page checksums."""
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", write_page_checksum=True)
    return sink.getvalue()


def part_digest(data: bytes) -> str:
    """The SHA-256 hex digest of a part's bytes, as :attr:`PartMeta.sha256` records it."""
    return hashlib.sha256(data).hexdigest()


def check_part_bytes(part: PartMeta, data: bytes | None) -> bytes:
    """Return ``data`` if it is the part the state recorded, else raise PartError.

    Missing data is ``missing``; a size or digest other than the recorded one
    is ``corrupt``.
    """
    if data is None:
        raise PartError(part.key, "missing")
    if len(data) != part.size_in_bytes:
        raise PartError(
            part.key, f"corrupt: it has {len(data)} bytes, the state says {part.size_in_bytes}"
        )
    if part.sha256 is not None and part_digest(data) != part.sha256:
        raise PartError(part.key, "corrupt: its SHA-256 differs from the one the state recorded")
    return data


def decode_part(key: str, data: bytes | None, data_schema: pa.Schema) -> pa.Table:
    """Parse a part's bytes; a missing or corrupt part raises PartError.

    Page checksums are verified where the part has them, and the decoded
    arrays are fully validated (offsets, UTF-8), so garbage never leaves here.
    """
    if data is None:
        raise PartError(key, "missing")
    target = updates_schema(data_schema)
    try:
        table = pq.read_table(pa.BufferReader(data), page_checksum_verification=True)
        names = table.schema.names
        if names != target.names:
            raise PartError(key, f"corrupt: columns {names}, expected {target.names}")
        table = table.cast(target)
        table.validate(full=True)
    except PartError:
        raise
    except Exception as e:  # pyarrow raises several types for corrupt input
        raise PartError(key, f"corrupt: {type(e).__name__}: {str(e)[:300]}") from e
    return table


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
    for i, field in enumerate(table.schema):
        if any(t in _FLOATS for t in _types_in(field.type)):
            column = pa.chunked_array(
                [_normalized_floats(chunk) for chunk in table.column(i).chunks], field.type
            )
            table = table.set_column(i, field, column)
    summed = DIFF  # the sum is named ``<column>_sum``: no data column may have that name
    while summed in keys or f"{summed}_sum" in keys:
        summed = f"_{summed}"
    if not _sums_fit_int64(table.column(DIFF)):
        return _consolidate_python(table)
    renamed_diff = table.rename_columns([summed if n == DIFF else n for n in table.column_names])
    try:
        grouped = renamed_diff.group_by(keys, use_threads=False).aggregate([(summed, "sum")])
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return _consolidate_python(table)
    renamed = [DIFF if n == f"{summed}_sum" else n for n in grouped.column_names]
    grouped = grouped.rename_columns(renamed).select(table.column_names).cast(table.schema)
    grouped = grouped.filter(pc.not_equal(grouped.column(DIFF), 0))
    return grouped.sort_by([(TS, "ascending")])


_FLOATS = (pa.float32(), pa.float64())


def _normalized_floats(array: pa.Array) -> pa.Array:
    """``array`` with every -0.0 made 0.0 and every NaN the one NaN, at any depth of
    structs, lists and maps, as Spark groups floats (Arrow keeps them apart: a NaN that ``0/0``
    made has another sign bit than ``float('nan')``). float16 is left as it is: Arrow
    compares none."""
    t = array.type
    if t in _FLOATS:
        zero, nan = pa.scalar(0.0, t), pa.scalar(float("nan"), t)
        array = pc.if_else(pc.equal(array, zero), zero, array)
        return pc.if_else(pc.is_nan(array), nan, array)
    if pa.types.is_struct(t):
        children = [_normalized_floats(child) for child in array.flatten()]
        return pa.StructArray.from_arrays(children, fields=list(t), mask=array.is_null())
    if pa.types.is_map(t):
        offsets = array.offsets  # of a slice: into all the entries, from offsets[0]
        first = offsets[0].as_py()
        count = offsets[-1].as_py() - first
        keys = _normalized_floats(array.keys.slice(first, count))
        items = _normalized_floats(array.items.slice(first, count))
        offsets = pc.subtract(offsets, pa.scalar(first, offsets.type))
        return pa.MapArray.from_arrays(offsets, keys, items, type=t, mask=array.is_null())
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        cls = pa.ListArray if pa.types.is_list(t) else pa.LargeListArray
        offsets = array.offsets  # of a slice: into all the values, from offsets[0]
        first = offsets[0].as_py()
        values = _normalized_floats(array.values.slice(first, offsets[-1].as_py() - first))
        offsets = pc.subtract(offsets, pa.scalar(first, offsets.type))
        return cls.from_arrays(offsets, values, type=t, mask=array.is_null())
    return array


def _sums_fit_int64(diffs: pa.ChunkedArray) -> bool:
    """Whether no sum of ``diffs`` can leave int64 (``len * max |diff|`` is inside it):
    then Arrow's grouped sum, which wraps, is exact."""
    mm = pc.min_max(diffs)
    low, high = mm["min"].as_py() or 0, mm["max"].as_py() or 0
    return len(diffs) * max(-low, high) < _INT64


def _unordered_maps(value: Any, t: pa.DataType) -> Any:
    """``value`` (of Arrow type ``t``, as ``to_pylist`` gives it) with every map's entries,
    at any depth, in one order: by the ``repr`` of their keys (a map's keys are distinct),
    so that two maps of the same entries are one grouping key."""
    if value is None:
        return None
    if pa.types.is_map(t):
        entries = [
            (_unordered_maps(k, t.key_type), _unordered_maps(v, t.item_type)) for k, v in value
        ]
        return sorted(entries, key=lambda entry: repr(entry[0]))
    if pa.types.is_struct(t):
        return {f.name: _unordered_maps(value[f.name], f.type) for f in t}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [_unordered_maps(v, t.value_type) for v in value]
    return value


def _consolidate_python(table: pa.Table) -> pa.Table:
    """Consolidation for column types Arrow cannot group by (lists, maps, ...), and
    for diffs whose sums may leave int64 (summed as Python ints, and checked)."""
    keys = [n for n in table.column_names if n != DIFF]
    types = [table.schema.field(n).type for n in keys]
    maps = any(pa.types.is_map(t) for n in keys for t in _types_in(table.schema.field(n).type))
    sums: dict[Any, int] = {}
    rows: dict[Any, dict[str, Any]] = {}
    for row in table.to_pylist():
        if maps:  # a map is one value whatever the order of its entries (as in Spark)
            k = repr([_unordered_maps(row[n], t) for n, t in zip(keys, types, strict=True)])
        else:
            k = repr([row[n] for n in keys])
        sums[k] = sums.get(k, 0) + int(row[DIFF])
        rows.setdefault(k, row)
    out = []
    for k, total in sums.items():
        if not -_INT64 <= total < _INT64:
            row = rows[k]
            data = tuple(row[n] for n in keys if n not in SYSTEM_COLUMNS)
            what = data if row[ERR] is None else f"the error {row[ERR]!r}"
            raise DiffOverflow(
                f"the diffs of {what} at time {row[TS]} sum to {total}, beyond int64: "
                "the shard's writers appended multiplicities that do not fit"
            )
        if total != 0:
            out.append({**rows[k], DIFF: total})
    out.sort(key=lambda r: r[TS])
    return pa.Table.from_pylist(out, schema=table.schema)


__all__ = [
    "DIFF",
    "ERR",
    "DiffOverflow",
    "MAX_PART_TIMES",
    "SYSTEM_COLUMNS",
    "TS",
    "PartMeta",
    "advance_since",
    "advance_times",
    "check_data_schema",
    "check_spark_readable",
    "check_part_bytes",
    "conform",
    "consolidate",
    "decode_part",
    "distinct_times",
    "encode_part",
    "err_row_count",
    "part_digest",
    "ts_bounds",
    "updates_schema",
]
