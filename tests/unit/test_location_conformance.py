"""One conformance suite, run against every blob and consensus backend.

Blobs: memory, file, arrowfs (a local root: a FileBlob), arrowfs-mock (pyarrow's
in-memory filesystem: the write-and-move path of HDFS), s3 (``s3a://``
on a SeaweedFS server the tests start, one fresh prefix per test). Consensus: memory,
sqlite, postgres (a throwaway server, one fresh schema per test). Then the
backend-specific failure modes (full disk, locked database, lost commit,
server restart, fork), the seeded unreliable wrappers, cross-process races and
a property test of MemoryConsensus against a list model.
"""

from __future__ import annotations

import errno
import multiprocessing
import os
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import hypothesis.strategies as st
import psycopg
import pytest
from hypothesis import given, settings
from tests.pg_server import PostgresServer

from timeshard.errors import CorruptState, Determinate, ExternalError, Indeterminate, InvalidUsage
from timeshard.location import (
    Blob,
    CaSResult,
    Consensus,
    FileBlob,
    Location,
    MemoryBlob,
    MemoryConsensus,
    PostgresConsensus,
    SqliteConsensus,
    UnreliableBlob,
    UnreliableConsensus,
    VersionedData,
    open_blob,
    open_consensus,
    open_location,
)

R = TypeVar("R")

POSTGRES = pytest.param("postgres", marks=pytest.mark.postgres)
UNSAFE_KEYS = [
    "",
    "/abs",
    "../up",
    "a/../b",
    "a//b",
    "a/./b",
    "a/",
    ".hidden",
    "a b",
    "a\\b",
    "x\0",
]


S3 = pytest.param("s3", marks=pytest.mark.s3)


@pytest.fixture(params=["memory", "file", "arrowfs", "arrowfs-mock", S3])
def blob(request: pytest.FixtureRequest, tmp_path: Path) -> Blob:
    if request.param == "memory":
        return MemoryBlob()
    if request.param == "arrowfs-mock":  # pyarrow's move path (HDFS), as arrowfs+file is local
        return open_blob(f"arrowfs+mock://{tmp_path}/afs")
    if request.param == "file":
        return FileBlob(tmp_path / "blob")
    if request.param == "s3":
        server = request.getfixturevalue("s3_server")
        return open_blob(server.uri(f"conformance/{uuid.uuid4().hex}"))
    (tmp_path / "afs").mkdir()
    return open_blob(f"arrowfs+file://{tmp_path / 'afs'}")


def make_consensus(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Consensus:
    if kind == "memory":
        return MemoryConsensus()
    if kind == "sqlite":
        return SqliteConsensus(tmp_path / "consensus.sqlite")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return PostgresConsensus(server.isolated_dsn())


@pytest.fixture(params=["memory", "sqlite", POSTGRES])
def consensus(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Consensus]:
    c = make_consensus(request.param, request, tmp_path)
    yield c
    if isinstance(c, SqliteConsensus | PostgresConsensus):
        c.close()


def v(seqno: int, data: bytes | None = None) -> VersionedData:
    return VersionedData(seqno, f"v{seqno}".encode() if data is None else data)


def seqnos(c: Consensus, key: str = "k") -> list[int]:
    return [x.seqno for x in c.scan(key, 0, 10_000)]


def append(c: Consensus, key: str, *versions: int) -> None:
    for s in versions:
        head = c.head(key)
        assert c.compare_and_set(key, None if head is None else head.seqno, v(s)) is (
            CaSResult.COMMITTED
        )


# --- blob ----------------------------------------------------------------------------------


def test_blob_get_set_delete(blob: Blob) -> None:
    assert blob.get("a/b") is None
    assert blob.delete("a/b") is None
    binary = bytes(range(256)) * 4096
    blob.set("a/b", b"one")
    blob.set("a/empty", b"")
    blob.set("big", binary)
    assert blob.get("a/b") == b"one"
    assert blob.get("a/empty") == b""
    assert blob.get("big") == binary
    assert blob.delete("a/b") == 3
    assert blob.delete("a/b") is None
    assert blob.get("a/b") is None
    assert blob.delete("big") == len(binary)


def test_blob_list_keys_by_prefix(blob: Blob) -> None:
    for key in ["s1/w1/p0", "s1/w1/p1", "s1/w2/p0", "s10/w1/p0", "s2/p", "top"]:
        blob.set(key, key.encode())

    def listed(prefix: str = "") -> list[tuple[str, int]]:
        return sorted((m.key, m.size_in_bytes) for m in blob.list_keys(prefix))

    assert [k for k, _ in listed()] == [
        "s1/w1/p0",
        "s1/w1/p1",
        "s1/w2/p0",
        "s10/w1/p0",
        "s2/p",
        "top",
    ]
    assert listed("s1/") == [("s1/w1/p0", 8), ("s1/w1/p1", 8), ("s1/w2/p0", 8)]
    assert [k for k, _ in listed("s1")] == ["s1/w1/p0", "s1/w1/p1", "s1/w2/p0", "s10/w1/p0"]
    assert [k for k, _ in listed("s1/w1/p")] == ["s1/w1/p0", "s1/w1/p1"]
    assert listed("s3/") == listed("nothing/here/") == listed("t0") == []
    blob.delete("s1/w1/p0")
    assert [k for k, _ in listed("s1/w1/")] == ["s1/w1/p1"]


def test_blob_keys_are_written_once(blob: Blob, request: pytest.FixtureRequest) -> None:
    blob.set("k", b"first")
    blob.set("k", b"first")  # a retry after an indeterminate failure is harmless
    with pytest.raises(InvalidUsage, match="'k' already holds"):
        blob.set("k", b"other")
    with pytest.raises(InvalidUsage, match="'k' already holds"):
        blob.set("k", b"firsT")  # same size, other bytes
    assert blob.get("k") == b"first"
    assert blob.delete("k") == 5
    blob.set("k", b"other")  # a deleted key may be written again
    assert blob.get("k") == b"other"


def test_blob_directory_of_keys_is_not_a_key(blob: Blob, request: pytest.FixtureRequest) -> None:
    blob.set("a/b", b"x")
    assert blob.get("a") is None
    assert blob.delete("a") is None
    assert blob.get("a/b") == b"x"


@pytest.mark.parametrize("key", UNSAFE_KEYS)
def test_blob_rejects_unsafe_keys(blob: Blob, key: str) -> None:
    for call in (lambda: blob.set(key, b"x"), lambda: blob.get(key), lambda: blob.delete(key)):
        with pytest.raises(InvalidUsage, match="invalid blob key"):
            call()
    assert list(blob.list_keys()) == []


@pytest.mark.parametrize("prefix", ["../", "/abs/", "a/../b/", "a//", "x\0/"])
def test_blob_rejects_unsafe_prefixes(
    blob: Blob, prefix: str, request: pytest.FixtureRequest
) -> None:
    with pytest.raises(InvalidUsage, match="invalid blob prefix"):
        list(blob.list_keys(prefix))


def test_blob_concurrent_writers(blob: Blob) -> None:
    def writer(i: int) -> None:
        for j in range(20):
            blob.set(f"w{i}/k{j}", f"{i}-{j}".encode())
            blob.set("shared", b"same bytes")

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    keys = sorted(m.key for m in blob.list_keys())
    assert keys == sorted(["shared"] + [f"w{i}/k{j}" for i in range(4) for j in range(20)])
    assert all(blob.get(f"w{i}/k{j}") == f"{i}-{j}".encode() for i in range(4) for j in range(20))


# --- file blob -------------------------------------------------------------------------------


def test_file_blob_stays_inside_its_root(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"s")
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "link").symlink_to(outside)
    blob = FileBlob(tmp_path / "root")
    for call in (
        lambda: blob.set("link/x", b"data"),
        lambda: blob.get("link/secret"),
        lambda: blob.delete("link/secret"),
    ):
        with pytest.raises(CorruptState, match=r"'link/.*' passes through 'link'.* outside"):
            call()
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert blob.root_uri == (tmp_path / "root").resolve().as_uri()


def test_file_blob_lists_no_temporary_files(tmp_path: Path) -> None:
    blob = FileBlob(tmp_path)
    blob.set("s/p", b"x")
    (tmp_path / "s" / ".tmp-0123").write_bytes(b"partial")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "k").write_bytes(b"h")
    assert [m.key for m in blob.list_keys()] == ["s/p"]


def leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_file_blob_full_disk_is_determinate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blob = FileBlob(tmp_path)

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(Determinate, match="writing blob 'a/k': no space left on the device"):
        blob.set("a/k", b"value")
    monkeypatch.undo()
    assert blob.get("a/k") is None
    assert leftovers(tmp_path) == []
    blob.set("a/k", b"value")
    assert blob.get("a/k") == b"value"


def test_file_blob_failed_link_is_indeterminate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blob = FileBlob(tmp_path)

    def broken(src: object, dst: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "link", broken)
    with pytest.raises(Indeterminate, match="linking blob 'k' into place"):
        blob.set("k", b"value")
    monkeypatch.undo()
    assert leftovers(tmp_path) == []
    blob.set("k", b"value")  # the caller retries
    assert blob.get("k") == b"value"


# --- consensus -------------------------------------------------------------------------------


def test_consensus_empty_key(consensus: Consensus) -> None:
    assert consensus.head("k") is None
    assert consensus.scan("k", 0, 10) == []
    assert consensus.list_keys() == []
    with pytest.raises(InvalidUsage, match="cannot truncate 'k' at 0: head seqno is None"):
        consensus.truncate("k", 0)


def test_consensus_compare_and_set(consensus: Consensus) -> None:
    assert consensus.compare_and_set("k", 0, v(1)) is CaSResult.EXPECTATION_MISMATCH
    assert consensus.head("k") is None
    assert consensus.compare_and_set("k", None, v(0)) is CaSResult.COMMITTED
    assert consensus.head("k") == v(0)
    assert consensus.compare_and_set("k", None, v(1)) is CaSResult.EXPECTATION_MISMATCH
    assert consensus.compare_and_set("k", 0, v(5)) is CaSResult.COMMITTED  # gaps are allowed
    assert consensus.compare_and_set("k", 0, v(6)) is CaSResult.EXPECTATION_MISMATCH
    assert consensus.compare_and_set("k", 4, v(6)) is CaSResult.EXPECTATION_MISMATCH
    assert consensus.compare_and_set("k", 6, v(7)) is CaSResult.EXPECTATION_MISMATCH
    assert consensus.scan("k", 0, 100) == [v(0), v(5)]
    assert consensus.compare_and_set("k", 5, v(6)) is CaSResult.COMMITTED
    assert consensus.head("k") == v(6)


def test_consensus_seqno_must_increase(consensus: Consensus) -> None:
    append(consensus, "k", 0, 1)
    for expected, new in [(1, 1), (1, 0), (None, -1)]:
        with pytest.raises(InvalidUsage, match="seqno"):
            consensus.compare_and_set("k", expected, v(new))
    assert seqnos(consensus) == [0, 1]


def test_consensus_keeps_data_exactly(consensus: Consensus) -> None:
    data = [b"", b"\x00\xff\x00", bytes(range(256)) * 4096]
    for i, d in enumerate(data):
        assert consensus.compare_and_set("k", i - 1 if i else None, v(i, d)) is (
            CaSResult.COMMITTED
        )
    assert [x.data for x in consensus.scan("k", 0, 10)] == data
    head = consensus.head("k")
    assert head is not None and head.data == data[-1]


def test_consensus_scan_order_and_limit(consensus: Consensus) -> None:
    append(consensus, "k", *range(10))
    assert consensus.scan("k", 0, 100) == [v(s) for s in range(10)]
    assert seqnos_of(consensus.scan("k", 3, 4)) == [3, 4, 5, 6]
    assert seqnos_of(consensus.scan("k", 8, 4)) == [8, 9]
    assert seqnos_of(consensus.scan("k", 9, 1)) == [9]
    assert consensus.scan("k", 10, 5) == []
    assert seqnos_of(consensus.scan("k", -5, 2)) == [0, 1]
    for limit in (0, -1):
        with pytest.raises(InvalidUsage, match="limit"):
            consensus.scan("k", 0, limit)


def seqnos_of(versions: list[VersionedData]) -> list[int]:
    return [x.seqno for x in versions]


def test_consensus_truncate(consensus: Consensus) -> None:
    append(consensus, "k", *range(6))
    assert consensus.truncate("k", 0) == 0
    assert consensus.truncate("k", 3) == 3
    assert seqnos(consensus) == [3, 4, 5]
    assert consensus.truncate("k", 2) == 0  # below the earliest: nothing to do
    with pytest.raises(InvalidUsage, match="cannot truncate 'k' at 6: head seqno is 5"):
        consensus.truncate("k", 6)
    assert seqnos(consensus) == [3, 4, 5]
    assert consensus.truncate("k", 5) == 2  # up to the head, which stays
    assert consensus.head("k") == v(5)
    assert consensus.compare_and_set("k", 5, v(6)) is CaSResult.COMMITTED
    assert seqnos(consensus) == [5, 6]


def test_consensus_keys_are_independent(consensus: Consensus) -> None:
    keys = ["b", "a_b", "a-b", "a.b", "A", "a", "s=1", "0"]
    for i, key in enumerate(keys):
        append(consensus, key, *range(i + 1))
    assert consensus.list_keys() == sorted(keys)
    for i, key in enumerate(keys):
        assert seqnos(consensus, key) == list(range(i + 1))
    consensus.truncate("b", 0)
    assert consensus.truncate("a", 5) == 5
    assert seqnos(consensus, "b") == [0]
    assert seqnos(consensus, "a-b") == [0, 1, 2]


@pytest.mark.parametrize("key", ["", "../etc", ".k", "-k", "a b", "a/b", "k'; DROP TABLE x;--"])
def test_consensus_rejects_bad_keys(consensus: Consensus, key: str) -> None:
    calls: list[Callable[[], object]] = [
        lambda: consensus.head(key),
        lambda: consensus.compare_and_set(key, None, v(0)),
        lambda: consensus.scan(key, 0, 1),
        lambda: consensus.truncate(key, 0),
    ]
    for call in calls:
        with pytest.raises(InvalidUsage, match="invalid consensus key"):
            call()
    assert consensus.list_keys() == []


def increment(c: Consensus, key: str, token: bytes) -> int:
    """Append one version carrying ``token`` at head + 1; return its seqno."""
    while True:
        head = c.head(key)
        seqno = 0 if head is None else head.seqno + 1
        expected = None if head is None else head.seqno
        if c.compare_and_set(key, expected, VersionedData(seqno, token)) is CaSResult.COMMITTED:
            return seqno


def test_consensus_thread_race(consensus: Consensus) -> None:
    wins: dict[int, bytes] = {}
    lock = threading.Lock()

    def racer(i: int) -> None:
        for j in range(20):
            token = f"{i}-{j}".encode()
            seqno = increment(consensus, "k", token)
            with lock:
                assert seqno not in wins, f"seqno {seqno} committed twice"
                wins[seqno] = token

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log = consensus.scan("k", 0, 1000)
    assert seqnos_of(log) == list(range(80))
    assert {x.seqno: x.data for x in log} == wins


# --- across processes ------------------------------------------------------------------------


def race_in_process(kind: str, target: str, index: int, n: int) -> None:
    """Runs in a spawned process: ``n`` increments tagged with ``index``."""
    c: Consensus = SqliteConsensus(target) if kind == "sqlite" else PostgresConsensus(target)
    for j in range(n):
        increment(c, "k", f"{index}-{j}".encode())


@pytest.mark.parametrize("kind", ["sqlite", POSTGRES])
def test_consensus_race_across_processes(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if kind == "sqlite":
        target = str(tmp_path / "consensus.sqlite")
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        target = server.isolated_dsn()
    processes, n = 4, 25
    spawn = multiprocessing.get_context("spawn")
    procs = [spawn.Process(target=race_in_process, args=(kind, target, i, n)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    c = SqliteConsensus(target) if kind == "sqlite" else PostgresConsensus(target)
    log = c.scan("k", 0, 1000)
    c.close()
    assert seqnos_of(log) == list(range(processes * n))
    assert sorted(x.data for x in log) == sorted(
        f"{i}-{j}".encode() for i in range(processes) for j in range(n)
    )
    for i in range(processes):  # each process's increments are in its own order
        mine = [x.data for x in log if x.data.startswith(f"{i}-".encode())]
        assert mine == [f"{i}-{j}".encode() for j in range(n)]


def test_sqlite_rolls_back_a_transaction_an_interrupt_left_open(tmp_path: Path) -> None:
    """An interrupt right after ``BEGIN IMMEDIATE`` returned left the connection inside a
    transaction: its writes failed for ever, and it held every other writer's lock."""
    path = tmp_path / "consensus.sqlite"
    c = SqliteConsensus(path, busy_timeout_s=1.0)
    assert c.compare_and_set("k", None, VersionedData(0, b"a")) is CaSResult.COMMITTED
    c._conn().execute("BEGIN IMMEDIATE")  # what an interrupt after BEGIN left behind
    assert c.compare_and_set("k", 0, VersionedData(1, b"b")) is CaSResult.COMMITTED
    other = SqliteConsensus(path, busy_timeout_s=1.0)  # another writer: the lock is free
    assert other.compare_and_set("j", None, VersionedData(0, b"c")) is CaSResult.COMMITTED
    assert [x.data for x in other.scan("k", 0, 10)] == [b"a", b"b"]
    other.close()
    c.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_sqlite_reconnects_after_fork(tmp_path: Path) -> None:
    c = SqliteConsensus(tmp_path / "consensus.sqlite")
    append(c, "k", 0)
    fork = multiprocessing.get_context("fork")
    child = fork.Process(target=increment, args=(c, "k", b"child"))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert increment(c, "k", b"parent") == 2
    assert [x.data for x in c.scan("k", 1, 10)] == [b"child", b"parent"]


# --- sqlite and postgres failures ------------------------------------------------------------


def test_sqlite_locked_database_is_determinate(tmp_path: Path) -> None:
    path = tmp_path / "consensus.sqlite"
    c = SqliteConsensus(path, busy_timeout_s=0.1)
    append(c, "k", 0)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(Determinate, match="locked"):
            c.compare_and_set("k", 0, v(1))
        with pytest.raises(Determinate, match="locked"):
            c.truncate("k", 0)
        assert c.head("k") == v(0)  # readers are not blocked (WAL)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert c.compare_and_set("k", 0, v(1)) is CaSResult.COMMITTED


class FailingCommit:
    """A connection whose ``COMMIT`` fails after ``before_commit`` runs."""

    def __init__(self, conn: Any, before_commit: Callable[[], None], error: type[Exception]):
        self.conn, self.before_commit, self.error = conn, before_commit, error

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT":
            self.before_commit()
            raise self.error("connection lost during COMMIT")
        return self.conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


def test_sqlite_failed_commit_is_indeterminate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = SqliteConsensus(tmp_path / "consensus.sqlite")
    append(c, "k", 0)
    real = c._conn()
    with monkeypatch.context() as m:
        m.setattr(c, "_conn", lambda: FailingCommit(real, lambda: None, sqlite3.OperationalError))
        with pytest.raises(Indeterminate, match="committing compare_and_set of 'k'"):
            c.compare_and_set("k", 0, v(1))
    assert not real.in_transaction
    assert c.head("k") == v(0)


@pytest.mark.postgres
def test_postgres_lost_commit_is_indeterminate(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = postgres_server.isolated_dsn()
    c = PostgresConsensus(dsn)
    append(c, "k", 0)
    real = c._conn()
    backend = real.info.backend_pid

    def terminate() -> None:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
        real.execute("COMMIT")  # fails: the session is gone

    with monkeypatch.context() as m:
        m.setattr(c, "_conn", lambda: FailingCommit(real, terminate, psycopg.OperationalError))
        with pytest.raises(Indeterminate, match="committing compare_and_set of 'k'"):
            c.compare_and_set("k", 0, v(1))
    assert c.head("k") == v(0)  # a new connection; the transaction died with the session
    assert c.compare_and_set("k", 0, v(1)) is CaSResult.COMMITTED
    c.close()


@pytest.mark.postgres
def test_postgres_survives_a_server_restart(postgres_server: PostgresServer) -> None:
    c = PostgresConsensus(postgres_server.isolated_dsn())
    append(c, "k", 0, 1)
    postgres_server.restart()
    with pytest.raises(Determinate):
        c.head("k")  # the old session is gone; the next call reconnects
    assert retry(lambda: c.compare_and_set("k", 1, v(2))) is CaSResult.COMMITTED
    assert seqnos(c) == [0, 1, 2]
    c.close()


def test_postgres_unreachable_is_determinate() -> None:
    with pytest.raises(Determinate, match="connecting"):
        PostgresConsensus("postgresql://postgres@127.0.0.1:1/postgres", connect_timeout_s=2)


# --- unreliable wrappers ---------------------------------------------------------------------


def retry(call: Callable[[], R]) -> R:
    for _ in range(1000):
        try:
            return call()
        except ExternalError:
            continue
    raise AssertionError("no success in 1000 attempts")


def reliable_increment(c: Consensus, key: str, token: bytes) -> None:
    """Append ``token`` exactly once, whatever faults the calls meet."""
    while True:
        head = retry(lambda: c.head(key))
        if head is not None and head.data == token:
            return  # an earlier indeterminate attempt landed
        expected = None if head is None else head.seqno
        new = VersionedData(0 if head is None else head.seqno + 1, token)
        try:
            if c.compare_and_set(key, expected, new) is CaSResult.COMMITTED:
                return
        except Determinate:
            continue
        except Indeterminate:
            continue  # re-read the head to learn whether it landed


def test_unreliable_consensus_retry_loop_is_consistent(consensus: Consensus) -> None:
    c = UnreliableConsensus(consensus, seed=11, fail_rate=0.2, timeout_rate=0.2)
    tokens = [f"t{i}".encode() for i in range(40)]
    for token in tokens:
        reliable_increment(c, "k", token)
    c.enabled = False
    log = c.scan("k", 0, 1000)
    assert log == [VersionedData(i, t) for i, t in enumerate(tokens)]
    assert c.injected["determinate"] > 0 and c.injected["indeterminate"] > 0
    retry(lambda: c.truncate("k", 20))
    assert seqnos(consensus) == list(range(20, 40))


def test_unreliable_blob_retry_loop_is_consistent(blob: Blob) -> None:
    b = UnreliableBlob(blob, seed=5, fail_rate=0.2, timeout_rate=0.2)
    for i in range(30):
        retry(partial(b.set, f"k/{i}", f"{i}".encode()))
    for i in range(0, 30, 3):
        retry(partial(b.delete, f"k/{i}"))
    listed = retry(lambda: sorted(m.key for m in b.list_keys("k/")))
    assert listed == sorted(f"k/{i}" for i in range(30) if i % 3)
    assert all(retry(partial(b.get, f"k/{i}")) == f"{i}".encode() for i in range(1, 30, 3))
    assert b.injected["determinate"] > 0 and b.injected["indeterminate"] > 0


def outcomes(seed: int) -> tuple[list[str], list[VersionedData]]:
    c = UnreliableConsensus(MemoryConsensus(), seed=seed, fail_rate=0.3, timeout_rate=0.3)
    seen = []
    for i in range(60):
        try:
            head = c.head("k") if i % 2 else None
            expected = None if head is None else head.seqno
            c.compare_and_set("k", expected, v(i))
            seen.append("ok")
        except (Determinate, Indeterminate) as e:
            seen.append(type(e).__name__)
    c.enabled = False
    return seen, c.scan("k", 0, 100)


def test_unreliable_is_deterministic_per_seed() -> None:
    assert outcomes(7) == outcomes(7)
    assert outcomes(7) != outcomes(8)
    assert set(outcomes(7)[0]) == {"ok", "Determinate", "Indeterminate"}


def test_unreliable_fault_kinds() -> None:
    inner = MemoryBlob()
    b = UnreliableBlob(inner, seed=3, fail_rate=0.4, timeout_rate=0.4)
    applied = failed = 0
    for i in range(100):
        try:
            b.set(f"k{i}", b"v")
        except Determinate:
            failed += 1
            assert inner.get(f"k{i}") is None  # surely not applied
        except Indeterminate:
            applied += 1
            assert inner.get(f"k{i}") == b"v"  # applied, but the caller cannot know
    assert b.injected == {"determinate": failed, "indeterminate": applied}
    assert b.calls == 100 and failed > 20 and applied > 20
    b.enabled = False
    for i in range(50):
        assert b.get(f"k{i}") in (b"v", None)
    assert b.injected == {"determinate": failed, "indeterminate": applied}
    with pytest.raises(InvalidUsage, match="invalid blob key"):
        UnreliableBlob(inner, seed=1, fail_rate=0, timeout_rate=1).set("../x", b"")
    for rates in [(-0.1, 0.0), (0.0, 1.5), (0.6, 0.6)]:
        with pytest.raises(InvalidUsage, match="rate"):
            UnreliableConsensus(MemoryConsensus(), 1, *rates)


# --- locations and URIs ----------------------------------------------------------------------


def test_open_location_uri_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loc = open_location(f"file://{tmp_path}/b", f"sqlite:///{tmp_path}/c.db")
    assert isinstance(loc.blob, FileBlob) and loc.blob.root == tmp_path / "b"
    assert isinstance(loc.consensus, SqliteConsensus) and loc.consensus.path == tmp_path / "c.db"
    four = open_consensus(f"sqlite:////{str(tmp_path).lstrip('/')}/c.db")
    assert isinstance(four, SqliteConsensus) and four.path == tmp_path / "c.db"
    monkeypatch.chdir(tmp_path)
    rel = open_location("plain/dir", "sqlite:rel/c.db")
    assert isinstance(rel.blob, FileBlob) and rel.blob.root == tmp_path / "plain" / "dir"
    assert isinstance(rel.consensus, SqliteConsensus)
    assert rel.consensus.path == tmp_path / "rel" / "c.db"
    spaced = open_blob((tmp_path / "with space").as_uri())
    assert isinstance(spaced, FileBlob) and spaced.root == tmp_path / "with space"


def test_locations_reopen_from_their_uris(tmp_path: Path) -> None:
    loc = Location.embedded(tmp_path / "a dir")
    assert isinstance(loc.blob, FileBlob) and isinstance(loc.consensus, SqliteConsensus)
    assert loc.blob.root == tmp_path / "a dir" / "blob"
    assert (tmp_path / "a dir" / "consensus.sqlite").exists()
    loc.blob.set("k", b"v")
    append(loc.consensus, "k", 0)
    assert loc.blob_uri is not None and loc.consensus_uri is not None
    again = open_location(loc.blob_uri, loc.consensus_uri)
    assert again.blob.get("k") == b"v" and again.consensus.head("k") == v(0)
    assert loc.describe() == f"blob {loc.blob_uri}, consensus {loc.consensus_uri}"
    assert Location(MemoryBlob(), MemoryConsensus()).blob_uri is None


def test_named_memory_locations_are_shared() -> None:
    a = open_location("memory://conformance-shared", "memory://conformance-shared")
    b = open_location("memory://conformance-shared", "memory://conformance-shared")
    other = open_location("memory://conformance-other", "memory://conformance-other")
    a.blob.set("k", b"v")
    append(a.consensus, "k", 0)
    assert b.blob.get("k") == b"v" and b.consensus.head("k") == v(0)
    assert other.blob.get("k") is None and other.consensus.head("k") is None
    assert a.describe() == "blob memory://conformance-shared, consensus memory://conformance-shared"


@pytest.mark.postgres
def test_postgres_location_hides_its_password(postgres_dsn: str) -> None:
    with_password = postgres_dsn.replace("postgres@", "postgres:s3cret@")
    loc = open_location("memory://pg-describe", with_password)
    assert isinstance(loc.consensus, PostgresConsensus)
    assert "s3cret" not in loc.describe() and "postgres:***@127.0.0.1" in loc.describe()
    assert loc.consensus_uri is not None and "s3cret" in loc.consensus_uri  # reopenable
    loc.consensus.close()


@pytest.mark.parametrize(
    ("blob_uri", "consensus_uri"),
    [
        ("redis://x", "memory://x"),
        ("file://host/x", "memory://x"),
        ("file:relative", "memory://x"),
        ("file:///a/../b", "memory://x"),
        ("../escape", "memory://x"),
        ("a/../../b", "memory://x"),
        ("/tmp/\0", "memory://x"),
        ("", "memory://x"),
        ("memory://", "memory://x"),
        ("memory://x", "sqlite:"),
        ("memory://x", "sqlite://host/c.db"),
        ("memory://x", "sqlite:///a/../c.db"),
        ("memory://x", "sqlite::memory:"),
        ("memory://x", "mysql://db"),
        ("memory://x", "plain/path.db"),
        ("memory://x", "memory://bad name"),
        ("memory://x", "postgresql://u:pw@h/db?nonsense=1"),
    ],
)
def test_bad_location_uris_name_the_value(blob_uri: str, consensus_uri: str) -> None:
    bad = consensus_uri if blob_uri == "memory://x" else blob_uri
    with pytest.raises(InvalidUsage) as info:
        open_location(blob_uri, consensus_uri)
    assert repr(bad.replace(":pw@", ":***@")) in str(info.value)
    assert ":pw@" not in str(info.value)


# --- model -----------------------------------------------------------------------------------

OPS = st.one_of(
    st.tuples(st.just("cas"), st.one_of(st.none(), st.integers(0, 8)), st.integers(0, 10)),
    st.tuples(st.just("truncate"), st.integers(0, 9), st.just(0)),
    st.tuples(st.just("scan"), st.integers(-1, 9), st.integers(1, 4)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(OPS, max_size=40))
def test_memory_consensus_matches_a_list_model(ops: list[tuple[str, int | None, int]]) -> None:
    c = MemoryConsensus()
    model: list[int] = []
    for op, a, b in ops:
        head = model[-1] if model else None
        if op == "cas":
            new = b if a is None else a + 1 + b
            result = c.compare_and_set("k", a, v(new))
            assert result is (CaSResult.COMMITTED if a == head else CaSResult.EXPECTATION_MISMATCH)
            if a == head:
                model.append(new)
        elif op == "truncate":
            assert a is not None
            if head is None or a > head:
                with pytest.raises(InvalidUsage):
                    c.truncate("k", a)
            else:
                assert c.truncate("k", a) == sum(1 for s in model if s < a)
                model = [s for s in model if s >= a]
        else:
            assert a is not None
            assert seqnos_of(c.scan("k", a, b)) == [s for s in model if s >= a][:b]
        assert c.head("k") == (v(model[-1]) if model else None)
        assert seqnos(c) == model


def test_an_arrow_blob_write_that_fails_leaves_no_temporary_file(tmp_path: Path) -> None:
    """A failed move left its ``.tmp-`` file behind for good: nothing lists or deletes it."""
    import pyarrow.fs as pafs

    from timeshard.errors import Indeterminate
    from timeshard.location.arrowfs import ArrowFsBlob

    blob = ArrowFsBlob(f"mock://{tmp_path}")  # a local root is served by a FileBlob

    class NoMove:
        def __init__(self, fs: Any) -> None:
            self.fs = fs

        def __getattr__(self, name: str) -> Any:
            return getattr(self.fs, name)

        def move(self, src: str, dest: str) -> None:
            raise OSError("the disk went away")

    blob.fs = NoMove(blob.fs)  # type: ignore[assignment]
    with pytest.raises(Indeterminate, match="the disk went away"):
        blob.set("s/w/b/part", b"data")
    listed = pafs.FileSelector(f"{blob.base}/s/w/b", recursive=True)
    assert [info.base_name for info in blob.fs.get_file_info(listed)] == []
