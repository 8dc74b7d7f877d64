"""The task of a COPY: read files, decode their rows, write one part (executors).

```
 batches of one `file` column (the task's files, sorted)
   │
   ├─ csv / json: chunks of lines ─> Arrow, or line by line: decode_payload ────┐
   │              (+ header, keys, NOT NULL)                                    │
   ├─ parquet: batches, rows numbered ─> columns checked, cast (+ NOT NULL) ────┤
   │                                                                            v
   │                           rows at _ts = time, _diff = 1, bad rows as err rows
   │                                                                            │
   └─ one Parquet part (write_task_part) <──────────────────────────────────────┘
      yields one RESULT_DDL row: the part, rows, bad rows, the first few bad rows
```

:mod:`timeshard.storage.copy_from` plans a COPY and runs this task as the
``mapInArrow`` function of its one Spark job; what the formats accept and
what a bad row is are written there. Here is how a task reads.

* A file is read whole, in order, by one task: a line's number is the count
  of newlines before it plus one, a Parquet row's the count of rows before
  it plus one. Files open through pyarrow's filesystems (local paths, or
  URIs: ``s3a://`` is read as ``s3://``); CSV and JSON streams are
  decompressed by extension.
* A line or row that does not decode is a bad row: counted, the first
  :data:`REPORTED_ROWS` kept as :class:`BadRow`, and written as an err row
  (data null, ``_err`` ``<file>:<n>: <error type>: <message>``). Any other
  failure while decoding (a MemoryError) fails the task, never a row.
* With ``on_error="fail"`` nothing after the first bad row is written (the
  driver deletes the part anyway) and the task stops reading at its
  :data:`REPORTED_ROWS`-th bad row (``stopped``).
* A CSV header or Parquet columns that do not match the collection raise
  InvalidUsage naming the file: the job fails, and the driver re-raises it.

Everything here runs in executors, but :func:`file_system` (also the driver's).
:class:`CopyTask` holds plain values only, so it pickles.

Invariants:

1. A task writes at most one part, every row of it at ``time`` with diff 1.
2. ``rows`` counts the rows read, ``bad`` the bad rows among them; in
   ``err_rows`` mode the part holds exactly ``rows`` rows, ``bad`` of them
   err rows.
3. ``first_bad`` holds the task's first bad rows in its files' order.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from timeshard.errors import InvalidUsage
from timeshard.location.unreliable import KeyedFaults
from timeshard.persist._internal.parts import DIFF, ERR, TS, conform, updates_schema
from timeshard.storage.file_source import (
    DECODE_ERRORS,
    DEFAULT_MAX_LINE_BYTES,
    arrow_json,
    decode_payload,
)

#: Bad rows a failed COPY names (and at which a task of one stops reading).
REPORTED_ROWS = 5
RESULT_DDL = (
    "partition int, attempt int, part string, rows long, bad long, stopped boolean, "
    "first_bad array<struct<file:string,line:long,reason:string>>"
)
_BAD_ROW = pa.struct([("file", pa.string()), ("line", pa.int64()), ("reason", pa.string())])
_RESULT = pa.schema(
    [
        ("partition", pa.int32()),
        ("attempt", pa.int32()),
        ("part", pa.string()),
        ("rows", pa.int64()),
        ("bad", pa.int64()),
        ("stopped", pa.bool_()),
        ("first_bad", pa.list_(_BAD_ROW)),
    ]
)
_BOM = b"\xef\xbb\xbf"
#: Bytes that send a CSV chunk line by line: what Python's csv reader or the
#: line splitting treat specially (a line break inside a line, NUL).
_LINE_BY_LINE = (b"\r", b"\x00")
#: A blank line: an empty one is skipped (lines and rows no longer match one to one), and
#: Arrow's reader and Python's may read one of spaces apart: either goes line by line.
_BLANK_LINE = re.compile(rb"(?m)^[ \t\x0b\x0c]*$")
_BATCH_ROWS = 4096
_READ_CHUNK = 1 << 20
_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}


@dataclass(frozen=True, slots=True)
class BadRow:
    """A row that did not load: ``file:line: reason``."""

    file: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"


def file_system(uri: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem of a URI and the path in it (``s3a`` read as ``s3``)."""
    if uri.startswith("s3a://"):
        uri = "s3://" + uri.removeprefix("s3a://")
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as e:
        raise InvalidUsage(f"cannot open {uri!r}: {e}") from None
    return fs, str(path)


@dataclass
class _Tally:
    """A task's rows and bad rows (executors)."""

    fail: bool
    rows: int = 0
    bad: int = 0
    first_bad: list[BadRow] = field(default_factory=list)

    def add_bad(self, row: BadRow) -> None:
        self.bad += 1
        if len(self.first_bad) < REPORTED_ROWS:
            self.first_bad.append(row)

    @property
    def full(self) -> bool:
        """With ``fail``: enough bad rows seen to stop reading."""
        return self.fail and self.bad >= REPORTED_ROWS


@dataclass(frozen=True, slots=True)
class CopyTask:
    """The ``mapInArrow`` function of a COPY (executors; see the module doc).

    Takes batches of one ``file`` column; reads those files in order, writes
    their rows as one part under ``key_prefix`` and yields one
    :data:`RESULT_DDL` row. With ``fail``, it writes no row after the first
    bad one and stops reading at the :data:`REPORTED_ROWS`-th.
    """

    root_uri: str
    key_prefix: str
    schema_ipc: bytes
    format: str
    header: bool
    on_error: str
    not_null: tuple[str, ...]
    time: int
    into: str
    faults: KeyedFaults | None = None
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from timeshard.spark.parts import write_task_part

        schema = pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))
        pieces = [Piece(**row) for b in batches for row in b.to_pylist()]
        tally = _Tally(fail=self.on_error == "fail")
        tables = self._tables(pieces, schema, tally)
        partition, attempt, part = write_task_part(
            self.root_uri, self.key_prefix, updates_schema(schema), tables, self.faults
        )
        result = {
            "partition": partition,
            "attempt": attempt,
            "part": None if part is None else json.dumps(part.to_json()),
            "rows": tally.rows,
            "bad": tally.bad,
            "stopped": tally.full,
            "first_bad": [
                {"file": b.file, "line": b.line, "reason": b.reason} for b in tally.first_bad
            ],
        }
        yield pa.RecordBatch.from_pylist([result], schema=_RESULT)

    def _tables(self, pieces: list[Piece], schema: pa.Schema, tally: _Tally) -> Iterator[pa.Table]:
        """The part's tables: every piece's rows at ``time``, conformed."""
        for piece in pieces:
            for table in self._piece_tables(piece, schema, tally):
                tally.rows += table.num_rows
                if tally.fail and tally.bad:
                    continue  # nothing of this COPY will be appended: read on for the report
                n = table.num_rows
                table = table.append_column(TS, pa.array([self.time] * n, pa.int64()))
                table = table.append_column(DIFF, pa.array([1] * n, pa.int64()))
                yield conform(table, schema)
            if tally.full:
                return

    def _piece_tables(self, piece: Piece, schema: pa.Schema, tally: _Tally) -> Iterator[pa.Table]:
        file = piece.file
        fs, path = _open_target(file)
        if self.format == "parquet":
            with fs.open_input_file(path) as f:
                yield from _parquet_tables(f, file, self.into, schema, self.not_null, tally)
            return
        limit = self.max_line_bytes
        spec = _LineSpec(self.format, self.header, schema, self.not_null, self.into, limit)
        if piece.whole:
            with fs.open_input_stream(path) as stream:
                chunks = _chunks(stream.read, 1, limit)
                if self.format == "csv":
                    yield from spec.csv_tables(chunks, file, tally)
                else:
                    yield from spec.json_tables(chunks, file, tally)
            return
        with fs.open_input_file(path) as f:
            chunks = _piece_chunks(f, piece, limit)
            if self.format == "csv":
                header = _first_line(f, file, limit) if self.header and piece.start > 0 else None
                yield from spec.csv_tables(chunks, file, tally, header=header)
            else:
                yield from spec.json_tables(chunks, file, tally)


@dataclass(frozen=True, slots=True)
class Piece:
    """What a COPY task reads: a whole file, or the lines of a file that start in
    ``[start, end)`` (an uncompressed CSV or JSON file split over tasks), of which the
    first is line ``line`` if ``start`` is a line's start, else the one after it."""

    file: str
    start: int = 0
    end: int = -1
    line: int = 1

    @property
    def whole(self) -> bool:
        return self.end < 0


#: The columns of the pieces a COPY job reads (:class:`Piece`).
PIECE_DDL = "file string, start long, end long, line long"


def count_newlines(piece: Piece) -> int:
    """The newlines of bytes ``[start, end)`` of ``piece``'s file (executors)."""
    fs, path = _open_target(piece.file)
    count, at = 0, piece.start
    with fs.open_input_file(path) as f:
        f.seek(at)
        while at < piece.end:
            block: bytes = f.read(min(_READ_CHUNK, piece.end - at))
            if not block:
                break
            count += block.count(b"\n")
            at += len(block)
    return count


def _line_start(f: Any, at: int) -> int:
    """The first position ``>= at`` where a line starts (0, or just after a newline), or EOF."""
    if at == 0:
        return 0
    f.seek(at - 1)
    position = at - 1
    while True:
        block: bytes = f.read(_READ_CHUNK)
        if not block:
            return position
        found = block.find(b"\n")
        if found >= 0:
            return position + found + 1
        position += len(block)


def _piece_chunks(
    f: Any, piece: Piece, limit: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[tuple[int, bytes | int]]:
    """:func:`_chunks` of the lines starting in the piece (``f`` may be read elsewhere
    between two chunks: a CSV header)."""
    begin, stop = _line_start(f, piece.start), _line_start(f, piece.end)
    first = piece.line + (1 if begin > piece.start else 0)  # the newline at begin - 1
    at = begin

    def read(size: int) -> bytes:
        nonlocal at
        if at >= stop:
            return b""
        f.seek(at)
        block: bytes = f.read(min(size, stop - at))
        at += len(block)
        return block

    yield from _chunks(read, first, limit)


def _first_line(f: Any, file: str, limit: int) -> bytes:
    """Line 1 of a file (a CSV header), without its newline; InvalidUsage past ``limit``."""
    f.seek(0)
    line = b""
    while True:
        block: bytes = f.read(64 << 10)
        cut = block.find(b"\n")
        if len(line) + (len(block) if cut < 0 else cut) > limit:
            raise _long_header(file, limit)
        if not block:
            return line
        if cut >= 0:
            return line + block[:cut]
        line += block


def _long_header(file: str, limit: int) -> InvalidUsage:
    return InvalidUsage(
        f"COPY: the CSV header of {file} (line 1) has more than max_line_bytes {limit} bytes"
    )


def _open_target(file: str) -> tuple[pafs.FileSystem, str]:
    if "://" not in file:
        return pafs.LocalFileSystem(), file
    return file_system(file)


def _chunks(
    read: Callable[[int], bytes], first: int = 1, limit: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[tuple[int, bytes | int]]:
    """``(number of its first line, whole lines)`` of the bytes ``read`` gives, about a
    read each, lines numbered from ``first``.

    A line of more than ``limit`` bytes (newline excluded) is ``(its number, its
    length)`` instead: it is measured in reads of at most ``limit + 1`` bytes, never
    held, so a file without newlines costs no more memory than a line may.
    """
    n, size = first, 0
    rest: list[bytes] = []  # the line in progress: its bytes so far, their length
    skipping = False  # it is longer than limit: counted, not kept
    while block := read(min(_READ_CHUNK, limit + 1)):
        while block:
            cut = block.find(b"\n")
            if cut < 0:  # the line goes on
                size += len(block)
                skipping = skipping or size > limit
                if skipping:
                    rest = []
                else:
                    rest.append(block)
                break
            if skipping or size + cut > limit:  # a read holds no other line this long
                yield n, size + cut
                n, rest, size, skipping = n + 1, [], 0, False
                block = block[cut + 1 :]
                continue
            last = block.rfind(b"\n")
            whole = b"".join([*rest, block[: last + 1]])
            yield n, whole
            n, rest, size = n + whole.count(b"\n"), [], 0
            block = block[last + 1 :]
    if skipping:
        yield n, size
    elif rest:
        yield n, b"".join(rest)


def _chunk_lines(first: int, chunk: bytes) -> Iterator[tuple[int, bytes]]:
    """The numbered lines of a chunk of :func:`_chunks`."""
    pieces = chunk.split(b"\n")
    if pieces[-1] == b"":
        pieces.pop()
    for i, piece in enumerate(pieces):
        yield first + i, piece.removesuffix(b"\r")


def _row_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([*schema, pa.field(ERR, pa.string())])


def _reason(error: BaseException) -> str:
    """What a bad row's report and err row say of ``error``."""
    return f"{type(error).__name__}: {str(error)[:300]}"


@dataclass(frozen=True, slots=True)
class _LineSpec:
    """How a task decodes the lines of a CSV or JSON file (executors)."""

    format: str
    header: bool
    schema: pa.Schema
    not_null: tuple[str, ...]
    into: str
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES

    def tables(
        self,
        lines: Iterable[tuple[int, bytes]],
        file: str,
        tally: _Tally,
        columns: pa.Schema | None = None,
    ) -> Iterator[pa.Table]:
        """The rows of ``lines``, one at a time (a CSV header is :meth:`csv_tables`'s)."""
        columns = columns or self.schema
        out = _row_schema(self.schema)
        rows: list[dict[str, Any]] = []
        for n, raw in lines:
            line = raw.removeprefix(_BOM) if n == 1 else raw
            if not line:  # an empty line; one of spaces is a record (a value, or a bad row)
                continue
            rows.append(self._row(line, columns, file, n, tally))
            if len(rows) >= _BATCH_ROWS:
                yield pa.Table.from_pylist(rows, schema=out)
                rows = []
            if tally.full:
                break
        if rows:
            yield pa.Table.from_pylist(rows, schema=out)

    def csv_tables(
        self,
        chunks: Iterable[tuple[int, bytes | int]],
        file: str,
        tally: _Tally,
        fast: bool = True,
        header: bytes | None = None,
    ) -> Iterator[pa.Table]:
        """The rows of a CSV file's chunks: each decoded whole by Arrow where it can be
        (:meth:`_vectorized`), else line by line, with the same result either way.
        ``header`` is line 1 of the file, for chunks that do not start with it."""
        columns = self.schema
        if header is not None:
            columns = self._header(header.removesuffix(b"\r").removeprefix(_BOM), file)
        for first, whole in chunks:
            if isinstance(whole, int):
                if first == 1 and self.header:
                    raise _long_header(file, self.max_line_bytes)
                yield self._long_line(first, whole, columns, file, tally)
                continue
            chunk, unmarked = whole, whole
            if first == 1 and self.header:
                line, newline, chunk = chunk.partition(b"\n")
                columns = self._header(line.removesuffix(b"\r").removeprefix(_BOM), file)
                first, unmarked = first + len(newline), chunk
            elif first == 1:
                unmarked = chunk.removeprefix(_BOM)  # line by line, tables() takes it off
            table = self._vectorized(first, unmarked, columns, file, tally) if fast else None
            if table is not None:
                yield table
            else:
                yield from self.tables(_chunk_lines(first, chunk), file, tally, columns)
            if tally.full:
                return

    def json_tables(
        self,
        chunks: Iterable[tuple[int, bytes | int]],
        file: str,
        tally: _Tally,
        fast: bool = True,
    ) -> Iterator[pa.Table]:
        """The rows of a JSON-lines file's chunks: each decoded whole by Arrow where that
        gives what line by line gives (:func:`~timeshard.storage.file_source.arrow_json`,
        unknown keys refused), else line by line."""
        for first, chunk in chunks:
            if isinstance(chunk, int):
                yield self._long_line(first, chunk, self.schema, file, tally)
                continue
            text = chunk.removesuffix(b"\n")
            table = None
            if fast:
                table = arrow_json(text, text.count(b"\n") + 1, self.schema, unknown="error")
            if table is not None:
                yield _with_not_null_errors(table, file, first - 1, self.not_null, tally)
            else:
                yield from self.tables(_chunk_lines(first, chunk), file, tally)
            if tally.full:
                return

    def _vectorized(
        self, first: int, chunk: bytes, columns: pa.Schema, file: str, tally: _Tally
    ) -> pa.Table | None:
        """The rows of ``chunk`` (lines ``first``...) decoded by Arrow, or None to go line by line.

        Only a chunk with nothing :meth:`_row` treats specially: no carriage
        return inside a line, NUL or blank line, quotes only around whole
        fields (:func:`plainly_quoted`, where Arrow's reader and Python's
        strict one agree); every line with the
        collection's number of fields and valid UTF-8; every value cast
        (Arrow's cast, the very one ``decode_payload`` applies per value). Any
        doubt returns None, and the line-by-line path finds the bad rows.
        """
        text = chunk.replace(b"\r\n", b"\n").removesuffix(b"\n")
        if not text or any(c in text for c in _LINE_BY_LINE) or _BLANK_LINE.search(text):
            return None
        if b'"' in text and not plainly_quoted(text):
            return None
        names = columns.names
        try:
            strings = pa_csv.read_csv(
                pa.py_buffer(text),
                read_options=pa_csv.ReadOptions(column_names=names, use_threads=False),
                parse_options=pa_csv.ParseOptions(
                    quote_char='"',
                    double_quote=True,
                    newlines_in_values=False,
                    ignore_empty_lines=False,
                ),
                convert_options=pa_csv.ConvertOptions(
                    column_types=dict.fromkeys(names, pa.string()), strings_can_be_null=False
                ),
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return None
        if strings.num_rows != text.count(b"\n") + 1:
            return None
        arrays = {}
        for name in names:
            typ = self.schema.field(name).type
            values = strings.column(name)
            values = pc.if_else(pc.equal(values, ""), pa.scalar(None, pa.string()), values)
            if not pa.types.is_string(typ):
                try:
                    values = pc.cast(values, typ)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                    return None
            arrays[name] = values
        table = pa.table([arrays[n] for n in self.schema.names], names=self.schema.names)
        return _with_not_null_errors(table, file, first - 1, self.not_null, tally)

    def _long_line(
        self, n: int, length: int, columns: pa.Schema, file: str, tally: _Tally
    ) -> pa.Table:
        """Line ``n``, of ``length`` bytes, more than ``max_line_bytes``: a bad row, unread."""
        error = ValueError(
            f"the line has {length} bytes, more than max_line_bytes {self.max_line_bytes}"
        )
        tally.add_bad(BadRow(file, n, _reason(error)))
        row = {**dict.fromkeys(columns.names), ERR: f"{file}:{n}: {_reason(error)}"}
        return pa.Table.from_pylist([row], schema=_row_schema(self.schema))

    def _header(self, line: bytes, file: str) -> pa.Schema:
        """The file's columns in header order; InvalidUsage unless they are the collection's."""
        try:
            names = next(csv.reader(io.StringIO(line.decode("utf-8")), strict=True), [])
        except (UnicodeDecodeError, csv.Error) as e:
            raise InvalidUsage(f"COPY: the CSV header of {file} does not parse: {e}") from None
        if sorted(names) != sorted(self.schema.names):
            raise InvalidUsage(
                f"COPY: the CSV header of {file} names the columns {names}; collection "
                f"{self.into!r} has {self.schema.names} (give them all, each once, in any order)"
            )
        return pa.schema([self.schema.field(name) for name in names])

    def _row(
        self, line: bytes, columns: pa.Schema, file: str, n: int, tally: _Tally
    ) -> dict[str, Any]:
        try:
            row = decode_payload(line, self.format, columns)
            if self.format == "json":
                _check_json_keys(line, columns)
            _check_not_null(row, self.not_null)
        except DECODE_ERRORS as e:  # a fault (MemoryError) fails the task, never a row
            reason = _reason(e)
            tally.add_bad(BadRow(file, n, reason))
            return {**dict.fromkeys(columns.names), ERR: f"{file}:{n}: {reason}"}
        row[ERR] = None
        return row


def plainly_quoted(text: bytes) -> bool:
    """Whether every quote of ``text`` (lines, no ``\\r``) opens or closes a whole field.

    That is: each line has an even number of quotes; a quote at an even place
    in its line (it opens) follows a comma, the line's start or a quote (the
    second of an escaped pair); one at an odd place (it closes) is followed by
    a comma, the line's end or a quote. Such lines are fields that are
    unquoted and hold no quote, or quoted with ``""`` for a quote inside, and
    Arrow's CSV reader reads them as Python's strict one does. Otherwise
    (``a"b``, ``"ab"c``, ``"ab``) the readers may differ: False. Vectorized
    with numpy over the bytes.
    """
    data = np.frombuffer(text, np.uint8)
    quotes = np.flatnonzero(data == ord('"'))
    newlines = np.flatnonzero(data == ord("\n"))
    line = np.searchsorted(newlines, quotes)  # the line of each quote
    first_of_line = np.searchsorted(line, line)  # the index of its line's first quote
    closing = (np.arange(len(quotes)) - first_of_line) % 2 == 1
    last_of_line = np.append(line[1:] != line[:-1], True)
    if np.any(last_of_line & ~closing):
        return False  # an odd number of quotes in a line: one is not closed
    before = data[np.maximum(quotes - 1, 0)]
    after = data[np.minimum(quotes + 1, len(data) - 1)]
    at_start, at_end = quotes == 0, quotes == len(data) - 1
    bounds = [ord(","), ord("\n"), ord('"')]
    opens_well = at_start | np.isin(before, bounds)
    closes_well = at_end | np.isin(after, bounds)
    return bool(np.all(np.where(closing, closes_well, opens_well)))


def _check_json_keys(line: bytes, columns: pa.Schema) -> None:
    unknown = sorted(set(json.loads(line)) - set(columns.names))
    if unknown:
        raise ValueError(f"unknown columns {unknown}; the collection has {columns.names}")


def _check_not_null(row: dict[str, Any], not_null: tuple[str, ...]) -> None:
    missing = [c for c in not_null if row.get(c) is None]
    if missing:
        raise ValueError(f"columns {missing} are null, and the COPY declares them NOT NULL")


def _parquet_tables(
    f: Any, file: str, into: str, schema: pa.Schema, not_null: tuple[str, ...], tally: _Tally
) -> Iterator[pa.Table]:
    """A Parquet file's rows in batches, checked against ``schema`` (executors)."""
    parquet = pq.ParquetFile(f)
    _check_parquet_schema(parquet.schema_arrow, file, into, schema)
    row = 0
    for batch in parquet.iter_batches(batch_size=_BATCH_ROWS * 16, columns=schema.names):
        table = pa.Table.from_batches([batch]).select(schema.names)
        table = table.cast(pa.schema([f.with_nullable(True) for f in schema]))
        yield _with_not_null_errors(table, file, row, not_null, tally)
        row += table.num_rows
        if tally.full:
            return


def _with_not_null_errors(
    table: pa.Table, file: str, first_row: int, not_null: tuple[str, ...], tally: _Tally
) -> pa.Table:
    """``table`` with ``_err``: a row null in a ``not_null`` column is an err row."""
    if not not_null or table.num_rows == 0:
        return table.append_column(ERR, pa.nulls(table.num_rows, pa.string()))
    masks = [pc.is_null(table.column(c)) for c in not_null]
    bad_mask = masks[0]
    for mask in masks[1:]:
        bad_mask = pc.or_(bad_mask, mask)
    errors: list[str | None] = [None] * table.num_rows
    bad_at = pc.indices_nonzero(bad_mask).to_pylist()
    for i in bad_at:
        null = [c for c, mask in zip(not_null, masks, strict=True) if mask[i].as_py()]
        error = ValueError(f"columns {null} are null, and the COPY declares them NOT NULL")
        reason = _reason(error)
        tally.add_bad(BadRow(file, first_row + i + 1, reason))
        errors[i] = f"{file}:{first_row + i + 1}: {reason}"
    if not bad_at:
        return table.append_column(ERR, pa.nulls(table.num_rows, pa.string()))
    cleared = [
        pc.if_else(bad_mask, pa.nulls(table.num_rows, col.type), col) for col in table.columns
    ]
    return pa.Table.from_arrays(
        [*cleared, pa.array(errors, pa.string())], names=[*table.column_names, ERR]
    )


def _check_parquet_schema(found: pa.Schema, file: str, into: str, schema: pa.Schema) -> None:
    """InvalidUsage naming ``file`` unless its columns are the collection's, each fitting."""
    if sorted(found.names) != sorted(schema.names):
        raise InvalidUsage(
            f"COPY: the Parquet file {file} has the columns {found.names}; collection "
            f"{into!r} has {schema.names}"
        )
    wrong = [
        f"{f.name!r} is {found.field(f.name).type}, the collection has {f.type}"
        for f in schema
        if not fits(found.field(f.name).type, f.type)
    ]
    if wrong:
        raise InvalidUsage(f"COPY: in the Parquet file {file}, column " + "; ".join(wrong))


def fits(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether every value of ``source`` is exactly a value of ``target`` (module doc)."""
    t = pa.types
    if source.equals(target) or t.is_null(source):
        return True
    if t.is_integer(source):
        digits = _INT_DIGITS[source.bit_width] + (1 if t.is_unsigned_integer(source) else 0)
        if t.is_integer(target):
            if t.is_unsigned_integer(target):
                return bool(t.is_unsigned_integer(source) and source.bit_width <= target.bit_width)
            wider = source.bit_width < target.bit_width
            return bool(
                wider or (source.bit_width == target.bit_width and t.is_signed_integer(source))
            )
        if t.is_decimal(target):
            return bool(target.precision - target.scale >= digits)
        return bool(t.is_float64(target) and source.bit_width <= 32)
    if t.is_floating(source) and t.is_floating(target):
        return bool(source.bit_width <= target.bit_width)
    pairs = [(t.is_string, t.is_large_string), (t.is_binary, t.is_large_binary)]
    return any(small(source) and large(target) for small, large in pairs)


__all__ = [
    "PIECE_DDL",
    "REPORTED_ROWS",
    "RESULT_DDL",
    "BadRow",
    "CopyTask",
    "Piece",
    "count_newlines",
    "file_system",
    "fits",
]
