"""``spark.read.format("timeshard")``: a Python Data Source over shards.

::

    from timeshard.spark import register
    register(spark)
    df = (spark.read.format("timeshard")
          .option("location", "/data/timeshard")   # or .option("blob", URI)
          .option("shard", "orders")               #    + .option("consensus", URI)
          .option("as_of", "1700000000000")        # default: the latest readable time
          .load())

=============  ==============================================================
option         meaning
=============  ==============================================================
``location``   directory of an embedded location (``Location.embedded``)
``blob``       blob URI, with ``consensus``: ``open_location(blob, consensus)``
``consensus``  consensus URI (``sqlite:///...``, ``postgresql://...``)
``shard``      the shard id (required)
``as_of``      the time to read at (default: the shard's upper minus one)
=============  ==============================================================

Each row is an update at ``as_of``: ``_ts`` is ``as_of``, ``_diff`` its
multiplicity, ``_err`` null for ok rows. Rows are consolidated within a part
but **not across parts**: one distinct row may appear in several rows whose
diffs add up, and some may add up to zero. Consolidate before use::

    data = [c for c in df.columns if c not in ("_ts", "_diff", "_err")]
    snapshot = (df.groupBy(*data, "_err").agg(F.sum("_diff").alias("_diff"))
                  .where("_diff != 0"))

or call :func:`timeshard.spark.snapshot_df`, which reads the same parts with
Spark's Parquet reader and consolidates.

What runs where (as in ``pyspark.sql.datasource``):

* planning, in a Python worker process beside the driver JVM (not in the
  process that called ``load``): ``schema()`` opens the location and reads
  the shard's stored schema; ``reader()`` checks the options, and
  ``partitions()`` opens an unleased reader (it writes nothing to consensus),
  resolves ``as_of``, takes the parts of the snapshot from the shard's head
  state and makes one partition per part;
* executors: ``read()`` reopens the blob from its URI, fetches its part with
  ``blob.get``, checks its size and recorded digest and decodes it (PartError
  if it is missing or corrupt), advances its times to ``as_of``, consolidates
  it and yields Arrow record batches.
  :class:`TimeshardReader` and :class:`PartPartition` hold plain strings,
  numbers and bytes only, so they pickle; executors need ``pyarrow`` and
  ``timeshard`` and must reach the blob under its URI (so not ``memory://``).

Nothing holds the parts between planning and the tasks' reads (Spark tells a
data source neither when a query ends nor when it is dropped, so a reader
registered for it could only be left to its lease, holding the shard's since
and GC back after every query). A part that compaction replaced and GC
deleted in between raises PartError ``missing``; planning the query again
reads the new parts.

Errors raised in those processes reach the caller as Spark exceptions that
carry the message; inside :func:`timeshard.spark.parts.typed_errors` they are
re-raised as InvalidUsage or PartError. Invalid options (none of
``location``/``blob``, no ``shard``, an unknown shard, an ``as_of`` that is not
a readable timestamp) raise InvalidUsage naming the value, and so does a schema
given to the reader (``spark.read.schema(...)``) that is not the shard's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from timeshard.errors import InvalidUsage, SinceError
from timeshard.location import Location, open_blob, open_location
from timeshard.persist import PersistClient, PersistConfig, check_shard_id
from timeshard.persist._internal.blobio import read_part
from timeshard.persist._internal.parts import PartMeta, advance_times, consolidate, updates_schema
from timeshard.spark.session import arrow_to_spark_schema

EMBEDDED_CONSENSUS = "consensus.sqlite"


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The data source options, checked (plain strings: they pickle)."""

    blob_uri: str
    consensus_uri: str
    shard: str
    as_of: int | None

    @staticmethod
    def parse(options: dict[str, str]) -> SourceOptions:
        """Check ``options``; InvalidUsage naming the offending value."""
        blob_uri, consensus_uri = _location_uris(options)
        if open_blob(blob_uri).root_uri is None:
            raise InvalidUsage(
                f"the timeshard data source needs a blob executors can reach; "
                f"{blob_uri!r} lives in one process"
            )
        shard = options.get("shard")
        if not shard:
            raise InvalidUsage(
                f"the timeshard data source needs option 'shard'; got options {sorted(options)}"
            )
        check_shard_id(shard)
        return SourceOptions(blob_uri, consensus_uri, shard, _as_of(options.get("as_of")))

    def client(self, config: PersistConfig | None = None) -> PersistClient:
        return PersistClient(open_location(self.blob_uri, self.consensus_uri), config)


def _location_uris(options: dict[str, str]) -> tuple[str, str]:
    directory = options.get("location")
    if directory is not None:
        if "blob" in options or "consensus" in options:
            raise InvalidUsage(
                "the timeshard data source takes option 'location' or options 'blob' and "
                f"'consensus', not both; got options {sorted(options)}"
            )
        if not (Path(directory) / EMBEDDED_CONSENSUS).is_file():
            raise InvalidUsage(
                f"option location {directory!r} is not a timeshard location: "
                f"it has no {EMBEDDED_CONSENSUS}"
            )
        location = Location.embedded(directory)
        assert location.blob_uri is not None and location.consensus_uri is not None, location
        return location.blob_uri, location.consensus_uri
    if "blob" in options and "consensus" in options:
        return options["blob"], options["consensus"]
    raise InvalidUsage(
        "the timeshard data source needs option 'location', or options 'blob' and "
        f"'consensus'; got options {sorted(options)}"
    )


def _as_of(raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        as_of = int(raw)
    except ValueError:
        raise InvalidUsage(f"option as_of must be an integer timestamp, got {raw!r}") from None
    if as_of < 0:
        raise InvalidUsage(f"option as_of must be a timestamp >= 0, got {raw!r}")
    return as_of


@dataclass(frozen=True)
class PartPartition(InputPartition):  # type: ignore[misc]
    """One part to read at ``as_of``, as plain values.

    ``sha256`` is the digest the state recorded for the part (None if none), which
    the read checks before decoding.
    """

    key: str
    size: int
    rows: int
    ts_min: int | None
    ts_max: int | None
    sha256: str | None
    as_of: int
    schema_ipc: bytes

    def part(self) -> PartMeta:
        return PartMeta(self.key, self.size, self.rows, self.ts_min, self.ts_max, self.sha256)


class TimeshardDataSource(DataSource):  # type: ignore[misc]
    """The ``timeshard`` format (see the module doc)."""

    @classmethod
    def name(cls) -> str:
        return "timeshard"

    def schema(self) -> StructType:
        options = SourceOptions.parse(dict(self.options))
        state = options.client().state(options.shard)
        return arrow_to_spark_schema(updates_schema(state.data_schema))

    def reader(self, schema: StructType) -> DataSourceReader:
        return TimeshardReader(SourceOptions.parse(dict(self.options)), schema.json())


class TimeshardReader(DataSourceReader):  # type: ignore[misc]
    """Reads one snapshot of one shard, one part per partition.

    ``schema_json`` is the schema Spark reads the rows as (JSON): the shard's,
    unless the caller gave one (``spark.read.schema(...)``), which must then be
    the shard's too.
    """

    def __init__(self, options: SourceOptions, schema_json: str) -> None:
        self.options = options
        self.schema_json = schema_json

    def partitions(self) -> list[InputPartition]:
        """One partition per part of the snapshot (planning worker).

        InvalidUsage if the schema read as is not the shard's (the rows are yielded
        in the shard's columns, which Spark would take by position), or if ``as_of``
        is not readable (below the since: the SinceError's message).
        """
        opts = self.options
        reader = opts.client().open_unleased_reader(opts.shard)
        _check_schema(
            StructType.fromJson(json.loads(self.schema_json)),
            arrow_to_spark_schema(updates_schema(reader.schema)),
            opts.shard,
        )
        as_of = opts.as_of
        if as_of is None:
            upper = reader.upper().time
            if upper is None:
                raise InvalidUsage(f"shard {opts.shard!r} is closed; pass option 'as_of'")
            if upper == 0:
                raise InvalidUsage(f"shard {opts.shard!r} has no readable time yet (upper 0)")
            as_of = upper - 1
        try:
            parts = reader.snapshot_parts(as_of)
        except SinceError as e:  # an option naming a time the shard no longer keeps
            raise InvalidUsage(f"option as_of: {e}") from None
        schema_ipc = reader.schema.serialize().to_pybytes()
        return [
            PartPartition(
                p.key, p.size_in_bytes, p.num_rows, p.ts_min, p.ts_max, p.sha256, as_of, schema_ipc
            )
            for p in parts
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The consolidated updates of one part at ``as_of`` (executors).

        Spark passes no partition (PySpark 4.1) or a partition of value None
        (later releases) when ``partitions()`` found no parts: the snapshot is
        empty.
        """
        if not isinstance(partition, PartPartition):
            assert partition is None or partition.value is None, partition
            return
        schema = pa.ipc.read_schema(pa.py_buffer(partition.schema_ipc))
        table = read_part(
            open_blob(self.options.blob_uri), partition.part(), schema, PersistConfig()
        )
        yield from consolidate(advance_times(table, partition.as_of)).to_batches()


def _check_schema(given: StructType, shard: StructType, shard_id: str) -> None:
    """InvalidUsage naming the first column where ``given`` is not the shard's schema: another
    name or type, or not null where the shard's may be null (nullable where it is not is
    fine)."""
    mismatch = len(given.fields) != len(shard.fields) or any(
        g.name != s.name or g.dataType != s.dataType or (s.nullable and not g.nullable)
        for g, s in zip(given.fields, shard.fields, strict=True)
    )
    if mismatch:
        raise InvalidUsage(
            f"the schema given to the timeshard data source, {_ddl(given)}, is not the "
            f"one shard {shard_id!r} has: {_ddl(shard)}; leave it out (select the columns "
            "after load)"
        )


def _ddl(schema: StructType) -> str:
    return ", ".join(
        f"{f.name} {f.dataType.simpleString()}{'' if f.nullable else ' NOT NULL'}"
        for f in schema.fields
    )


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("timeshard")`` available in ``spark`` (driver)."""
    spark.dataSource.register(TimeshardDataSource)


__all__ = [
    "PartPartition",
    "SourceOptions",
    "TimeshardDataSource",
    "TimeshardReader",
    "register",
]
