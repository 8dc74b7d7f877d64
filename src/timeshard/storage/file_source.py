"""FILE sources: an append-only file, or a directory of newline-framed records.

Each file is a partition, named by its path relative to the source root; its
FromTime is a byte offset. ``upper()`` is, per file, the offset just past its
last complete line (with a fingerprint of the bytes before it, below), so a
line being written is not read until its newline arrives; lines appended
later are picked up by the next read, and new files in the directory become
new partitions. A name below the root that starts with ``.`` or ``_`` is
hidden (a Spark writer's ``_temporary``, ``_SUCCESS``), as COPY FROM hides it.
A path that does not exist, a file name that is not UTF-8, or a directory or
file that cannot be read (a PermissionError) stalls the source with an error
naming it; its files are never left out silently.

Order. A record's *position* is ``(file, offset)``: its file's name (the path
relative to the source root, ``/``-separated), then the byte offset of its
line. Positions are totally ordered: names compared as UTF-8 bytes (the order
of ``LC_ALL=C sort``; ``a-b`` < ``a.x`` < ``a/b`` < ``b``), then offsets.
No two records share a position. The records of a source are ordered by
``(reclocked time, position)``, and that is the order in which the UPSERT
envelope applies the commands to one key: the latest reclocked time wins, and
among the records bound at one time the greatest position, so the file whose
name sorts last, and within a file the last line.

Why by name and not by when a file appeared: the time comes first, and it
already orders by appearance. A record is bound at the first tick whose
binding covers it, so every record of a file that appears later -- even one
whose name sorts first -- is bound after everything that was bound before it
appeared, and wins over it. The position only orders records bound at the
same time: lines that became readable between the same two listings, of
which the source saw no order. Within a file, offset order agrees with
reclocking (a later line is never bound earlier); across files only a rule
that every reader computes alike, from the record alone, can decide: the
ingestion across restarts, each replica, and ``timeshard verify``. A file's
name is such a rule; the time a file was first listed is not (two files
appear in one listing, and compaction of the remap shard forgets the
bindings below its since). To have one file's lines win over another's
written in the same tick, name it to sort later (a zero-padded sequence
number or an ISO 8601 timestamp in the name).

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
  ``double``, ``string``, ``bytes`` or ``fixed`` (with the logical types
  ``decimal``, ``date``, ``timestamp-*`` and ``local-timestamp-*`` read as
  decimal, date and timestamp columns, as spark-avro reads them), inline
  arrays, maps and records of those (list, map and struct columns), or a
  union of ``null`` and one of them; the columns are its fields, in order
  (:func:`avro_payload_schema`, :mod:`timeshard.storage.avro`).

No column name may start with ``_`` (InvalidUsage when the source is built):
``_partition``, ``_offset``, ``_ts``, ``_diff`` and ``_err`` are the
columns ingestion adds, and a data column of that name would be taken for one.
Every column is nullable, and so is every field inside one (InvalidUsage
for ``nullable=False``): a missing field and an err row are null there.

A line that cannot be decoded (malformed JSON, a wrong field type, a wrong
number of CSV fields, invalid UTF-8, invalid base64, an Avro datum that does
not decode with the declared schema, a line longer than ``max_line_bytes``)
becomes an err row: data columns null, ``_err`` reading
``<file>@<offset>: <error type>: <message>`` (the message names the column
where there is one). It is kept, and the source goes on with the next line.
Any other failure while decoding (a MemoryError) is a fault, never a row: it
fails the task, and the read is tried again.

The declared schema is the contract, checked per line; files may drift from
it, line by line:

* JSON: a field the schema does not declare is ignored; a declared field that
  is missing or ``null`` is null. Values are not coerced: an integer column
  takes a JSON integer within the column type's range (not ``"1"``, ``1.5``,
  ``1.0`` or ``true``), a floating column a JSON number (``NaN`` and
  ``Infinity`` included) that fits it, a boolean column ``true``/``false``,
  a string column a string; other types go through Arrow's conversion.
  Anything else makes the line an err row. A UTF-8 byte order mark at the
  start of a file is skipped.
* CSV: a line is one record (a quoted field cannot span lines) and must
  parse strictly (an unterminated quote is an error) with exactly the declared
  number of fields; an empty field is null; other fields are parsed by Arrow
  as the column type (``"1.5"`` is not an int64).

A line longer than ``max_line_bytes`` (default 64 MiB, newline excluded) is
not decoded: the task measures it in 1 MiB reads without keeping them, skips
it, and emits an err row for it. The limit is part of the source's definition:
changing it changes what the same bytes decode to. A task holds one line and
one output batch (at most 4096 rows or about 16 MiB of lines) at a time.
Files must only be appended to. What is checked (each check stalls the
ingestion, nothing is skipped):

* a file shorter than the offset bound for it (truncated, or removed with
  bytes bound but not read) is refused by the ingestion, and a range that
  does not start just after a newline, or runs past the end of its file,
  fails the read with InvalidUsage;
* ``upper`` remembers, per file, the furthest offset it found and a
  *fingerprint* of the bytes before it: a digest of the file's first 4 KiB
  and of the 4 KiB before the offset. It raises InvalidUsage naming the file
  when a file at least that long no longer holds those bytes: a file
  rewritten, or truncated and written again (``copytruncate`` log rotation),
  even with newlines at the old offsets.

The fingerprints are bound with the offsets, so they outlive the process: the
frontier ``upper`` returns holds, besides each file's offset, an entry
``/fingerprint/<file>`` (no file's name starts with ``/``) whose value is
``offset << 24`` plus the digest's first 24 bits (:func:`fingerprint_entry`),
for files shorter than 2**39 bytes. The entry grows with the offset, so the
bindings stay monotone and the remap joins it as it joins offsets; it is in
the same binding as the offset, written in the same compare-and-append.
After a restart ``resume`` takes the fingerprints of the latest binding, and
``upper`` checks each file against its own, as a running source does: a file
rewritten while no process ran is refused (InvalidUsage naming it), not read
on from its old offset. Bindings made before fingerprints were bound have
none, and resume as before (the first new binding adds them). Not caught: a
rewrite that leaves a file's first 4 KiB and the 4 KiB before the offset as
they were, and, after a restart, one whose digest agrees in its first 24 bits
(one in 16 million). :func:`file_offsets` is a frontier without its
fingerprints: the offsets of files only.

Avro datums are decoded by spark-avro on the JVM, not in Python: the tasks
only split lines and base64-decode them into a binary column (invalid base64
is an err row right there); then ``from_avro`` in ``PERMISSIVE`` mode decodes
that column (:mod:`timeshard.storage.avro`, which the KAFKA source shares: it
frames each datum with an end marker, so that a datum that fails to decode,
or has bytes left over, is told apart from one whose fields are all null).
A row whose datum does not decode becomes an err row
``<file>@<offset>: AvroDecodeError: ...``.
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
import errno
import hashlib
import io
import json
import math
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc

from timeshard.errors import InvalidUsage
from timeshard.persist._internal.parts import ERR
from timeshard.storage.avro import (
    AVRO_DECODE_ERROR,
    AVRO_TYPES,
    avro_payload_schema,
    datum_ok,
    decode_datum,
    record_columns,
)
from timeshard.storage.reclock import SourceFrontier

FORMATS = ("json", "csv", "text", "bytes", "avro")
_DATUM = "_datum"
_VALUE = "_value"
DEFAULT_MAX_LINE_BYTES = 64 << 20
_READ_CHUNK = 1 << 20
_BATCH_ROWS = 4096
_BATCH_BYTES = 16 << 20
#: How many bytes at the start of a file, and before an offset, a fingerprint covers.
_TAIL = 4096
#: The first entry name of a fingerprint in a frontier; no file's (relative) name has it.
FINGERPRINT = "/fingerprint/"
#: How many bits of a fingerprint's digest a binding holds (the offset takes the others).
_BOUND_BITS = 24
#: Files at least this long bind no new fingerprint (its entry would pass int64).
_FINGERPRINTED_BELOW = 1 << (63 - _BOUND_BITS)


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


def hidden(names: Iterable[str]) -> bool:
    """Whether a file with these path components (below a directory read) is hidden."""
    return any(n.startswith((".", "_")) for n in names)


_BOM = b"\xef\xbb\xbf"
_INT_RANGES = {
    (bits, signed): (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    for bits in (8, 16, 32, 64)
    for signed in (True, False)
}


class FileSource:
    """A directory (or one file) of newline-delimited records."""

    #: One upstream every instance sees, whose upper never moves back: an upper below the
    #: offsets already bound means the upstream lost them (``Ingestion`` stalls on it).
    shared_upper = True

    def __init__(
        self,
        name: str,
        path: str | Path,
        fmt: str,
        schema: pa.Schema | None = None,
        avro_schema: str | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
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
        if (
            not isinstance(max_line_bytes, int)
            or isinstance(max_line_bytes, bool)
            or max_line_bytes <= 0
        ):
            raise InvalidUsage(f"max_line_bytes must be a positive integer, got {max_line_bytes!r}")
        self.name = name
        self.path = Path(path).resolve()
        self.format = fmt
        self.max_line_bytes = max_line_bytes
        self.avro_schema = avro_schema
        if fmt == "text":
            schema = pa.schema([("text", pa.string())])
        elif fmt == "bytes":
            schema = pa.schema([("data", pa.binary())])
        elif avro_schema is not None:
            schema = avro_payload_schema(avro_schema)
        assert schema is not None
        #: Per file, the fingerprint of the furthest offset :meth:`upper` found, or
        #: that :meth:`resume` took from the bindings.
        self._seen: dict[str, Fingerprint] = {}
        reserved = [n for n in schema.names if n.startswith("_")]
        if reserved:  # _partition, _offset, _ts, _diff and _err are ingestion's own
            raise InvalidUsage(
                f"FILE source {name!r}: columns {reserved} start with '_' (reserved)"
            )
        not_null = [path for f in schema for path in _not_null(f, f.name)]
        if not_null:
            raise InvalidUsage(
                f"FILE source {name!r}: columns {not_null} are NOT NULL (nullable=False), but a "
                "missing field or an err row is null there; declare them nullable"
            )
        self.schema = schema

    def payload_schema(self) -> pa.Schema:
        return self.schema

    def tick(self) -> None:
        return None

    @property
    def line_schema(self) -> pa.Schema:
        """The columns :func:`decode_line` fills: the payload, or ``_datum`` for avro."""
        if self.avro_schema is None:
            return self.schema
        return pa.schema([(_DATUM, pa.binary())])

    def _files(self) -> list[Path]:
        """The files of the source, in file order (their names as UTF-8 bytes); none whose
        name below the directory is hidden (``.`` or ``_``: a Spark writer's ``_temporary``).

        Raises the OSError of a directory that cannot be listed (PermissionError
        naming it): its files are never silently left out.
        """
        if self.path.is_file():
            return [self.path]
        if not self.path.is_dir():  # a typo must not read as a source with no data yet
            raise InvalidUsage(f"FILE source {self.name!r}: path {str(self.path)!r} does not exist")
        return sorted(_walk(self.path), key=self._order)

    def _order(self, file: Path) -> bytes:
        try:
            return self._partition(file).encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidUsage(
                f"FILE source {self.name!r}: the name of {str(file)!r} is not UTF-8"
            ) from None

    def _partition(self, file: Path) -> str:
        if self.path.is_file():
            return file.name
        return file.relative_to(self.path).as_posix()

    def resume(self, bound: SourceFrontier) -> None:
        """The durable bindings reached ``bound``: check each file against the fingerprint
        bound for it (at the next :meth:`upper`), unless this source found a later one."""
        for partition, fingerprint in fingerprints(bound).items():
            seen = self._seen.get(partition)
            if seen is None or seen.offset < fingerprint.offset:
                self._seen[partition] = fingerprint

    def upper(self) -> SourceFrontier:
        """Per file, the offset just past its last complete line, and the entry of its
        fingerprint there (:func:`fingerprint_entry`).

        A file removed after the listing is left out, as a listing after its
        removal leaves it out; bytes of it already bound but not read yet fail
        the read (:func:`_decode_range`). Raises InvalidUsage for a file whose
        bytes before an offset found earlier, or bound, changed (:meth:`_look`).
        A file shorter than that offset has no fingerprint entry: only its
        offset is below the bound one, which the ingestion refuses.
        """
        out: SourceFrontier = {}
        for f in self._files():
            partition = self._partition(f)
            try:
                out[partition] = offset = self._look(f, partition)
            except FileNotFoundError:
                continue
            seen = self._seen.get(partition)
            if seen is not None and seen.offset == offset:
                entry = fingerprint_entry(seen)
                if entry is not None:
                    out[FINGERPRINT + partition] = entry
        return dict(sorted(out.items()))

    def _look(self, file: Path, partition: str) -> int:
        """The offset just past the last complete line of ``file``, after checking that
        the bytes before the furthest offset seen in it are still there.

        Raises InvalidUsage if they changed (the file was rewritten, or truncated
        and written again). A file now shorter than that offset is not checked:
        its upper is below what may be bound, which the ingestion refuses; the
        offset is kept, to check the file if it grows again.
        """
        with open(file, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            seen = self._seen.get(partition)
            if seen is not None and size >= seen.offset and not seen.holds(f):
                raise InvalidUsage(
                    f"FILE source {self.name!r}: {partition!r} no longer holds the bytes "
                    f"before byte {seen.offset} that were read from it (its first "
                    f"{_TAIL} bytes or the {_TAIL} before that one); it was rewritten, and "
                    "files must only be appended to"
                )
            offset = _complete_prefix(f, size)
            if seen is None or offset > seen.offset:  # at seen.offset: it was just checked
                self._seen[partition] = Fingerprint(offset, _digest(f, offset), _DIGEST_BITS)
        return offset

    def read(self, spark: Any, start: SourceFrontier, end: SourceFrontier) -> Any:
        """The records in ``[start, end)`` (driver: plans; executors: decode).

        Raises InvalidUsage for format ``avro`` if ``spark`` lacks spark-avro.
        """
        return self.decode_lines(self._lines(spark, start, end))

    def decode_lines(self, lines: Any) -> Any:
        """The records of ``lines`` (rows of :func:`decode_line`): avro datums are decoded here.

        A plan (driver); ``from_avro`` runs in the executors' JVMs. Other
        formats are decoded already and pass through. Raises InvalidUsage for
        format ``avro`` if the session lacks spark-avro.
        """
        if self.avro_schema is None:
            return lines
        return _from_avro(lines, self.avro_schema, self.schema)

    def _lines(self, spark: Any, start: SourceFrontier, end: SourceFrontier) -> Any:
        """The lines of ``[start, end)`` decoded by the tasks into :attr:`line_schema`."""
        line_schema = self.line_schema
        base = self.path if self.path.is_dir() else self.path.parent
        end = file_offsets(end)
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
        from timeshard.spark.sqltext import empty_frame

        if not ranges:
            return empty_frame(spark, spark_schema)
        seeds = spark.createDataFrame(ranges, "p string, lo long, hi long").repartition(len(ranges))
        return seeds.mapInArrow(
            _decoder(
                str(base),
                self.format,
                line_schema.serialize().to_pybytes(),
                self.max_line_bytes,
            ),
            spark_schema,
        )


def _not_null(field: pa.Field, path: str) -> Iterator[str]:
    """The paths (``column.field``) of the fields declared NOT NULL in ``field``, itself
    included; a map's keys, never null in Arrow, are not among them."""
    if not field.nullable:
        yield path
    typ = field.type
    if pa.types.is_struct(typ):
        for child in typ:
            yield from _not_null(child, f"{path}.{child.name}")
    elif pa.types.is_map(typ):
        yield from _not_null(typ.item_field, f"{path}.value")
    elif pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        yield from _not_null(typ.value_field, f"{path}.element")


def _from_avro(lines: Any, avro_schema: str, payload: pa.Schema) -> Any:
    """Decode the framed ``_datum`` column of ``lines`` with spark-avro (a plan; runs in the JVM).

    A row whose datum does not decode (:func:`~timeshard.storage.avro.datum_ok`)
    becomes an err row at its position, data columns null.
    """
    from pyspark.sql import functions as F

    from timeshard.spark.session import requires_spark_avro

    with requires_spark_avro():  # the plan is analysed here, on the driver
        decoded = lines.withColumn(_VALUE, decode_datum(F.col(_DATUM), avro_schema))
    ok = datum_ok(F.col(_VALUE))
    message = F.concat(
        F.col("_partition"),
        F.lit("@"),
        F.col("_offset").cast("string"),
        F.lit(f": AvroDecodeError: {AVRO_DECODE_ERROR}"),
    )
    err = F.when(F.col(ERR).isNull() & ~ok, message).otherwise(F.col(ERR))
    columns = record_columns(F.col(_VALUE), ok, payload)
    return decoded.select("_partition", "_offset", *columns, err.alias(ERR))


def _walk(directory: Path, top: bool = True) -> Iterator[Path]:
    """The files below ``directory`` whose names are not hidden, in no order.

    Hidden directories are not entered. A symbolic link to a file is a file;
    one to a directory is not followed, and a dangling or looping one is no
    file. An error listing a directory raises (``Path.rglob`` ignores a
    PermissionError, and would leave its files out); a subdirectory removed
    since its parent was listed holds no file.
    """
    try:
        with os.scandir(directory) as listing:
            entries = list(listing)
    except FileNotFoundError:
        if top:
            raise
        return
    for entry in entries:
        if hidden([entry.name]):
            continue
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(directory / entry.name, top=False)
        elif _is_file(entry):
            yield directory / entry.name


def _is_file(entry: os.DirEntry[str]) -> bool:
    """Whether ``entry`` is a file or a link to one (as ``Path.is_file`` says)."""
    try:
        return entry.is_file()
    except OSError as e:
        if e.errno == errno.ELOOP:
            return False
        raise


def _complete_prefix(f: BinaryIO, size: int) -> int:
    """Bytes up to and including the last newline of the ``size`` first bytes of ``f``."""
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


#: How many bits :func:`_digest` has.
_DIGEST_BITS = 64


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What was read of a file up to ``offset``: the first ``bits`` bits of the
    :func:`_digest` of its bytes there (all of them, or those a binding holds)."""

    offset: int
    digest: int
    bits: int

    def holds(self, f: BinaryIO) -> bool:
        """Whether ``f``, at least ``offset`` bytes long, still has those bytes."""
        return _digest(f, self.offset) >> (_DIGEST_BITS - self.bits) == self.digest


def _digest(f: BinaryIO, offset: int) -> int:
    """A 64-bit digest of the first :data:`_TAIL` bytes of ``f`` and the :data:`_TAIL`
    bytes before ``offset`` (both cut at ``offset``)."""
    h = hashlib.blake2b(digest_size=_DIGEST_BITS // 8)
    f.seek(0)
    h.update(f.read(min(offset, _TAIL)))
    start = max(0, offset - _TAIL)
    f.seek(start)
    h.update(f.read(offset - start))
    return int.from_bytes(h.digest(), "big")


def fingerprint_entry(fingerprint: Fingerprint) -> int | None:
    """The value a frontier holds for ``fingerprint``: ``offset << 24`` plus the first
    24 bits of its digest. It grows with the offset, as bindings must. None at offset 0
    (nothing read) or at 2**39 and beyond (it would pass int64)."""
    if not 0 < fingerprint.offset < _FINGERPRINTED_BELOW:
        return None
    assert fingerprint.bits >= _BOUND_BITS, fingerprint
    digest = fingerprint.digest >> (fingerprint.bits - _BOUND_BITS)
    return fingerprint.offset << _BOUND_BITS | digest


def fingerprints(frontier: SourceFrontier) -> dict[str, Fingerprint]:
    """The fingerprints ``frontier`` binds, per file."""
    return {
        p.removeprefix(FINGERPRINT): Fingerprint(
            value >> _BOUND_BITS, value & ((1 << _BOUND_BITS) - 1), _BOUND_BITS
        )
        for p, value in frontier.items()
        if p.startswith(FINGERPRINT) and value > 0
    }


def file_offsets(frontier: SourceFrontier) -> SourceFrontier:
    """``frontier`` without its fingerprints: the offset of each file.

    What a reader of a FILE source's bindings reads files up to (the
    fingerprints are not files).
    """
    return {p: o for p, o in frontier.items() if not p.startswith(FINGERPRINT)}


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
    :attr:`~FileSource.line_schema`. A line that does not decode
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


_BOM = b"\xef\xbb\xbf"
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


__all__ = [
    "AVRO_DECODE_ERROR",
    "AVRO_TYPES",
    "DECODE_ERRORS",
    "DEFAULT_MAX_LINE_BYTES",
    "FINGERPRINT",
    "FORMATS",
    "FileSource",
    "Fingerprint",
    "avro_payload_schema",
    "decode_line",
    "decode_payload",
    "file_offsets",
    "fingerprint_entry",
    "fingerprints",
]
