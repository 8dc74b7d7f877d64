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

Runs on the driver: the constructor, ``upper`` and ``read``'s planning;
in Spark tasks: :class:`ReadTask` (snapshot and stream) and
:class:`DecodeTask` (text forms to typed columns).
"""

from __future__ import annotations

import contextlib
import os
import random
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import pyarrow as pa

from timeshard.errors import InvalidUsage, SourceUnavailable
from timeshard.persist._internal.parts import DIFF, ERR
from timeshard.storage.cdc import DecodeTask, raw_batches
from timeshard.storage.mysql_ddl import ALTERED, EVERY_TABLE, ddl_tables
from timeshard.storage.mysql_types import (
    CHARSETS,
    Column,
    Undecodable,
    binlog_text,
    column_from_schema,
    covers,
    decode_text,
    gtid_frontier,
    incompatibility,
    snapshot_text,
    time2_size,
    time2_value,
)
from timeshard.storage.reclock import SourceFrontier, join_frontiers

#: The partition of the snapshot's records (every frontier has it, at least at 1).
SNAPSHOT_PARTITION = "0"
_IDENT = re.compile(r"[^\x00]{1,64}")
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
#: How many binlog positions of its earlier reads a source remembers (to start near).
CHECKPOINTS = 8
#: The longest ``connect_timeout_s`` (pymysql's bound: a year).
MAX_CONNECT_TIMEOUT_S = 31_536_000
#: Settings every session of the source uses (timestamps print in UTC).
SESSION_INIT = "SET time_zone = '+00:00'"
#: What the server must be configured with, and the value.
REQUIRED_SETTINGS = {
    "binlog_format": "ROW",
    "binlog_row_image": "FULL",
    "binlog_row_metadata": "FULL",
    "gtid_strict_mode": "1",
    "log_bin": "1",
}


def quote(identifier: str) -> str:
    """A table or column name in backticks, a backtick in it doubled (an empty name, one
    longer than 64 characters or holding NUL, which no MySQL name is, is refused)."""
    if not isinstance(identifier, str) or not _IDENT.fullmatch(identifier):
        raise InvalidUsage(f"not a MySQL identifier this source reads: {identifier!r}")
    return "`" + identifier.replace("`", "``") + "`"


def redact(url: object) -> object:
    """A URL with its password shown as ``***`` (anything else unchanged)."""
    if not isinstance(url, str):
        return url
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "<an unparsable url>"
    if password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{user}:***@{host}").geturl()


def binlog_order(position: tuple[str, int]) -> tuple[int, str, int]:
    """A sort key of binlog positions: the file's numeric suffix, then the offset in it.

    File names compare by number, not as strings (``binlog.999999`` precedes
    ``binlog.1000000``).
    """
    name, offset = position
    suffix = name.rpartition(".")[2]
    return (int(suffix) if suffix.isdigit() else -1, name, offset)


def _env_password() -> str:
    """The password of ``MYSQL_PWD`` (read on the driver; tasks get the Server's), or ""."""
    return os.environ.get("MYSQL_PWD", "")


@dataclass(frozen=True)
class Server:
    """Where the server is: plain values a Spark task can connect with."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    database: str
    connect_timeout_s: int = 10

    @classmethod
    def from_url(cls, url: str, connect_timeout_s: int = 10) -> Server:
        """``mysql://user[:password]@host:port/database``.

        A URL without a password takes it from ``MYSQL_PWD``, as MySQL's own
        clients do (a catalog keeps the URL, so an SQL statement's URL should
        hold none); with neither, the account is one without a password.
        """
        if (
            isinstance(connect_timeout_s, bool)
            or not isinstance(connect_timeout_s, int)
            or not 0 < connect_timeout_s <= MAX_CONNECT_TIMEOUT_S
        ):
            raise InvalidUsage(
                "MYSQL connect_timeout_s must be a whole number of seconds in "
                f"[1, {MAX_CONNECT_TIMEOUT_S}], got {connect_timeout_s!r}"
            )
        try:
            parts = urlsplit(url) if isinstance(url, str) else None
            port = None if parts is None else parts.port
        except ValueError as e:  # a port that is no number or above 65535, a bad IPv6 host
            raise InvalidUsage(f"url {redact(url)!r} is not a MySQL URL: {e}") from None
        if parts is None or parts.scheme not in ("mysql", "mariadb") or not parts.hostname:
            raise InvalidUsage(
                f"url must be mysql://user:password@host:port/database, got {redact(url)!r}"
            )
        if port == 0:
            raise InvalidUsage(f"url {redact(url)!r} has port 0, which no server listens on")
        if parts.query or parts.fragment or url.endswith(("?", "#")):
            raise InvalidUsage(
                f"url {redact(url)!r} has a query string or fragment, which the MYSQL source "
                "does not read (nothing after the database is an option)"
            )
        database = unquote(parts.path.lstrip("/"))
        if not database:
            raise InvalidUsage(f"url {redact(url)!r} names no database")
        quote(database)
        return cls(
            parts.hostname,
            port or 3306,
            unquote(parts.username or "root"),
            unquote(parts.password) if parts.password is not None else _env_password(),
            database,
            connect_timeout_s,
        )

    def connect(self, *, text_only: bool = False) -> Any:
        """A pymysql connection (autocommit, UTC); unreachable: ``SourceUnavailable``."""
        import pymysql
        from pymysql.converters import conversions

        # Text only: the encoders (Python types) stay, the decoders (field type codes) go.
        encoders_only = {k: v for k, v in conversions.items() if not isinstance(k, int)}
        try:
            return pymysql.connect(
                host=self.host,
                port=self.port,
                user=self.user,
                password=self.password,
                database=self.database,
                autocommit=True,
                charset="utf8mb4",
                connect_timeout=self.connect_timeout_s,
                init_command=SESSION_INIT,
                **({"conv": encoders_only} if text_only else {}),
            )
        except pymysql.err.OperationalError as e:
            raise SourceUnavailable(
                f"MySQL server {self.host}:{self.port} is unreachable: {e}"
            ) from None

    def stream_settings(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "connect_timeout": self.connect_timeout_s,
        }


@dataclass(frozen=True)
class Table:
    """A table of the database: its name (the subsource's) and its columns."""

    name: str
    columns: tuple[Column, ...]

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.arrow_type()) for c in self.columns])


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


def _refuse_cascades(source: str, conn: Any, database: str, names: Sequence[str]) -> None:
    """Raises ``InvalidUsage`` for a table that is the child of a foreign key with ``ON
    DELETE|UPDATE CASCADE|SET NULL|SET DEFAULT``: InnoDB applies those itself, and the
    binlog has no row events of the child's changes."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_NAME, CONSTRAINT_NAME, DELETE_RULE, UPDATE_RULE "
            "FROM information_schema.REFERENTIAL_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = %s "
            "ORDER BY TABLE_NAME, CONSTRAINT_NAME",
            (database,),
        )
        rows = [tuple(_text(v) for v in r) for r in cur.fetchall()]
    for table, constraint, on_delete, on_update in rows:
        actions = [
            f"ON {event} {rule}"
            for event, rule in (("DELETE", on_delete), ("UPDATE", on_update))
            if rule.upper() in ("CASCADE", "SET NULL", "SET DEFAULT")
        ]
        if table in names and actions:
            raise InvalidUsage(
                f"MYSQL source {source!r}: table {table!r} is the child of foreign key "
                f"constraint {constraint!r} with {' and '.join(actions)}, whose changes of "
                "its rows are not in the binlog: leave the table out of tables, or make the "
                "constraint RESTRICT or NO ACTION"
            )


def table_columns(conn: Any, database: str, table: str) -> tuple[Column, ...]:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE, "
            "DATETIME_PRECISION, CHARACTER_SET_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (database, table),
        )
        rows = cur.fetchall()
    out = []
    for row in rows:
        name, data_type, column_type, precision, scale, fsp, charset = (
            None if v is None else _text(v) for v in row
        )
        assert name is not None and data_type is not None and column_type is not None, row
        out.append(
            column_from_schema(
                name,
                data_type,
                column_type,
                None if precision is None else int(precision),
                None if scale is None else int(scale),
                None if fsp is None else int(fsp),
                charset,
            )
        )
    return tuple(out)


# -- what the task runs --------------------------------------------------------------------


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


def binlog_end(cur: Any) -> tuple[str, int]:
    """The binlog's end now: (file, position)."""
    cur.execute("SHOW MASTER STATUS")
    status = cur.fetchone()
    if status is None:
        raise SourceUnavailable("the MySQL server has no binlog (log_bin is off)")
    return (_text(status[0]), int(status[1]))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def current_frontier(cur: Any) -> dict[str, int]:
    """``@@gtid_binlog_pos`` as a frontier, joined with the snapshot partition's ``{"0": 1}``."""
    cur.execute("SELECT @@gtid_binlog_pos")
    (position,) = cur.fetchone()
    return join_frontiers({SNAPSHOT_PARTITION: 1}, gtid_frontier(_text(position or "")))


def check_not_behind(
    source: str, now: Mapping[str, int], before: Mapping[str, int], what: str
) -> None:
    """Raises a definite ``SourceUnavailable`` if ``now`` is below ``before`` in a domain.

    After ``RESET MASTER``, a restore or a failover to a server with lower
    sequence numbers, new transactions would reuse offsets the source has
    passed: they would be skipped, so the source stops instead.
    """
    behind = {d: (now.get(d, 0), seq) for d, seq in before.items() if now.get(d, 0) < seq}
    if behind:
        detail = ", ".join(
            f"domain {d} is at {have} (next sequence number), {what} needs {need}"
            for d, (have, need) in sorted(behind.items())
        )
        raise SourceUnavailable(
            f"MYSQL source {source!r}: the upstream GTID position went backwards: {detail} "
            "(RESET MASTER, a restore or a failover?): transactions would be skipped",
            definite=True,
        )


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


def _schema_change(declared: Sequence[Column], actual: Sequence[Column]) -> str | None:
    by_name = {c.name: c for c in actual}
    for column in declared:
        now = by_name.get(column.name)
        if now is None:
            return f"upstream schema changed: column {column.name!r} was dropped"
        if now != column:
            return f"upstream schema changed: column {column.name!r} changed type"
    names = [c.name for c in declared]
    if [c.name for c in actual][: len(names)] != names:
        return f"upstream schema changed: its columns are no longer in the order {names}"
    return None


def start_position(
    cur: Any,
    lo: Mapping[str, int],
    checkpoints: Sequence[tuple[tuple[str, int], Mapping[str, int]]] = (),
) -> tuple[str, int]:
    """The latest binlog position known to precede every transaction from ``lo`` on.

    A position an earlier read stopped at (``checkpoints``), if its file is
    still there and its GTID frontier is at or below ``lo``; else the start
    of the newest file whose first GTID frontier is (``BINLOG_GTID_POS(file, 4)``).
    """
    cur.execute("SHOW BINARY LOGS")
    files = [_text(r[0]) for r in cur.fetchall()]
    for at, frontier in reversed(checkpoints):
        if at[0] in files and covers(frontier, lo):
            return at
    for name in reversed(files):
        cur.execute("SELECT BINLOG_GTID_POS(%s, 4)", (name,))
        (position,) = cur.fetchone()
        # NULL is "not found" (unknown), not the empty position "": skip the file.
        if position is not None and covers(gtid_frontier(_text(position)), lo):
            return (name, 4)
    raise SourceUnavailable(
        f"the MySQL binlog from GTID frontier {dict(lo)} was purged (the oldest file is "
        f"{files[0] if files else None!r}): the changes since the resumption frontier are lost",
        definite=True,
    )


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


__all__ = ["MySqlSource", "ReadPlan", "Server", "Table", "quote"]
