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

What runs where. :class:`PostgresSource` runs on the driver: its
constructor, ``upper``, ``commit``, ``drop`` and ``read``'s planning, with
the exported snapshot it holds open while the read job runs. What it reads
of the server's catalog about its tables is
:mod:`~timeshard.storage.postgres_tables` (on the driver and in the read
tasks); the read plan and what the Spark tasks run (the stream of the slot,
the snapshot's tables, the decoding of their text values) is
:mod:`~timeshard.storage.postgres_read`. Their public names are importable
from here too.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage, SourceUnavailable
from timeshard.persist._internal.parts import DIFF, ERR
from timeshard.storage.cdc import DecodeTask
from timeshard.storage.pgoutput import Column, format_lsn, parse_lsn
from timeshard.storage.postgres_read import (
    BATCH_ROWS,
    RAW_SCHEMA,
    RawRow,
    ReadPlan,
    ReadTask,
    SnapshotInfo,
    _decode,
    _libpq_options,
    snapshot_rows,
    stream_rows,
)
from timeshard.storage.postgres_tables import (
    StorageMark,
    Table,
    _columns,
    _partitions_not_full,
    _published,
    incompatibility,
    storage_marks,
    stored_type,
)
from timeshard.storage.reclock import SourceFrontier

log = logging.getLogger(__name__)

PARTITION = "0"
_SLOT = re.compile(r"[a-z0-9_]{1,63}")
_IDENT = re.compile(r"[^\0]{1,63}")


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


__all__ = [
    "PARTITION",
    "PostgresSource",
    "ReadPlan",
    "SnapshotInfo",
    "Table",
    "default_slot",
    "frame_schema",
    "incompatibility",
    # Defined in postgres_tables and postgres_read, importable from here as before.
    "BATCH_ROWS",
    "RAW_SCHEMA",
    "RawRow",
    "ReadTask",
    "StorageMark",
    "snapshot_rows",
    "storage_marks",
    "stored_type",
    "stream_rows",
]
