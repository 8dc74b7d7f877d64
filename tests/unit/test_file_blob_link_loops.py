"""A key under a loop of symbolic links is CorruptState on every Python.

Python 3.13's non-strict ``Path.resolve()`` returns a path through a loop
unchanged where 3.11 and 3.12 raise RuntimeError. The file blob took "resolves
to itself" for "passes through no link", so on 3.13 a key under ``a -> a`` or
``a -> b -> a`` looked for no link: ``served_sizes`` and ``get`` raised
Determinate ("[Errno 40] Too many levels of symbolic links"), a fault retried
for ever, and ``check_key_path`` returned the path, so a part writer went ahead.
The loop is state found on disk: each raises CorruptState naming the link.

Needs nothing but the file blob, so it runs under any Python the package
imports on (``--noconftest`` where pyarrow is missing).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from timeshard.errors import CorruptState
from timeshard.location.file import FileBlob, check_key_path, served_sizes

LOOPS: dict[str, list[tuple[str, str]]] = {
    "a -> a": [("a", "a")],
    "a -> b -> a": [("a", "b"), ("b", "a")],
}


def _calls(root: Path) -> dict[str, Callable[[str], object]]:
    blob = FileBlob(root)
    return {
        "served_sizes": lambda key: served_sizes(root, [key]),
        "check_key_path": lambda key: check_key_path(root, key),
        "get": blob.get,
        "set": lambda key: blob.set(key, b"x"),
        "delete": blob.delete,
    }


@pytest.mark.parametrize("key", ["a/p", "a/p/q", "a"])
@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("call", ["served_sizes", "check_key_path", "get", "set", "delete"])
def test_a_key_under_a_loop_of_links_is_corrupt_state(
    tmp_path: Path, loop: str, key: str, call: str
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    for link, target in LOOPS[loop]:
        os.symlink(target, root / link)
    with pytest.raises(CorruptState, match=r"'a'.* does not resolve"):
        _calls(root)[call](key)
    assert sorted(os.listdir(root)) == sorted(link for link, _ in LOOPS[loop])
