"""ArrowFsBlob lists only the directory a prefix names, not the whole root."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from timeshard.location.arrowfs import ArrowFsBlob


class _Recording:
    """The blob's filesystem, recording the directories it is asked to list."""

    def __init__(self, fs: pafs.FileSystem) -> None:
        self.fs = fs
        self.listed: list[str] = []

    def get_file_info(self, what: Any) -> Any:
        if isinstance(what, pafs.FileSelector):
            self.listed.append(what.base_dir)
        return self.fs.get_file_info(what)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fs, name)


def _blob(tmp_path: Path) -> tuple[ArrowFsBlob, _Recording]:
    """A blob on pyarrow's in-memory filesystem (a local root is served by a FileBlob)."""
    blob = ArrowFsBlob(f"mock://{tmp_path}/root")
    for key in ("s1/w1/b1/p0", "s1/w1/b1/p1", "s1/w2/b2/p0", "s2/w1/b1/p0", "top"):
        blob.set(key, b"x")
    recording = _Recording(blob.fs)
    blob.fs = recording  # type: ignore[assignment]
    return blob, recording


def test_a_prefix_lists_only_its_directory(tmp_path: Path) -> None:
    blob, recording = _blob(tmp_path)
    keys = sorted(m.key for m in blob.list_keys("s1/w1/b1/"))
    assert keys == ["s1/w1/b1/p0", "s1/w1/b1/p1"]
    assert list(blob.list_temporaries("s1/w1/b1/")) == []
    base = blob.base
    assert recording.listed == [f"{base}/s1/w1/b1", f"{base}/s1/w1/b1"]


def test_a_partial_last_component_lists_its_parent(tmp_path: Path) -> None:
    blob, recording = _blob(tmp_path)
    assert sorted(m.key for m in blob.list_keys("s1/w")) == [
        "s1/w1/b1/p0",
        "s1/w1/b1/p1",
        "s1/w2/b2/p0",
    ]
    assert recording.listed == [f"{blob.base}/s1"]
    assert sorted(m.key for m in blob.list_keys("s")) == [
        "s1/w1/b1/p0",
        "s1/w1/b1/p1",
        "s1/w2/b2/p0",
        "s2/w1/b1/p0",
    ]
    assert len(list(blob.list_keys(""))) == 5
    assert recording.listed[1:] == [blob.base, blob.base]


def test_a_prefix_of_no_directory_lists_nothing(tmp_path: Path) -> None:
    blob, _ = _blob(tmp_path)
    assert list(blob.list_keys("s9/w1/")) == []
    assert list(blob.list_temporaries("s9/")) == []
