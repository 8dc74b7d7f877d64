"""A Spark task's part is published under a local root without replacing a file at its key.

``_commit_local`` renamed the written temporary over the key with ``os.replace``, which
silently overwrote a file already there. Part keys carry a fresh id, so such a file is
another writer's bytes: they were lost, and the state that names them read this part's
rows. Now the part is hard-linked into place as ``FileBlob.set`` does: other bytes at the
key are CorruptState naming it and are left as they were; the same bytes are a retry. On a
filesystem without hard links the key is checked to be free before the rename.
"""

from __future__ import annotations

import dataclasses
import errno
import os
from pathlib import Path

import pyarrow as pa
import pytest

from timeshard.errors import CorruptState
from timeshard.persist._internal.parts import PartMeta, updates_schema
from timeshard.spark.parts import write_part_file

KEY = "s/w/b/part-00000-0123456789ab.parquet"
SCHEMA = updates_schema(pa.schema([("k", pa.int64())]))
TABLE = pa.table({"k": [1, 2], "_ts": [0, 0], "_diff": [1, 1], "_err": [None, None]}, SCHEMA)
OTHER = b"another writer's bytes"


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "blob"
    (root / "s/w/b").mkdir(parents=True)
    return root


def _write(root: Path, key: str = KEY) -> PartMeta:
    part = write_part_file(root.as_uri(), key, SCHEMA, [TABLE])
    assert part is not None
    return part


def _names(root: Path) -> list[str]:
    return sorted(os.listdir(root / "s/w/b"))


@pytest.fixture(params=["hard links", "no hard links"])
def links(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The filesystem has hard links, or ``os.link`` fails as on one without them."""
    if request.param == "no hard links":

        def no_link(*args: object, **kwargs: object) -> None:
            raise OSError(errno.EPERM, os.strerror(errno.EPERM))

        monkeypatch.setattr(os, "link", no_link)
    return str(request.param)


def test_other_bytes_at_the_key_are_corrupt_state_and_kept(tmp_path: Path, links: str) -> None:
    root = _root(tmp_path)
    (root / KEY).write_bytes(OTHER)
    with pytest.raises(CorruptState, match=f"part '{KEY}' already holds other bytes"):
        _write(root)
    assert (root / KEY).read_bytes() == OTHER
    assert _names(root) == [KEY.rpartition("/")[2]]  # no temporary is left


def test_the_same_bytes_at_the_key_are_a_retry(tmp_path: Path, links: str) -> None:
    root = _root(tmp_path)
    written = _write(root, "s/w/b/part-00000-aaaaaaaaaaaa.parquet")
    data = (root / "s/w/b/part-00000-aaaaaaaaaaaa.parquet").read_bytes()
    (root / KEY).write_bytes(data)
    assert _write(root) == dataclasses.replace(written, key=KEY)
    assert (root / KEY).read_bytes() == data
    assert _names(root) == sorted(["part-00000-aaaaaaaaaaaa.parquet", KEY.rpartition("/")[2]])


def test_a_free_key_is_published(tmp_path: Path, links: str) -> None:
    root = _root(tmp_path)
    part = _write(root)
    assert (root / KEY).stat().st_size == part.size_in_bytes
    assert _names(root) == [KEY.rpartition("/")[2]]


def test_a_directory_at_the_key_is_corrupt_state(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (root / KEY).mkdir()
    with pytest.raises(CorruptState, match=f"part '{KEY}' is a directory"):
        _write(root)
    assert _names(root) == [KEY.rpartition("/")[2]]


def test_a_directory_at_the_key_leaves_no_descriptor_open(tmp_path: Path) -> None:
    """The check of what is at the key opens it: a directory there is CorruptState, and
    the descriptor is closed (a task's Python worker is reused: a leak would add up)."""
    root = _root(tmp_path)
    (root / KEY).mkdir()
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(5):
        with pytest.raises(CorruptState, match="is a directory"):
            _write(root)
    assert len(os.listdir("/proc/self/fd")) == before
