"""A KAFKA source's records decoded in Python: the key's and the value's columns, or
an err row.

Each side of a record (the key and the value) decodes by its format: ``json``
(an object, fields by the declared columns), ``text`` (UTF-8), ``bytes`` (as
they are); an ``avro`` side is only passed on as its raw bytes, for spark-avro
on the JVM (:mod:`timeshard.storage.kafka_avro`). A batch whose every record
decodes exactly with Arrow is decoded as a whole (:func:`arrow_decoded`); else
it goes record by record (:func:`decode_record`), which finds the err rows. The
semantics are the KAFKA source's module doc (:mod:`timeshard.storage.kafka_source`).

Invariants:

1. A record that does not decode is an err row, never a fault: ``_err`` reads
   ``<topic>/<partition>@<offset>: <error>``, and its value columns are null
   (its key columns too if the key is what did not decode).
2. A null key or value (a tombstone) decodes to null columns.
3. Arrow's decoding of a batch gives the rows the record-by-record decoding
   gives, or nothing (None), never other rows.

What runs where: the driver plans the decoding (``mapInArrow`` over the function
:func:`_decoder` makes, its schemas passed as Arrow IPC bytes); the Spark tasks
run that function on the fetched records.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from timeshard.persist._internal.parts import ERR
from timeshard.storage.file_source import DECODE_ERRORS

FORMATS = ("json", "text", "bytes", "avro")
METADATA: dict[str, pa.DataType] = {
    "partition": pa.int32(),
    "offset": pa.int64(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "headers": pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
}
_BATCH_ROWS = 4096


def _raw_column(side: str) -> str:
    return f"_avro_{side}"


def decode_record(
    raw: bytes | None, fmt: str | None, side: str, schema: pa.Schema
) -> dict[str, Any]:
    """The columns of a key or value (``raw`` None: all null). Raises if it does not decode.

    An ``avro`` side is only passed on, as its raw bytes (decoded later, on the JVM).
    """
    from timeshard.storage.file_source import decode_payload

    if fmt is None or raw is None:
        return dict.fromkeys(schema.names)
    if fmt == "avro":
        return {_raw_column(side): raw}
    if fmt == "json":
        return decode_payload(raw, "json", schema)
    if fmt == "text":
        return {side: raw.decode("utf-8")}
    return {side: raw}


def _decoder(
    topic: str,
    key_format: str | None,
    value_format: str,
    key_ipc: bytes,
    value_ipc: bytes,
    metadata: tuple[str, ...],
    out_ipc: bytes,
) -> Any:
    """The task function (executors): Kafka records -> rows or err rows."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        key_schema = pa.ipc.read_schema(pa.py_buffer(key_ipc))
        value_schema = pa.ipc.read_schema(pa.py_buffer(value_ipc))
        out_schema = pa.ipc.read_schema(pa.py_buffer(out_ipc))
        null = dict.fromkeys(value_schema.names)  # the value of an err row
        for batch in batches:
            fast = arrow_decoded(batch, key_format, value_format, key_schema, value_schema)
            if fast is not None:
                yield from _with_metadata(fast, batch, metadata, out_schema).to_batches()
                continue
            rows = []
            for rec in batch.to_pylist():
                row: dict[str, Any] = {
                    "_partition": str(rec["partition"]),
                    "_offset": rec["offset"],
                    ERR: None,
                }
                try:
                    row.update(decode_record(rec["key"], key_format, "key", key_schema))
                except DECODE_ERRORS as e:  # a fault (MemoryError) fails the task, never a row
                    row.update(dict.fromkeys(key_schema.names), **null)
                    row[ERR] = _error(topic, rec, e)
                else:  # a value that does not decode keeps its key: the key's error
                    try:
                        row.update(decode_record(rec["value"], value_format, "value", value_schema))
                    except DECODE_ERRORS as e:
                        row.update(null)
                        row[ERR] = _error(topic, rec, e)
                for m in metadata:
                    row[m] = rec[m]
                rows.append(row)
                if len(rows) >= _BATCH_ROWS:
                    yield pa.RecordBatch.from_pylist(rows, schema=out_schema)
                    rows = []
            if rows:
                yield pa.RecordBatch.from_pylist(rows, schema=out_schema)

    return run


def _error(topic: str, record: dict[str, Any], error: Exception) -> str:
    """An err row's ``_err``: where the record is, and why it does not decode."""
    where = f"{topic}/{record['partition']}@{record['offset']}"
    return f"{where}: {type(error).__name__}: {str(error)[:300]}"


def arrow_decoded(
    batch: pa.RecordBatch,
    key_format: str | None,
    value_format: str,
    key_schema: pa.Schema,
    value_schema: pa.Schema,
) -> pa.Table | None:
    """A batch of records decoded by Arrow: ``_partition``, ``_offset``, the key's and the
    value's columns, ``_err`` (all null); None where any record needs :func:`decode_record`.

    Arrow decodes a ``json`` side (``pyarrow.json``, the declared columns as
    its explicit schema, other fields ignored) when every column is an
    integer, a double, a boolean or a string, for which Arrow's reader is
    as strict as :func:`~timeshard.storage.file_source.decode_payload`: no
    coercion, integers in range, a duplicate key refused (the records then
    go one by one, and the last key wins there). It refuses anything it
    cannot read exactly: then None, and the batch goes record by record,
    which finds the err rows. A ``text`` side is cast to UTF-8 (None if any is
    not), a ``bytes`` side passed on; ``avro`` is not decoded here (None).
    A null key or value (a tombstone) decodes to null columns.
    """
    columns: list[pa.ChunkedArray | pa.Array] = [
        pc.cast(batch.column("partition"), pa.string()),
        batch.column("offset"),
    ]
    names = ["_partition", "_offset"]
    for side, fmt, schema in (
        ("key", key_format, key_schema),
        ("value", value_format, value_schema),
    ):
        raw = batch.column(side)
        if fmt is None:
            decoded = [pa.nulls(batch.num_rows, f.type) for f in schema]
        elif fmt == "json":
            found = _arrow_json(raw, schema)
            if found is None:
                return None
            decoded = found
        elif fmt == "text":
            try:
                decoded = [pc.cast(raw, pa.string())]
            except pa.ArrowInvalid:
                return None
        elif fmt == "bytes":
            decoded = [raw]
        else:
            return None
        columns += decoded
        names += schema.names
    columns.append(pa.nulls(batch.num_rows, pa.string()))
    return pa.Table.from_arrays(columns, names=[*names, ERR])


def _arrow_json(raw: pa.Array, schema: pa.Schema) -> list[pa.Array] | None:
    """The columns of a binary array of JSON objects (null stays null), or None (see above)."""
    from timeshard.storage.file_source import arrow_json

    present = pc.is_valid(raw)
    values = raw.filter(present).to_pylist()
    if not values:
        return [pa.nulls(len(raw), f.type) for f in schema]
    table = arrow_json(b"\n".join(values), len(values), schema, unknown="ignore")
    if table is None:
        return None
    if len(values) == len(raw):
        return list(table.columns)
    at = pc.subtract(pc.cumulative_sum(present.cast(pa.int64())), 1)
    return [
        pc.if_else(
            present,
            pc.take(table.column(f.name), pc.max_element_wise(at, 0)),
            pa.scalar(None, f.type),
        )
        for f in schema
    ]


def _with_metadata(
    decoded: pa.Table, batch: pa.RecordBatch, metadata: tuple[str, ...], out: pa.Schema
) -> pa.Table:
    """``decoded`` with the metadata columns the source declares, as ``out``."""
    table = decoded
    for m in metadata:
        table = table.append_column(m, batch.column(m).cast(METADATA[m]))
    return table.select(out.names).cast(out)


__all__ = ["FORMATS", "METADATA", "arrow_decoded", "decode_record"]
