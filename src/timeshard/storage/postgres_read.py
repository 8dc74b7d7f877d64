"""The read of a POSTGRES source: its plan, and what its Spark tasks run.

:meth:`PostgresSource.read <timeshard.storage.postgres_source.PostgresSource.read>`
plans on the driver: it exports a snapshot when the read takes one
(:class:`SnapshotInfo`) and makes a :class:`ReadPlan` of plain values. The
rest runs in Spark tasks: :class:`ReadTask`, ``mapInArrow`` over
``range(items)``, where item 0 streams a temporary copy of the slot
(:func:`stream_rows`, pgoutput messages through psycopg2's
``LogicalReplicationConnection``) and item i reads table i - 1 under the
snapshot (:func:`snapshot_rows`), each as :data:`RAW_SCHEMA` rows of text
values; the decode tasks then make typed columns of the text with
:func:`_decode`. What a read yields and why (the snapshot at ``C - 1`` and
its rewinds, the stream's range, the err rows) is the module doc of
:mod:`~timeshard.storage.postgres_source`.

:func:`_libpq_options` gives every connection its options, the driver's
and the tasks' alike.
"""

from __future__ import annotations

import contextlib
import select
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from timeshard.errors import SourceUnavailable
from timeshard.persist._internal.parts import DIFF, ERR
from timeshard.storage.cdc import raw_batches
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
    decode_text,
    format_lsn,
    parse_array,
    parse_lsn,
    parse_message,
)
from timeshard.storage.postgres_tables import Table, _catalog_change, _columns, incompatibility

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


def _libpq_options(dsn: str) -> str:
    """The ``options`` of a connection to ``dsn``: the DSN's own, then the session
    settings the decoder needs (later ``-c`` settings win). Passing ``options`` to
    connect replaces the DSN's, so they are joined here."""
    from psycopg.conninfo import conninfo_to_dict

    own = conninfo_to_dict(dsn).get("options") or ""
    ours = " ".join(f"-c {k}={v.replace(' ', '')}" for k, v in SESSION_SETTINGS.items())
    return f"{own} {ours}" if own else ours


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
    "BATCH_ROWS",
    "RAW_SCHEMA",
    "RawRow",
    "ReadPlan",
    "ReadTask",
    "SnapshotInfo",
    "snapshot_rows",
    "stream_rows",
]
