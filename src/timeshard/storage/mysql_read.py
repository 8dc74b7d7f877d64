"""The read of a MYSQL source: its plan, and what its Spark task runs.

:meth:`MySqlSource.read <timeshard.storage.mysql_source.MySqlSource.read>`
plans on the driver: a :class:`ReadPlan` of plain values (the server, the
tables, the GTID range, the binlog positions to read between, whether to
take the snapshot). The rest runs in one Spark task, :class:`ReadTask`:
:func:`read_rows` reads the snapshot, if asked, in one consistent
transaction (:func:`_snapshot`), then streams the binlog
(:func:`stream_rows`, ``mysql-replication``): a transaction's row events
become the text forms MySQL prints (:func:`read_exactly`,
:func:`_row_changes`), its DDL statements err rows of the tables they touch
(:func:`_apply_query`). The output is :data:`RAW_SCHEMA` rows, which the
decode tasks make typed columns of. What a read yields and why (the
snapshot at the origin and its rewinds, the range, the err rows) is the
module doc of :mod:`~timeshard.storage.mysql_source`.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from timeshard.errors import SourceUnavailable
from timeshard.persist._internal.parts import DIFF, ERR
from timeshard.storage.cdc import raw_batches
from timeshard.storage.mysql_ddl import ALTERED, EVERY_TABLE, ddl_tables
from timeshard.storage.mysql_position import SNAPSHOT_PARTITION, binlog_end, binlog_order
from timeshard.storage.mysql_server import Server, _text, quote
from timeshard.storage.mysql_tables import Table, _schema_change, table_columns
from timeshard.storage.mysql_types import (
    Undecodable,
    binlog_text,
    gtid_frontier,
    incompatibility,
    snapshot_text,
    time2_size,
    time2_value,
)

#: The rows a read task emits: table, partition, offset, diff, error, text values.
RAW_SCHEMA = pa.schema(
    [
        ("_sub", pa.int32()),
        ("_partition", pa.string()),
        ("_offset", pa.int64()),
        (DIFF, pa.int64()),
        (ERR, pa.string()),
        ("_values", pa.list_(pa.string())),
    ]
)
RawRow = tuple[int, str, int, int, str | None, list[str | None] | None]
BATCH_ROWS = 10_000


@dataclass(frozen=True)
class ReadPlan:
    """Plain values: what the read task of one ``read`` needs."""

    server: Server
    tables: tuple[Table, ...]
    lo: dict[str, int]
    hi: dict[str, int]
    first: tuple[str, int]
    until: tuple[str, int]
    snapshot: bool = field(default=False)


@dataclass(frozen=True)
class ReadTask:
    """``mapInArrow`` over ``range(1)``: the snapshot (if any) and the stream, as raw rows."""

    plan: ReadPlan

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if batch.num_rows:
                yield from raw_batches(read_rows(self.plan), RAW_SCHEMA, BATCH_ROWS)


def read_rows(plan: ReadPlan) -> Iterator[RawRow]:
    """The snapshot at ``lo`` (with its rewinds) if asked, then the stream over ``[lo, hi)``."""
    seen: dict[str, int] = {}
    until = plan.until
    if plan.snapshot:
        conn = plan.server.connect(text_only=True)
        try:
            yield from _snapshot(conn, plan, seen)
            with conn.cursor() as cur:
                until = max(until, binlog_end(cur), key=binlog_order)  # rewinds reach the snapshot
        finally:
            conn.close()
    yield from stream_rows(plan, until, seen)


def _snapshot(conn: Any, plan: ReadPlan, seen: dict[str, int]) -> Iterator[RawRow]:
    """Every table in one consistent snapshot, streamed; its GTID frontier goes in ``seen``."""
    from pymysql.cursors import SSCursor

    offset = plan.lo[SNAPSHOT_PARTITION] - 1
    with conn.cursor() as cur:
        # Only REPEATABLE READ takes the read view at START TRANSACTION: under the
        # server's or the session's READ COMMITTED each SELECT would see later commits.
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        try:
            cur.execute(
                "SHOW STATUS WHERE Variable_name IN "
                "('binlog_snapshot_file', 'binlog_snapshot_position')"
            )
            status = {_text(k).lower(): _text(v) for k, v in cur.fetchall()}
            cur.execute(
                "SELECT BINLOG_GTID_POS(%s, %s)",
                (status["binlog_snapshot_file"], int(status["binlog_snapshot_position"])),
            )
            (position,) = cur.fetchone()
            if position is None:
                raise SourceUnavailable(
                    "the MySQL server cannot map the snapshot's binlog position "
                    f"{status['binlog_snapshot_file']}:{status['binlog_snapshot_position']} "
                    "to GTIDs (BINLOG_GTID_POS is NULL)"
                )
            seen.update(gtid_frontier(_text(position)))
            for index, table in enumerate(plan.tables):
                actual = table_columns(conn, plan.server.database, table.name)
                why = _schema_change(table.columns, actual)
                if why is not None:
                    yield (index, SNAPSHOT_PARTITION, offset, 1, f"{table.name}: {why}", None)
                    continue
                select = ", ".join(
                    f"CAST({quote(c.name)} AS DOUBLE)" if c.data_type == "float" else quote(c.name)
                    for c in table.columns
                )
                with conn.cursor(SSCursor) as rows:  # unbuffered: one batch in memory
                    rows.execute(f"SELECT {select} FROM {quote(table.name)}")  # names quoted
                    while batch := rows.fetchmany(BATCH_ROWS):
                        for values in batch:
                            texts = [
                                snapshot_text(v, c)
                                for v, c in zip(values, table.columns, strict=True)
                            ]
                            yield (index, SNAPSHOT_PARTITION, offset, 1, None, texts)
        finally:
            with contextlib.suppress(Exception):  # a read-only transaction: nothing to lose
                cur.execute("COMMIT")


class _Txn:
    def __init__(self, domain: str, seq: int, standalone: bool, wanted: bool) -> None:
        self.domain, self.seq = domain, seq
        self.standalone = standalone  # a DDL statement: its query event is the transaction
        self.wanted = wanted  # emitted or rewound: else its rows are never decoded
        self.rows: list[tuple[int, int, str | None, list[str | None] | None]] = []
        self.errors: set[tuple[int, str]] = set()


def _wanted(plan: ReadPlan, seen: Mapping[str, int], domain: str, seq: int) -> bool:
    """Whether transaction ``domain-seq`` is emitted (in ``[lo, hi)``) or rewound (``< seen``)."""
    if seq < plan.lo.get(domain, 0):
        return False
    return seq < plan.hi.get(domain, 0) or (plan.snapshot and seq < seen.get(domain, 0))


def stream_rows(
    plan: ReadPlan, until: tuple[str, int], seen: Mapping[str, int]
) -> Iterator[RawRow]:
    """The transactions in ``[lo, hi)`` from binlog position ``plan.first`` up to ``until``.

    With a snapshot (``seen`` its GTID frontier), also the inverse of every
    transaction from ``lo`` that the snapshot saw, at the snapshot's offset.
    """
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, XidEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    tables = {t.name: i for i, t in enumerate(plan.tables)}
    reader = BinLogStreamReader(
        connection_settings=plan.server.stream_settings(),
        server_id=random.randrange(1 << 20, 1 << 31),
        blocking=False,
        resume_stream=True,
        log_file=plan.first[0],
        log_pos=plan.first[1],
        # Not is_mariadb: it makes the library ignore log_file/log_pos (and dump from the
        # first file). MariaDB sends its GTID events to a reader with capability 4 anyway.
        only_events=[
            MariadbGtidEvent,
            QueryEvent,
            XidEvent,
            WriteRowsEvent,
            UpdateRowsEvent,
            DeleteRowsEvent,
        ],
        only_schemas=[plan.server.database],  # rows of other tables are skipped undecoded
        only_tables=[t.name for t in plan.tables],
        enable_logging=False,
    )
    txn: _Txn | None = None
    until_key = binlog_order(until)
    try:
        for event in reader:
            if isinstance(event, MariadbGtidEvent):
                if txn is not None:
                    yield from _emit(txn, plan, seen)
                domain, seq = str(event.domain_id), int(event.gtid_seq_no)
                txn = _Txn(domain, seq, event.flags & 1 == 1, _wanted(plan, seen, domain, seq))
            elif txn is None:
                pass
            elif isinstance(event, XidEvent):
                yield from _emit(txn, plan, seen)
                txn = None
            elif isinstance(event, QueryEvent):
                if _text(event.query).strip().upper() == "COMMIT" or txn.standalone:
                    _apply_query(txn, event, plan, tables)
                    yield from _emit(txn, plan, seen)
                    txn = None
                else:
                    _apply_query(txn, event, plan, tables)
            elif txn.wanted and event.schema == plan.server.database and event.table in tables:
                _apply_rows(txn, event, plan, tables[event.table])
            if txn is None and binlog_order((reader.log_file, reader.log_pos)) >= until_key:
                return
        # The server ended the stream early (a transaction cut, or short of ``until``):
        # what is missing is not known to be nothing, so the read is retried.
        at = (reader.log_file, reader.log_pos)
        if txn is not None or at[0] is None or binlog_order(at) < until_key:
            cut = "" if txn is None else f" inside transaction {txn.domain}-{txn.seq}"
            raise SourceUnavailable(
                f"the MySQL binlog stream ended at {at[0]}:{at[1]}{cut}, "
                f"before {until[0]}:{until[1]}"
            )
    except SourceUnavailable:
        raise
    except Exception as e:
        import pymysql

        if isinstance(e, pymysql.err.OperationalError):
            raise SourceUnavailable(f"the MySQL binlog stream failed: {e}") from None
        raise
    finally:
        reader.close()


def _apply_query(txn: _Txn, event: Any, plan: ReadPlan, tables: Mapping[str, int]) -> None:
    """A DDL statement that empties, drops, renames or replaces a source table: an err row."""
    query = _text(event.query).strip()
    if not txn.wanted or query.upper() in ("COMMIT", "BEGIN"):
        return
    for change, database, name in ddl_tables(query, _text(event.schema)):
        if database != plan.server.database:
            continue
        touched = tables.values() if name == EVERY_TABLE else [tables.get(name)]
        what = f"{change} upstream"
        if change == ALTERED:
            what += f" by a statement that may change existing values: {query[:200]}"
        for index in touched:
            if index is not None:
                txn.errors.add((index, f"{plan.tables[index].name}: {what}"))


def _apply_rows(txn: _Txn, event: Any, plan: ReadPlan, index: int) -> None:
    """A row event's changes of table ``index``; a value that does not decode makes the
    table's changes in the transaction one err row (:func:`_emit`), never a failed task."""
    table = plan.tables[index]
    why = incompatibility(table.columns, event.columns)
    if why is not None:
        txn.errors.add((index, f"{table.name}: upstream schema changed: {why}"))
        return
    try:
        txn.rows += _row_changes(event, table, index)
    except ValueError as e:  # Undecodable, UnicodeDecodeError, a date such as 2024-02-30
        detail = e if isinstance(e, Undecodable) else f"{type(e).__name__}: {e}"
        txn.errors.add((index, f"{table.name}: a row event does not decode: {detail}"))


def _undecoded(charset: str) -> str:
    """A codec name no codec has: ``mysql-replication`` then hands a text value's bytes over
    as they are (its ``LookupError`` path), for :func:`charset_text` to decode."""
    return "timeshard-undecoded"


def _charset(column: Any, declared: str | None) -> str | None:
    """The MySQL charset of a table map's column: its collation's (the library's
    ``character_set_name`` is a Python codec it guesses), else the declared one."""
    collation = getattr(column, "collation_name", None)
    if not collation:  # a collation id the library does not know
        return declared
    return "binary" if collation == "binary" else str(collation).split("_")[0].lower()


def read_exactly(event: Any) -> None:
    """Makes the row event (not read yet: the library reads its rows when first asked) hand
    over text as its bytes and read TIME2 as MySQL does.

    The library would decode text with Python's codec of the charset pymysql names, which
    is not MySQL's for several (latin1, utf16, swe7, ...), and its TIME2 reader gets a
    negative time's fraction wrong (``-00:00:00.001`` as ``-00:00:00.999``). Both are
    replaced on this event only.
    """
    event.charset_to_encoding = _undecoded
    event._RowsEvent__read_time2 = lambda column: time2_value(
        event.packet.read(time2_size(column.fsp)), column.fsp
    )


def _row_changes(
    event: Any, table: Table, index: int
) -> list[tuple[int, int, str | None, list[str | None] | None]]:
    """``(table, diff, None, texts)`` of each row of ``event``; raises ``ValueError`` for a
    value that does not decode."""
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent

    sets = {c.name: getattr(c, "set_values", None) for c in event.columns}
    declared = {c.name: c.charset for c in table.columns}
    charsets = {c.name: _charset(c, declared.get(c.name)) for c in event.columns}
    read_exactly(event)

    def texts(values: Mapping[str, Any], nones: Mapping[str, str]) -> list[str | None]:
        return [
            binlog_text(
                values.get(c.name), c, nones.get(c.name), sets.get(c.name), charsets.get(c.name)
            )
            for c in table.columns
        ]

    out: list[tuple[int, int, str | None, list[str | None] | None]] = []
    for row in event.rows:
        if isinstance(event, UpdateRowsEvent):
            out.append((index, -1, None, texts(row["before_values"], row["before_none_sources"])))
            out.append((index, 1, None, texts(row["after_values"], row["after_none_sources"])))
        elif isinstance(event, DeleteRowsEvent):
            out.append((index, -1, None, texts(row["values"], row["none_sources"])))
        else:
            out.append((index, 1, None, texts(row["values"], row["none_sources"])))
    return out


def _emit(txn: _Txn, plan: ReadPlan, seen: Mapping[str, int]) -> Iterator[RawRow]:
    d, seq = txn.domain, txn.seq
    if seq < plan.lo.get(d, 0):
        return  # before the range (the file starts earlier)
    errored = {index for index, _ in txn.errors}
    rows = [r for r in txn.rows if r[0] not in errored]
    if seq < plan.hi.get(d, 0):
        for index, why in sorted(txn.errors):
            yield (index, d, seq, 1, f"{why} at GTID {d}-{seq}", None)
        for index, diff, err, values in rows:
            yield (index, d, seq, diff, err, values)
    if plan.snapshot and seq < seen.get(d, 0):
        offset = plan.lo[SNAPSHOT_PARTITION] - 1
        # What cannot be rewound (a truncate, a drop, an undecodable row the snapshot has
        # the effect of) makes the table's state at lo an error too.
        for index, why in sorted(txn.errors):
            yield (index, SNAPSHOT_PARTITION, offset, 1, f"{why} at GTID {d}-{seq}", None)
        for index, diff, err, values in rows:  # the snapshot has these: take them back to lo
            yield (index, SNAPSHOT_PARTITION, offset, -diff, err, values)


__all__ = [
    "BATCH_ROWS",
    "RAW_SCHEMA",
    "RawRow",
    "ReadPlan",
    "ReadTask",
    "read_exactly",
    "read_rows",
    "stream_rows",
]
