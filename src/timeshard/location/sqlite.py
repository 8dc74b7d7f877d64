"""SQLite consensus: the embedded default, linearizable across processes on one machine.

One table holds every version of every key. ``compare_and_set`` runs in a
``BEGIN IMMEDIATE`` transaction, which takes SQLite's write lock before it
reads the head, so two processes can never both see the same head and commit.
The database is in WAL mode so readers do not block the writer.

Invariants:

1. Every statement takes user values as parameters; no SQL is built from them.
2. A failure before ``COMMIT`` (a busy database past the timeout, a full
   disk) is Determinate; a failure of ``COMMIT`` itself is Indeterminate.
3. Connections are per thread and per process: a forked child opens its own.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from pathlib import Path

from timeshard.errors import Determinate, Indeterminate, InvalidUsage
from timeshard.location.consensus import (
    CaSResult,
    SeqNo,
    VersionedData,
    check_consensus_key,
    check_new_version,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS consensus (
    shard TEXT NOT NULL,
    seqno INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (shard, seqno)
) WITHOUT ROWID
"""


class SqliteConsensus:
    """Consensus in a SQLite database file."""

    def __init__(self, path: str | Path, busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path).resolve()
        self.busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = self._conn()
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(_SCHEMA)
        except (sqlite3.Error, OSError) as e:
            raise Determinate(f"opening SQLite consensus {str(self.path)!r}: {e}") from e

    @property
    def uri(self) -> str:
        return f"sqlite://{self.path}"

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout_s,
                isolation_level=None,
                check_same_thread=True,
            )
            conn.execute("PRAGMA synchronous=FULL")
            self._local.conn = conn
            self._local.pid = os.getpid()
        return conn

    def head(self, key: str) -> VersionedData | None:
        check_consensus_key(key)
        try:
            row = (
                self._conn()
                .execute(
                    "SELECT seqno, data FROM consensus WHERE shard = ? ORDER BY seqno DESC LIMIT 1",
                    (key,),
                )
                .fetchone()
            )
        except sqlite3.Error as e:
            raise Determinate(f"reading head of {key!r}: {e}") from e
        return None if row is None else VersionedData(int(row[0]), bytes(row[1]))

    def compare_and_set(self, key: str, expected: SeqNo | None, new: VersionedData) -> CaSResult:
        check_consensus_key(key)
        check_new_version(expected, new)
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise Determinate(f"compare_and_set of {key!r}: {e}") from e
        try:
            row = conn.execute(
                "SELECT max(seqno) FROM consensus WHERE shard = ?", (key,)
            ).fetchone()
            current = None if row is None or row[0] is None else int(row[0])
            if current != expected:
                conn.execute("ROLLBACK")
                return CaSResult.EXPECTATION_MISMATCH
            conn.execute(
                "INSERT INTO consensus (shard, seqno, data) VALUES (?, ?, ?)",
                (key, new.seqno, new.data),
            )
        except sqlite3.Error as e:
            _rollback(conn)
            raise Determinate(f"compare_and_set of {key!r}: {e}") from e
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            _rollback(conn)
            raise Indeterminate(f"committing compare_and_set of {key!r}: {e}") from e
        return CaSResult.COMMITTED

    def scan(self, key: str, from_seqno: SeqNo, limit: int) -> list[VersionedData]:
        check_consensus_key(key)
        if limit <= 0:
            raise InvalidUsage(f"scan limit must be positive, got {limit}")
        try:
            rows = (
                self._conn()
                .execute(
                    "SELECT seqno, data FROM consensus WHERE shard = ? AND seqno >= ? "
                    "ORDER BY seqno LIMIT ?",
                    (key, from_seqno, limit),
                )
                .fetchall()
            )
        except sqlite3.Error as e:
            raise Determinate(f"scanning {key!r}: {e}") from e
        return [VersionedData(int(s), bytes(d)) for s, d in rows]

    def truncate(self, key: str, seqno: SeqNo) -> int:
        check_consensus_key(key)
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise Determinate(f"truncating {key!r}: {e}") from e
        try:
            row = conn.execute(
                "SELECT max(seqno) FROM consensus WHERE shard = ?", (key,)
            ).fetchone()
            head = None if row is None or row[0] is None else int(row[0])
            if head is None or seqno > head:
                conn.execute("ROLLBACK")
                raise InvalidUsage(f"cannot truncate {key!r} at {seqno}: head seqno is {head}")
            deleted = conn.execute(
                "DELETE FROM consensus WHERE shard = ? AND seqno < ?", (key, seqno)
            ).rowcount
        except sqlite3.Error as e:
            _rollback(conn)
            raise Determinate(f"truncating {key!r}: {e}") from e
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            _rollback(conn)
            raise Indeterminate(f"committing truncate of {key!r}: {e}") from e
        return int(deleted)

    def list_keys(self) -> list[str]:
        try:
            rows = (
                self._conn()
                .execute("SELECT DISTINCT shard FROM consensus ORDER BY shard")
                .fetchall()
            )
        except sqlite3.Error as e:
            raise Determinate(f"listing shards: {e}") from e
        return [str(r[0]) for r in rows]


def _rollback(conn: sqlite3.Connection) -> None:
    with contextlib.suppress(sqlite3.Error):
        conn.execute("ROLLBACK")


__all__ = ["SqliteConsensus"]
