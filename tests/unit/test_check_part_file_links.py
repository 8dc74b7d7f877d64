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
from typing import Any

import pytest

from timeshard.errors import CorruptState, PartError
from timeshard.spark import part_errors
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


def _linked_at_open(monkeypatch: pytest.MonkeyPatch, part: Path, target: Path) -> list[Path]:
    """Make ``part`` a symbolic link to ``target`` just before it is opened (after every look
    at its path): at the first ``open`` of its name, by path or below its directory's
    descriptor. Returns the list that records the swap."""
    swapped: list[Path] = []
    real_os_open, real_open = os.open, open

    def swap(name: object, dir_fd: int | None) -> None:
        by_path = dir_fd is None and isinstance(name, str | Path) and str(name) == str(part)
        below = dir_fd is not None and name == part.name
        if (by_path or below) and not swapped:
            part.unlink()
            part.symlink_to(target)
            swapped.append(part)

    def os_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        swap(path, dir_fd)
        return real_os_open(path, flags, mode, dir_fd=dir_fd)

    def builtin_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        swap(file, None)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(part_errors, "open", builtin_open, raising=False)
    return swapped


def test_a_part_made_a_link_out_of_the_root_while_it_is_opened_is_corrupt_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The link is made after the key's path was judged, as the part is opened: it was
    followed (here to other bytes: PartError 'SHA-256 differs', a corrupt part where there is
    a link out of the root; with the recorded bytes there, a sound part). The part is
    opened without following a link now, so the link is refused as one made before."""
    root = _root(tmp_path)
    (root / KEY).write_bytes(DATA)
    outside = tmp_path / "outside"
    outside.write_bytes(DATA.upper())
    swapped = _linked_at_open(monkeypatch, root / KEY, outside)
    with pytest.raises(CorruptState, match=f"{KEY}.*outside the blob root"):
        _check(root)
    assert swapped == [root / KEY]


def test_a_root_spelled_through_a_link_reads_a_part_linked_inside_it(tmp_path: Path) -> None:
    """The root named through a symbolic link (an ``arrowfs+file`` location keeps it as
    given): a part that is a link to a file inside the root is judged by its bytes, as
    ``get`` serves it, not refused for lying outside the unresolved root."""
    real = _root(tmp_path)
    (real / "s/w/b/target").write_bytes(DATA)
    (real / KEY).symlink_to(real / "s/w/b/target")
    (tmp_path / "link-to-root").symlink_to(real)
    _check(tmp_path / "link-to-root")
    (real / "s/w/b/target").write_bytes(DATA.upper())
    with pytest.raises(PartError, match=f"{KEY}.*SHA-256 differs"):
        _check(tmp_path / "link-to-root")


def test_a_fifo_at_a_part_key_is_a_missing_part_not_a_wait(tmp_path: Path) -> None:
    """A FIFO put at the key is no part: the re-read does not wait for a writer to open it
    (it did, for ever). Run in a thread, with a generous deadline to tell stuck from slow,
    and the FIFO opened for writing afterwards so that a stuck reader ends."""
    import threading

    root = _root(tmp_path)
    os.mkfifo(root / KEY)
    outcome: list[BaseException | None] = []

    def check() -> None:
        try:
            _check(root)
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    reader = threading.Thread(target=check, daemon=True)
    reader.start()
    reader.join(timeout=60)
    stuck = reader.is_alive()
    if stuck:  # release it: a writer lets the blocked open return
        os.close(os.open(root / KEY, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(timeout=60)
    assert not stuck, "the re-read waited for a writer of the FIFO"
    [error] = outcome
    assert isinstance(error, PartError) and "missing" in str(error), error


def test_a_part_is_opened_for_blocking_reads(tmp_path: Path) -> None:
    """Opened O_NONBLOCK (a FIFO at a key must not wait for a writer), a file is then read
    blocking, as any file is: a filesystem that honours the flag on files (some FUSE
    mounts) would answer a short read, taken for a short or corrupt part."""
    from timeshard.location.file import open_served

    root = _root(tmp_path)
    (root / KEY).write_bytes(DATA)
    fd = open_served(root, KEY)
    assert fd is not None
    try:
        assert os.get_blocking(fd)
    finally:
        os.close(fd)
