"""One conformance suite, run against every blob and consensus backend."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from timeshard import Determinate, Indeterminate, InvalidUsage
from timeshard.location import (
    Blob,
    CaSResult,
    Consensus,
    FileBlob,
    Location,
    MemoryBlob,
    MemoryConsensus,
    SqliteConsensus,
    UnreliableBlob,
    UnreliableConsensus,
    VersionedData,
    open_blob,
    open_consensus,
    open_location,
)


@pytest.fixture(params=["memory", "file", "arrowfs"])
def blob(request: pytest.FixtureRequest, tmp_path: Path) -> Blob:
    if request.param == "memory":
        return MemoryBlob()
    if request.param == "file":
        return FileBlob(tmp_path / "blob")
    (tmp_path / "afs").mkdir()
    return open_blob(f"arrowfs+file://{tmp_path / 'afs'}")


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def consensus(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Consensus]:
    if request.param == "memory":
        yield MemoryConsensus()
    elif request.param == "sqlite":
        yield SqliteConsensus(tmp_path / "c.sqlite")
    else:
        from timeshard.location.postgres import PostgresConsensus

        dsn = request.getfixturevalue("postgres_dsn")
        yield PostgresConsensus(dsn)


def key_for(request: pytest.FixtureRequest) -> str:
    return "k-" + str(abs(hash(request.node.nodeid)))


def test_blob_get_set_delete_list(blob: Blob) -> None:
    assert blob.get("a/b") is None
    blob.set("a/b", b"one")
    blob.set("a/c", b"")
    blob.set("z", b"zz")
    assert blob.get("a/b") == b"one" and blob.get("a/c") == b""
    assert sorted((m.key, m.size_in_bytes) for m in blob.list_keys("a/")) == [
        ("a/b", 3),
        ("a/c", 0),
    ]
    assert sorted(m.key for m in blob.list_keys()) == ["a/b", "a/c", "z"]
    blob.set("a/b", b"one")  # a retried write of the same bytes is harmless
    assert blob.delete("a/b") == 3
    assert blob.delete("a/b") is None
    assert blob.get("a/b") is None


@pytest.mark.parametrize(
    "key", ["", "/abs", "../up", "a/../b", "a//b", "a/./b", "a b", "a\\b", "x/\x00"]
)
def test_blob_rejects_unsafe_keys(blob: Blob, key: str) -> None:
    with pytest.raises(InvalidUsage, match="invalid blob key"):
        blob.set(key, b"x")
    with pytest.raises(InvalidUsage, match="invalid blob key"):
        blob.get(key)


def test_file_blob_stays_in_root(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "link").symlink_to(outside)
    blob = FileBlob(tmp_path / "root")
    with pytest.raises(InvalidUsage, match="escapes the blob root"):
        blob.set("link/x", b"data")
    assert list(outside.iterdir()) == []


def test_consensus_cas_semantics(consensus: Consensus, request: pytest.FixtureRequest) -> None:
    key = key_for(request)
    assert consensus.head(key) is None
    assert consensus.compare_and_set(key, 0, VersionedData(1, b"x")) is (
        CaSResult.EXPECTATION_MISMATCH
    )
    assert consensus.compare_and_set(key, None, VersionedData(0, b"v0")) is CaSResult.COMMITTED
    assert consensus.compare_and_set(key, None, VersionedData(0, b"again")) is (
        CaSResult.EXPECTATION_MISMATCH
    )
    with pytest.raises(InvalidUsage, match="greater than expected"):
        consensus.compare_and_set(key, 0, VersionedData(0, b"same"))
    for s in range(1, 6):
        assert consensus.compare_and_set(key, s - 1, VersionedData(s, f"v{s}".encode())) is (
            CaSResult.COMMITTED
        )
    assert consensus.compare_and_set(key, 3, VersionedData(4, b"stale")) is (
        CaSResult.EXPECTATION_MISMATCH
    )
    assert consensus.head(key) == VersionedData(5, b"v5")
    assert [v.seqno for v in consensus.scan(key, 2, 2)] == [2, 3]
    assert [v.data for v in consensus.scan(key, 4, 100)] == [b"v4", b"v5"]
    assert consensus.truncate(key, 3) == 3
    assert [v.seqno for v in consensus.scan(key, 0, 100)] == [3, 4, 5]
    with pytest.raises(InvalidUsage, match="head seqno is 5"):
        consensus.truncate(key, 6)
    assert consensus.truncate(key, 5) == 2
    assert consensus.head(key) == VersionedData(5, b"v5")
    assert key in consensus.list_keys()
    with pytest.raises(InvalidUsage):
        consensus.head("../etc")


def test_consensus_thread_race(consensus: Consensus, request: pytest.FixtureRequest) -> None:
    key = key_for(request)
    consensus.compare_and_set(key, None, VersionedData(0, b"0"))
    wins: list[int] = []
    lock = threading.Lock()

    def racer() -> None:
        done = 0
        while done < 20:
            head = consensus.head(key)
            assert head is not None
            nxt = VersionedData(head.seqno + 1, str(head.seqno + 1).encode())
            if consensus.compare_and_set(key, head.seqno, nxt) is CaSResult.COMMITTED:
                with lock:
                    wins.append(nxt.seqno)
                done += 1

    threads = [threading.Thread(target=racer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wins) == list(range(1, 81))
    assert [v.seqno for v in consensus.scan(key, 0, 1000)] == list(range(81))


SQLITE_RACER = """
import sys
from timeshard.location import SqliteConsensus, VersionedData, CaSResult
c = SqliteConsensus(sys.argv[1])
done = 0
while done < 30:
    head = c.head("k")
    nxt = VersionedData(head.seqno + 1, sys.argv[2].encode())
    if c.compare_and_set("k", head.seqno, nxt) is CaSResult.COMMITTED:
        done += 1
"""


def test_sqlite_is_linearizable_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    SqliteConsensus(path).compare_and_set("k", None, VersionedData(0, b"start"))
    procs = [
        subprocess.Popen([sys.executable, "-c", SQLITE_RACER, str(path), str(i)]) for i in range(4)
    ]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    versions = SqliteConsensus(path).scan("k", 0, 1000)
    assert [v.seqno for v in versions] == list(range(121))
    assert sorted(v.data for v in versions[1:]) == sorted(
        str(i).encode() for i in range(4) for _ in range(30)
    )


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["cas", "truncate"]), st.integers(-1, 6)), max_size=30))
def test_memory_consensus_matches_list_model(ops: list[tuple[str, int]]) -> None:
    c = MemoryConsensus()
    model: list[int] = []
    for op, n in ops:
        if op == "cas":
            expected = None if n < 0 else n
            head = model[-1] if model else None
            result = c.compare_and_set(
                "k",
                expected,
                VersionedData((expected or 0) + 1 if expected is not None else 0, b""),
            )
            if head == expected:
                assert result is CaSResult.COMMITTED
                model.append((expected + 1) if expected is not None else 0)
            else:
                assert result is CaSResult.EXPECTATION_MISMATCH
        else:
            if not model or n > model[-1]:
                with pytest.raises(InvalidUsage):
                    c.truncate("k", n)
            else:
                c.truncate("k", n)
                model = [s for s in model if s >= n]
        assert [v.seqno for v in c.scan("k", 0, 100)] == model


def test_unreliable_wrappers_are_seeded_and_typed() -> None:
    def run(seed: int) -> list[str]:
        c = UnreliableConsensus(MemoryConsensus(), seed=seed, fail_rate=0.3, timeout_rate=0.3)
        outcomes = []
        for _ in range(50):
            try:
                c.head("k")
                outcomes.append("ok")
            except Determinate:
                outcomes.append("determinate")
            except Indeterminate:
                outcomes.append("indeterminate")
        return outcomes

    assert run(7) == run(7)
    assert set(run(7)) == {"ok", "determinate", "indeterminate"}


def test_unreliable_timeouts_happen_and_failures_do_not() -> None:
    inner = MemoryBlob()
    blob = UnreliableBlob(inner, seed=3, fail_rate=0.5, timeout_rate=0.5)
    applied = failed = 0
    for i in range(100):
        try:
            blob.set(f"k{i}", b"v")
        except Determinate:
            failed += 1
            assert inner.get(f"k{i}") is None
        except Indeterminate:
            applied += 1
            assert inner.get(f"k{i}") == b"v"
    assert applied and failed
    assert blob.injected["determinate"] == failed and blob.injected["indeterminate"] == applied
    blob.enabled = False
    blob.set("x", b"y")


@pytest.mark.parametrize(
    "uri",
    [
        "ftp://bucket/x",
        "file:///x/../../etc",
        "file://host/x",
        "file:///a/../b",
        "sqlite:",
        "redis://x",
        "",
        "file:///tmp/\x00",
    ],
)
def test_bad_location_uris(uri: str) -> None:
    with pytest.raises(InvalidUsage):
        if uri.startswith(("file", "ftp")) or uri == "":
            open_blob(uri)
        else:
            open_consensus(uri)


def test_embedded_and_named_locations(tmp_path: Path) -> None:
    loc = Location.embedded(tmp_path / "loc")
    assert isinstance(loc.blob, FileBlob) and isinstance(loc.consensus, SqliteConsensus)
    assert (tmp_path / "loc" / "consensus.sqlite").exists()
    a = open_location("memory://x", "memory://x")
    b = open_location("memory://x", "memory://x")
    a.blob.set("k", b"v")
    assert b.blob.get("k") == b"v"
