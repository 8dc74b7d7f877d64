"""PostgreSQL consensus: for deployments on several machines.

One table holds every version of every key, created if the connection's
``search_path`` finds none (in its first schema)::

    consensus(shard TEXT, seqno BIGINT, data BYTEA, PRIMARY KEY (shard, seqno))

Why it is linearizable: ``compare_and_set`` and ``truncate`` run in one
READ COMMITTED transaction that first takes a transaction-scoped advisory lock
on the key (``pg_advisory_xact_lock(hashtextextended(shard, 0))``), then reads
the head with a fresh statement and writes. Every writer of a key serializes
on that lock, which PostgreSQL releases only after the holder's commit is
visible, and each READ COMMITTED statement takes a new snapshot, so the head
read under the lock is the latest committed one: check and insert are atomic
whatever seqno the caller picks, across any number of processes and machines.
The primary key ``(shard, seqno)`` guards the same invariant a second time.
Two keys whose hashes collide merely share a lock. Reads (``head``, ``scan``)
are single statements and see the last committed state.

Each thread uses its own connection (psycopg, autocommit, explicit
``BEGIN``/``COMMIT``), closed when the thread ends (a server runs a thread per
client); a connection that failed is closed and a new one is opened by the
next call, so a server restart is survived by retrying. After ``fork`` the
child opens its own connection and never touches the parent's.

Invariants:

1. User values are always bound parameters; no SQL is built from them. A DSN
   libpq would refuse without connecting (a syntax error, a port that is not
   a number, an unknown ``sslmode``) and a timeout that is not positive raise
   InvalidUsage at construction; failing to connect is a fault (Determinate).
2. A failure to connect, or of any statement before ``COMMIT`` is sent, is
   Determinate (the server rolls the transaction back when the session ends);
   a failure while committing is Indeterminate.
3. No connection is ever reused inside a failed or interrupted transaction:
   an exception that leaves a transaction open closes the connection.
4. Opening creates nothing when the table exists: a role with only SELECT,
   INSERT and DELETE on a table an administrator created can use it. Such a
   table must have the columns ``shard text``, ``seqno bigint`` and ``data
   bytea`` (others are left alone); one that lacks any, or has it with another
   type, raises CorruptState naming the table and the column at opening, as
   a stored row that is not a valid version does at any call (see
   :func:`~timeshard.location.consensus.stored_version`). A call that finds the
   table dropped, renamed or without such a column since (``42P01``,
   ``42703``) raises CorruptState naming the location too: the state stored
   there is gone, and no retry brings it back. A privilege taken away
   (``42501``) stays a fault: an administrator can grant it again.
5. A writer waits at most ``lock_timeout_s`` for another writer's lock; a
   session idle in a transaction for ``idle_in_transaction_s`` is ended by the
   server, so a paused process cannot block a key forever.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg

from timeshard.errors import CorruptState, Determinate, Indeterminate, InvalidUsage
from timeshard.location._masking import hidden, masked, secrets
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
Conn = psycopg.Connection[tuple[Any, ...]]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS consensus (
    shard TEXT NOT NULL,
    seqno BIGINT NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (shard, seqno)
)
"""
_COLUMNS = {"shard": "text", "seqno": "bigint", "data": "bytea"}
_TABLE = """
SELECT n.nspname, a.attname, format_type(a.atttypid, a.atttypmod)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.oid = to_regclass('consensus')
"""
_SCHEMA_LOCK = 7361636
#: The SQLSTATEs of a statement naming a table or column that is not there.
_UNDEFINED_TABLE = "42P01"
_UNDEFINED_COLUMN = "42703"
#: The longest timeout PostgreSQL takes: an int of milliseconds.
_MAX_TIMEOUT_S = (2**31 - 1) // 1000
_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
_HEAD = "SELECT seqno, data FROM consensus WHERE shard = %s ORDER BY seqno DESC LIMIT 1"
_HEAD_SEQNO = "SELECT max(seqno) FROM consensus WHERE shard = %s"


class PostgresConsensus:
    """Consensus in a PostgreSQL table, through psycopg 3.

    ``dsn`` is a ``postgresql://`` URI or a ``key=value`` connection string.
    """

    def __init__(
        self,
        dsn: str,
        connect_timeout_s: int = 10,
        lock_timeout_s: float = 30.0,
        idle_in_transaction_s: float = 60.0,
    ) -> None:
        if not isinstance(dsn, str):
            raise InvalidUsage(f"a PostgreSQL DSN must be a str, got {type(dsn).__name__}")
        _check_dsn(dsn)
        if (
            isinstance(connect_timeout_s, bool)
            or not isinstance(connect_timeout_s, int)
            or connect_timeout_s <= 0
        ):
            raise InvalidUsage(
                "connect_timeout_s must be a positive whole number of seconds, "
                f"got {connect_timeout_s!r}"
            )
        for name, seconds in (
            ("lock_timeout_s", lock_timeout_s),
            ("idle_in_transaction_s", idle_in_transaction_s),
        ):
            if (
                isinstance(seconds, bool)
                or not isinstance(seconds, int | float)
                or not (math.isfinite(seconds) and 0 < seconds <= _MAX_TIMEOUT_S)
            ):
                raise InvalidUsage(
                    f"{name} must be a positive number of seconds at most {_MAX_TIMEOUT_S}, "
                    f"got {seconds!r}"
                )
        self.dsn = dsn
        self.connect_timeout_s = connect_timeout_s
        self.lock_timeout_s = lock_timeout_s
        self.idle_in_transaction_s = idle_in_transaction_s
        self._connections: ThreadConnections[Conn] = ThreadConnections(psycopg.Connection.close)

        def create(conn: Conn) -> None:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            columns = conn.execute(_TABLE).fetchall()
            if not columns:
                conn.execute(_SCHEMA)
            else:
                _check_table(columns)

        self._write("creating the consensus table", create)

    @property
    def uri(self) -> str:
        return self.dsn

    def _conn(self) -> Conn:
        conn = self._connections.get()
        if conn is not None and not conn.closed:
            return conn
        try:
            conn = psycopg.connect(
                self.dsn,
                autocommit=True,
                connect_timeout=self.connect_timeout_s,
                keepalives=1,
                keepalives_idle=10,
                keepalives_interval=5,
                keepalives_count=3,
            )
        except psycopg.Error as e:
            raise Determinate(
                f"connecting to PostgreSQL consensus: {hidden(str(e), self.dsn)}"
            ) from e
        try:
            conn.execute(
                "SELECT set_config('lock_timeout', %s, false), "
                "set_config('idle_in_transaction_session_timeout', %s, false)",
                (_ms(self.lock_timeout_s), _ms(self.idle_in_transaction_s)),
            )
        except psycopg.Error as e:
            conn.close()
            raise Determinate(f"configuring a PostgreSQL consensus session: {e}") from e
        self._connections.put(conn)
        return conn

    def _drop(self) -> None:
        """Close this thread's connection; the next call opens a new one."""
        self._connections.drop()

    def close(self) -> None:
        """Close every connection this process opened; call when no thread uses this."""
        self._connections.close_all()

    def _read(self, what: str, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        conn = self._conn()
        try:
            return conn.execute(sql, params).fetchall()
        except psycopg.Error as e:
            self._drop()
            raise self._failure(what, e) from e
        except BaseException:
            self._drop()
            raise

    def _write(self, what: str, body: Callable[[Conn], T]) -> T:
        """Run ``body`` in a transaction and commit it.

        ``body`` may end the transaction itself with ``ROLLBACK`` (a mismatch);
        ``COMMIT`` is then skipped. An exception that leaves the transaction
        open drops the connection, which ends the transaction on the server.
        """
        conn = self._conn()
        committing = False
        try:
            conn.execute("BEGIN")
            result = body(conn)
            if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                return result
            committing = True
            conn.execute("COMMIT")
        except psycopg.Error as e:
            self._drop()
            if committing:
                raise Indeterminate(f"committing {what}: {e}") from e
            raise self._failure(what, e) from e
        except BaseException:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                self._drop()
            raise
        return result

    def _failure(self, what: str, e: psycopg.Error) -> CorruptState | Determinate:
        """The error to raise for a statement's failure ``e`` (its connection dropped):
        CorruptState if the table is no longer one opening accepts, else Determinate (a
        fault, retried: a permission taken away, 42501, is one an administrator fixes)."""
        if e.sqlstate in (_UNDEFINED_TABLE, _UNDEFINED_COLUMN):
            changed = self._changed_table(what)
            if changed is not None:
                return changed
        return Determinate(f"{what}: {e}")

    def _changed_table(self, what: str) -> CorruptState | None:
        """CorruptState naming the location if ``consensus`` is missing (dropped, renamed)
        or lacks a column of :data:`_COLUMNS` since it was opened, else None (invariant
        4). Runs only after a statement failed so, on a new connection."""
        try:
            columns = self._conn().execute(_TABLE).fetchall()
        except (psycopg.Error, Determinate):
            self._drop()
            return None
        if not columns:
            return CorruptState(
                f"{what}: PostgreSQL consensus {masked(self.dsn)!r} has no table consensus "
                "on its search_path (dropped or renamed): the versions stored there are gone"
            )
        try:
            _check_table(columns)
        except CorruptState as e:
            return CorruptState(f"{what}: {e}")
        return None

    def head(self, key: str) -> VersionedData | None:
        check_consensus_key(key)
        rows = self._read(f"reading head of {key!r}", _HEAD, (key,))
        return _versions(key, rows)[0] if rows else None

    def compare_and_set(self, key: str, expected: SeqNo | None, new: VersionedData) -> CaSResult:
        check_consensus_key(key)
        check_new_version(expected, new)

        def body(conn: Conn) -> CaSResult:
            conn.execute(_LOCK, (key,))
            if _head_seqno(conn, key) != expected:
                conn.execute("ROLLBACK")
                return CaSResult.EXPECTATION_MISMATCH
            conn.execute(
                "INSERT INTO consensus (shard, seqno, data) VALUES (%s, %s, %s)",
                (key, new.seqno, bytes(new.data)),
            )
            return CaSResult.COMMITTED

        return self._write(f"compare_and_set of {key!r}", body)

    def scan(self, key: str, from_seqno: SeqNo, limit: int) -> list[VersionedData]:
        check_consensus_key(key)
        check_scan(from_seqno, limit)
        rows = self._read(
            f"scanning {key!r}",
            "SELECT seqno, data FROM consensus WHERE shard = %s AND seqno >= %s "
            "ORDER BY seqno LIMIT %s",
            (key, from_seqno, limit),
        )
        return _versions(key, rows)

    def truncate(self, key: str, seqno: SeqNo) -> int:
        check_consensus_key(key)
        check_seqno_bound(seqno, "truncation seqno")

        def body(conn: Conn) -> int:
            conn.execute(_LOCK, (key,))
            head = _head_seqno(conn, key)
            if head is None or seqno > head:
                conn.execute("ROLLBACK")
                raise InvalidUsage(f"cannot truncate {key!r} at {seqno}: head seqno is {head}")
            cursor = conn.execute(
                "DELETE FROM consensus WHERE shard = %s AND seqno < %s", (key, seqno)
            )
            return int(cursor.rowcount)

        return self._write(f"truncate of {key!r}", body)

    def list_keys(self) -> list[str]:
        rows = self._read(
            "listing shards",
            'SELECT shard FROM consensus GROUP BY shard ORDER BY shard COLLATE "C"',
            (),
        )
        return [stored_key(r[0]) for r in rows]


def _head_seqno(conn: Conn, key: str) -> SeqNo | None:
    row = conn.execute(_HEAD_SEQNO, (key,)).fetchone()
    return None if row is None or row[0] is None else stored_seqno(key, row[0])


def _check_table(columns: list[tuple[Any, ...]]) -> None:
    """CorruptState naming the table and the column unless ``columns`` (schema, name, type)
    has every column of :data:`_COLUMNS` with its type (invariant 4)."""
    schema = columns[0][0]
    found = {name: kind for _, name, kind in columns if name is not None}
    for name, kind in _COLUMNS.items():
        if found.get(name) != kind:
            has = "has no such column" if name not in found else f"has it as {found[name]}"
            raise CorruptState(
                f"the consensus table {schema}.consensus needs column {name} {kind}, but it "
                f"{has}: it was created otherwise than by timeshard"
            )


def _ms(seconds: float) -> str:
    """A positive duration for ``set_config``, at least 1 ms (``0ms`` means no timeout)."""
    return f"{max(1, math.ceil(seconds * 1000))}ms"


_CHOICES = {
    "sslmode": ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
    "gssencmode": ("disable", "prefer", "require"),
    "channel_binding": ("disable", "prefer", "require"),
    "target_session_attrs": (
        "any",
        "read-write",
        "read-only",
        "primary",
        "standby",
        "prefer-standby",
    ),
    "load_balance_hosts": ("disable", "random"),
}


def _check_dsn(dsn: str) -> None:
    """InvalidUsage naming the parameter and value if libpq would refuse ``dsn`` (a syntax
    error, a port that is not a number in 1..65535, an unknown ``sslmode``, ...) before it
    connects: that is a mistake to fix, never a fault to retry.

    A password with an unencoded ``@`` or ``/`` makes libpq read part of it as the host
    (``app:p@ss@db`` connects to host ``ss@db``) or as the port (``app:p/ss@db``): such a
    DSN is refused without showing the part, which is a secret."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error as e:
        raise InvalidUsage(f"invalid PostgreSQL DSN: {hidden(str(e), dsn)}") from None
    dsn_secrets = secrets(dsn)

    def shown(name: str, value: object) -> str:
        text = str(value)
        if text and any(text in secret or secret in text for secret in dsn_secrets):
            raise InvalidUsage(
                f"invalid PostgreSQL DSN: its {name} is part of a secret; percent-encode "
                "'@', '/' and ':' in a user name or password (%40, %2F, %3A)"
            )
        return repr(text)

    hosts = str(params.get("host", "")).split(",")
    if "://" in dsn and any("@" in host[1:] for host in hosts):  # "@name": an abstract socket
        raise InvalidUsage(
            "invalid PostgreSQL DSN: a host has an '@'; percent-encode '@', '/' and ':' in a "
            "user name or password (%40, %2F, %3A)"
        )
    for port in str(params.get("port", "")).split(","):
        if port and not (port.isdigit() and 1 <= int(port) <= 65535):
            raise InvalidUsage(
                f"invalid PostgreSQL DSN: port {shown('port', port)} is not in 1..65535"
            )
    timeout = str(params.get("connect_timeout", "0")).strip()
    if not timeout.lstrip("-").isdigit():
        raise InvalidUsage(
            f"invalid PostgreSQL DSN: connect_timeout {shown('connect_timeout', timeout)} is not "
            "a number of seconds"
        )
    for name, choices in _CHOICES.items():
        value = params.get(name)
        if value is not None and value not in choices:
            raise InvalidUsage(
                f"invalid PostgreSQL DSN: {name} {shown(name, value)} is not one of "
                f"{', '.join(choices)}"
            )


def _versions(key: str, rows: list[tuple[Any, ...]]) -> list[VersionedData]:
    return [stored_version(key, seqno, data) for seqno, data in rows]


__all__ = ["PostgresConsensus"]
