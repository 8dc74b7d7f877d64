"""What the CDC sources (POSTGRES, MYSQL) share in their Spark tasks.

Both read a server's change stream (and a snapshot) in one task that emits
*raw rows*: a table's values as text, with the offset, the diff and an
error, batched as Arrow by :func:`raw_batches`. Each table's raw rows are
then decoded to typed columns in tasks of their own (:class:`DecodeTask`,
with the source's decoding of a text value): a value that does not decode
makes its row an err row naming the table, the other rows go on.

Everything here runs in executors and is pure apart from its input.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from timeshard.persist._internal.parts import DIFF, ERR


def raw_batches(
    rows: Iterable[tuple[Any, ...]], schema: pa.Schema, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """``rows`` (tuples in ``schema``'s column order) as batches of at most ``batch_rows``."""
    buffer: list[tuple[Any, ...]] = []
    for row in rows:
        buffer.append(row)
        if len(buffer) >= batch_rows:
            yield _batch(buffer, schema)
            buffer = []
    if buffer:
        yield _batch(buffer, schema)


def _batch(rows: list[tuple[Any, ...]], schema: pa.Schema) -> pa.RecordBatch:
    columns = list(zip(*rows, strict=True))
    return pa.RecordBatch.from_arrays(
        [pa.array(list(c), type=f.type) for c, f in zip(columns, schema, strict=True)],
        schema=schema,
    )


def decoded_batches(
    batches: Iterable[pa.RecordBatch],
    out: pa.Schema,
    table: str,
    columns: Sequence[Any],
    decode: Callable[[str, Any], Any],
    undecodable: tuple[type[BaseException], ...],
    partition: str | None,
) -> Iterator[pa.RecordBatch]:
    """One table's raw rows (``_offset``, ``_diff``, ``_err``, ``_values``) as ``out``:
    ``_partition``, ``_offset``, the columns decoded by ``decode(text, column)``,
    ``_diff`` and ``_err``. A row whose value raises one of ``undecodable`` is an
    err row ``<table>: cannot decode a row: ...`` with null columns. ``_partition``
    is ``partition`` for every row, or the raw row's own if None."""
    for batch in batches:
        rows: dict[str, list[Any]] = {f.name: [] for f in out}
        for row in batch.to_pylist():
            err: str | None = row[ERR]
            values: list[Any] = [None] * len(columns)
            if err is None:
                try:
                    values = [
                        None if text is None else decode(text, column)
                        for text, column in zip(row["_values"], columns, strict=True)
                    ]
                except undecodable as e:
                    err = f"{table}: cannot decode a row: {e}"
                    values = [None] * len(columns)
            rows["_partition"].append(row["_partition"] if partition is None else partition)
            rows["_offset"].append(row["_offset"])
            for column, value in zip(columns, values, strict=True):
                rows[column.name].append(value)
            rows[DIFF].append(row[DIFF])
            rows[ERR].append(err)
        yield pa.RecordBatch.from_pydict(rows, schema=out)


@dataclass(frozen=True)
class DecodeTask:
    """``mapInArrow`` over one table's raw rows: text values to typed columns (err rows kept).

    The arguments of :func:`decoded_batches`; ``decode`` must pickle by
    reference (a module-level function).
    """

    table: str
    columns: Sequence[Any]
    schema_ipc: bytes
    decode: Callable[[str, Any], Any]
    undecodable: tuple[type[BaseException], ...]
    partition: str | None = None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        out = pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))
        yield from decoded_batches(
            batches,
            out,
            self.table,
            self.columns,
            self.decode,
            self.undecodable,
            self.partition,
        )


__all__ = ["DecodeTask", "decoded_batches", "raw_batches"]
