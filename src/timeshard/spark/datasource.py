"""``spark.read.format("timeshard")``: a Python Data Source over shards.

    from timeshard.spark import register
    register(spark)
    df = (spark.read.format("timeshard")
          .option("location", "/data/timeshard")     # or .option("blob", URI)
          .option("shard", "orders")                 #    + .option("consensus", URI)
          .option("as_of", "1700000000000")          # default: the latest readable time
          .load())

Each row is an update at ``as_of`` (``_ts`` = ``as_of``) with its ``_diff``
and ``_err``. Rows are consolidated within a part but not across parts, so
one distinct row may appear in several rows whose diffs add up:
``df.groupBy(*data_columns, "_err").sum("_diff")`` gives the snapshot, and
:func:`timeshard.spark.snapshot_df` does that for you.

What runs where (as in ``pyspark.sql.datasource``):

* driver: ``schema()`` reads the shard's stored schema; ``partitions()``
  opens a leased reader (lease: ``reader_lease_ms``, 5 minutes by default
  here), checks ``as_of`` against since and upper, and makes one partition per
  part. The lease keeps the parts from GC while the query runs.
* executors: ``read()`` reopens the blob from the options (plain strings, so
  the reader pickles), fetches its part, and raises PartError if the part is
  missing or corrupt.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from timeshard.errors import InvalidUsage
from timeshard.location import Location, open_blob, open_location
from timeshard.persist import PersistClient, PersistConfig
from timeshard.persist._internal.blobio import read_part
from timeshard.persist._internal.parts import PartMeta, advance_times, consolidate, updates_schema
from timeshard.persist._internal.state import decode_schema
from timeshard.spark.session import arrow_to_spark_schema

DATASOURCE_LEASE_MS = 5 * 60 * 1000


def _location_uris(options: dict[str, str]) -> tuple[str, str]:
    if "location" in options:
        loc = Location.embedded(options["location"])
        assert loc.blob_uri is not None and loc.consensus_uri is not None
        return loc.blob_uri, loc.consensus_uri
    if "blob" in options and "consensus" in options:
        return options["blob"], options["consensus"]
    raise InvalidUsage(
        f"the timeshard data source needs option 'location', or 'blob' and 'consensus'; "
        f"got options {sorted(options)}"
    )


def _client(options: dict[str, str], config: PersistConfig | None = None) -> PersistClient:
    blob_uri, consensus_uri = _location_uris(options)
    return PersistClient(open_location(blob_uri, consensus_uri), config)


def _shard(options: dict[str, str]) -> str:
    shard = options.get("shard")
    if not shard:
        raise InvalidUsage(f"the timeshard data source needs option 'shard'; got {sorted(options)}")
    return shard


@dataclass(frozen=True)
class PartPartition(InputPartition):  # type: ignore[misc]
    """One part to read, as plain values."""

    key: str
    size: int
    rows: int
    ts_min: int | None
    ts_max: int | None
    as_of: int
    schema_ipc: bytes


class TimeshardDataSource(DataSource):  # type: ignore[misc]
    """The ``timeshard`` format (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return "timeshard"

    def schema(self) -> StructType:
        options = dict(self.options)
        state = _client(options).state(_shard(options))
        return arrow_to_spark_schema(updates_schema(decode_schema(state.schema)))

    def reader(self, schema: StructType) -> DataSourceReader:
        return TimeshardReader(dict(self.options))


class TimeshardReader(DataSourceReader):  # type: ignore[misc]
    """Reads one snapshot of one shard, a part per partition."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.blob_uri, _ = _location_uris(options)
        self.shard = _shard(options)

    def partitions(self) -> list[InputPartition]:
        client = _client(self.options, PersistConfig(reader_lease_ms=DATASOURCE_LEASE_MS))
        reader = client.open_leased_reader(self.shard)
        as_of = self._as_of(reader.fetch_recent_upper().time)
        parts = reader.snapshot_parts(as_of)
        schema_ipc = reader.schema.serialize().to_pybytes()
        return [
            PartPartition(p.key, p.size_in_bytes, p.num_rows, p.ts_min, p.ts_max, as_of, schema_ipc)
            for p in parts
        ]

    def _as_of(self, upper: int | None) -> int:
        raw = self.options.get("as_of")
        if raw is None:
            if upper is None:
                raise InvalidUsage(f"shard {self.shard!r} is closed; pass option 'as_of'")
            if upper == 0:
                raise InvalidUsage(f"shard {self.shard!r} has no readable time yet")
            return upper - 1
        try:
            return int(raw)
        except ValueError:
            raise InvalidUsage(f"option as_of must be an integer timestamp, got {raw!r}") from None

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, PartPartition), partition
        schema = pa.ipc.read_schema(pa.py_buffer(partition.schema_ipc))
        blob = open_blob(self.blob_uri)
        part = PartMeta(
            partition.key, partition.size, partition.rows, partition.ts_min, partition.ts_max
        )
        table = read_part(blob, part, schema, PersistConfig())
        yield from consolidate(advance_times(table, partition.as_of)).to_batches()


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("timeshard")`` available in ``spark``."""
    spark.dataSource.register(TimeshardDataSource)


__all__ = ["TimeshardDataSource", "TimeshardReader", "register"]
