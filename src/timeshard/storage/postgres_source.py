"""POSTGRES sources: the tables of a publication, by logical replication (pgoutput).

The publication must publish inserts, updates, deletes and truncates (the
constructor refuses one that leaves any out: those changes would be lost).
Each table of the publication (or of the ``tables`` named) is a subsource
with its own output shard ``<source>.<table>`` (``<schema>.<table>`` outside
``public``). Its columns are the table's, typed as
:mod:`timeshard.storage.pgoutput` decodes them, plus ``_diff``: an insert is
the new row at +1, a delete the old row at -1, an update both. Every table
must have ``REPLICA IDENTITY FULL`` (so deletes and updates carry the whole
old row, TOASTed values included), and so must every partition of a
partitioned one (published via its root, its changes log the old row as the
partition's identity has it); the constructor refuses one that has not,
naming the statement that fixes it. Upstream later, a change without its
whole old row is a definite error of its subsource (below).

Text (names and values) is decoded from the database's encoding
(``server_encoding``); a database in ``SQL_ASCII``, which declares none, or
in one Python has no codec for is refused.

FromTime is an LSN: the source has one partition, ``"0"``, and a record's
offset is the LSN of its transaction's commit record, so all changes of a
transaction share one offset and reclock to one time. ``upper()`` is the
server's flushed WAL position (``pg_current_wal_flush_lsn``): every
transaction whose commit record starts below it is durable.

The slot. The constructor creates the logical replication slot ``slot``
(default :func:`default_slot`: ``timeshard_<name>_<hash of the name>``)
unless it exists; its consistent point ``C`` is where the stream starts. A
source whose slot was defaulted before the hash was added
(``timeshard_<name>``, which names such as ``a.x`` and ``a-x`` shared) keeps
that slot while no slot has the new name, and a build whose catalog entry
records a slot streams that one (:meth:`PostgresSource.pin_recorded`).
:meth:`PostgresSource.commit` advances the slot
(``pg_replication_slot_advance``) to the resumption frontier after each
durable tick, so the server keeps only the WAL a restart still needs;
:meth:`PostgresSource.drop` drops the slot, unless another process uses it
(in use now, or moved on since this instance created it and before it
advanced it itself): a slot name is shared by every source of that name.

The snapshot. The tables' contents at ``C`` are the records at offset
``C - 1`` (so a frontier includes them exactly when it is at or beyond
``C``). A read from offset 0 takes them: the driver opens a ``REPEATABLE
READ`` transaction, exports its snapshot (``pg_export_snapshot``) and notes
which transactions it sees (``pg_current_snapshot``) and the WAL position
``S`` after it; Spark tasks read every table under that snapshot with
``::text`` columns, one task per table. The snapshot is later than ``C``,
so the stream task *rewinds* it: it reads the slot from ``C`` to ``S`` and
emits, at offset ``C - 1``, the inverse of every transaction the snapshot
sees. Snapshot plus rewinds is the state at ``C`` whatever snapshot was
taken, so a read that is retried (its first try was never committed) takes
a new snapshot and yields the same updates. Once the output holds the
snapshot, the resumption frontier is past ``C`` and no snapshot is taken
again: a restart resumes from the frontier.

The stream. One Spark task streams the slot (psycopg2's
``LogicalReplicationConnection``, pgoutput protocol 1) from the read's
start until the server has sent everything below its end (a keepalive
reports a position at or past it), and emits the transactions whose commit
falls in the range. It streams a *temporary copy* of the slot
(``pg_copy_logical_replication_slot``, gone with its connection), never the
slot itself: psycopg2 answers the server's keepalives with a flush position
it moves on to the keepalive's WAL end whenever no change arrived before it,
and the server would take that as a confirmation and move the slot past the
resumption frontier. So only :meth:`PostgresSource.commit` moves the slot,
several instances can read it at once, and each read needs one spare
replication slot (``max_replication_slots``) while it streams. A copy that
is already past the read's start (another instance committed meanwhile)
raises :class:`~timeshard.errors.SourceUnavailable` rather than skip.

Errors. A value that does not decode makes its row an err row (for that
table only). An incompatible change of a table's schema upstream (a dropped
or retyped column, or one dropped and added again under its name: its
``attnum`` changed) and a ``TRUNCATE`` are *definite* errors of that
subsource: every transaction touching it from then on is an err row naming
the change, while the other tables go on. So is a table that left the
publication (checked by OID at the start of every read): one err row when a
read first finds it gone (written again only if no commit made it durable,
or by a process started after), and its changes if it is published again,
since those in between were not sent. So is a table rewritten upstream
with its values changed and no change sent (``ALTER COLUMN ... TYPE`` to
the same type ``USING`` an expression): found at the start of a read as new
storage files and a declared column's catalog row written since the last
check (:class:`StorageMark`; the first check is at the build, so such an
ALTER while no process ran goes unseen). The stream names a table by its
OID, so a table renamed upstream is still read, and a table created again
under the name of one dropped is such an error too, also when that happened
while no process ran: the OIDs are recorded in the catalog when the source is
first built, and a later build keeps them (:meth:`PostgresSource.pin_recorded`).
(A ``DROP TABLE``
itself sends no change: the dropped table's rows stay until another table
of its name sends one.) Faults are not data: an
unreachable server raises :class:`~timeshard.errors.SourceUnavailable`; a
slot that is gone or has moved past the resumption frontier (its WAL was
released) raises it as definite, and nothing is skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import select
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage, SourceUnavailable
from timeshard.persist._internal.parts import DIFF, ERR
from timeshard.storage.cdc import DecodeTask, raw_batches
from timeshard.storage.pgoutput import (
    ARRAYS,
    SESSION_SETTINGS,
    TIME,
    UNCHANGED,
    Begin,
    Change,
    Column,
    Commit,
    Relation,
    Truncate,
    arrow_type,
    decode_text,
    format_lsn,
    parse_array,
    parse_lsn,
    parse_message,
)
from timeshard.storage.reclock import SourceFrontier

log = logging.getLogger(__name__)

PARTITION = "0"
_SLOT = re.compile(r"[a-z0-9_]{1,63}")
_IDENT = re.compile(r"[^\0]{1,63}")
#: The rows a read task emits: which table, the offset, the diff, an error or text values.
RAW_SCHEMA = pa.schema(
    [
        ("_sub", pa.int32()),
        ("_offset", pa.int64()),
        (DIFF, pa.int64()),
        (ERR, pa.string()),
        ("_values", pa.list_(pa.string())),
    ]
)
#: One raw row: table index, offset, diff, error, text values.
RawRow = tuple[int, int, int, str | None, list[Any] | None]
BATCH_ROWS = 10_000


@dataclass(frozen=True)
class Table:
    """A table of the publication: where it is, its subsource name, its columns and its OID.

    The stream names a table by its OID: a table renamed upstream is still
    this table, and one dropped and created again under its name is not.
    """

    schema: str
    name: str
    sub: str
    columns: tuple[Column, ...]
    oid: int

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, stored_type(c)) for c in self.columns])


def stored_type(column: Column) -> pa.DataType:
    """The Arrow type a column is stored as (``time`` as its text, ``time[]`` as a list of
    them: Spark has no time type)."""
    if column.type_oid == TIME:
        return pa.string()
    if ARRAYS.get(column.type_oid) == TIME:
        return pa.list_(pa.string())
    return arrow_type(column.type_oid, column.typmod)


def frame_schema(table: Table) -> pa.Schema:
    """The records of one table as ``read`` returns them."""
    return pa.schema(
        [
            pa.field("_partition", pa.string()),
            pa.field("_offset", pa.int64()),
            *table.arrow_schema(),
            pa.field(DIFF, pa.int64()),
            pa.field(ERR, pa.string()),
        ]
    )


def default_slot(name: str) -> str:
    """The replication slot of the source ``name`` unless it is given one: ``timeshard_``,
    the name in lower case with every character but ``[a-z0-9_]`` as ``_`` (at most 40),
    ``_`` and the first 12 hex digits of the name's SHA-256, so that different names never
    share a slot (at most 63 characters)."""
    readable = re.sub(r"[^a-z0-9_]", "_", name.lower())[:40]
    return f"timeshard_{readable}_{hashlib.sha256(name.encode()).hexdigest()[:12]}"


def _legacy_slot(name: str) -> str | None:
    """The default slot before :func:`default_slot` (names could share it), if valid."""
    slot = "timeshard_" + re.sub(r"[^a-z0-9_]", "_", name.lower())
    return slot if _SLOT.fullmatch(slot) else None


def _libpq_options(dsn: str) -> str:
    """The ``options`` of a connection to ``dsn``: the DSN's own, then the session
    settings the decoder needs (later ``-c`` settings win). Passing ``options`` to
    connect replaces the DSN's, so they are joined here."""
    from psycopg.conninfo import conninfo_to_dict

    own = conninfo_to_dict(dsn).get("options") or ""
    ours = " ".join(f"-c {k}={v.replace(' ', '')}" for k, v in SESSION_SETTINGS.items())
    return f"{own} {ours}" if own else ours


class PostgresSource:
    """The tables of a PostgreSQL publication, by logical replication (module doc).

    With ``create_slot=False`` (what ``timeshard verify`` rebuilds it with)
    the slot is never created: a read finds it, or fails as for a dropped slot.
    """

    #: One upstream every instance sees, whose upper never moves back: an upper below the
    #: offsets already bound means the upstream lost them (``Ingestion`` stalls on it).
    shared_upper = True

    def __init__(
        self,
        name: str,
        dsn: str,
        publication: str,
        *,
        slot: str | None = None,
        tables: Sequence[str] | None = None,
        connect_timeout_s: int = 10,
        create_slot: bool = True,
    ) -> None:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.=-]{1,100}", name):
            raise InvalidUsage(
                f"POSTGRES source name must be 1-100 of [A-Za-z0-9_.=-], got {name!r}"
            )
        if not isinstance(publication, str) or not _IDENT.fullmatch(publication):
            raise InvalidUsage(f"publication must be a PostgreSQL identifier, got {publication!r}")
        self._slot_declared = slot is not None
        self._slot_created = False
        #: Where the slot this instance created started (its confirmed flush LSN then),
        #: until this instance advances it (:meth:`drop`).
        self._created_at: int | None = None
        slot = slot if slot is not None else default_slot(name)
        if not isinstance(slot, str) or not _SLOT.fullmatch(slot):
            raise InvalidUsage(f"slot must be 1-63 of [a-z0-9_], got {slot!r}")
        if not isinstance(dsn, str) or not dsn:
            raise InvalidUsage(f"dsn must be a PostgreSQL connection string, got {dsn!r}")
        try:
            _libpq_options(dsn)
        except Exception:  # psycopg quotes the text, which may hold a password
            raise InvalidUsage(f"POSTGRES source {name!r}: its dsn does not parse") from None
        self.name = name
        self.dsn = dsn
        self.publication = publication
        self.slot = slot
        self.connect_timeout_s = connect_timeout_s
        self.encoding = self._encoding()
        self.tables = self._tables(tables)
        #: Tables that left the publication (by index): why, and whose err row is durable.
        self._left: dict[int, str] = {}
        self._reported: set[int] = set()
        self._announced: dict[int, int] = {}
        #: Per table (by index), its storage and its columns' catalog rows when last checked.
        self._storage: dict[int, StorageMark] = {}
        with self._connect() as conn:
            self._storage = storage_marks(conn, self.tables)
        if not self._slot_declared:
            self.slot = self._kept_slot(slot, _legacy_slot(name))
        if create_slot:
            self._ensure_slot()

    @property
    def slot_created(self) -> bool:
        """Whether this instance created its replication slot (a CREATE that fails drops
        such a slot, never one it found)."""
        return self._slot_created

    # -- the Source protocol ---------------------------------------------------------------

    def outputs(self) -> dict[str, pa.Schema]:
        return {
            t.sub: pa.schema([*t.arrow_schema(), pa.field(DIFF, pa.int64())]) for t in self.tables
        }

    def payload_schema(self) -> pa.Schema:
        raise InvalidUsage(f"POSTGRES source {self.name!r} has subsources: use outputs()")

    def tick(self) -> None:
        return None

    def upper(self) -> SourceFrontier:
        with self._connect() as conn:
            row = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
        assert row is not None
        return {PARTITION: parse_lsn(row[0])}

    def read(self, spark: Any, start: SourceFrontier, end: SourceFrontier) -> dict[str, Any]:
        """One DataFrame per table, of the changes with offsets in ``[start, end)``.

        Runs one Spark job (the read tasks, checkpointed) before it returns;
        the frames decode the checkpointed rows.
        """
        from pyspark.sql import functions as F

        from timeshard.spark.session import arrow_to_spark_schema

        lo, hi = start.get(PARTITION, 0), end.get(PARTITION, 0)
        confirmed = self.confirmed_flush()
        if confirmed is None:
            raise SourceUnavailable(
                f"POSTGRES source {self.name!r}: the replication slot {self.slot!r} is gone "
                "(dropped upstream): the changes since the resumption frontier are lost",
                definite=lo > 0,
            )
        if 0 < lo < confirmed:
            # Another instance committed meanwhile (the next step resumes past it), or the
            # slot was advanced from outside and the WAL in between is lost: never skipped.
            raise SourceUnavailable(
                f"POSTGRES source {self.name!r}: the slot {self.slot!r} is at "
                f"{format_lsn(confirmed)}, past the resumption frontier {format_lsn(lo)} "
                "(another instance went on, or the WAL in between was released)"
            )
        if lo == 0:  # the snapshot is at offset C - 1, C the slot's consistent point
            if hi <= confirmed - 1:  # bound before the slot existed: nothing to read yet
                from timeshard.spark.sqltext import empty_frame

                return {t.sub: empty_frame(spark, self._frame_schema(t)) for t in self.tables}
            lo = confirmed
        announce = self._check_membership(lo)
        with self._snapshot(lo == confirmed and start.get(PARTITION, 0) == 0) as snapshot:
            plan = ReadPlan(
                self.dsn,
                self.slot,
                self.publication,
                self.tables,
                lo=lo,
                hi=hi,
                consistent=confirmed,
                snapshot=snapshot,
                encoding=self.encoding,
                left=tuple(sorted(self._left.items())),
                announce=announce,
            )
            items = 1 + (len(self.tables) if snapshot is not None else 0)
            raw = (
                spark.range(0, items, 1, items)
                .mapInArrow(ReadTask(plan), arrow_to_spark_schema(RAW_SCHEMA))
                .localCheckpoint(eager=True)
            )
        frames = {}
        for i, table in enumerate(self.tables):
            out = frame_schema(table)
            frames[table.sub] = raw.where(F.col("_sub") == i).mapInArrow(
                DecodeTask(
                    table.qualified,
                    table.columns,
                    out.serialize().to_pybytes(),
                    _decode,
                    (ValueError, ArithmeticError),
                    PARTITION,
                ),
                arrow_to_spark_schema(out),
            )
        return frames

    def _frame_schema(self, table: Table) -> Any:
        from timeshard.spark.session import arrow_to_spark_schema

        return arrow_to_spark_schema(frame_schema(table))

    def commit(self, frontier: SourceFrontier) -> None:
        """Advance the slot to the resumption frontier, so the server releases older WAL."""
        lsn = frontier.get(PARTITION, 0)
        for index, offset in list(self._announced.items()):
            if offset < lsn:  # its err row is durable: not written again
                self._reported.add(index)
                del self._announced[index]
        confirmed = self.confirmed_flush()
        if confirmed is None or lsn <= confirmed:
            return
        with self._connect() as conn:
            conn.execute(
                "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (self.slot, format_lsn(lsn))
            )
        self._created_at = None  # the slot moved on by this instance: see drop

    def close(self) -> None:
        return None

    def pin_recorded(self, options: Mapping[str, Any]) -> None:
        """Hold each table to the OID the catalog recorded for it (``options["table_oids"]``,
        by subsource), not the one its name has upstream now.

        Built again after a table was dropped and created again under its name while no
        process ran, the source would otherwise read the new table as the old: the old
        one's rows would stay in the output (a ``DROP TABLE`` sends no change) beside the
        new one's. Pinned, the new table's changes are err rows, as they are when the
        stream sees the new OID. A table the record does not name keeps its OID.

        The recorded ``options["slot"]`` is the slot, unless one was given: a
        slot this build created under another name is dropped. The recorded
        ``options["table_columns"]`` (:meth:`recorded_columns`) are each table's
        columns, so that its output keeps its schema after a column was added
        upstream, and a column dropped and added again under its name since is
        an error; a table the record does not name takes its columns from upstream.
        """
        slot = options.get("slot")
        if (
            not self._slot_declared
            and isinstance(slot, str)
            and _SLOT.fullmatch(slot)
            and slot != self.slot
        ):
            self._adopt_slot(slot)
        columns = options.get("table_columns")
        if isinstance(columns, Mapping):
            self.tables = [_with_recorded_columns(t, columns.get(t.sub)) for t in self.tables]
        recorded = options.get("table_oids")
        if not isinstance(recorded, Mapping):
            return
        pinned = []
        for table in self.tables:
            oid = recorded.get(table.sub)
            if isinstance(oid, int) and not isinstance(oid, bool) and oid != table.oid:
                table = replace(table, oid=oid)
            pinned.append(table)
        self.tables = pinned

    def recorded_columns(self) -> dict[str, list[list[Any]]]:
        """Per subsource, its columns as ``[name, type oid, typmod, attnum]`` lists: what
        the catalog records for :meth:`pin_recorded`."""
        return {
            t.sub: [[c.name, c.type_oid, c.typmod, c.attnum] for c in t.columns]
            for t in self.tables
        }

    def drop(self) -> bool:
        """Drop the replication slot (the source is gone: the server keeps no WAL for it),
        unless another process uses it, which is logged and leaves it: the slot is in use
        (``active``: a walsender streams it, or an instance of the source advances it),
        or -- a slot this instance created and never advanced -- it moved on from where it
        was created (an instance of a source of this name elsewhere, which shares the
        slot, committed on it). One statement checks and drops, so nothing starts using it
        in between (the drop of a slot taken meanwhile fails). True if it was dropped; no
        slot is no error."""
        return self._drop_slot(self._created_at)

    def _drop_slot(self, created_at: int | None) -> bool:
        """Drop the slot if it is not in use and, with ``created_at``, still there."""
        query = (
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = %s AND NOT active"
        )
        params = [self.slot]
        if created_at is not None:
            query += " AND confirmed_flush_lsn = %s::pg_lsn"
            params.append(format_lsn(created_at))
        with self._connect() as conn:
            if conn.execute(query, params).fetchall():
                return True
            row = conn.execute(
                "SELECT active, confirmed_flush_lsn::text FROM pg_replication_slots "
                "WHERE slot_name = %s",
                (self.slot,),
            ).fetchone()
        if row is not None:
            how = (
                "is in use (active)"
                if row[0] or created_at is None
                else f"moved on to {row[1]} from {format_lsn(created_at)}, where this "
                "instance created it"
            )
            log.warning(
                "POSTGRES source %s: its replication slot %s %s: another process uses it, "
                "and it is left to that process",
                self.name,
                self.slot,
                how,
            )
        return False

    # -- the server, on the driver ---------------------------------------------------------

    def _connect(self, autocommit: bool = True) -> Any:
        import psycopg

        try:
            return psycopg.connect(
                self.dsn,
                autocommit=autocommit,
                connect_timeout=self.connect_timeout_s,
                options=_libpq_options(self.dsn),
            )
        except psycopg.OperationalError as e:
            raise SourceUnavailable(
                f"POSTGRES source {self.name!r}: the server is unreachable: {str(e).strip()[:300]}"
            ) from None

    def _tables(self, only: Sequence[str] | None) -> list[Table]:
        with self._connect() as conn:
            listed = conn.execute(
                "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s "
                "ORDER BY schemaname, tablename",
                (self.publication,),
            ).fetchall()
            publishes = conn.execute(
                "SELECT pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication "
                "WHERE pubname = %s",
                (self.publication,),
            ).fetchone()
            if publishes is None:
                raise InvalidUsage(
                    f"POSTGRES source {self.name!r}: no publication {self.publication!r} "
                    "(CREATE PUBLICATION ... FOR TABLE ...)"
                )
            operations = ("insert", "update", "delete", "truncate")
            unpublished = [op for op, on in zip(operations, publishes, strict=True) if not on]
            if unpublished:
                raise InvalidUsage(
                    f"POSTGRES source {self.name!r}: publication {self.publication!r} does not "
                    f"publish {', '.join(unpublished)}, whose changes would be lost (ALTER "
                    f"PUBLICATION ... SET (publish = 'insert, update, delete, truncate'))"
                )
            names = {(s, t): t if s == "public" else f"{s}.{t}" for s, t in listed}
            if only is not None:
                wanted = list(only)
                unknown = [w for w in wanted if w not in names.values()]
                if unknown:
                    raise InvalidUsage(
                        f"POSTGRES source {self.name!r}: tables {unknown} are not in publication "
                        f"{self.publication!r}, which has {sorted(names.values())}"
                    )
                listed = [k for k in listed if names[k] in wanted]
            if not listed:
                raise InvalidUsage(f"publication {self.publication!r} has no tables")
            published = _published(conn, self.publication)
            tables = []
            for schema, table in listed:
                columns, row_filter = published.get((schema, table), (None, None))
                if row_filter is not None:
                    raise InvalidUsage(
                        f"POSTGRES source {self.name!r}: publication {self.publication!r} "
                        f"filters the rows of {schema}.{table} (WHERE {row_filter}); a row that "
                        "leaves the filter is not replicated as deleted, so it is not supported"
                    )
                read = _columns(conn, schema, table)
                if columns is not None:  # a column list: only those are replicated
                    read = tuple(c for c in read if c.name in columns)
                identity = conn.execute(
                    "SELECT c.relreplident, c.oid::bigint FROM pg_class c JOIN pg_namespace n "
                    "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
                    (schema, table),
                ).fetchone()
                if identity is not None:
                    tables.append(Table(schema, table, names[(schema, table)], read, identity[1]))
                if identity is None or identity[0] != "f":
                    raise InvalidUsage(
                        f"POSTGRES source {self.name!r}: table {schema}.{table} needs "
                        f"REPLICA IDENTITY FULL (ALTER TABLE {schema}.{table} REPLICA IDENTITY "
                        "FULL), so that updates and deletes carry the whole old row"
                    )
                partial = _partitions_not_full(conn, identity[1])
                if partial:
                    raise InvalidUsage(
                        f"POSTGRES source {self.name!r}: the partitions {partial} of table "
                        f"{schema}.{table} need REPLICA IDENTITY FULL (ALTER TABLE <partition> "
                        "REPLICA IDENTITY FULL for each), so that updates and deletes carry "
                        "the whole old row"
                    )
        return tables

    def confirmed_flush(self) -> int | None:
        """The slot's position: the first LSN it still streams; None if the slot is gone."""
        with self._connect() as conn:
            row = conn.execute(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                (self.slot,),
            ).fetchone()
        return None if row is None or row[0] is None else parse_lsn(row[0])

    def _encoding(self) -> str:
        """The Python codec of the database's encoding (InvalidUsage if it has none)."""
        import psycopg

        with self._connect() as conn:
            row = conn.execute("SELECT current_setting('server_encoding')").fetchone()
            assert row is not None
            # In SQL_ASCII, psycopg reads text as bytes (and sends str as bytea).
            server = row[0].decode() if isinstance(row[0], bytes) else str(row[0])
            why = "it declares no encoding of its bytes" if server == "SQL_ASCII" else None
            if why is None:
                try:
                    conn.execute("SELECT set_config('client_encoding', %s, false)", (server,))
                    return str(conn.info.encoding)
                except psycopg.NotSupportedError:
                    why = "Python has no codec for it"
        raise InvalidUsage(
            f"POSTGRES source {self.name!r}: the database's encoding {server} cannot be "
            f"read ({why}): use a database of another encoding, such as UTF8"
        )

    def _check_membership(self, offset: int) -> tuple[int, ...]:
        """Note the tables (by OID) no longer in the publication, and those rewritten upstream
        since the last check (:meth:`StorageMark.rewritten_since`); the indexes of those whose
        err row this read writes, at ``offset`` (until a commit past it makes it durable).

        A table that was dropped is not one (its rows stay, as the module doc says).
        """
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT c.oid::bigint, EXISTS (SELECT 1 FROM pg_publication_tables p "
                "JOIN pg_namespace n ON n.nspname = p.schemaname WHERE p.pubname = %s "
                "AND n.oid = c.relnamespace AND p.tablename = c.relname) "
                "FROM pg_class c WHERE c.oid::bigint = ANY(%s)",
                (self.publication, [t.oid for t in self.tables]),
            ).fetchall()
            marks = storage_marks(conn, self.tables)
        published = dict(rows)
        for index, table in enumerate(self.tables):
            if published.get(table.oid, True) is False and index not in self._left:
                self._left[index] = (
                    f"left the publication {self.publication!r} (its changes are no longer sent)"
                )
            mark, before = marks.get(index), self._storage.get(index)
            if mark is not None and before is not None and index not in self._left:
                why = mark.rewritten_since(before)
                if why is not None:
                    self._left[index] = why
            if mark is not None:
                self._storage[index] = mark
        announce = tuple(i for i in sorted(self._left) if i not in self._reported)
        for index in announce:
            self._announced[index] = min(offset, self._announced.get(index, offset))
        return announce

    def _kept_slot(self, slot: str, legacy: str | None) -> str:
        """``slot``, or ``legacy`` if only that one exists (a source built before the
        default slot named the name's hash keeps the slot it made then)."""
        if legacy is None or legacy == slot:
            return slot
        with self._connect() as conn:
            found = {
                row[0]
                for row in conn.execute(
                    "SELECT slot_name FROM pg_replication_slots WHERE slot_name IN (%s, %s)",
                    (slot, legacy),
                ).fetchall()
            }
        return legacy if legacy in found and slot not in found else slot

    def _adopt_slot(self, slot: str) -> None:
        if self._slot_created:
            self.drop()
            self._slot_created = False
            self._created_at = None
        self.slot = slot

    def _ensure_slot(self) -> None:
        import psycopg

        if self.confirmed_flush() is not None:
            return
        # Another instance may create it first.
        with self._connect() as conn, contextlib.suppress(psycopg.errors.DuplicateObject):
            row = conn.execute(
                "SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput')",
                (self.slot,),
            ).fetchone()
            self._slot_created = True
            self._created_at = parse_lsn(row[0]) if row is not None else None

    @contextlib.contextmanager
    def _snapshot(self, wanted: bool) -> Iterator[SnapshotInfo | None]:
        """An exported REPEATABLE READ snapshot, held open while the read job runs."""
        if not wanted:
            yield None
            return
        conn = self._connect(autocommit=False)
        try:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            row = conn.execute(
                "SELECT pg_export_snapshot(), pg_current_snapshot()::text, "
                "pg_current_wal_lsn()::text"
            ).fetchone()
            assert row is not None
            xmin, xmax, xip = row[1].split(":")
            yield SnapshotInfo(
                row[0],
                int(xmin),
                int(xmax),
                tuple(int(x) for x in xip.split(",") if x),
                parse_lsn(row[2]),
            )
        finally:
            with contextlib.suppress(Exception):
                conn.rollback()
            conn.close()


def _published(
    conn: Any, publication: str
) -> dict[tuple[str, str], tuple[frozenset[str] | None, str | None]]:
    """Per table of ``publication``: its column list and its row filter, where it has them
    (PostgreSQL 15 on; before, neither exists)."""
    (version,) = conn.execute("SELECT current_setting('server_version_num')::int").fetchone()
    if version < 150000:
        return {}
    rows = conn.execute(
        "SELECT schemaname, tablename, attnames, rowfilter FROM pg_publication_tables "
        "WHERE pubname = %s",
        (publication,),
    ).fetchall()
    return {
        (schema, table): (None if names is None else frozenset(names), row_filter)
        for schema, table, names, row_filter in rows
    }


def _with_recorded_columns(table: Table, recorded: Any) -> Table:
    """``table`` with the columns a catalog entry recorded for it (None: as it is)."""
    if recorded is None:
        return table
    shape = (str, int, int, int)
    if not isinstance(recorded, list) or not all(
        isinstance(c, list)
        and len(c) == 4
        and all(isinstance(v, t) and not isinstance(v, bool) for v, t in zip(c, shape, strict=True))
        for c in recorded
    ):
        raise InvalidUsage(
            f"the recorded columns of {table.sub!r} are not [name, type oid, typmod, attnum] "
            f"lists: {recorded!r}"
        )
    return replace(table, columns=tuple(Column(*c) for c in recorded))


def _partitions_not_full(conn: Any, oid: int) -> list[str]:
    """The partitions of table ``oid`` (none if it is not partitioned) whose REPLICA
    IDENTITY is not FULL, qualified.

    A partitioned table published via its root sends the root's identity in its Relation
    message, but each change logs its old row as its partition's identity has it.
    """
    rows = conn.execute(
        "SELECT n.nspname, c.relname FROM pg_partition_tree(%s::oid) p "
        "JOIN pg_class c ON c.oid = p.relid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE p.relid <> %s::oid AND c.relkind = 'r' AND c.relreplident <> 'f' "
        "ORDER BY 1, 2",
        (oid, oid),
    ).fetchall()
    return [f"{schema}.{name}" for schema, name in rows]


def _columns(conn: Any, schema: str, table: str) -> tuple[Column, ...]:
    """The columns pgoutput sends of a table: not dropped, not generated."""
    rows = conn.execute(
        "SELECT a.attname, a.atttypid::int, a.atttypmod, a.attnum::int FROM pg_attribute a "
        "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped "
        "AND a.attgenerated = '' ORDER BY a.attnum",
        (schema, table),
    ).fetchall()
    reserved = [r[0] for r in rows if r[0].startswith("_")]
    if reserved:
        raise InvalidUsage(f"table {schema}.{table}: columns {reserved} start with '_' (reserved)")
    return tuple(Column(*row) for row in rows)


def incompatibility(declared: Sequence[Column], actual: Sequence[Column]) -> str | None:
    """Why ``actual`` columns cannot be read as ``declared`` (None: they can; new columns can)."""
    by_name = {c.name: c for c in actual}
    for column in declared:
        now = by_name.get(column.name)
        if now is None:
            return f"column {column.name!r} was dropped"
        if (now.type_oid, now.typmod) != (column.type_oid, column.typmod):
            return f"column {column.name!r} changed type"
        if column.attnum and now.attnum and now.attnum != column.attnum:
            return f"column {column.name!r} was dropped and added again"
    return None


def _catalog_change(conn: Any, oid: int, declared: Sequence[Column]) -> str | None:
    """Why table ``oid`` as the server's catalog has it now cannot be read as ``declared``,
    where a Relation message cannot tell (a column dropped and added again under its name
    and type, a partition whose REPLICA IDENTITY is not FULL); None if it can or is gone."""
    partial = _partitions_not_full(conn, oid)
    if partial:
        return f"the partitions {partial} have no REPLICA IDENTITY FULL"
    rows = conn.execute(
        "SELECT attname, atttypid::int, atttypmod, attnum::int FROM pg_attribute "
        "WHERE attrelid = %s::oid AND attnum > 0 AND NOT attisdropped",
        (oid,),
    ).fetchall()
    return incompatibility(declared, [Column(*row) for row in rows]) if rows else None


@dataclass(frozen=True)
class StorageMark:
    """Where a table's rows are stored (the ``relfilenode`` of it and of its partitions) and,
    per declared column, the transaction that last wrote its ``pg_attribute`` row and
    whether that row has a missing value (``atthasmissing``: a column added with a default,
    whose value older rows do not store)."""

    files: frozenset[int]
    columns: tuple[tuple[str, int, bool], ...]

    def rewritten_since(self, before: StorageMark) -> str | None:
        """Why the table's values may have changed with no change sent, since ``before``.

        ``ALTER TABLE ... ALTER COLUMN c TYPE t USING expr`` to the type ``c`` already has
        rewrites every row (new files) and writes ``c``'s catalog row, and logical
        replication sends nothing of it: its Relation message, if any, is the one before.
        A rewrite alone (``VACUUM FULL``, ``CLUSTER``, ``SET TABLESPACE``) keeps every
        value, and so does a catalog row written alone (``SET NOT NULL``, a type change
        that needs no rewrite). A rewrite also writes the catalog row of each column with
        a missing value, to clear it (the rows now store it): that is no change either.
        Both at once, between two checks, are taken as such an ALTER (a ``SET NOT NULL``
        and a ``VACUUM FULL`` between two reads also are; a ``USING`` on a column with a
        missing value is not seen).
        """
        if self.files == before.files:
            return None
        was = {name: (xmin, missing) for name, xmin, missing in before.columns}
        written = [
            name
            for name, xmin, missing in self.columns
            if name in was
            and was[name][0] != xmin
            and not (was[name][1] and not missing)  # a rewrite cleared the missing value
        ]
        if not written:
            return None
        return (
            f"rewritten upstream with its columns {written} altered (ALTER TABLE ... ALTER "
            "COLUMN ... TYPE ... USING?): its rows may have changed with no change sent"
        )


def storage_marks(conn: Any, tables: Sequence[Table]) -> dict[int, StorageMark]:
    """Each table's :class:`StorageMark` now, by index (a table that is gone has none).

    Two queries whatever the number of tables (it runs at the start of every read).
    """
    oids = sorted({t.oid for t in tables})
    files: dict[int, set[int]] = {}
    for oid, file in conn.execute(
        "SELECT t.oid::bigint, c.relfilenode::bigint FROM unnest(%s::oid[]) AS t(oid) "
        "JOIN pg_class c ON c.oid = t.oid "
        "OR c.oid IN (SELECT relid FROM pg_partition_tree(t.oid))",
        (oids,),
    ).fetchall():
        files.setdefault(oid, set()).add(file)
    written: dict[int, dict[str, tuple[int, bool]]] = {}
    for oid, name, xmin, missing in conn.execute(
        "SELECT attrelid::bigint, attname, xmin::text::bigint, atthasmissing FROM pg_attribute "
        "WHERE attrelid = ANY(%s::oid[]) AND attnum > 0 AND NOT attisdropped",
        (oids,),
    ).fetchall():
        written.setdefault(oid, {})[name] = (xmin, bool(missing))
    out: dict[int, StorageMark] = {}
    for index, table in enumerate(tables):
        if table.oid in files:
            declared = {c.name for c in table.columns}
            columns = written.get(table.oid, {})
            out[index] = StorageMark(
                frozenset(files[table.oid]),
                tuple(sorted((n, x, m) for n, (x, m) in columns.items() if n in declared)),
            )
    return out


# -- what the tasks run --------------------------------------------------------------------


@dataclass(frozen=True)
class SnapshotInfo:
    """An exported snapshot: its id, the transactions it sees (xid8), the WAL after it."""

    exported: str
    xmin: int
    xmax: int
    xip: tuple[int, ...]
    wal_after: int

    def sees(self, xid32: int) -> bool:
        """Whether the snapshot sees the committed transaction of 32-bit id ``xid32``."""
        full = (self.xmax & ~0xFFFFFFFF) | xid32
        if full > self.xmax:
            full -= 1 << 32
        return full < self.xmin or (full < self.xmax and full not in self.xip)


@dataclass(frozen=True)
class ReadPlan:
    """Plain values: what every read task of one ``read`` needs."""

    dsn: str
    slot: str
    publication: str
    tables: Sequence[Table]
    lo: int
    hi: int
    consistent: int
    snapshot: SnapshotInfo | None = field(default=None)
    #: The Python codec of the database's encoding, which the stream's text is in.
    encoding: str = "utf-8"
    #: Tables that left the publication (index, why): their changes, if any come, are errors.
    left: tuple[tuple[int, str], ...] = ()
    #: Of those, the ones whose err row the stream writes at ``lo``.
    announce: tuple[int, ...] = ()


@dataclass(frozen=True)
class ReadTask:
    """``mapInArrow`` over ``range(items)``: item 0 streams the slot, item i reads table i - 1."""

    plan: ReadPlan

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for item in batch.column(0).to_pylist():
                rows = stream_rows(self.plan) if item == 0 else snapshot_rows(self.plan, item - 1)
                yield from raw_batches(rows, RAW_SCHEMA, BATCH_ROWS)


def snapshot_rows(plan: ReadPlan, index: int) -> Iterator[RawRow]:
    """Table ``index`` under the exported snapshot, as text, at offset ``consistent - 1``."""
    import psycopg
    from psycopg import sql

    assert plan.snapshot is not None
    table = plan.tables[index]
    offset = plan.consistent - 1
    with psycopg.connect(plan.dsn, options=_libpq_options(plan.dsn)) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        conn.execute(
            sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(plan.snapshot.exported))
        )
        # By OID, as the stream names it: renamed, the table is still read; a table that
        # has the name now but another OID is not this one.
        located = conn.execute(
            "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE c.oid::bigint = %s",
            (table.oid,),
        ).fetchone()
        if located is None:
            gone = "upstream table was dropped (no table has its OID; one created again is another)"
            yield (index, offset, 1, f"{table.qualified}: {gone}", None)
            return
        schema, name = located
        why = incompatibility(table.columns, _columns(conn, schema, name))
        if why is not None:
            yield (index, offset, 1, f"{table.qualified}: upstream schema changed: {why}", None)
            return
        query = sql.SQL("SELECT {} FROM {}.{}").format(
            sql.SQL(", ").join(
                sql.SQL("{}::text").format(sql.Identifier(c.name)) for c in table.columns
            ),
            sql.Identifier(schema),
            sql.Identifier(name),
        )
        with conn.cursor(name="timeshard_snapshot") as cursor:
            cursor.itersize = BATCH_ROWS
            cursor.execute(query)
            for values in cursor:
                yield (index, offset, 1, None, list(values))


class _Txn:
    def __init__(self, begin: Begin) -> None:
        self.begin = begin
        self.rows: list[
            tuple[int, int, str | None, list[Any] | None]
        ] = []  # sub, diff, err, values
        self.errors: set[tuple[int, str]] = set()


def stream_rows(plan: ReadPlan) -> Iterator[RawRow]:
    """The slot's transactions with commits in ``[lo, hi)`` and the snapshot's rewinds.

    Reads from ``lo`` (``consistent`` with a snapshot) until every commit
    record below the target (``hi``, or the WAL after the snapshot if later)
    has been received. A rewind is the inverse of a transaction the snapshot
    sees, at offset ``consistent - 1``.
    """
    snapshot = plan.snapshot
    left = dict(plan.left)
    if plan.lo < plan.hi:
        for i in plan.announce:
            found = f"{plan.tables[i].qualified}: {left[i]}: found at LSN {format_lsn(plan.lo)}"
            yield (i, plan.lo, 1, found, None)
    target = max(plan.hi, snapshot.wal_after if snapshot is not None else 0)
    if target <= plan.lo:
        return
    by_oid: dict[int, tuple[int, list[int] | str]] = {
        plan.tables[index].oid: (index, why) for index, why in plan.left
    }
    tables = {t.oid: i for i, t in enumerate(plan.tables)}
    named = {(t.schema, t.name): i for i, t in enumerate(plan.tables)}
    conn, cursor = _start_replication(plan)
    catalog = _Catalog(plan.dsn)
    try:
        txn: _Txn | None = None
        waited_since = time.monotonic()
        nudged = False
        while True:
            message = cursor.read_message()
            if message is None:
                if txn is None and cursor.wal_end >= target:
                    return
                if not nudged and time.monotonic() - waited_since > 2.0:
                    _nudge_wal(plan.dsn)  # a record past the target, if the server is idle
                    nudged = True
                cursor.send_feedback(reply=True)
                select.select([conn], [], [], 0.5)
                continue
            waited_since = time.monotonic()
            parsed = parse_message(bytes(message.payload), plan.encoding)
            if isinstance(parsed, Begin):
                if parsed.final_lsn >= target:
                    return
                txn = _Txn(parsed)
            elif isinstance(parsed, Relation):
                index = tables.get(parsed.oid)  # renamed upstream: still the table
                if index is None and (parsed.namespace, parsed.name) in named:
                    # Another table under the name: the one read was dropped (which sends
                    # no change: its rows stay in the shard) and this one was created after.
                    index = named[(parsed.namespace, parsed.name)]
                    by_oid[parsed.oid] = (
                        index,
                        "upstream table was dropped and created again (its OID changed)",
                    )
                elif index is not None and index not in left:
                    declared = plan.tables[index].columns
                    why = incompatibility(declared, parsed.columns)
                    if why is None and parsed.replica_identity != "f":
                        # Updates would come without their old row, deletes with the key only.
                        why = "its REPLICA IDENTITY is no longer FULL"
                    if why is None:
                        # What the Relation does not carry (a partition's identity, a
                        # column's number), as the server has it now: the error may start
                        # before the change that caused it, never after.
                        why = _catalog_change(catalog(), parsed.oid, declared)
                    positions = [c.name for c in parsed.columns]
                    by_oid[parsed.oid] = (
                        index,
                        f"upstream schema changed: {why}"
                        if why is not None
                        else [positions.index(c.name) for c in declared],
                    )
            elif isinstance(parsed, Change) and txn is not None:
                _apply_change(txn, parsed, by_oid, plan)
            elif isinstance(parsed, Truncate) and txn is not None:
                for oid in parsed.relations:
                    if oid in by_oid:
                        index = by_oid[oid][0]
                        txn.errors.add(
                            (index, f"{plan.tables[index].qualified}: truncated upstream")
                        )
            elif isinstance(parsed, Commit) and txn is not None:
                yield from _emit(txn, plan)
                txn = None
    finally:
        conn.close()
        catalog.close()


class _Catalog:
    """A plain connection to the server's catalog, opened when first called."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.conn: Any = None

    def __call__(self) -> Any:
        import psycopg

        if self.conn is None:
            self.conn = psycopg.connect(self.dsn, autocommit=True, options=_libpq_options(self.dsn))
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def _apply_change(
    txn: _Txn, change: Change, by_oid: dict[int, tuple[int, list[int] | str]], plan: ReadPlan
) -> None:
    known = by_oid.get(change.relation)
    if known is None:
        return  # a table of the publication this source does not read
    index, positions = known
    if isinstance(positions, str):
        txn.errors.add((index, f"{plan.tables[index].qualified}: {positions}"))
        return
    old, new = change.old, change.new
    lacking = (
        "an update without its old row"
        if change.kind == "U" and old is None
        else f"{'an update' if change.kind == 'U' else 'a delete'} with only the key of its old row"
        if change.key_only
        else None
    )
    if lacking is not None:
        # The row's own REPLICA IDENTITY is not FULL: a partition's, when the table is
        # published via its partitioned root (the root's identity is what the Relation says).
        txn.errors.add(
            (
                index,
                f"{plan.tables[index].qualified}: {lacking}: its replica identity (every "
                "partition's, for a partitioned table) must be FULL",
            )
        )
        return
    if change.kind == "U" and new is not None and UNCHANGED in new:
        assert old is not None
        new = tuple(o if n is UNCHANGED else n for o, n in zip(old, new, strict=True))
    if old is not None:
        txn.rows.append((index, -1, None, [old[p] for p in positions]))
    if new is not None:
        txn.rows.append((index, 1, None, [new[p] for p in positions]))


def _emit(txn: _Txn, plan: ReadPlan) -> Iterator[RawRow]:
    offset = txn.begin.final_lsn
    errored = {index for index, _ in txn.errors}
    rows = [(i, diff, err, values) for i, diff, err, values in txn.rows if i not in errored]
    if plan.lo <= offset < plan.hi:
        for index, why in sorted(txn.errors):
            yield (index, offset, 1, f"{why} at LSN {format_lsn(offset)}", None)
        for index, diff, err, values in rows:
            yield (index, offset, diff, err, values)
    snapshot = plan.snapshot
    if snapshot is not None and offset >= plan.consistent and snapshot.sees(txn.begin.xid):
        for index, diff, err, values in rows:  # the snapshot has these: take them back to C
            yield (index, plan.consistent - 1, -diff, err, values)


def _start_replication(plan: ReadPlan) -> tuple[Any, Any]:
    """A replication connection streaming a temporary copy of the slot from ``lo``."""
    import psycopg2
    from psycopg2.extras import LogicalReplicationConnection

    copy = f"timeshard_read_{uuid.uuid4().hex[:16]}"
    conn = psycopg2.connect(
        plan.dsn,
        connection_factory=LogicalReplicationConnection,
        options=_libpq_options(plan.dsn),
    )
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT pg_copy_logical_replication_slot(%s, %s, true)", (plan.slot, copy))
        cursor.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (copy,),
        )
        row = cursor.fetchone()
        confirmed = parse_lsn(row[0]) if row is not None and row[0] is not None else None
        if confirmed is None or confirmed > plan.lo:
            raise SourceUnavailable(
                f"the slot {plan.slot!r} is at {format_lsn(confirmed or 0)}, past the read's "
                f"start {format_lsn(plan.lo)} (another instance went on)"
            )
        cursor.start_replication(
            slot_name=copy,
            decode=False,
            start_lsn=format_lsn(plan.lo),
            # A list of identifiers, which pgoutput parses (and folds to lower case) as SQL does.
            options={
                "proto_version": "1",
                "publication_names": '"' + plan.publication.replace('"', '""') + '"',
            },
        )
        return conn, cursor
    except Exception:
        conn.close()
        raise


def _nudge_wal(dsn: str) -> None:
    """Write a tiny non-transactional WAL record, so that an idle server's stream moves on."""
    import psycopg

    with contextlib.suppress(Exception), psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_logical_emit_message(false, 'timeshard', '')")


def _decode(text: str, column: Column) -> Any:
    if column.type_oid == TIME:
        return text
    if ARRAYS.get(column.type_oid) == TIME:
        return parse_array(text)
    return decode_text(text, column.type_oid, column.typmod)


__all__ = [
    "PostgresSource",
    "ReadPlan",
    "SnapshotInfo",
    "Table",
    "default_slot",
    "incompatibility",
]
