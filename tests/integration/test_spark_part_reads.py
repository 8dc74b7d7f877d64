"""Spark reads of parts: an I/O error is a fault, not a corrupt part, and a footer statistic
drops no row."""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.errors import Determinate
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark import snapshot_df, typed_errors, updates_df

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("k", pa.int64())])
#: A time whose eight little-endian bytes are found only where the part stores it.
T0 = 0x1122_3344_5566


def _one_part(tmp_path: Path) -> tuple[PersistClient, Path, str]:
    client = PersistClient(Location.embedded(tmp_path))
    writer = client.open_writer("s", SCHEMA)
    writer.append([], 0, T0)
    writer.append([((k,), T0, 1) for k in range(100)], T0, T0 + 1)
    [key] = client.state("s").referenced_keys()
    return client, tmp_path / "blob" / key, key


def test_an_io_error_reading_a_part_is_a_fault_not_a_corrupt_part(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The part's file fails every read with EIO (it is made a link to ``/proc/self/mem``,
    whose first 64 KiB are never mapped) after Spark listed it: the read is Determinate
    naming the part (it was PartError 'corrupt', a data problem, for a passing fault)."""
    client, path, key = _one_part(tmp_path)
    assert path.stat().st_size < 65536
    df = snapshot_df(spark, client.open_unleased_reader("s"), T0)
    path.unlink()
    path.symlink_to("/proc/self/mem")
    with pytest.raises(Determinate, match=f"{key}.*Input/output error"), typed_errors():
        df.collect()


def _flip_time_statistics(path: Path, was: int, to: int) -> None:
    """Set every min and max statistic of ``_ts`` in the footer from ``was`` to ``to`` (same
    size; the pages and their checksums are untouched)."""
    data = bytearray(path.read_bytes())
    (length,) = struct.unpack("<I", data[-8:-4])
    start = len(data) - 8 - length
    old, new = struct.pack("<q", was), struct.pack("<q", to)
    footer = bytes(data[start:-8])
    assert footer.count(old) >= 2, footer
    data[start:-8] = footer.replace(old, new)
    path.write_bytes(bytes(data))


def test_a_corrupt_footer_statistic_drops_no_row(spark: SparkSession, tmp_path: Path) -> None:
    """A flipped byte in the footer's ``_ts`` statistics made Spark's Parquet reader skip the
    row group for the pushed filter ``_ts <= as_of`` (the footer has no checksum): the
    snapshot read as empty. No read of parts filters by the footer now."""
    client, path, _key = _one_part(tmp_path)
    reader = client.open_unleased_reader("s")
    assert snapshot_df(spark, reader, T0).count() == 100
    was = T0
    for wrong in (T0 + 1, T0 + 2**40):
        _flip_time_statistics(path, was, wrong)
        was = wrong
        assert snapshot_df(spark, reader, T0).count() == 100
        assert updates_df(spark, reader, T0, T0 + 1).count() == 100
