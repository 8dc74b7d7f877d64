"""A key whose component is longer than the file blob's filesystem takes is InvalidUsage
naming it, in every call, before anything is written.

Such a key can never be held by a file blob (Linux names are at most 255
bytes). ``get``, ``delete`` and a listing below it raised Determinate (``File
name too long``), a fault callers retry for ever; ``set`` made the key's
directories and a temporary file, then raised Indeterminate from the link.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from timeshard.errors import InvalidUsage
from timeshard.location import FileBlob

LONG = "b" * 300
KEY = f"a/{LONG}"

CALLS: list[tuple[str, Callable[[FileBlob], object]]] = [
    ("get", lambda blob: blob.get(KEY)),
    ("set", lambda blob: blob.set(KEY, b"x")),
    ("delete", lambda blob: blob.delete(KEY)),
    ("list_keys", lambda blob: list(blob.list_keys(f"{KEY}/"))),
    ("list_temporaries", lambda blob: list(blob.list_temporaries(f"{KEY}/c"))),
    ("delete_temporary", lambda blob: blob.delete_temporary(f"{KEY}/.tmp-0123")),
]


@pytest.mark.parametrize(("name", "call"), CALLS, ids=[name for name, _ in CALLS])
def test_a_component_too_long_for_the_filesystem_is_invalid_usage(
    tmp_path: Path, name: str, call: Callable[[FileBlob], object]
) -> None:
    blob = FileBlob(tmp_path / "root")
    with pytest.raises(InvalidUsage, match=f"blob key '{KEY}' has a component of 300 bytes"):
        call(blob)
    assert list(blob.root.iterdir()) == []


def test_a_component_as_long_as_the_filesystem_takes_is_a_key(tmp_path: Path) -> None:
    blob = FileBlob(tmp_path / "root")
    key = "a/" + "b" * 255
    blob.set(key, b"x")
    assert blob.get(key) == b"x"
    assert [m.key for m in blob.list_keys("a/")] == [key]
