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

Modules. :class:`FileSource` is defined here (its public path: the run spec,
the catalog, verify and the README name it), with the Avro step of its plan;
the rest lives in
:mod:`~timeshard.storage.file_listing` (the files of a directory, which names
are hidden; driver), :mod:`~timeshard.storage.file_frontier` (offsets and
fingerprints; driver), :mod:`~timeshard.storage.file_read` (the read task;
executors) and :mod:`~timeshard.storage.file_decode` (the decoding of a line;
executors, ``timeshard verify``'s replay tasks too). Their public names are
importable from here too.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

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
from timeshard.storage.file_decode import (
    _DATUM,
    DECODE_ERRORS,
    arrow_json,
    arrow_json_exact,
    decode_line,
    decode_payload,
)
from timeshard.storage.file_frontier import (
    _DIGEST_BITS,
    _TAIL,
    FINGERPRINT,
    Fingerprint,
    _complete_prefix,
    _digest,
    file_offsets,
    fingerprint_entry,
    fingerprints,
)
from timeshard.storage.file_listing import _walk, hidden
from timeshard.storage.file_read import _decoder
from timeshard.storage.reclock import SourceFrontier

FORMATS = ("json", "csv", "text", "bytes", "avro")

_VALUE = "_value"

DEFAULT_MAX_LINE_BYTES = 64 << 20


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
        the read (:func:`~timeshard.storage.file_read._decode_range`). Raises
        InvalidUsage for a file whose bytes before an offset found earlier, or
        bound, changed (:meth:`_look`).
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


__all__ = [
    "AVRO_DECODE_ERROR",
    "AVRO_TYPES",
    "DECODE_ERRORS",
    "DEFAULT_MAX_LINE_BYTES",
    "FINGERPRINT",
    "FORMATS",
    "FileSource",
    "Fingerprint",
    "arrow_json",
    "arrow_json_exact",
    "avro_payload_schema",
    "decode_line",
    "decode_payload",
    "file_offsets",
    "fingerprint_entry",
    "fingerprints",
    "hidden",
]
