"""A FILE source notices a file rewritten under offsets it has seen, even when the new
bytes have their newlines at the old offsets (``copytruncate`` log rotation followed by
new lines before the next listing): reading on from the old offset would lose lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from timeshard.errors import InvalidUsage
from timeshard.storage.file_source import FileSource, file_offsets


def test_a_rewritten_file_is_refused_even_with_newlines_at_the_old_offsets(
    tmp_path: Path,
) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"a1\na2\n")
    source = FileSource("f", tmp_path, "text")
    assert file_offsets(source.upper()) == {"app.log": 6}
    log.write_bytes(b"b1\nb2\nb3\n")  # byte 5 is a newline again
    with pytest.raises(InvalidUsage, match=r"'app.log' .*rewritten"):
        source.upper()


def test_a_file_truncated_then_regrown_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"a1\na2\n")
    source = FileSource("f", tmp_path, "text")
    assert file_offsets(source.upper()) == {"app.log": 6}
    log.write_bytes(b"")
    # Below the bound: the ingestion stalls on it.
    assert file_offsets(source.upper()) == {"app.log": 0}
    log.write_bytes(b"c1\nc2\nc3\n")
    with pytest.raises(InvalidUsage, match="rewritten"):
        source.upper()


def test_a_file_removed_and_made_again_bigger_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"x" * 5000 + b"\n")
    source = FileSource("f", tmp_path, "text")
    assert file_offsets(source.upper()) == {"app.log": 5001}
    log.unlink()
    assert file_offsets(source.upper()) == {}
    log.write_bytes(b"y" * 5000 + b"\nz\n")
    with pytest.raises(InvalidUsage, match="rewritten"):
        source.upper()


def test_appended_lines_and_new_files_are_read_on(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"")
    source = FileSource("f", tmp_path, "text")
    for i in range(40):
        with log.open("ab") as f:  # lines up to 10 KiB, and part of the next one
            f.write(b"\n" + f"line {i} ".encode() * (i * 37) + b"\npartial")
        assert file_offsets(source.upper()) == {"app.log": log.stat().st_size - len(b"partial")}
    (tmp_path / "b.log").write_bytes(b"b\n")
    assert file_offsets(source.upper()) == {
        "app.log": log.stat().st_size - len(b"partial"),
        "b.log": 2,
    }
