"""An ``arrowfs+file://`` blob keeps the file blob's promises on its directory.

pyarrow's local ``move`` is a ``rename``: it replaced a value a racing writer of
other bytes had moved into place first (both writers returned, one value lost),
wrote nothing to disk before ``set`` returned, and pyarrow's listing followed
symbolic links anywhere, out of the root and round loops.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from timeshard.errors import CorruptState, InvalidUsage
from timeshard.location import open_blob
from timeshard.location.arrowfs import ArrowFsBlob


def _arrow_blob(root: Path) -> ArrowFsBlob:
    blob = open_blob(f"arrowfs+file://{root}")
    assert isinstance(blob, ArrowFsBlob)
    return blob


def _after_the_check(monkeypatch: pytest.MonkeyPatch, other: Callable[[], None]) -> None:
    """Run ``other`` once, when the next ``set`` has found its key free and names its
    temporary file (both blobs draw that name from ``uuid.uuid4``)."""
    real = uuid.uuid4
    pending = [other]

    def uuid4() -> uuid.UUID:
        if pending:
            pending.pop()()
        return real()

    monkeypatch.setattr(uuid, "uuid4", uuid4)


def test_a_writer_overtaken_by_other_bytes_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blob, other = _arrow_blob(tmp_path), _arrow_blob(tmp_path)
    _after_the_check(monkeypatch, lambda: other.set("s/w/b/part", b"first"))
    with pytest.raises(InvalidUsage, match="'s/w/b/part' already holds 5 other bytes"):
        blob.set("s/w/b/part", b"second")
    assert blob.get("s/w/b/part") == b"first"
    assert [p.name for p in (tmp_path / "s" / "w" / "b").iterdir()] == ["part"]


def test_a_returned_set_is_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    _arrow_blob(tmp_path).set("s/w/b/part", b"value")
    directory = str((tmp_path / "s" / "w" / "b").resolve())
    assert directory in synced, synced  # the name survives a crash
    assert any(p.startswith(f"{directory}/.tmp-") for p in synced), synced  # and its bytes


def test_links_are_checked_as_in_a_file_blob(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "g").write_bytes(b"secret")
    root = tmp_path / "root"
    blob = _arrow_blob(root)
    blob.set("s/w/b/part-0", b"p")
    blob.set("t/x", b"q")
    (root / "s" / "out").symlink_to(outside)
    with pytest.raises(CorruptState, match="'s/out/g' passes through 's/out'"):
        blob.get("s/out/g")
    with pytest.raises(CorruptState, match="'s/out'"):
        list(blob.list_keys("s/"))
    (root / "s" / "out").unlink()
    (root / "s" / "loop").symlink_to(root / "s")  # a loop through a directory
    (root / "s" / "in").symlink_to(root / "t")
    assert sorted(m.key for m in blob.list_keys("")) == ["s/w/b/part-0", "t/x"]
    with pytest.raises(CorruptState, match="passes through the symbolic link 's/in'"):
        blob.get("s/in/x")
    assert (outside / "g").read_bytes() == b"secret"
