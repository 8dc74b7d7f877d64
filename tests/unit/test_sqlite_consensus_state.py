"""A SQLite consensus file that is not a database is CorruptState naming its path.

``SqliteConsensus(path)`` on such a file raised Determinate ("file is not a
database"), a fault that callers retry for ever, although no retry can repair
a file on disk.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from timeshard.errors import CorruptState
from timeshard.location import SqliteConsensus


@pytest.mark.parametrize("content", [b"x" * 2000, b"hello", b"SQLite format 3\x00" + b"\xff" * 200])
def test_a_file_that_is_not_a_database_is_corrupt_state(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "consensus.sqlite"
    path.write_bytes(content)
    with pytest.raises(
        CorruptState, match=rf"{re.escape(str(path))}'? is not a database or is damaged"
    ):
        SqliteConsensus(path)
    assert path.read_bytes() == content
