"""What a FILE source's read task runs: byte ranges read, split into lines, decoded (executors).

``FileSource.read`` plans one task per file range on the driver; each task
runs :func:`_decoder`: it reads its range in blocks (:func:`_decode_range`,
:func:`_split_lines`), measures a line longer than ``max_line_bytes`` without
keeping it, decodes each line (:func:`~timeshard.storage.file_decode.decode_line`)
and yields Arrow batches of bounded size. A range that does not start after a
newline, or runs past the end of its file, fails the task with InvalidUsage
(:mod:`timeshard.storage.file_source`). The task function closes over plain
values (root path, line schema as Arrow IPC bytes, format name).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, BinaryIO

import pyarrow as pa

from timeshard.errors import InvalidUsage
from timeshard.persist._internal.parts import ERR
from timeshard.storage.file_decode import decode_line

_READ_CHUNK = 1 << 20

_BATCH_ROWS = 4096

_BATCH_BYTES = 16 << 20


def _decoder(base: str, fmt: str, schema_ipc: bytes, max_line_bytes: int) -> Any:
    """The task function (executors): read byte ranges, split lines, decode.

    Rows go out in Arrow batches of at most :data:`_BATCH_ROWS` rows or about
    :data:`_BATCH_BYTES` bytes of lines, so a task holds one batch and one
    line at a time, whatever the size of its range.
    """

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
                rows: list[dict[str, Any]] = []
                size = 0
                for row, length in _decode_range(
                    base, seed["p"], seed["lo"], seed["hi"], fmt, schema, max_line_bytes
                ):
                    rows.append(row)
                    size += length
                    if len(rows) >= _BATCH_ROWS or size >= _BATCH_BYTES:
                        yield pa.RecordBatch.from_pylist(rows, schema=out_schema)
                        rows, size = [], 0
                if rows:
                    yield pa.RecordBatch.from_pylist(rows, schema=out_schema)

    return run


def _decode_range(
    base: str, partition: str, lo: int, hi: int, fmt: str, schema: pa.Schema, max_line_bytes: int
) -> Iterator[tuple[dict[str, Any], int]]:
    """Each line of ``[lo, hi)`` of one file as a row (or err row), with its length."""
    path = os.path.join(base, partition)
    try:
        f = open(path, "rb")  # noqa: SIM115 -- closed below, after the generator is done
    except FileNotFoundError:
        raise InvalidUsage(
            f"FILE source: {partition!r} is gone, but bytes [{lo}, {hi}) of it were already "
            "bound; files must only be appended to"
        ) from None
    with f:
        for offset, raw, length in _split_lines(f, partition, lo, hi, max_line_bytes):
            yield decode_line(partition, offset, raw, length, fmt, schema, max_line_bytes), length


def _split_lines(
    f: BinaryIO, partition: str, lo: int, hi: int, max_line_bytes: int
) -> Iterator[tuple[int, bytes | None, int]]:
    """``(offset, line, length)`` of each line of ``[lo, hi)``, newline excluded.

    Reads blocks of :data:`_READ_CHUNK` bytes. A line that runs past its block
    is measured first, by scanning ahead block by block without keeping them;
    then it is read whole if it is at most ``max_line_bytes`` long, and
    otherwise reported with ``line`` None. So memory is one block plus one
    line of at most ``max_line_bytes``. Raises InvalidUsage if the range does
    not start after a newline or end with one (the file was truncated or
    rewritten: a range bound earlier ended at a line's end).
    """
    if lo > 0:
        f.seek(lo - 1)
        if f.read(1) != b"\n":
            raise InvalidUsage(
                f"FILE source: {partition!r} has no line end at byte {lo - 1}, where the "
                "bytes bound earlier ended; it was truncated or rewritten, and files must "
                "only be appended to"
            )
    pos, block, start = lo, b"", 0  # block holds the bytes from file offset pos
    while pos + start < hi:
        newline = block.find(b"\n", start)
        if newline >= 0:
            length = newline - start
            line = block[start:newline] if length <= max_line_bytes else None
            yield pos + start, line, length
            start = newline + 1
            continue
        offset = pos + start
        if start < len(block):  # the line at offset runs past this block
            length = _line_length(f, partition, offset, pos + len(block), hi)
            line = None
            if length <= max_line_bytes:
                f.seek(offset)
                line = f.read(length)
            yield offset, line, length
            offset += length + 1
        pos, start = offset, 0
        f.seek(pos)
        block = f.read(min(_READ_CHUNK, hi - pos)) if pos < hi else b""
        if pos < hi and not block:
            raise _rewritten(partition, pos, pos, hi)


def _line_length(f: BinaryIO, partition: str, offset: int, scan_from: int, hi: int) -> int:
    """The length of the line at ``offset``, whose bytes up to ``scan_from`` hold no newline."""
    f.seek(scan_from)
    at = scan_from
    while at < hi:
        chunk = f.read(min(_READ_CHUNK, hi - at))
        if not chunk:
            break
        newline = chunk.find(b"\n")
        if newline >= 0:
            return at + newline - offset
        at += len(chunk)
    raise _rewritten(partition, offset, at, hi)


def _rewritten(partition: str, line: int, end: int, hi: int) -> InvalidUsage:
    return InvalidUsage(
        f"FILE source: {partition!r} ends at byte {end}, inside the line at byte {line}, but "
        f"bytes up to {hi} were already bound; it was truncated or rewritten, and files must "
        "only be appended to"
    )
