"""A file blob key is written once even when two writers race for it, and never below a key.

``FileBlob.set`` checks that the key is free and then moves its temporary file
into place; another writer can finish in between. With ``os.replace`` the
second move overwrote the first value and both writers returned: one value
silently lost, and a reader could see either.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import timeshard.location.file as file_module
from timeshard.errors import InvalidUsage
from timeshard.location import FileBlob
from timeshard.location.arrowfs import ArrowFsBlob


def racing(monkeypatch: pytest.MonkeyPatch, other: Callable[[], None]) -> None:
    """Run ``other`` once, after the next ``set`` checked its key and before it writes."""
    real = file_module._make_dirs
    pending = [other]

    def make_dirs(*args: Any) -> Any:
        if pending:
            pending.pop()()
        return real(*args)

    monkeypatch.setattr(file_module, "_make_dirs", make_dirs)


def test_a_writer_overtaken_by_other_bytes_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blob, other = FileBlob(tmp_path), FileBlob(tmp_path)
    racing(monkeypatch, lambda: other.set("s/w/b/part", b"first"))
    with pytest.raises(InvalidUsage, match="'s/w/b/part' already holds 5 other bytes"):
        blob.set("s/w/b/part", b"second")
    assert blob.get("s/w/b/part") == b"first"
    assert [p.name for p in (tmp_path / "s" / "w" / "b").iterdir()] == ["part"]


def test_a_writer_overtaken_by_the_same_bytes_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blob, other = FileBlob(tmp_path), FileBlob(tmp_path)
    racing(monkeypatch, lambda: other.set("s/w/b/part", b"same"))
    blob.set("s/w/b/part", b"same")  # a retry racing the first attempt
    assert blob.get("s/w/b/part") == b"same"
    assert [p.name for p in (tmp_path / "s" / "w" / "b").iterdir()] == ["part"]


def race(blob: FileBlob, key: str, values: list[bytes]) -> list[bytes]:
    """Set ``key`` to each of ``values`` from its own thread, all at once; return who won."""
    start = threading.Barrier(len(values))
    won: list[bytes] = []

    def write(value: bytes) -> None:
        start.wait()
        try:
            blob.set(key, value)
            won.append(value)
        except InvalidUsage:
            pass

    threads = [threading.Thread(target=write, args=(v,)) for v in values]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return won


def test_of_racing_writers_of_other_bytes_exactly_one_wins(tmp_path: Path) -> None:
    blob = FileBlob(tmp_path)
    for i in range(50):
        won = race(blob, f"s/w/b/p{i}", [bytes([1]) * 10_000, bytes([2]) * 10_000])
        assert len(won) == 1, f"{len(won)} writers of 's/w/b/p{i}' returned"
        assert blob.get(f"s/w/b/p{i}") == won[0]
    names = sorted(p.name for p in (tmp_path / "s" / "w" / "b").iterdir())
    assert names == sorted(f"p{i}" for i in range(50))


def test_without_hard_links_a_blob_renames(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def unsupported(src: object, dst: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", unsupported)
    blob = FileBlob(tmp_path)
    blob.set("s/w/b/part", b"value")
    blob.set("s/w/b/part", b"value")
    with pytest.raises(InvalidUsage, match="already holds"):
        blob.set("s/w/b/part", b"other")
    assert blob.get("s/w/b/part") == b"value"
    assert [p.name for p in (tmp_path / "s" / "w" / "b").iterdir()] == ["part"]


@pytest.mark.parametrize("key", ["s/w/b/part/x", "s/w/b/part/y/z"])
def test_a_key_below_a_key_holding_a_value_is_invalid_usage(tmp_path: Path, key: str) -> None:
    """Not a fault to retry: no retry can make ``s/w/b/part`` a directory."""
    blob = FileBlob(tmp_path)
    blob.set("s/w/b/part", b"value")
    with pytest.raises(InvalidUsage, match=f"{key!r} is below the key 's/w/b/part'"):
        blob.set(key, b"other")
    assert blob.get("s/w/b/part") == b"value"
    assert [p.name for p in (tmp_path / "s" / "w" / "b").iterdir()] == ["part"]


def test_an_arrow_blob_key_below_a_key_holding_a_value_is_invalid_usage() -> None:
    """The same on pyarrow's write-and-move path (HDFS), seen on its in-memory filesystem."""
    blob = ArrowFsBlob("mock:///root")
    blob.set("s/w/b/part", b"value")
    with pytest.raises(InvalidUsage, match="'s/w/b/part/x' is below the key 's/w/b/part'"):
        blob.set("s/w/b/part/x", b"other")
    assert blob.get("s/w/b/part") == b"value"
    assert list(blob.list_temporaries("")) == []
