"""The driver's re-read of a part Spark failed to read judges its key as the blob's ``get``.

``check_part_file`` (which tells a missing or corrupt part from a fault after Spark's read
failed) opened the part through every symbolic link: a part that is a link out of the
blob root with the recorded bytes there passed as sound, so the failed read was called a
fault and retried for ever, where ``get`` and ``check_parts`` raise CorruptState. Now a
link ``get`` refuses (out of the root, a directory link on the path, a loop) is
CorruptState naming the key, and a key ``get`` serves nothing for is a missing part.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from timeshard.errors import CorruptState, PartError
from timeshard.spark.parts import check_part_file

KEY = "s/w/b/part-00000-0123456789ab.parquet"
DATA = b"the recorded bytes of a part"
DIGEST = hashlib.sha256(DATA).hexdigest()


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "blob"
    (root / "s/w/b").mkdir(parents=True)
    return root


def _check(root: Path, key: str = KEY) -> None:
    check_part_file(root.as_uri(), key, len(DATA), DIGEST)


def test_a_part_that_is_a_link_out_of_the_root_is_corrupt_state(tmp_path: Path) -> None:
    root = _root(tmp_path)
    outside = tmp_path / "outside"
    outside.write_bytes(DATA)
    (root / KEY).symlink_to(outside)
    with pytest.raises(CorruptState, match=f"{KEY}.*outside the blob root"):
        _check(root)


def test_a_part_below_a_directory_link_is_corrupt_state(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (root / "t/w/b").mkdir(parents=True)
    (root / "t/w/b" / KEY.rpartition("/")[2]).write_bytes(DATA)
    os.rename(root / "s", tmp_path / "gone")
    (root / "s").symlink_to(root / "t")
    with pytest.raises(CorruptState, match=f"{KEY}.*passes through the symbolic link 's'"):
        _check(root)


def test_a_part_in_a_loop_of_links_is_corrupt_state(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (root / KEY).symlink_to(root / KEY)
    with pytest.raises(CorruptState, match=f"{KEY}.*does not resolve"):
        _check(root)


@pytest.mark.parametrize("target", ["missing", "a directory"])
def test_a_part_that_is_a_link_to_no_file_is_missing(tmp_path: Path, target: str) -> None:
    root = _root(tmp_path)
    there = root / "s/w/other"
    if target == "a directory":
        there.mkdir()
    (root / KEY).symlink_to(there)
    with pytest.raises(PartError, match=f"{KEY}.* missing"):
        _check(root)


def test_a_part_that_is_a_link_to_a_file_inside_the_root_is_read(tmp_path: Path) -> None:
    """As ``get`` serves it: the recorded bytes pass, other bytes are a corrupt part."""
    root = _root(tmp_path)
    (root / "s/w/b/target").write_bytes(DATA)
    (root / KEY).symlink_to(root / "s/w/b/target")
    _check(root)
    (root / "s/w/b/target").write_bytes(DATA.upper())
    with pytest.raises(PartError, match=f"{KEY}.*SHA-256 differs"):
        _check(root)
