"""Spark reads of parts: an I/O error is a fault, not a corrupt part, a part that became a
link out of the blob root is CorruptState, and a footer statistic drops no row."""

from __future__ import annotations

import errno
import os
import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.errors import CorruptState, Determinate
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark import part_errors, snapshot_df, typed_error, typed_errors, updates_df

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


def _failing_open(part: Path) -> Callable[..., Any]:
    """``open`` that fails with EIO for ``part`` (the driver's re-read of it, which opens
    the descriptor the blob's ``get`` would read)."""

    def failing(file: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, int) and os.path.samestat(os.fstat(file), os.stat(part)):
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(part))
        return open(file, *args, **kwargs)

    return failing


def test_an_io_error_reading_a_part_is_a_fault_not_a_corrupt_part(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark's read of the part fails (after Spark listed it, the part is made a link to
    ``/proc/self/mem``, which Spark's reader finds empty), and the driver's re-read of it
    fails with EIO (the part is put back, and its open on the driver fails): the read is
    Determinate naming the part (it was PartError 'corrupt', a data problem, for a
    passing fault)."""
    client, path, key = _one_part(tmp_path)
    assert path.stat().st_size < 65536
    data = path.read_bytes()
    df = snapshot_df(spark, client.open_unleased_reader("s"), T0)
    path.unlink()
    path.symlink_to("/proc/self/mem")
    with pytest.raises(Exception, match="FAILED_READ_FILE") as failed:
        df.collect()
    path.unlink()
    path.write_bytes(data)
    monkeypatch.setattr(part_errors, "open", _failing_open(path), raising=False)
    error = typed_error(failed.value)
    assert isinstance(error, Determinate), error
    assert re.search(f"reading part '{key}'.*Input/output error", str(error)), error


def test_a_part_that_became_a_link_out_of_the_root_is_corrupt_state(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The part is made a link out of the blob root after Spark listed it (here to
    ``/proc/self/mem``, which Spark's reader follows and fails to read): the driver's
    re-read judges the key as the blob's ``get`` does, CorruptState naming it (it was
    Determinate, a fault retried for ever, as it read through the link)."""
    client, path, key = _one_part(tmp_path)
    df = snapshot_df(spark, client.open_unleased_reader("s"), T0)
    path.unlink()
    path.symlink_to("/proc/self/mem")
    with pytest.raises(CorruptState, match=f"{key}.*outside the blob root"), typed_errors():
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
