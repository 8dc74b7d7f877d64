"""A local backend's path that is not a path of text is InvalidUsage naming it.

``FileBlob(123)`` and ``FileBlob(b"/data")`` raised a bare TypeError, and a path
with a NUL character (``FileBlob("a\\x00b")``, ``SqliteConsensus("c\\x00.db")``) a
bare ValueError ("embedded null byte"), as did an ``os.PathLike`` of bytes:
neither a caller mistake timeshard names nor a fault.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from timeshard.errors import InvalidUsage
from timeshard.location import FileBlob, SqliteConsensus


class BytesPath(os.PathLike[bytes]):
    def __fspath__(self) -> bytes:
        return b"/tmp/x"

    def __repr__(self) -> str:
        return "BytesPath()"


@pytest.mark.parametrize("root", [123, None, b"/tmp/x", BytesPath()])
def test_a_blob_root_that_is_not_a_path_is_invalid_usage(root: object) -> None:
    with pytest.raises(InvalidUsage, match=rf"blob root must be .*got {re.escape(repr(root))}$"):
        FileBlob(root)  # type: ignore[arg-type]


def test_a_sqlite_path_of_bytes_is_invalid_usage() -> None:
    with pytest.raises(InvalidUsage, match=r"SQLite consensus path must be .*got BytesPath\(\)$"):
        SqliteConsensus(BytesPath())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("make", "what"),
    [(FileBlob, "blob root"), (SqliteConsensus, "SQLite consensus path")],
)
def test_a_path_with_a_nul_is_invalid_usage(tmp_path: Path, make: object, what: str) -> None:
    path = str(tmp_path / "a\x00b")
    assert callable(make)
    with pytest.raises(InvalidUsage, match=rf"{what} {re.escape(repr(path))} has a NUL"):
        make(path)
    assert list(tmp_path.iterdir()) == []
