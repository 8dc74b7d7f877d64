"""Spark's reads of parts under a local root agree with the file blob about symbolic links.

Spark's Parquet reader opens a part's path and follows every link on it; the
file blob's ``get`` refuses a key whose path passes through a link out of the
root, through a directory link, or a loop (CorruptState naming the key).
``check_parts``, which runs before every Spark read of parts, judges each part
as ``get`` does, so a part the blob calls corrupt state is never read as data.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from timeshard.errors import CorruptState, PartError
from timeshard.location import FileBlob, Location
from timeshard.persist import PersistClient
from timeshard.persist._internal.parts import PartMeta
from timeshard.spark.parts import check_parts

SCHEMA = pa.schema([("k", pa.int64())])


def _one_part(tmp_path: Path) -> tuple[FileBlob, PartMeta]:
    client = PersistClient(Location.embedded(tmp_path))
    client.open_writer("s", SCHEMA).append([((k,), 0, 1) for k in range(10)], 0, 1)
    [batch] = [b for b in client.state("s").batches if b.parts]
    [part] = batch.parts
    blob = client.location.blob
    assert isinstance(blob, FileBlob), blob
    return blob, part


def _moved_out(path: Path, outside: Path) -> Path:
    """``path`` moved to ``outside`` (same name), a link left at ``path`` to it."""
    outside.mkdir(parents=True, exist_ok=True)
    target = outside / path.name
    shutil.move(path, target)
    path.symlink_to(target, target_is_directory=target.is_dir())
    return target


def _link_at_key_out_of_root(blob: FileBlob, part: PartMeta, tmp: Path) -> None:
    _moved_out(blob.root / part.key, tmp / "outside")


def _batch_directory_out_of_root(blob: FileBlob, part: PartMeta, tmp: Path) -> None:
    _moved_out((blob.root / part.key).parent, tmp / "outside")


def _writer_directory_link_inside_root(blob: FileBlob, part: PartMeta, tmp: Path) -> None:
    _moved_out((blob.root / part.key).parent.parent, blob.root / "elsewhere")


def _loop_at_key(blob: FileBlob, part: PartMeta, tmp: Path) -> None:
    path = blob.root / part.key
    path.unlink()
    path.symlink_to(path)


def _loop_in_directory(blob: FileBlob, part: PartMeta, tmp: Path) -> None:
    directory = (blob.root / part.key).parent
    shutil.rmtree(directory)
    directory.symlink_to(directory)


def _dangling_link_out_of_root(blob: FileBlob, part: PartMeta, tmp: Path) -> None:
    path = blob.root / part.key
    path.unlink()
    path.symlink_to(tmp / "nowhere" / path.name)


@pytest.mark.parametrize(
    "make",
    [
        _link_at_key_out_of_root,
        _batch_directory_out_of_root,
        _writer_directory_link_inside_root,
        _loop_at_key,
        _loop_in_directory,
        _dangling_link_out_of_root,
    ],
)
def test_a_part_the_blob_refuses_is_corrupt_state_for_spark_reads(
    tmp_path: Path, make: object
) -> None:
    blob, part = _one_part(tmp_path)
    assert callable(make)
    make(blob, part, tmp_path)
    with pytest.raises(CorruptState, match=f"'{part.key}'"):
        blob.get(part.key)
    with pytest.raises(CorruptState, match=f"'{part.key}'"):
        check_parts(blob, [part])


def test_a_link_at_the_key_to_a_file_inside_the_root_is_the_part(tmp_path: Path) -> None:
    blob, part = _one_part(tmp_path)
    _moved_out(blob.root / part.key, blob.root / "kept")
    assert blob.get(part.key) is not None
    check_parts(blob, [part])


def test_a_dangling_link_inside_the_root_is_a_missing_part(tmp_path: Path) -> None:
    blob, part = _one_part(tmp_path)
    path = blob.root / part.key
    path.unlink()
    path.symlink_to(blob.root / "gone")
    assert blob.get(part.key) is None
    with pytest.raises(PartError, match="missing"):
        check_parts(blob, [part])


def test_a_root_reached_through_a_link_reads_its_parts(tmp_path: Path) -> None:
    """The root itself may be a link (a blob opened at a linked path): its parts are read."""
    blob, part = _one_part(tmp_path)
    linked = tmp_path / "linked-root"
    os.symlink(blob.root, linked)
    check_parts(FileBlob(linked), [part])
