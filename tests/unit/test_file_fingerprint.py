"""A FILE source binds a fingerprint of each file with its offset, so that a file
rewritten while no process ran is refused after a restart, as a running source
refuses it, instead of being read on from its old offset (its new first lines lost)."""

from __future__ import annotations

from pathlib import Path

import pytest

from timeshard.errors import InvalidUsage
from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient, PersistConfig
from timeshard.storage import Remap
from timeshard.storage.file_source import FileSource, file_offsets


def client() -> PersistClient:
    return PersistClient(Location(MemoryBlob(), MemoryConsensus()), PersistConfig(backoff_ms=0.0))


def bind(c: PersistClient, source: FileSource, t: int) -> None:
    """What a step of the ingestion binds: the source's upper, at ``t``."""
    remap = Remap(c, "f.remap")
    try:
        assert remap.mint(t, source.upper())
    finally:
        remap.close()


def restarted(c: PersistClient, path: Path) -> FileSource:
    """A new source told the latest binding, as a new ``Ingestion`` tells it."""
    source = FileSource("f", path, "text")
    remap = Remap(c, "f.remap")
    try:
        resume = getattr(source, "resume", None)
        if resume is not None:
            resume(remap.frontier_at(remap.upper.time or 0))
    finally:
        remap.close()
    return source


def test_a_file_rewritten_while_no_process_ran_is_refused_after_a_restart(
    tmp_path: Path,
) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"a1\na2\n")
    c = client()
    bind(c, FileSource("f", tmp_path, "text"), 1)
    log.write_bytes(b"b1\nb2\nb3\n")  # byte 5 is a newline again
    source = restarted(c, tmp_path)
    for _ in range(2):  # every look says so, nothing is skipped past
        with pytest.raises(InvalidUsage, match=r"'app\.log' no longer holds .*rewritten"):
            source.upper()


def test_a_file_replaced_by_a_longer_one_while_stopped_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"x" * 5000 + b"\n")
    c = client()
    bind(c, FileSource("f", tmp_path, "text"), 1)
    log.unlink()
    log.write_bytes(b"y" * 5000 + b"\nz\n")
    with pytest.raises(InvalidUsage, match="rewritten"):
        restarted(c, tmp_path).upper()


def test_a_rewrite_that_keeps_the_bytes_before_the_offset_is_refused(tmp_path: Path) -> None:
    """The first 4 KiB are part of the fingerprint: a copytruncate whose new lines end
    as the old ones did is caught, while running and after a restart."""
    log = tmp_path / "app.log"
    tail = b"t" * 5000 + b"\n"
    log.write_bytes(b"a1\n" + tail)
    c = client()
    running = FileSource("f", tmp_path, "text")
    bind(c, running, 1)
    log.write_bytes(b"b1\n" + tail)
    with pytest.raises(InvalidUsage, match="rewritten"):
        running.upper()
    with pytest.raises(InvalidUsage, match="rewritten"):
        restarted(c, tmp_path).upper()


def test_appended_files_resume_after_a_restart_and_their_fingerprints_move_on(
    tmp_path: Path,
) -> None:
    (tmp_path / "d").mkdir()
    a, b = tmp_path / "a.log", tmp_path / "d" / "b.log"
    a.write_bytes(b"a1\na2\npart")
    b.write_bytes(b"b" * 9000 + b"\n")
    c = client()
    first = FileSource("f", tmp_path, "text")
    bind(c, first, 1)
    with a.open("ab") as f:
        f.write(b"ial\na3\n")
    source = restarted(c, tmp_path)
    upper = source.upper()
    assert file_offsets(upper) == {"a.log": a.stat().st_size, "d/b.log": 9001}
    assert set(upper) - set(file_offsets(upper)) == {"/fingerprint/a.log", "/fingerprint/d/b.log"}
    bind(c, source, 2)
    remap = Remap(c, "f.remap")
    [before, after] = [f for t, f in remap.bindings() if t in (1, 2)]
    remap.close()
    assert set(before) == set(after)
    for p in before:  # monotone: no entry goes back
        assert after[p] >= before[p], p
    assert after["/fingerprint/a.log"] > before["/fingerprint/a.log"]
    assert restarted(c, tmp_path).upper() == upper


def test_bindings_without_fingerprints_still_resume(tmp_path: Path) -> None:
    """A remap shard bound before fingerprints were: offsets only."""
    log = tmp_path / "app.log"
    log.write_bytes(b"a1\na2\n")
    c = client()
    remap = Remap(c, "f.remap")
    assert remap.mint(1, {"app.log": 6})
    remap.close()
    with log.open("ab") as f:
        f.write(b"a3\n")
    source = restarted(c, tmp_path)
    assert file_offsets(source.upper()) == {"app.log": 9}


def test_a_file_shorter_than_its_fingerprint_is_checked_once_it_grows_again(
    tmp_path: Path,
) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"a1\na2\n")
    c = client()
    bind(c, FileSource("f", tmp_path, "text"), 1)
    log.write_bytes(b"c\n")
    source = restarted(c, tmp_path)
    # Below the bound offset: the ingestion stalls on it; no fingerprint is reported
    # for it, so only the file's own offset is behind.
    assert source.upper() == {"app.log": 2}
    log.write_bytes(b"c\nc2\nc3\n")
    with pytest.raises(InvalidUsage, match="rewritten"):
        source.upper()
