"""A symbolic link made on a key's path while ``FileBlob.get`` reads it is never followed.

``get`` looked at each component of the key's path (an ``lstat`` each) and then opened the
path by name, which follows every link: a directory swapped for a link out of the root
between the two served a file outside the blob root, which ``get`` refuses when the link
is there first. Now each component is opened below the previous one without following a
link, so the file read is the one the walk reached: a link made after a component was
opened is not on the way, and one met is refused (CorruptState naming the key).
"""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path
from typing import Any

import pytest

from timeshard.errors import CorruptState, Determinate
from timeshard.location import file as file_module
from timeshard.location.file import FileBlob

INSIDE = b"the blob's value"
OUTSIDE = b"a file outside the blob root"


def test_a_directory_swapped_for_a_link_while_get_reads_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Right after ``get`` first looks at (or opens) ``a``, ``a`` becomes a link to a
    directory outside the root holding ``b/k``: ``get`` serves the blob's value, or
    refuses the link; never the outside file."""
    root = tmp_path / "blob"
    blob = FileBlob(root)
    blob.set("a/b/k", INSIDE)
    outside = tmp_path / "outside"
    (outside / "b").mkdir(parents=True)
    (outside / "b" / "k").write_bytes(OUTSIDE)
    swapped: list[str] = []
    real_lstat, real_open = os.lstat, os.open

    def swap_after(call: str) -> None:
        if not swapped:
            swapped.append(call)
            os.rename(root / "a", tmp_path / "moved")
            os.symlink(outside, root / "a")

    def lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        result = real_lstat(path, *args, **kwargs)
        if os.fspath(path) == str(root / "a"):
            swap_after("lstat")
        return result

    def open_(path: Any, flags: int, *args: Any, dir_fd: int | None = None, **kwargs: Any) -> int:
        fd = real_open(path, flags, *args, dir_fd=dir_fd, **kwargs)
        if os.fspath(path) == str(root / "a") or (dir_fd is not None and path == "a"):
            swap_after("open")
        return fd

    monkeypatch.setattr(os, "lstat", lstat)
    monkeypatch.setattr(os, "open", open_)
    try:
        served: bytes | CorruptState | None = blob.get("a/b/k")
    except CorruptState as e:
        served = e
    monkeypatch.undo()
    assert swapped, "get looked at no component of the key"
    assert served != OUTSIDE
    assert served == INSIDE or isinstance(served, CorruptState), served
    with pytest.raises(CorruptState, match="'a/b/k' passes through 'a', which is a symbolic link"):
        blob.get("a/b/k")  # the link there first is refused, as ever


def test_a_read_error_of_the_opened_file_is_determinate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file opened without following links fails to read: a fault, its key named."""
    blob = FileBlob(tmp_path)
    blob.set("k", INSIDE)

    class Unreadable(io.FileIO):
        def readall(self) -> bytes:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

        def read(self, size: int = -1) -> bytes:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(file_module, "open", lambda fd, mode: Unreadable(fd, mode), raising=False)
    with pytest.raises(Determinate, match=r"reading blob 'k': .*Input/output error"):
        blob.get("k")
