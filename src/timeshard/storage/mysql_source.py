"""MYSQL sources: the tables of a MariaDB database, by its row-based GTID binlog.

Each table of the database (or of the ``tables`` named) is a subsource with
its own output shard ``<source>.<table>``. Its columns are the table's,
typed as :mod:`timeshard.storage.mysql_types` says, plus ``_diff``: an
insert is the new row at +1, a delete the old row at -1, an update both. The
server must log whole rows with their column names (``binlog_format=ROW``,
``binlog_row_image=FULL``, ``binlog_row_metadata=FULL``) and keep sequence
numbers in order per domain (``gtid_strict_mode=ON``); the constructor
refuses a server that does not, naming the setting, and one whose binlog
filters (``binlog-do-db``, ``binlog-ignore-db``) leave the database out. A session may still set
its own ``binlog_row_image``: a row event without every column makes the
table's changes in its transaction one err row naming it.

FromTime is the GTID position. Each replication domain is a partition (its
id as a string) and a transaction's offset is its GTID's sequence number,
so all changes of a transaction share one offset and reclock to one time.
``upper()`` is ``@@gtid_binlog_pos`` (``{domain: seq + 1}``) joined with
``{"0": 1}``, so that a source frontier is never empty: a domain that
appears later starts at 0, as a new Kafka partition does. A position that
goes backwards (``RESET MASTER``, a restore, a failover to a server with
lower sequence numbers) would reuse offsets the source has passed: ``upper``
(below an earlier upper of the instance or the bindings the ingestion
resumed it at, :meth:`MySqlSource.resume`) and ``read`` (below the read's
range) raise a definite ``SourceUnavailable`` naming the domain.

The snapshot. Its point ``C`` is the *origin*: the first binding of the
source's remap shard, which the ingestion passes to :meth:`MySqlSource.read`
(``reads_from_origin``); it is durable and the same for every instance and
every retry. The tables' contents at ``C`` are the records at partition
``"0"``, offset ``C["0"] - 1``, which the first binding covers and no
earlier one does. A read from the empty frontier takes them, in one Spark
task: it opens ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` (in REPEATABLE
READ, whatever the server's default: only that level takes one read view), whose binlog
position (``binlog_snapshot_file``/``_position``, mapped to GTIDs with
``BINLOG_GTID_POS``) is the snapshot's GTID position ``S >= C``, reads every
table in that transaction, then streams the binlog from ``C`` and emits, at
the snapshot's offset, the inverse of every transaction below ``S``
(*rewinds*). Snapshot plus rewinds is the state at ``C`` whatever ``S`` was,
so a retried first read yields the same updates. A transaction below ``S``
that cannot be rewound -- a statement that truncates, drops, renames,
replaces or alters a table, rows that do not decode -- puts its err rows at
the snapshot's offset too (and again at its own), so the table is in error
from ``C`` on. Afterwards the resumption
frontier is past ``C`` and no snapshot is taken again.

The stream. One Spark task reads the binlog (``mysql-replication``, by file
and position) from a position known to precede every transaction from the
read's start -- where an earlier read of this instance stopped, if its GTID
frontier is at or below the start, else the newest binlog file whose first
GTID frontier is (``BINLOG_GTID_POS(file, 4)``) -- up to the binlog's end as
it was after ``end`` was minted (after the snapshot, if one is taken), and
emits the transactions whose sequence number is in ``[start[d], end[d])``
for their domain ``d``. Where it starts changes how much it reads, never
what it emits; a transaction outside that range (and not rewound) has its
rows skipped undecoded. A stream the server ends before that binlog end,
or inside a transaction, emits nothing of the cut transaction and raises a
non-definite ``SourceUnavailable``: the step is retried. Binlog positions
compare by the file name's numeric suffix. Each task registers with a
random server id, so instances never displace each other's dump threads.

Binlog retention plays the role of a slot: nothing upstream records the
source's progress, so :meth:`MySqlSource.commit` and
:meth:`MySqlSource.drop` do nothing (the source creates nothing on the
server). If the binlog the resumption frontier needs was purged, the read
raises :class:`~timeshard.errors.SourceUnavailable` as definite: nothing is
skipped.

Errors. A value the stored type cannot hold (a zero date) makes its row an
err row, for that table only. A binlog value that does not decode at all (a
date such as ``2024-02-30`` under ``ALLOW_INVALID_DATES``, bytes that are no
text in their charset) makes the table's changes in its transaction one err
row. Text is decoded from its bytes as MySQL does
(:func:`~timeshard.storage.mysql_types.charset_text`); the constructor
refuses a column whose character set is not one it decodes exactly, naming
table, column and charset. Changes of a table upstream are definite
errors of that subsource, while the other tables go on: a dropped,
retyped or moved column makes each later transaction touching the table an
err row (its row events' table maps show the change), and a statement that
truncates, drops, renames or replaces it, or an ``ALTER TABLE`` that does
more than add columns at the end or change indexes, keys, constraints or
partitioning (it may change existing values with no row event: a column
dropped and added again, columns swapped, ``varchar`` made ``char``), parsed
by :mod:`timeshard.storage.mysql_ddl`, is one err row at its transaction,
naming the change; the err row is never retracted, so the subsource stays
errored. A build takes each table's columns from upstream, unless
:meth:`MySqlSource.pin_recorded` holds it to those the catalog recorded
when the source was first built (a restart, or a first read retried by
another process, after the table was altered, keeps its output schema and
errs the table as above). Only InnoDB tables are read (the consistent snapshot covers no
other engine): the constructor refuses others, naming them, and refuses the
child table of a foreign key that cascades (``ON DELETE|UPDATE CASCADE``,
``SET NULL``, ``SET DEFAULT``: InnoDB logs no row events of what it does to
the child), naming the constraint. Faults are not
data: an unreachable server raises ``SourceUnavailable``.

Runs on the driver: :class:`MySqlSource` (the constructor, ``upper`` and
``read``'s planning); in Spark tasks: the read task of
:mod:`~timeshard.storage.mysql_read` (snapshot and stream) and
:class:`~timeshard.storage.cdc.DecodeTask` (text forms to typed columns).
Where the server is and how a session connects to it is
:mod:`~timeshard.storage.mysql_server`; GTID frontiers and binlog positions
are :mod:`~timeshard.storage.mysql_position`; the tables as
``information_schema`` describes them are
:mod:`~timeshard.storage.mysql_tables`. Their public names are importable
from here too.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage
from timeshard.persist._internal.parts import DIFF, ERR
from timeshard.storage.cdc import DecodeTask
from timeshard.storage.mysql_position import (
    SNAPSHOT_PARTITION,
    binlog_end,
    binlog_order,
    check_not_behind,
    current_frontier,
    start_position,
)
from timeshard.storage.mysql_read import (
    BATCH_ROWS,
    RAW_SCHEMA,
    RawRow,
    ReadPlan,
    ReadTask,
    read_exactly,
    read_rows,
    stream_rows,
)
from timeshard.storage.mysql_server import (
    MAX_CONNECT_TIMEOUT_S,
    SESSION_INIT,
    Server,
    _text,
    quote,
    redact,
)
from timeshard.storage.mysql_tables import Table, _refuse_cascades, table_columns
from timeshard.storage.mysql_types import CHARSETS, Column, Undecodable, decode_text, gtid_frontier
from timeshard.storage.reclock import SourceFrontier, join_frontiers

#: How many binlog positions of its earlier reads a source remembers (to start near).
CHECKPOINTS = 8
#: What the server must be configured with, and the value.
REQUIRED_SETTINGS = {
    "binlog_format": "ROW",
    "binlog_row_image": "FULL",
    "binlog_row_metadata": "FULL",
    "gtid_strict_mode": "1",
    "log_bin": "1",
}


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


class MySqlSource:
    """The tables of a MariaDB database, by its GTID binlog (module doc)."""

    #: One upstream every instance sees, whose upper never moves back: an upper below the
    #: offsets already bound means the upstream lost them (``Ingestion`` stalls on it).
    shared_upper = True

    #: The ingestion passes the first binding as ``origin`` (the snapshot's point).
    reads_from_origin = True

    def __init__(
        self,
        name: str,
        url: str,
        *,
        tables: Sequence[str] | None = None,
        connect_timeout_s: int = 10,
    ) -> None:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.=-]{1,100}", name):
            raise InvalidUsage(f"MYSQL source name must be 1-100 of [A-Za-z0-9_.=-], got {name!r}")
        if tables is not None and (
            not isinstance(tables, list | tuple)
            or not tables
            or not all(isinstance(t, str) for t in tables)
        ):
            raise InvalidUsage(
                f"MYSQL source {name!r}: tables must be a non-empty list of table names, "
                f"got {tables!r}"
            )
        self.name = name
        self.server = Server.from_url(url, connect_timeout_s)
        #: Binlog positions this instance read up to, with their GTID frontiers.
        self._checkpoints: list[tuple[tuple[str, int], dict[str, int]]] = []
        #: The greatest frontier ``upper`` returned: the server's position may not go below it.
        self._upper: dict[str, int] = {}
        with contextlib.closing(self.server.connect()) as conn:
            self._check_settings(conn)
            self.tables = self._tables(conn, tables)

    # -- the Source protocol ---------------------------------------------------------------

    def outputs(self) -> dict[str, pa.Schema]:
        return {
            t.name: pa.schema([*t.arrow_schema(), pa.field(DIFF, pa.int64())]) for t in self.tables
        }

    def payload_schema(self) -> pa.Schema:
        raise InvalidUsage(f"MYSQL source {self.name!r} has subsources: use outputs()")

    def tick(self) -> None:
        return None

    def resume(self, bound: SourceFrontier) -> None:
        """The durable bindings reached ``bound``: ``upper`` may not go below it."""
        self._upper = join_frontiers(self._upper, bound)

    def upper(self) -> SourceFrontier:
        """``@@gtid_binlog_pos`` as a frontier; one below an earlier one is a definite error."""
        with contextlib.closing(self.server.connect()) as conn, conn.cursor() as cur:
            now = current_frontier(cur)
        check_not_behind(self.name, now, self._upper, "an earlier upper")
        self._upper = join_frontiers(self._upper, now)
        return now

    def read(
        self,
        spark: Any,
        start: SourceFrontier,
        end: SourceFrontier,
        origin: SourceFrontier | None = None,
    ) -> dict[str, Any]:
        """One DataFrame per table, of the changes with offsets in ``[start, end)``.

        A read from the empty frontier starts at ``origin`` (the first
        binding) and includes the snapshot. Runs one Spark job (the read
        task, checkpointed) before it returns.
        """
        from pyspark.sql import functions as F

        from timeshard.spark.session import arrow_to_spark_schema

        snapshot = not any(start.values())
        lo = dict(start)
        if snapshot:
            if not origin or origin.get(SNAPSHOT_PARTITION, 0) < 1:
                raise InvalidUsage(
                    f"MYSQL source {self.name!r}: a read from the start needs the origin "
                    f"(the first binding, with partition {SNAPSHOT_PARTITION!r}), got {origin!r}"
                )
            lo = dict(origin)
        with contextlib.closing(self.server.connect(text_only=True)) as conn, conn.cursor() as cur:
            until = binlog_end(cur)  # after the mint of ``end``: the stream stops here
            # On the driver: a position gone backwards or a purged binlog is a definite fault.
            check_not_behind(
                self.name, current_frontier(cur), join_frontiers(lo, end), "the read's range"
            )
            first = start_position(cur, lo, self._checkpoints)
            cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", until)
            (position,) = cur.fetchone()
        plan = ReadPlan(
            self.server,
            tuple(self.tables),
            lo=lo,
            hi=dict(end),
            first=first,
            until=until,
            snapshot=snapshot,
        )
        raw = (
            spark.range(0, 1, 1, 1)
            .mapInArrow(ReadTask(plan), arrow_to_spark_schema(RAW_SCHEMA))
            .localCheckpoint(eager=True)
        )
        if position is not None:  # NULL: the server cannot map it to GTIDs (no checkpoint)
            checkpoint = (until, gtid_frontier(_text(position)))
            self._checkpoints = [*self._checkpoints[-(CHECKPOINTS - 1) :], checkpoint]
        frames = {}
        for i, table in enumerate(self.tables):
            out = frame_schema(table)
            frames[table.name] = raw.where(F.col("_sub") == i).mapInArrow(
                DecodeTask(
                    table.name,
                    table.columns,
                    out.serialize().to_pybytes(),
                    decode_text,
                    (Undecodable,),
                ),
                arrow_to_spark_schema(out),
            )
        return frames

    def commit(self, frontier: SourceFrontier) -> None:
        """Nothing: the server keeps no progress for the source (binlog retention is the DBA's)."""
        return None

    def close(self) -> None:
        return None

    def drop(self) -> None:
        """Nothing: the source created nothing on the server."""
        return None

    def recorded_columns(self) -> dict[str, list[list[Any]]]:
        """Per table, its columns as ``[name, data type, unsigned, precision, scale, fsp,
        length, charset]`` lists: what the catalog records for :meth:`pin_recorded`."""
        return {
            t.name: [
                [c.name, c.data_type, c.unsigned, c.precision, c.scale, c.fsp, c.length, c.charset]
                for c in t.columns
            ]
            for t in self.tables
        }

    def pin_recorded(self, options: Mapping[str, Any]) -> None:
        """Hold each table to the columns the catalog recorded for it
        (``options["table_columns"]``, :meth:`recorded_columns`), not those it has upstream now.

        Built again (a restart, a first read retried by a new process) after a table was
        altered upstream, the source would otherwise take the new columns: an output
        schema other than the shard's, or rows of the new shape read as the old. Pinned,
        columns added at the end are left out, and the change of a recorded one is an err
        row (the snapshot's or the ALTER's). A table the record does not name takes its
        columns from upstream.
        """
        columns = options.get("table_columns")
        if isinstance(columns, Mapping):
            self.tables = [_with_recorded_columns(t, columns.get(t.name)) for t in self.tables]

    # -- the server, on the driver ---------------------------------------------------------

    def _check_settings(self, conn: Any) -> None:
        with conn.cursor() as cur:
            names = list(REQUIRED_SETTINGS)
            cur.execute("SELECT " + ", ".join(f"@@GLOBAL.{n}" for n in names))
            values = cur.fetchone()
            cur.execute("SHOW MASTER STATUS")  # File, Position, Binlog_Do_DB, Binlog_Ignore_DB
            status = cur.fetchone()
        for setting, value in zip(names, values, strict=True):
            want = REQUIRED_SETTINGS[setting]
            if str(value).upper() not in (want, "ON" if want == "1" else want):
                raise InvalidUsage(
                    f"MYSQL source {self.name!r}: the server needs {setting}={want} "
                    f"(it has {value!r}): set it in the server's configuration"
                )
        if status is not None:
            self._check_binlog_filters(_text(status[2] or ""), _text(status[3] or ""))

    def _check_binlog_filters(self, do_db: str, ignore_db: str) -> None:
        """Refuses a server whose ``binlog-do-db``/``binlog-ignore-db`` leave the source's
        database out: its changes would never be in the binlog."""
        database = self.server.database
        if database in ignore_db.split(","):
            raise InvalidUsage(
                f"MYSQL source {self.name!r}: the server's binlog leaves database "
                f"{database!r} out (Binlog_Ignore_DB is {ignore_db!r}): its changes are "
                "never logged; remove it from the server's binlog-ignore-db"
            )
        if do_db and database not in do_db.split(","):
            raise InvalidUsage(
                f"MYSQL source {self.name!r}: the server's binlog logs only databases "
                f"{do_db!r} (Binlog_Do_DB), not {database!r}: its changes are never logged; "
                "add it to the server's binlog-do-db"
            )

    def _tables(self, conn: Any, only: Sequence[str] | None) -> list[Table]:
        database = self.server.database
        with conn.cursor() as cur:
            cur.execute(
                "SELECT TABLE_NAME, ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                "AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME",
                (database,),
            )
            engines = {_text(r[0]): None if r[1] is None else _text(r[1]) for r in cur.fetchall()}
        names = list(engines)
        if only is not None:
            unknown = [t for t in only if t not in names]
            if unknown:
                raise InvalidUsage(
                    f"MYSQL source {self.name!r}: tables {unknown} are not in database "
                    f"{database!r}, which has {names}"
                )
            names = [n for n in names if n in only]
        if not names:
            raise InvalidUsage(f"MYSQL source {self.name!r}: database {database!r} has no tables")
        _refuse_cascades(self.name, conn, database, names)
        tables = []
        for name in names:
            quote(name)
            if (engines[name] or "").upper() != "INNODB":
                raise InvalidUsage(
                    f"MYSQL source {self.name!r}: table {name!r} uses engine {engines[name]!r}; "
                    "only InnoDB tables can be read (the consistent snapshot covers no other)"
                )
            columns = table_columns(conn, database, name)
            for c in columns:
                quote(c.name)  # every read names it: refused here, never in a read task
            reserved = [c.name for c in columns if c.name.startswith("_")]
            if reserved:
                raise InvalidUsage(f"table {name}: columns {reserved} start with '_' (reserved)")
            for c in columns:
                if c.charset is not None and c.charset not in CHARSETS:
                    raise InvalidUsage(
                        f"MYSQL source {self.name!r}: table {name!r} column {c.name!r} has "
                        f"character set {c.charset!r}, which the source cannot decode from the "
                        f"binlog exactly (it decodes {sorted(CHARSETS)})"
                    )
            tables.append(Table(name, columns))
        return tables


def _with_recorded_columns(table: Table, recorded: Any) -> Table:
    """``table`` with the columns a catalog entry recorded for it (None: as it is)."""
    if recorded is None:
        return table
    shape = (str, str, bool, (int, None), (int, None), int, (int, None), (str, None))

    def fits(value: Any, kind: Any) -> bool:
        kinds = kind if isinstance(kind, tuple) else (kind,)
        return any(
            value is None
            if k is None
            else isinstance(value, k) and (k is bool or not isinstance(value, bool))
            for k in kinds
        )

    if not isinstance(recorded, list) or not all(
        isinstance(c, list)
        and len(c) == len(shape)
        and all(fits(v, k) for v, k in zip(c, shape, strict=True))
        for c in recorded
    ):
        raise InvalidUsage(
            f"the recorded columns of {table.name!r} are not [name, data type, unsigned, "
            f"precision, scale, fsp, length, charset] lists: {recorded!r}"
        )
    return Table(table.name, tuple(Column(*c) for c in recorded))


__all__ = [
    "CHECKPOINTS",
    "REQUIRED_SETTINGS",
    "MySqlSource",
    "ReadPlan",
    "Server",
    "Table",
    "frame_schema",
    "quote",
    # Defined in mysql_server, mysql_position, mysql_tables and mysql_read, importable
    # from here as before.
    "BATCH_ROWS",
    "MAX_CONNECT_TIMEOUT_S",
    "RAW_SCHEMA",
    "SESSION_INIT",
    "SNAPSHOT_PARTITION",
    "RawRow",
    "ReadTask",
    "binlog_end",
    "binlog_order",
    "check_not_behind",
    "current_frontier",
    "read_exactly",
    "read_rows",
    "redact",
    "start_position",
    "stream_rows",
    "table_columns",
]
