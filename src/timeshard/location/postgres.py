"""PostgreSQL consensus: for deployments on several machines.

One table holds every version of every key. ``compare_and_set`` and
``truncate`` run in one transaction that first takes a transaction-scoped
advisory lock on the key (``pg_advisory_xact_lock``), then reads the head and
writes. Every writer of a key serializes on that lock, so the check and the
insert are atomic: the operation is linearizable whatever seqno the caller
picks. The primary key ``(shard, seqno)`` guards the same invariant a second
time.

Invariants:

1. User values are always bound parameters; no SQL is built from them.
2. A failure before ``COMMIT`` is sent is Determinate (the transaction is
   rolled back); a failure while committing is Indeterminate.
3. A broken connection is replaced on the next call, so a server restart is
   survived by retrying.
"""

from __future__ import annotations

import contextlib
import os
import threading

import psycopg

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
    seqno BIGINT NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (shard, seqno)
)
"""
_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
_HEAD_SEQNO = "SELECT max(seqno) FROM consensus WHERE shard = %s"


class PostgresConsensus:
    """Consensus in a PostgreSQL table, through psycopg 3."""

    def __init__(self, dsn: str, connect_timeout_s: int = 10) -> None:
        self.dsn = dsn
        self.connect_timeout_s = connect_timeout_s
        self._local = threading.local()
        conn = self._conn()
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(7361636)")
                conn.execute(_SCHEMA)
        except psycopg.Error as e:
            self._reset()
            raise Determinate(f"creating the consensus table: {e}") from e

    @property
    def uri(self) -> str:
        return self.dsn

    def _conn(self) -> psycopg.Connection[tuple[object, ...]]:
        conn: psycopg.Connection[tuple[object, ...]] | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken or self._local.pid != os.getpid():
            try:
                conn = psycopg.connect(
                    self.dsn, autocommit=True, connect_timeout=self.connect_timeout_s
                )
            except psycopg.Error as e:
                raise Determinate(f"connecting to PostgreSQL consensus: {e}") from e
            self._local.conn = conn
            self._local.pid = os.getpid()
        return conn

    def _reset(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def head(self, key: str) -> VersionedData | None:
        check_consensus_key(key)
        conn = self._conn()
        try:
            row = conn.execute(
                "SELECT seqno, data FROM consensus WHERE shard = %s ORDER BY seqno DESC LIMIT 1",
                (key,),
            ).fetchone()
        except psycopg.Error as e:
            self._reset()
            raise Determinate(f"reading head of {key!r}: {e}") from e
        return None if row is None else VersionedData(int(row[0]), bytes(row[1]))  # type: ignore[call-overload]

    def compare_and_set(self, key: str, expected: SeqNo | None, new: VersionedData) -> CaSResult:
        check_consensus_key(key)
        check_new_version(expected, new)
        conn = self._conn()
        committing = False
        try:
            conn.execute("BEGIN")
            conn.execute(_LOCK, (key,))
            row = conn.execute(_HEAD_SEQNO, (key,)).fetchone()
            current = None if row is None or row[0] is None else int(row[0])  # type: ignore[call-overload]
            if current != expected:
                conn.execute("ROLLBACK")
                return CaSResult.EXPECTATION_MISMATCH
            conn.execute(
                "INSERT INTO consensus (shard, seqno, data) VALUES (%s, %s, %s)",
                (key, new.seqno, new.data),
            )
            committing = True
            conn.execute("COMMIT")
        except psycopg.Error as e:
            self._reset()
            if committing:
                raise Indeterminate(f"committing compare_and_set of {key!r}: {e}") from e
            raise Determinate(f"compare_and_set of {key!r}: {e}") from e
        return CaSResult.COMMITTED

    def scan(self, key: str, from_seqno: SeqNo, limit: int) -> list[VersionedData]:
        check_consensus_key(key)
        if limit <= 0:
            raise InvalidUsage(f"scan limit must be positive, got {limit}")
        conn = self._conn()
        try:
            rows = conn.execute(
                "SELECT seqno, data FROM consensus WHERE shard = %s AND seqno >= %s "
                "ORDER BY seqno LIMIT %s",
                (key, from_seqno, limit),
            ).fetchall()
        except psycopg.Error as e:
            self._reset()
            raise Determinate(f"scanning {key!r}: {e}") from e
        return [VersionedData(int(s), bytes(d)) for s, d in rows]  # type: ignore[call-overload]

    def truncate(self, key: str, seqno: SeqNo) -> int:
        check_consensus_key(key)
        conn = self._conn()
        committing = False
        try:
            conn.execute("BEGIN")
            conn.execute(_LOCK, (key,))
            row = conn.execute(_HEAD_SEQNO, (key,)).fetchone()
            head = None if row is None or row[0] is None else int(row[0])  # type: ignore[call-overload]
            if head is None or seqno > head:
                conn.execute("ROLLBACK")
                raise InvalidUsage(f"cannot truncate {key!r} at {seqno}: head seqno is {head}")
            cur = conn.execute(
                "DELETE FROM consensus WHERE shard = %s AND seqno < %s", (key, seqno)
            )
            deleted = cur.rowcount
            committing = True
            conn.execute("COMMIT")
        except psycopg.Error as e:
            self._reset()
            if committing:
                raise Indeterminate(f"committing truncate of {key!r}: {e}") from e
            raise Determinate(f"truncating {key!r}: {e}") from e
        return int(deleted)

    def list_keys(self) -> list[str]:
        conn = self._conn()
        try:
            rows = conn.execute("SELECT DISTINCT shard FROM consensus ORDER BY shard").fetchall()
        except psycopg.Error as e:
            self._reset()
            raise Determinate(f"listing shards: {e}") from e
        return [str(r[0]) for r in rows]


__all__ = ["PostgresConsensus"]
