"""SQLite consensus: the embedded default, linearizable across processes on one machine.

One table holds every version of every key::

    consensus(shard TEXT, seqno INTEGER, data BLOB, PRIMARY KEY (shard, seqno))

``compare_and_set`` and ``truncate`` run in a ``BEGIN IMMEDIATE`` transaction,
which takes SQLite's single write lock *before* reading the head, so between
the read and the write no other connection, thread or process can commit: two
writers can never both see the same head and both commit. The database is in
WAL mode (readers never block the writer and see the last committed state) with
``synchronous=FULL`` (a returned commit survives a power loss). A writer that
finds the lock taken waits up to ``busy_timeout_s``.

Each thread uses its own connection, closed when the thread ends (a server
runs a thread per client), and each process: a connection is never used in a
process other than the one that opened it. After ``fork`` the child notices
the pid change and opens a new connection; the inherited one is kept
referenced but never touched, because closing it in the child could disturb
the parent's locks.

Invariants:

1. Every statement takes user values as bound parameters; no SQL is built
   from them.
2. A failure before ``COMMIT`` (the database still locked after
   ``busy_timeout_s``, a full disk, a failed open) raises Determinate and the
   transaction is rolled back; a failure of ``COMMIT`` itself raises
   Indeterminate.
3. No connection is ever left inside a transaction: any exception, including
   ``KeyboardInterrupt``, rolls it back before it propagates.
4. A file SQLite finds is not a database, or a damaged one (``SQLITE_NOTADB``,
   ``SQLITE_CORRUPT``), raises CorruptState naming the path, at opening or at
   any later call: it is state found on disk, which no retry repairs.
5. A ``consensus`` that is not a table with the columns ``shard TEXT``,
   ``seqno INTEGER`` and ``data BLOB`` (others are left alone: something else
   made it; unless NOT NULL without a default, which no write fills), also a
   view or an index of that name, raises CorruptState naming the path and the
   column at opening, never a fault at each later call. So does a call that
   finds the table dropped, renamed or without such a column since (SQLite's
   "no such table"): the state stored there is gone, no retry brings it back. A
   trigger named ``consensus`` is none of these (triggers have names of their
   own) and is left alone.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

from timeshard.errors import CorruptState, Determinate, ExternalError, Indeterminate, InvalidUsage
from timeshard.location._paths import check_creatable, local_path
from timeshard.location._thread_connections import ThreadConnections
from timeshard.location.consensus import (
    CaSResult,
    SeqNo,
    VersionedData,
    check_consensus_key,
    check_new_version,
    check_scan,
    check_seqno_bound,
    stored_key,
    stored_seqno,
    stored_version,
)

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS consensus (
    shard TEXT NOT NULL,
    seqno INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (shard, seqno)
) WITHOUT ROWID
"""
_COLUMNS = {"shard": "TEXT", "seqno": "INTEGER", "data": "BLOB"}
#: What ``consensus`` names: tables, views and indexes share one namespace (a trigger's is
#: its own), so at most one row, and ``CREATE TABLE IF NOT EXISTS`` raises for an index.
_KIND = (
    "SELECT type FROM sqlite_master WHERE name = 'consensus' AND type IN ('table', 'view', 'index')"
)
#: How ``_check_table`` names a ``consensus`` of another kind.
_ANOTHER_KIND = {"view": "a view", "index": "an index"}
_TABLE_INFO = "PRAGMA table_info(consensus)"
_HEAD = "SELECT seqno, data FROM consensus WHERE shard = ? ORDER BY seqno DESC LIMIT 1"
_HEAD_SEQNO = "SELECT max(seqno) FROM consensus WHERE shard = ?"
#: The least SQLite INTEGER: a scan start or truncation point below it (which consensus
#: allows: it is below every version) is bound as this, which is below every version too.
_MIN_INTEGER = -(2**63)
#: The longest busy timeout SQLite takes: a C int of milliseconds.
_MAX_BUSY_TIMEOUT_S = (2**31 - 1) // 1000


class SqliteConsensus:
    """Consensus in a SQLite database file, created (with its directory) if missing."""

    def __init__(self, path: str | Path, busy_timeout_s: float = 30.0) -> None:
        spelled = local_path(path, "SQLite consensus path")
        if (
            isinstance(busy_timeout_s, bool)
            or not isinstance(busy_timeout_s, int | float)
            or not (math.isfinite(busy_timeout_s) and 0 <= busy_timeout_s <= _MAX_BUSY_TIMEOUT_S)
        ):
            raise InvalidUsage(
                f"busy_timeout_s must be a number of seconds in [0, {_MAX_BUSY_TIMEOUT_S}], "
                f"got {busy_timeout_s!r}"
            )
        self.path = spelled.resolve()
        check_creatable(self.path, "SQLite consensus file", directory=False)
        self.busy_timeout_s = busy_timeout_s
        self._connections: ThreadConnections[sqlite3.Connection] = ThreadConnections(
            sqlite3.Connection.close
        )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise Determinate(f"opening SQLite consensus {str(self.path)!r}: {e}") from e
        self._create()

    def _failure(
        self, what: str, e: sqlite3.Error, kind: type[ExternalError] = Determinate
    ) -> CorruptState | ExternalError:
        """The error to raise for ``e``: CorruptState naming the file if SQLite found it is
        not a database or is damaged (invariant 4), else ``kind`` (a fault, retried)."""
        code = getattr(e, "sqlite_errorcode", None)  # None: raised by Python's sqlite3 itself
        if code is not None and code & 0xFF in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT):
            return CorruptState(
                f"{what}: SQLite consensus {str(self.path)!r} is not a database or is damaged: {e}"
            )
        if code is not None and code & 0xFF == sqlite3.SQLITE_ERROR:
            changed = self._changed_table(what)
            if changed is not None:
                return changed
        return kind(f"{what}: {_explain(e, self.busy_timeout_s)}")

    def _changed_table(self, what: str) -> CorruptState | None:
        """CorruptState if ``consensus`` is no longer the table :meth:`_check_table` accepts
        (dropped, renamed, a column dropped or renamed since it was opened: SQLite says
        "no such table" or "no such column", a plain error), else None (invariant 5).

        Runs only after a statement failed so, on the thread's connection."""
        conn = self._connections.get()
        if conn is None:
            return None
        try:
            self._check_table(conn)
        except CorruptState as e:
            return CorruptState(f"{what}: {e}")
        except sqlite3.Error:
            return None
        return None

    @property
    def uri(self) -> str:
        return f"sqlite://{quote(str(self.path))}"

    def _create(self) -> None:
        """Switch to WAL and create the table, waiting while another process does the same."""
        deadline = time.monotonic() + self.busy_timeout_s
        while True:
            try:
                conn = self._conn()
                conn.execute("PRAGMA journal_mode=WAL")
                if conn.execute(_KIND).fetchone() is None:
                    conn.execute(_SCHEMA)
                self._check_table(conn)
                return
            except sqlite3.Error as e:
                if not _is_busy(e) or time.monotonic() > deadline:
                    raise self._failure(f"opening SQLite consensus {str(self.path)!r}", e) from e
                time.sleep(0.01)

    def _check_table(self, conn: sqlite3.Connection) -> None:
        """CorruptState naming the file and the column unless ``consensus`` is a table with
        the columns (and declared types) of :data:`_COLUMNS`, and no other column a write
        must fill (NOT NULL without a default) (invariant 5)."""
        where = f"SQLite consensus {str(self.path)!r}"
        kind = conn.execute(_KIND).fetchone()
        if kind is None:
            raise CorruptState(
                f"{where}: table consensus is missing (dropped or renamed): the versions "
                "stored there are gone"
            )
        if kind[0] != "table":
            raise CorruptState(f"{where}: consensus is {_ANOTHER_KIND[kind[0]]}, not a table")
        rows = conn.execute(_TABLE_INFO).fetchall()  # cid, name, type, notnull, default, pk
        found = {row[1]: str(row[2]).upper() for row in rows}
        for row in rows:
            if row[1] not in _COLUMNS and row[3] and row[4] is None:
                raise CorruptState(
                    f"{where}: table consensus has column {row[1]} NOT NULL without a "
                    "default, which no write of timeshard fills: it was created otherwise "
                    "than by timeshard"
                )
        for name, declared in _COLUMNS.items():
            if found.get(name) != declared:
                has = f"has it as {found[name]!r}" if name in found else "has none"
                raise CorruptState(
                    f"{where}: table consensus needs column {name} {declared}, but it {has}: "
                    "it was created otherwise than by timeshard"
                )

    def _conn(self) -> sqlite3.Connection:
        conn = self._connections.get()
        if conn is not None:
            return conn
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout_s,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as e:
            raise self._failure(f"connecting to SQLite consensus {str(self.path)!r}", e) from e
        try:
            conn.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as e:
            conn.close()
            raise self._failure(f"connecting to SQLite consensus {str(self.path)!r}", e) from e
        self._connections.put(conn)
        return conn

    def close(self) -> None:
        """Close every connection this process opened; call when no thread uses this."""
        self._connections.close_all()

    def _write(self, what: str, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``body`` in a ``BEGIN IMMEDIATE`` transaction and commit it.

        ``body`` may end the transaction itself with ``ROLLBACK`` (a mismatch);
        ``COMMIT`` is then skipped. Whatever ``body`` raises rolls back.
        """
        conn = self._conn()
        _rollback(conn)  # one an interrupt left open (it holds the database's write lock)
        try:
            # One try from BEGIN on: an interrupt right after BEGIN returns rolls back too.
            conn.execute("BEGIN IMMEDIATE")
            result = body(conn)
        except sqlite3.Error as e:
            _rollback(conn)
            raise self._failure(what, e) from e
        except BaseException:
            _rollback(conn)
            raise
        if not conn.in_transaction:
            return result
        try:
            conn.execute("COMMIT")
        except BaseException as e:
            _rollback(conn)
            if isinstance(e, sqlite3.Error):
                raise self._failure(f"committing {what}", e, Indeterminate) from e
            raise
        return result

    def head(self, key: str) -> VersionedData | None:
        check_consensus_key(key)
        try:
            row = self._conn().execute(_HEAD, (key,)).fetchone()
        except sqlite3.Error as e:
            raise self._failure(f"reading head of {key!r}", e) from e
        return None if row is None else stored_version(key, row[0], row[1])

    def compare_and_set(self, key: str, expected: SeqNo | None, new: VersionedData) -> CaSResult:
        check_consensus_key(key)
        check_new_version(expected, new)

        def body(conn: sqlite3.Connection) -> CaSResult:
            if _head_seqno(conn, key) != expected:
                conn.execute("ROLLBACK")
                return CaSResult.EXPECTATION_MISMATCH
            conn.execute(
                "INSERT INTO consensus (shard, seqno, data) VALUES (?, ?, ?)",
                (key, new.seqno, bytes(new.data)),
            )
            return CaSResult.COMMITTED

        return self._write(f"compare_and_set of {key!r}", body)

    def scan(self, key: str, from_seqno: SeqNo, limit: int) -> list[VersionedData]:
        check_consensus_key(key)
        check_scan(from_seqno, limit)
        try:
            rows = (
                self._conn()
                .execute(
                    "SELECT seqno, data FROM consensus WHERE shard = ? AND seqno >= ? "
                    "ORDER BY seqno LIMIT ?",
                    (key, max(from_seqno, _MIN_INTEGER), limit),
                )
                .fetchall()
            )
        except sqlite3.Error as e:
            raise self._failure(f"scanning {key!r}", e) from e
        return [stored_version(key, s, d) for s, d in rows]

    def truncate(self, key: str, seqno: SeqNo) -> int:
        check_consensus_key(key)
        check_seqno_bound(seqno, "truncation seqno")

        def body(conn: sqlite3.Connection) -> int:
            head = _head_seqno(conn, key)
            if head is None or seqno > head:
                raise InvalidUsage(f"cannot truncate {key!r} at {seqno}: head seqno is {head}")
            cursor = conn.execute(
                "DELETE FROM consensus WHERE shard = ? AND seqno < ?",
                (key, max(seqno, _MIN_INTEGER)),
            )
            return int(cursor.rowcount)

        return self._write(f"truncate of {key!r}", body)

    def list_keys(self) -> list[str]:
        try:
            rows = (
                self._conn()
                .execute("SELECT DISTINCT shard FROM consensus ORDER BY shard")
                .fetchall()
            )
        except sqlite3.Error as e:
            raise self._failure("listing shards", e) from e
        return [stored_key(r[0]) for r in rows]


def _head_seqno(conn: sqlite3.Connection, key: str) -> SeqNo | None:
    row = conn.execute(_HEAD_SEQNO, (key,)).fetchone()
    return None if row is None or row[0] is None else stored_seqno(key, row[0])


def _is_busy(e: sqlite3.Error) -> bool:
    return "locked" in str(e) or "busy" in str(e)


def _explain(e: sqlite3.Error, busy_timeout_s: float) -> str:
    if _is_busy(e):
        return f"{e} (another writer held the lock for more than {busy_timeout_s} s)"
    return str(e)


def _rollback(conn: sqlite3.Connection) -> None:
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass


__all__ = ["SqliteConsensus"]
