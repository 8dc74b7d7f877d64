"""The PostgreSQL wire protocol in front of an :class:`~timeshard.server.engine.Engine`.

``psql``, psycopg and any PostgreSQL driver connect to it. The messages are
encoded and decoded by pygwire (a sans-I/O codec of protocol 3.0 with its
state machine); this module does the I/O, one thread per connection, and
maps statements to messages:

* the simple query protocol (``Query``), several statements per message;
* the extended protocol (``Parse``/``Bind``/``Describe``/``Execute``/``Sync``)
  with parameters in text, or in binary for the integer, float, boolean,
  numeric, text, json, time, interval and bytea types drivers send that way, which
  :func:`~timeshard.server.statements.bind` turns into literals of their
  declared types (bytea a BINARY; json and jsonb, which Spark has no type of,
  strings); a statement's ``Describe`` answers the columns of its
  rows (``RowDescription``) without running it, as PostgreSQL does; a
  portal's statement runs when it is described or first executed, and
  ``Execute`` with a row limit suspends it (the next goes on); a portal is closed by ``Close``,
  a ``Bind`` of its name, the ``Sync`` that ends its implicit transaction
  (outside a transaction block), a simple query (the unnamed portal) and
  the connection's end -- a SUBSCRIBE's with its reader, a query's with its
  readers (no Spark job of it runs again);
* a query's rows are sent as Spark makes them, one partition of the result at a
  time (:class:`~timeshard.server.rows.QueryRows`), never collected whole: a
  suspended portal or a query cursor takes the rows it sends (and one more, to
  know whether any is left), and runs the Spark job of a partition when its
  rows are taken;
* ``SUBSCRIBE`` (bare, or ``COPY (SUBSCRIBE ...) TO STDOUT``) as COPY OUT in
  text format: ``mz_timestamp``, ``mz_diff`` and the columns, one line per
  row, until its frontier reaches ``UP TO`` (exclusive), the client cancels
  (``CancelRequest``, psql's Ctrl-C), sends ``CopyFail``, or ``Terminate`` or
  closes the connection (looked for at every row and heartbeat); messages pipelined
  behind it (a ``Sync``) are answered after it, as PostgreSQL does;
* cursors, as Materialize has them: ``DECLARE c CURSOR FOR {SUBSCRIBE ... |
  query}`` in a transaction block (or a message of several statements, an
  implicit one) runs the statement and keeps its rows in the session;
  ``FETCH [n | ALL] c [WITH (TIMEOUT = t)]`` answers them as a query's rows.
  A cursor scans forward only: a backward FETCH (``BACKWARD``, ``PRIOR``, a
  negative count) is refused with 55000, as PostgreSQL refuses it on a ``NO
  SCROLL`` cursor, and ``FETCH 0`` takes no row, as Materialize's (re-fetching
  the current row would need a step back). A query cursor answers PostgreSQL's
  ``ABSOLUTE n`` (``FIRST``) to a row past its place and ``RELATIVE n`` forward
  as a ``NO SCROLL`` cursor does, and refuses the moves that need a step back
  (``LAST``, ``RELATIVE 0`` on a row, an earlier row) with 55000; a SUBSCRIBE
  cursor, whose rows come over time, refuses them all (0A000).
  A SUBSCRIBE cursor's FETCH waits for a first row (at most ``t``, checked
  at each heartbeat of the SUBSCRIBE, about every 0.5 s), then takes the
  rows that are ready, up to ``n``: those before its next heartbeat.
  ``CLOSE``, COMMIT, ROLLBACK and the connection's end close cursors; a
  closed SUBSCRIBE expires its reader, whether a FETCH started it or not.
  A ``Describe`` of a portal named as a cursor describes the
  cursor (psycopg's named cursors);
* a ``CancelRequest`` cancels the statement its connection runs: a query's
  Spark jobs (each connection's queries run under a job tag of its own, so
  only its jobs stop), a SUBSCRIBE, a waiting FETCH, a CREATE SOURCE, SINK or
  MATERIALIZED VIEW until its object is added (undone as a failed CREATE is;
  once added it answers as done); the client gets 57014 and the connection stays usable.
  A cancel that comes while the connection is idle does nothing. A client
  that goes away while its query runs cancels it the same way;
* ``SET statement_timeout`` (``SET LOCAL`` for a transaction block, ``RESET``,
  ``SHOW``): a query (a SELECT, its Describe or Execute of a
  portal, a query cursor's FETCH) still running that long after its Spark work
  started, or a CREATE SOURCE, SINK or MATERIALIZED VIEW that long after it
  started (until its object is added), is canceled as a CancelRequest cancels
  it, with 57014 ``canceling statement due to statement timeout``. A SUBSCRIBE,
  and a SUBSCRIBE cursor's FETCH (which has its TIMEOUT), run on, as Materialize's;
* prepared statements: a ``Parse`` of a named statement that exists is refused
  (42P05) and the statement stays as it was; the unnamed one is replaced. A
  ``Parse`` of several statements is refused (42601), as PostgreSQL's.
  ``DEALLOCATE ALL`` forgets the named ones: the unnamed one stays, as PostgreSQL
  keeps it apart.
  ``DISCARD ALL`` (outside a transaction block: 25001 inside one, and in a pipeline
  of the extended protocol once a statement of it was executed) gives the
  session back as a new connection has it: its cursors and portals closed, its
  named prepared statements forgotten, statement_timeout reset;
* errors as ``ErrorResponse`` with the SQLSTATE and a one-line message; the
  connection stays usable (in a transaction block, until ROLLBACK); a
  message that does not decode (a garbled length, a kind no client sends)
  is a protocol violation: FATAL 08P01 naming it, and the connection ends;
* transaction statements only move the status ``ReadyForQuery`` reports:
  every statement takes effect at once. A failed transaction block takes
  only COMMIT or ROLLBACK (25P02 for anything else: at Parse, Bind and a
  statement's Describe too, as PostgreSQL refuses them); its COMMIT answers
  ``ROLLBACK``, as PostgreSQL's does. A rolled-back block (or a failed message
  of several statements, or a failed extended-protocol pipeline outside a block:
  PostgreSQL runs its messages up to the Sync as an implicit transaction) undoes
  its ``SET``/``RESET`` of statement_timeout.
  DDL (CREATE, DROP, ALTER SYSTEM PROMOTE), which nothing undoes, runs only as
  a statement of its own, as Materialize's:
  in a transaction block, a message of several statements or a pipeline after
  an executed statement it is refused (25001 naming it), so no ROLLBACK seems
  to undo it (psycopg's default mode opens a block: DDL needs autocommit).

Access: the server binds 127.0.0.1 unless told otherwise. With a password,
every client authenticates with SCRAM-SHA-256
(:mod:`timeshard.server.scram`); a non-loopback bind without a password is refused before
anything listens. SSL is declined (``N``); clients fall back to plain text.
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import logging
import os
import secrets
import select
import socket
import socketserver
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from pygwire.connection import BackendConnection
from pygwire.constants import TransactionStatus
from pygwire.exceptions import ProtocolError
from pygwire.messages import (
    AuthenticationOk,
    AuthenticationSASL,
    AuthenticationSASLContinue,
    AuthenticationSASLFinal,
    BackendKeyData,
    Bind,
    BindComplete,
    CancelRequest,
    Close,
    CloseComplete,
    CommandComplete,
    CopyData,
    CopyDone,
    CopyOutResponse,
    DataRow,
    Describe,
    EmptyQueryResponse,
    ErrorResponse,
    Execute,
    FieldDescription,
    Flush,
    GSSEncRequest,
    GSSResponse,
    NoData,
    ParameterDescription,
    ParameterStatus,
    Parse,
    ParseComplete,
    PGMessage,
    PortalSuspended,
    Query,
    ReadyForQuery,
    RowDescription,
    SASLInitialResponse,
    SASLResponse,
    SSLRequest,
    SSLResponse,
    StartupMessage,
    Sync,
    Terminate,
)

from timeshard.errors import InvalidUsage
from timeshard.server.discovery import is_loopback
from timeshard.server.engine import Engine, Result, Stream
from timeshard.server.intervals import interval_fields, interval_text
from timeshard.server.parameter_types import ColumnsOf, arrow_columns, parameter_types
from timeshard.server.pgtypes import (
    TYPE_OIDS,
    encode_value,
    kept_columns,
    parameter_columns,
    type_oid,
    with_declared,
)
from timeshard.server.rows import QueryRows
from timeshard.server.scram import MECHANISM, ScramExchange, ScramFailure, ScramKeys
from timeshard.server.statements import (
    CloseCursor,
    CreateSink,
    CreateSource,
    CreateView,
    Deallocate,
    Declare,
    Drop,
    Empty,
    Fetch,
    Ignored,
    Param,
    Promote,
    Setting,
    ShowSetting,
    SqlError,
    Statement,
    TypedAs,
    bind,
    described_oid,
    interval_parameters,
    parameter_count,
    parse,
    placeholder,
    show_timeout,
    split,
)
from timeshard.server.statements import Query as SelectStatement

log = logging.getLogger(__name__)


#: PostgreSQL's interval.
_INTERVAL_OID = 1186


@dataclass(slots=True)
class _Prepared:
    """A prepared statement: its text, the parameter types its Parse declared (0 or
    missing: undeclared), the parameters it casts to interval itself
    (:func:`~timeshard.server.statements.interval_parameters`), and the types PostgreSQL
    infers for its undeclared ones (:func:`~timeshard.server.parameter_types.parameter_types`),
    found at its Parse, and again with its relations' columns at its Describe."""

    sql: str
    types: list[int]
    intervals: frozenset[int] = frozenset()
    #: the OID inferred for each undeclared parameter that has one, by number
    inferred: dict[int, int] = field(default_factory=dict)
    #: whether ``inferred`` knows the columns of the relations it reads (a Describe's)
    with_columns: bool = False
    #: its columns that may be a json, jsonb or varchar parameter
    #: (:func:`~timeshard.server.pgtypes.parameter_columns`)
    columns: tuple[tuple[int, str | int], ...] = ()
    #: its query as its Describe binds it, once an Execute has needed it (:meth:`typed_as`)
    described: TypedAs | None = None

    @classmethod
    def of(cls, sql: str, types: list[int]) -> _Prepared:
        inferred = parameter_types(sql) if _undeclared(sql, types) else {}
        return cls(
            sql, types, interval_parameters(sql), inferred, False, parameter_columns(sql, types)
        )

    def infer_with(self, columns_of: ColumnsOf) -> None:
        """Infer its undeclared parameters' types again, with the columns of the relations
        it reads (``columns_of``), once: a Describe answers them, and the Binds after it
        read the values a client sends in them."""
        if self.with_columns:
            return
        self.with_columns = True
        if _undeclared(self.sql, self.types):
            self.inferred = parameter_types(self.sql, columns_of)
            self.described = None  # made with the types inferred before

    def typed_as(self) -> TypedAs | None:
        """Its query bound as its Describe binds it (:func:`_placeholders`), made once and
        kept with the statement, with the Spark SQL it resolves to once it has: the Binds
        of a statement resolve it once. None if that is no query."""
        if self.described is None:
            described = parse(bind(self.sql, _placeholders(self)))
            if not isinstance(described, SelectStatement):
                return None
            self.described = TypedAs(described.query)
        return self.described

    def bound_oid(self, number: int) -> int:
        """The type parameter ``number`` is read and bound as: an undeclared one the type
        inferred for it (unknown, 0, if none), a declared one as
        :func:`~timeshard.server.statements.described_oid` says."""
        declared = self.types[number - 1] if number <= len(self.types) else 0
        if declared == 0 and number in self.inferred:
            return self.inferred[number]
        return described_oid(declared, number, self.intervals)


def _undeclared(sql: str, types: list[int]) -> bool:
    """Whether ``sql`` has a parameter ``types`` leaves undeclared."""
    return "$" in sql and (0 in types or parameter_count(sql) > len(types))


def _statement_oids(prepared: _Prepared) -> list[int]:
    """The type OIDs of a prepared statement's parameters, as its Describe answers them:
    those declared; one not, the type inferred for it (:meth:`_Prepared.bound_oid`), as
    PostgreSQL infers it, else text (25)."""
    sql, types = prepared.sql, prepared.types
    count = max(len(types), parameter_count(sql))
    return [
        types[i] if i < len(types) and types[i] else prepared.bound_oid(i + 1) or 25
        for i in range(count)
    ]


def _placeholders(prepared: _Prepared) -> list[Param]:
    """The parameters a Describe of a prepared statement binds: one of each parameter's
    type as Execute binds it (:func:`~timeshard.server.statements.placeholder`, of
    :meth:`_Prepared.bound_oid`)."""
    count = len(_statement_oids(prepared))
    return [placeholder(prepared.bound_oid(i + 1)) for i in range(count)]


def _typed_as(prepared: _Prepared, params: list[Param]) -> _Prepared | None:
    """``prepared``, whose rows are typed as its Describe binds it
    (:meth:`_Prepared.typed_as`), if ``params`` bind a year-month interval (or one of
    months and days or time), declared interval or a string the statement casts to
    interval: the placeholder of an interval is a day-time one, and ``DATE '2020-01-01'
    + $1`` is then a TIMESTAMP where a year-month value makes it a DATE. The rows are sent
    as the Describe described them (their columns cast to its types, as PostgreSQL's
    ``date + interval`` is a timestamp whatever the interval). None if no parameter is
    such an interval: the types cannot differ."""
    year_month = any(
        prepared.bound_oid(i + 1) == _INTERVAL_OID and p.text is not None and _months(p.text)
        for i, p in enumerate(params)
    )
    return prepared if year_month else None


def _months(text: str) -> int:
    """The months of an interval's text; 0 for text that is none (Execute answers why)."""
    try:
        return interval_fields(text)[0]
    except SqlError:
        return 0


def _may_answer_rows(sql: str) -> bool:
    """Whether ``sql`` may answer rows (True unless it parses, alone, as a statement that
    never does: a SET, a DROP, a cursor's DECLARE or CLOSE, ...)."""
    statements = split(sql)
    if len(statements) != 1:
        return True
    try:
        statement = parse(statements[0])
    except SqlError:  # one with parameters, or CREATE: not known without binding
        return True
    quiet = (CloseCursor, Deallocate, Declare, Drop, Empty, Ignored, Promote, Setting)
    return not isinstance(statement, quiet)


def _copy_text(value: Any, type_name: str = "") -> str:
    """A value in COPY's text format (backslash escapes, ``\\N`` for NULL)."""
    if value is None:
        return "\\N"
    text = encode_value(value, type_name)
    assert text is not None
    out = text.decode("utf-8")
    for raw, escaped in (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r")):
        out = out.replace(raw, escaped)
    return out


def _types(columns: list[tuple[str, str]], width: int) -> list[str]:
    """The type names of a row of ``width`` values: a value past the columns has none."""
    return ([t for _, t in columns] + [""] * width)[:width]


def _fields(columns: list[tuple[str, str]]) -> list[FieldDescription]:
    return [FieldDescription(name=n, type_oid=type_oid(t), type_size=-1) for n, t in columns]


def _sql_error(e: Exception) -> SqlError:
    """``e`` as the client sees it: a SqlError as it is; anything else is an internal
    error (XX000) naming its type, logged with its traceback -- the connection and the
    server go on. The client going away, or breaking the protocol, is not an error to
    report as a statement's: it is re-raised."""
    if isinstance(e, SqlError):
        return e
    if isinstance(e, _Closed | _Violation | ConnectionError):
        raise e
    log.error("statement failed", exc_info=e)
    return SqlError(f"internal error: {type(e).__name__}: {e}", "XX000")


def _canceled(timed_out: bool) -> SqlError:
    why = "statement timeout" if timed_out else "user request"
    return SqlError(f"canceling statement due to {why}", "57014")


def _aborted() -> SqlError:
    return SqlError(
        "current transaction is aborted, commands ignored until end of transaction block",
        "25P02",
    )


def _ends_transaction(statements: list[str]) -> bool:
    """Whether ``statements`` (a prepared statement's, split) are a COMMIT or a ROLLBACK:
    all a failed transaction block takes, at Parse and Bind as at Execute."""
    if len(statements) != 1:
        return False
    try:
        statement = parse(statements[0])
    except SqlError:
        return False
    return isinstance(statement, Ignored) and statement.tag in ("COMMIT", "ROLLBACK")


def _error(e: SqlError) -> ErrorResponse:
    message = " ".join(str(e).split()) or type(e).__name__
    return ErrorResponse(fields={"S": "ERROR", "V": "ERROR", "C": e.sqlstate, "M": message})


#: No row is left (a row is a tuple, never this).
_END: Any = object()


class _Rows:
    """A statement's rows still to send, taken one at a time, and its command tag once
    all are sent (``tag(n)``, ``n`` the rows of the last Execute): a Result's, a
    query's as Spark makes them (``streamed``: taking them runs its Spark jobs) or a
    query cursor's FETCH.
    ``close`` lets go of what they hold (a query's readers)."""

    def __init__(
        self,
        columns: list[tuple[str, str]],
        rows: Iterator[tuple[Any, ...]],
        tag: Callable[[int], str],
        *,
        streamed: bool = False,
        close: Callable[[], None] | None = None,
    ) -> None:
        self.columns = columns
        self.rows = rows
        self.tag = tag
        self.streamed = streamed
        self._close = close
        self._ahead: list[tuple[Any, ...]] = []  # the row a look ahead took

    @classmethod
    def of(cls, result: Result | QueryRows | _Rows) -> _Rows:
        if isinstance(result, _Rows):
            return result
        if isinstance(result, QueryRows):
            return cls(
                result.columns, result, lambda n: f"SELECT {n}", streamed=True, close=result.close
            )
        tag = result.tag
        return cls(result.columns, iter(result.rows), lambda n: tag)

    def take(self) -> Any:
        """The next row, or _END."""
        return self._ahead.pop() if self._ahead else next(self.rows, _END)

    def more(self) -> bool:
        """Whether a row is left (taken ahead, for the next :meth:`take`)."""
        if not self._ahead:
            row = next(self.rows, _END)
            if row is _END:
                return False
            self._ahead.append(row)
        return True

    def close(self) -> None:
        if self._close is not None:
            self._close()


#: What running a statement gives the connection to send.
_Answer = Result | Stream | QueryRows | _Rows


def _close_answer(answer: _Answer | None) -> None:
    """Let go of what ``answer`` holds: a SUBSCRIBE's or a query's readers."""
    if isinstance(answer, Stream):
        close = getattr(answer.rows, "close", None)
        if close is not None:
            close()
    elif isinstance(answer, QueryRows | _Rows):
        answer.close()


def _pipelined(statement: Statement | Empty, before: bool) -> bool:
    """Whether an extended-protocol pipeline is under way once an Execute completed
    ``statement`` (``before``: whether one was), as PostgreSQL tells it: then DISCARD
    ALL is refused until the Sync ends the pipeline's implicit transaction. COMMIT and
    ROLLBACK end that transaction, and DISCARD ALL commits at once; an empty statement
    and BEGIN change nothing; any other statement is part of the pipeline."""
    if isinstance(statement, Empty):
        return before
    if isinstance(statement, Ignored) and statement.tag in ("BEGIN", "START TRANSACTION"):
        return before
    if isinstance(statement, Ignored) and statement.tag in ("COMMIT", "ROLLBACK"):
        return False
    return not (isinstance(statement, Setting) and statement.tag == "DISCARD ALL")


def _ddl_name(statement: Statement | Empty) -> str | None:
    """The name of ``statement`` if it changes the catalog (DDL), else None. Nothing undoes
    DDL once it ran, so it runs only as a statement of its own: in a transaction block,
    a message of several statements or an extended-protocol pipeline it is refused
    (25001), as Materialize refuses it, never kept by a ROLLBACK that would undo it."""
    if isinstance(statement, CreateSource):
        return "CREATE SOURCE"
    if isinstance(statement, CreateView):
        return "CREATE MATERIALIZED VIEW"
    if isinstance(statement, CreateSink):
        return "CREATE SINK"
    if isinstance(statement, Drop):
        return (
            "DROP MATERIALIZED VIEW"
            if statement.kind == "view"
            else f"DROP {statement.kind.upper()}"
        )
    if isinstance(statement, Promote):
        return "ALTER SYSTEM PROMOTE"
    return None


@dataclass
class _Portal:
    sql: str
    statement: Statement | Empty | None = None  # parsed once it runs
    result: _Answer | None = None
    rows: _Rows | None = None  # its rows not sent yet, once an Execute has sent some
    described: bool = False
    #: its columns that are a json, jsonb or varchar parameter (:func:`kept_columns`)
    declared: dict[int, str] = field(default_factory=dict)
    #: its prepared statement, when a value bound may make a column's type other than
    #: its Describe answered: its rows are typed as that (:func:`_typed_as`)
    typed_as: _Prepared | None = None


@dataclass
class _Cursor:
    """A DECLAREd cursor: its columns and the rows no FETCH has taken yet.

    A SUBSCRIBE's rows come with heartbeats (empty tuples) while nothing
    arrives, about every 0.5 s: they end a FETCH's ready rows and let it
    notice its deadline, a cancel or the client's going.
    """

    columns: list[tuple[str, str]]
    rows: Iterator[tuple[Any, ...]]
    waits: bool  # a SUBSCRIBE's: FETCH waits for rows; a query's are all there
    #: A query cursor's place, as PostgreSQL's portal has it: the rows FETCHes took, and
    #: whether one ran off the last row (then it is after the last row, not on it).
    position: int = 0
    at_end: bool = False

    def take(self, skip: int, count: int | None) -> Iterator[tuple[Any, ...]]:
        """A query cursor's rows: ``skip`` of them passed over, then up to ``count`` (None:
        all) taken, as they are sent; its place moves with each."""
        assert not self.waits, "a SUBSCRIBE cursor's rows are fetched as they are ready"
        taken = 0
        while count is None or taken < count + skip:
            row = next(self.rows, _END)
            if row is _END:
                self.at_end = True
                return
            self.position += 1
            taken += 1
            if taken > skip:
                yield row

    def fetch(
        self, count: int | None, timeout_s: float | None, interrupted: Callable[[], None]
    ) -> list[tuple[Any, ...]]:
        """Up to ``count`` rows of a SUBSCRIBE (None: no limit); ``interrupted`` raises to
        stop a wait. A query cursor's rows are taken as they are sent (:meth:`_Handler._fetch`)."""
        assert self.waits, "a query cursor's rows are streamed"
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        out: list[tuple[Any, ...]] = []
        while count is None or len(out) < count:
            interrupted()
            row = next(self.rows, None)
            if row is None:  # the UP TO reached: no more rows, ever
                break
            if row:
                out.append(row)
            elif out or (deadline is not None and time.monotonic() >= deadline):
                break
        return out

    def close(self) -> None:
        close = getattr(self.rows, "close", None)
        if close is not None:
            close()


def _scan_forward() -> SqlError:
    return SqlError("cursor can only scan forward", "55000")


def _forward_move(cursor: _Cursor, statement: Fetch) -> tuple[int, int | None]:
    """The rows a query cursor's FETCH passes over and then takes (None: all), as
    PostgreSQL's ``NO SCROLL`` cursor moves: ``ABSOLUTE n`` (and ``FIRST``, ``ABSOLUTE
    1``) only to a row after its place, ``RELATIVE n`` only forward, ``RELATIVE 0`` and
    ``ABSOLUTE 0`` only off a row (they take none); a move that needs a step back (to
    re-fetch the current row, to an earlier one, to ``LAST``, from the end) is 55000."""
    count = statement.count
    if statement.position == "forward":  # a count past sys.maxsize is every row
        return 0, None if count is None else min(count, sys.maxsize)
    on_row = cursor.position > 0 and not cursor.at_end
    at_start = cursor.position == 0 and not cursor.at_end
    if statement.position == "relative" and count is not None and count > 0:
        return count - 1, 1
    if statement.position == "relative" and count == 0 and not on_row:
        return 0, 0
    if statement.position == "absolute" and count == 0 and at_start:
        return 0, 0
    if statement.position == "absolute" and count is not None and count > 0:
        place = cursor.position + (1 if cursor.at_end else 0)
        if count > place:
            return count - cursor.position - 1, 1
    raise _scan_forward()


@dataclass
class _Session:
    """What one connection holds between messages."""

    statements: dict[str, _Prepared] = field(default_factory=dict)
    portals: dict[str, _Portal] = field(default_factory=dict)
    cursors: dict[str, _Cursor] = field(default_factory=dict)
    in_transaction: bool = False
    implicit: bool = False  # running a simple query of several statements
    failed: bool = False
    skipping: bool = False  # after an error in the extended protocol, until Sync
    pipelined: bool = False  # an Execute completed a statement since the Sync (:func:`_pipelined`)
    timeout_ms: int = 0  # statement_timeout (0: none)
    local_timeout_ms: int | None = None  # SET LOCAL's, until the transaction block ends
    #: statement_timeout as the transaction under way (a block, or a message of several
    #: statements) found it: a rollback of it undoes its SETs, as PostgreSQL's (None: none)
    kept_timeout_ms: int | None = None
    running: _Portal | None = None  # the portal whose statement runs (DISCARD ALL keeps it)

    @property
    def statement_timeout_ms(self) -> int:
        return self.timeout_ms if self.local_timeout_ms is None else self.local_timeout_ms

    def keep_timeout(self) -> None:
        """A transaction starts (a block, or a pipeline's implicit one): keep the timeout
        its rollback returns to, unless one is under way already."""
        if not self.in_transaction and self.kept_timeout_ms is None:
            self.kept_timeout_ms = self.timeout_ms

    def roll_back_timeout(self) -> None:
        """An implicit transaction (a pipeline, a message of several statements) failed:
        its SETs are undone."""
        if not self.in_transaction and self.kept_timeout_ms is not None:
            self.timeout_ms = self.kept_timeout_ms

    @property
    def status(self) -> TransactionStatus:
        if self.failed:
            return TransactionStatus.ERROR_TRANSACTION
        if self.in_transaction:
            return TransactionStatus.IN_TRANSACTION
        return TransactionStatus.IDLE


_BINARY = {21: "!h", 23: "!i", 20: "!q", 26: "!I", 700: "!f", 701: "!d"}


def _param_text(value: bytes | None, oid: int, binary: bool) -> str | None:
    """A parameter's value as text: as sent, or decoded from PostgreSQL's binary format
    for the types drivers send that way (integers, floats, booleans, numeric, text,
    varchar, json, jsonb, date, time, timestamp, timestamptz, interval, uuid and bytea:
    psycopg sends its dates, times, datetimes, timedeltas, UUIDs and bytes so by
    default, and its json with ``%b``).

    Bytes that are not UTF-8 are SqlError 22021, a binary value of the wrong length
    22P03, as is a binary jsonb of a version other than 1, as PostgreSQL answers them."""
    if value is None:
        return None
    try:
        if not binary or oid in (0, 25, 1042, 1043, 19, 114):
            return value.decode("utf-8")
        if oid == 3802:  # jsonb: a version byte, then the text
            if value[:1] != b"\x01":
                raise SqlError(f"unsupported jsonb version number {value[:1]!r}", "22P03")
            return value[1:].decode("utf-8")
        if oid in _BINARY:
            (number,) = struct.unpack(_BINARY[oid], value)
            return repr(number)
        if oid == 16:
            return "t" if value == b"\x01" else "f"
        if oid == 1700:
            return _numeric_text(value)
        if oid in _BINARY_TIMES:
            return _time_text(value, oid)
        if oid == 17:  # bytea: its text form, as a client sends it in text
            return "\\x" + value.hex()
        if oid == 2950:  # uuid: 16 bytes; Spark has no uuid type, so its text form
            if len(value) != 16:
                raise struct.error(len(value))
            return str(uuid.UUID(bytes=value))
        if oid == 1083:
            return _time_of_day_text(value)
        if oid == 1186:
            return _interval_text(value)
    except UnicodeDecodeError:
        raise SqlError("invalid byte sequence for encoding UTF8 in a parameter", "22021") from None
    except struct.error:
        raise SqlError(
            f"incorrect binary data format in a parameter of type OID {oid}", "22P03"
        ) from None
    raise SqlError(f"binary parameters of type OID {oid} are not supported; send text", "0A000")


#: PostgreSQL's epoch of binary dates and timestamps.
_PG_EPOCH = datetime.datetime(2000, 1, 1)
#: Binary date (days, int32), timestamp and timestamptz (microseconds, int64, UTC).
_BINARY_TIMES = {1082: "!i", 1114: "!q", 1184: "!q"}


def _time_text(value: bytes, oid: int) -> str:
    """A binary date, timestamp or timestamptz (UTC) as ISO text; ``infinity`` and values
    beyond years 1-9999, which Spark has no value for, are SqlError 22008."""
    (number,) = struct.unpack(_BINARY_TIMES[oid], value)
    try:
        if oid == 1082:
            return (_PG_EPOCH.date() + datetime.timedelta(days=number)).isoformat()
        moment = _PG_EPOCH + datetime.timedelta(microseconds=number)
    except OverflowError:
        raise SqlError(
            f"a parameter of type OID {oid} is out of range (infinity, or beyond years 1-9999)",
            "22008",
        ) from None
    text = moment.isoformat(" ")
    return text + "+00:00" if oid == 1184 else text


def _time_of_day_text(value: bytes) -> str:
    """A binary time (microseconds since midnight, int64) as its text form, ``HH:MM:SS``
    and the microseconds if any (as a client sends it in text); past 24:00:00 or before
    midnight is SqlError 22008."""
    (micros,) = struct.unpack("!q", value)
    if not 0 <= micros <= 86_400_000_000:
        raise SqlError(f"a time parameter of {micros} microseconds is out of range", "22008")
    seconds, fraction = divmod(micros, 1_000_000)
    text = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return f"{text}.{fraction:06d}" if fraction else text


def _interval_text(value: bytes) -> str:
    """A binary interval (microseconds, int64; days, int32; months, int32) as PostgreSQL
    writes its text (:func:`~timeshard.server.intervals.interval_text`): a text
    parameter's path binds it from there, and refuses one of months and days or time,
    which no Spark interval holds (0A000 naming it)."""
    micros, days, months = struct.unpack("!qii", value)
    return interval_text(months, days, micros)


def _numeric_text(value: bytes) -> str:
    """PostgreSQL's binary numeric: base-10000 digits, a weight, a sign and a scale."""
    ndigits, weight, sign, dscale = struct.unpack("!hhHH", value[:8])
    if sign == 0xC000:
        raise SqlError("NaN is not a number parameter", "22P02")
    digits = struct.unpack(f"!{ndigits}H", value[8 : 8 + 2 * ndigits])
    # Exact, whatever its length: a Decimal of these digits, not a sum under a context.
    places = "".join(f"{d:04d}" for d in digits) or "0"
    number = decimal.Decimal((0, tuple(map(int, places)), 4 * (weight + 1 - len(digits))))
    text = f"{number:.{dscale}f}"
    return "-" + text if sign == 0x4000 else text


def check_access(host: str, password: str | None) -> None:
    """InvalidUsage naming ``host`` if it is not loopback and there is no password."""
    if not is_loopback(host) and not password:
        raise InvalidUsage(
            f"binding {host!r} (not loopback) needs a password: set TIMESHARD_SERVE_PASSWORD"
        )


#: The most bytes a connection holds for its client: a message not yet whole (PostgreSQL
#: refuses one past 1 GiB), or what the client sent while a COPY OUT or a waiting FETCH ran
#: (read to notice a cancel or its going). Past it the client gets FATAL 54000, and the
#: connection ends: no client makes the server hold more.
MAX_MESSAGE_BYTES = 64 << 20

#: How long a client has to start up and authenticate (PostgreSQL's
#: ``authentication_timeout``): a connection that sends nothing, or stops halfway through
#: SCRAM, is closed then, not left holding its thread.
STARTUP_TIMEOUT_S = 60.0


class PgServer(socketserver.ThreadingTCPServer):
    """A pgwire listener; ``serve_forever`` on a thread, ``shutdown`` to stop."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        engine: Engine,
        host: str = "127.0.0.1",
        port: int = 6875,
        password: str | None = None,
        *,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        check_access(host, password)
        if not startup_timeout_s > 0:
            raise InvalidUsage(f"startup_timeout_s must be positive, got {startup_timeout_s!r}")
        if isinstance(max_message_bytes, bool) or not (
            isinstance(max_message_bytes, int) and max_message_bytes > 0
        ):
            raise InvalidUsage(f"max_message_bytes must be positive, got {max_message_bytes!r}")
        self.startup_timeout_s = startup_timeout_s
        self.max_message_bytes = max_message_bytes
        self.engine = engine
        self.auth = ScramKeys.from_password(password) if password else None
        self.cancels: dict[tuple[int, bytes], _Handler] = {}
        self.cancels_lock = threading.Lock()
        super().__init__((host, port), _Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _Closed(Exception):
    """The client went away."""


class _Violation(Exception):
    """The client broke the protocol (a garbled message): FATAL 08P01, and the
    connection ends, as PostgreSQL's does."""


#: The names of the messages a client sends, by their kind byte.
_FRONTEND = {
    b"B": "Bind",
    b"C": "Close",
    b"c": "CopyDone",
    b"d": "CopyData",
    b"D": "Describe",
    b"E": "Execute",
    b"f": "CopyFail",
    b"F": "FunctionCall",
    b"H": "Flush",
    b"P": "Parse",
    b"p": "authentication",
    b"Q": "Query",
    b"S": "Sync",
    b"X": "Terminate",
}


#: CopyData, CopyDone and CopyFail: serve has no COPY FROM, so one comes only behind a
#: COPY it refused (or after a COPY OUT ended), and is ignored, as PostgreSQL ignores
#: them outside a COPY FROM.
_STRAY_COPY = (b"d", b"c", b"f")


class _ClientWatch:
    """Reads what a client sends while its query runs, on a thread of its own, to notice
    its going (the connection's end): then the query is canceled. What it reads waits in
    the handler's ``unread`` (it holds no more than the server's limit: past it the
    client waits, as TCP makes it)."""

    def __init__(self, handler: _Handler) -> None:
        self.handler = handler
        self.gone = False
        self.wake, self.waker = socket.socketpair()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def stop(self) -> bool:
        """Stop watching; True if the client went away."""
        self.waker.send(b"\0")
        self.thread.join()
        self.wake.close()
        self.waker.close()
        return self.gone

    def _run(self) -> None:
        handler = self.handler
        while len(handler.unread) <= handler.server.max_message_bytes:
            ready = select.select([handler.sock, self.wake], [], [])[0]
            if self.wake in ready:
                return
            try:
                data = handler.sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                self.gone = True
                handler.interrupt()
                return
            handler.unread += data


class _Handler(socketserver.BaseRequestHandler):
    server: PgServer

    def setup(self) -> None:
        self.conn = BackendConnection(strict=False)
        self.sock: socket.socket = self.request
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.session = _Session()
        self.cancel = threading.Event()
        #: The statement_timeout of the statement under way: its timer once a query's Spark
        #: work started (None: none armed), and whether it went off (its cancel's message).
        self.deadline: threading.Timer | None = None
        self.deadline_lock = threading.Lock()
        self.timed_out = False
        self.jobs = f"timeshard-pgwire-{secrets.token_hex(8)}"  # the job tag of its queries
        self.key = (os.getpid() & 0x7FFFFFFF, secrets.token_bytes(4))
        self.out = bytearray()
        self.unread = bytearray()  # bytes read, not yet decoded: the messages not yet whole
        self.started = False  # a StartupMessage came: every message now has a kind byte

    def handle(self) -> None:
        try:
            self.sock.settimeout(self.server.startup_timeout_s)
            if not self._startup():
                return
            self.sock.settimeout(None)  # a session may idle for as long as it likes
            with self.server.cancels_lock:
                self.server.cancels[self.key] = self
            self._send(BackendKeyData(process_id=self.key[0], secret_key=self.key[1]))
            self._send(ReadyForQuery(status=self.session.status))
            self._flush()
            for msg in self._messages():
                if isinstance(msg, Terminate):
                    return
                self._dispatch(msg)
                self._flush()
        except (_Closed, ConnectionError, OSError):
            return
        except _Violation as e:
            self._fatal("08P01", str(e))
        except Exception:  # a bug here must not take the server down
            log.exception("pgwire connection failed")
        finally:
            with self.server.cancels_lock:
                self.server.cancels.pop(self.key, None)
            self._close_cursors(None)
            self._close_portals(None)

    # -- I/O

    def _send(self, msg: PGMessage) -> None:
        self.out += self.conn.send(msg)
        if len(self.out) > 1 << 16:
            self._flush()

    def _flush(self) -> None:
        if self.out:
            self.sock.sendall(self.out)
            self.out.clear()

    def _messages(self) -> Iterator[PGMessage]:
        """The client's messages, each decoded once it is whole (and its length checked:
        a garbled one is a :class:`_Violation`); COPY data is skipped (:data:`_STRAY_COPY`)."""
        while True:
            frame = self._frame()
            if frame is None:
                data = self.sock.recv(1 << 16)
                if not data:
                    raise _Closed
                self.unread += data
                continue
            if self.started and frame[:1] in _STRAY_COPY:
                continue
            try:
                for msg in self.conn.receive(frame):
                    if isinstance(msg, StartupMessage):
                        self.started = True
                    yield msg
            except ProtocolError as e:
                kind = _FRONTEND.get(frame[:1], "startup") if self.started else "startup"
                raise _Violation(f"invalid {kind} message: {e}") from e

    def _frame(self) -> bytes | None:
        """The first whole message in ``unread``, taken out of it; None until one is whole.

        Before the StartupMessage a message is its length (four bytes, counting
        themselves) and its body; after it, a kind byte comes first. A length that
        cannot be (shorter than itself, or than a start-up message's code) is a
        :class:`_Violation`; one past ``max_message_bytes`` ends the connection
        (54000) before the server holds it.
        """
        kind = 1 if self.started else 0
        if len(self.unread) < kind + 4:
            return None
        (length,) = struct.unpack("!i", self.unread[kind : kind + 4])
        if length < (4 if self.started else 8):
            what = _FRONTEND.get(bytes(self.unread[:1]), "unknown") if kind else "startup"
            raise _Violation(f"invalid length {length} of a {what} message")
        self._check_held(length, "a message")
        end = kind + length
        if len(self.unread) < end:
            return None
        frame = bytes(self.unread[:end])
        del self.unread[:end]
        return frame

    def _client_input(self, copying: bool) -> None:
        """Read what the client sent while a COPY OUT (``copying``) or a waiting FETCH
        runs, without blocking: Terminate, or the connection's end, raise _Closed
        (libpq's close sends Terminate, then closes); a CopyFail during COPY OUT
        ends the COPY with an error. Any other message (a pipelined ``Sync``) waits
        in ``unread`` for :meth:`_messages`, as PostgreSQL reads it after the COPY.
        """
        while select.select([self.sock], [], [], 0)[0]:
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                raise _Closed from None
            if not data:
                raise _Closed
            self.unread += data
            self._check_held(len(self.unread), "what was sent while a statement ran")
        pos = 0
        while len(self.unread) - pos >= 5:
            kind = self.unread[pos : pos + 1]
            (length,) = struct.unpack("!i", self.unread[pos + 1 : pos + 5])
            if length < 4:  # no message is that short: the stream is garbled
                kind_name = _FRONTEND.get(bytes(kind), "unknown")
                raise _Violation(f"invalid length {length} of a {kind_name} message")
            end = pos + 1 + length
            if len(self.unread) < end:
                break
            if kind == b"X":
                raise _Closed
            if kind == b"f" and copying:
                reason = bytes(self.unread[pos + 5 : end]).rstrip(b"\0")
                del self.unread[pos:end]
                message = reason.decode("utf-8", "replace")
                raise SqlError(f"COPY terminated by the client: {message}", "57014")
            pos = end

    def _check_held(self, held: int, what: str) -> None:
        """End the connection (FATAL 54000) if ``held`` bytes of the client's are more than
        the server's limit."""
        limit = self.server.max_message_bytes
        if held <= limit:
            return
        message = f"{what} is over {limit} bytes, the most the server holds for a client"
        self.out.clear()  # the COPY data or rows not sent yet: the error is the last word
        self._fatal("54000", message)
        raise _Closed

    def _fatal(self, sqlstate: str, message: str) -> None:
        """Send FATAL ``sqlstate``: the last thing the connection sends before it ends."""
        log.info("pgwire connection ended: %s (%s)", message, sqlstate)
        self._send(ErrorResponse(fields={"S": "FATAL", "V": "FATAL", "C": sqlstate, "M": message}))
        with contextlib.suppress(OSError):
            self._flush()

    # -- start-up

    def _startup(self) -> bool:
        for msg in self._messages():
            if isinstance(msg, SSLRequest):
                self.sock.sendall(self.conn.send(SSLResponse(accepted=False)))
                continue
            if isinstance(msg, GSSEncRequest):
                self.sock.sendall(self.conn.send(GSSResponse(accepted=False)))
                continue
            if isinstance(msg, CancelRequest):
                with self.server.cancels_lock:
                    target = self.server.cancels.get((msg.process_id, msg.secret_key))
                if target is not None:
                    target.interrupt()
                return False
            if isinstance(msg, StartupMessage):
                user = msg.params.get("user", "")
                if self.server.auth is not None and not self._authenticate(user):
                    return False
                self._send(AuthenticationOk())
                for name, value in (
                    ("server_version", "16.0 (timeshard)"),
                    ("server_encoding", "UTF8"),
                    ("client_encoding", "UTF8"),
                    ("DateStyle", "ISO, MDY"),
                    ("TimeZone", "UTC"),
                    ("integer_datetimes", "on"),
                    ("standard_conforming_strings", "on"),
                    ("application_name", msg.params.get("application_name", "")),
                ):
                    self._send(ParameterStatus(name=name, value=value))
                return True
            return False
        return False

    def _authenticate(self, user: str) -> bool:
        assert self.server.auth is not None
        self._send(AuthenticationSASL(mechanisms=[MECHANISM]))
        self._flush()
        scram = ScramExchange(self.server.auth)
        messages = self._messages()
        try:
            first = next(messages)
            if not isinstance(first, SASLInitialResponse) or first.mechanism != MECHANISM:
                raise ScramFailure(f"expected {MECHANISM}")
            server_first = scram.first(first.data.decode("utf-8", "replace"))
            self._send(AuthenticationSASLContinue(data=server_first.encode()))
            self._flush()
            final = next(messages)
            if not isinstance(final, SASLResponse):
                raise ScramFailure("expected the client's final SCRAM message")
            server_final = scram.final(final.data.decode("utf-8", "replace"))
            self._send(AuthenticationSASLFinal(data=server_final.encode()))
            return True
        except ScramFailure as e:
            log.info("authentication of %r failed: %s", user, e)
            self._send(
                ErrorResponse(
                    fields={
                        "S": "FATAL",
                        "V": "FATAL",
                        "C": "28P01",
                        "M": f'password authentication failed for user "{user}"',
                    }
                )
            )
            self._flush()
            return False

    # -- statements

    def interrupt(self) -> None:
        """Cancel the statement this connection runs (a CancelRequest's, on the thread of
        the connection that sent it): a waiting FETCH or a COPY OUT notices the event;
        a query's Spark jobs are canceled. Nothing if the connection is idle."""
        self.cancel.set()
        try:
            self.server.engine.cancel(self.jobs)
        except Exception as e:  # a cancel that cannot reach Spark leaves the query running
            log.warning("canceling the Spark jobs of %s: %s", self.jobs, e)

    def _execute(self, statement: Statement) -> _Answer:
        """``statement`` run by the engine; a query's under :meth:`_watched` (its rows
        come as Spark makes them: the caller sends them, then closes them)."""
        engine = self.server.engine
        if isinstance(statement, CreateSource | CreateView | CreateSink):
            return self._create(statement)
        if not isinstance(statement, SelectStatement):
            return engine.execute(statement)
        result = None
        try:
            with self._watched():
                result = engine.execute(statement)
        except BaseException:
            _close_answer(result)
            raise
        return result

    def _create(self, statement: CreateSource | CreateView | CreateSink) -> _Answer:
        """A CREATE (SOURCE, SINK or MATERIALIZED VIEW) that a CancelRequest cancels (57014)
        until the engine adds its object: its Spark jobs are canceled, and the engine
        undoes what it did, as for a CREATE that failed. One that completed answers as
        done, canceled or not. Its statement_timeout runs from its start."""
        self._arm_deadline()
        try:
            with self._cancellable():
                return self.server.engine.execute(statement)
        except Exception as e:
            if self.cancel.is_set():
                raise _canceled(self.timed_out) from e
            raise

    @contextlib.contextmanager
    def _cancellable(self) -> Iterator[None]:
        """The engine's :meth:`~timeshard.server.engine.Engine.cancellable` under the
        connection's job tag; a CancelRequest that came before the engine could take it is
        passed on again once it can."""
        engine = self.server.engine
        with engine.cancellable(self.jobs):
            if self.cancel.is_set():
                engine.cancel(self.jobs)
            yield

    @contextlib.contextmanager
    def _watched(self) -> Iterator[None]:
        """Run Spark work of a query (its planning, or taking its rows): its jobs carry the
        connection's job tag, and the statement_timeout runs. A CancelRequest that comes
        meanwhile, or the timeout, cancels them (57014): one that came before they started
        drops the rows, as they are the canceled statement's. A client that goes away
        meanwhile (watched on a thread of its own) cancels them too (_Closed): its jobs
        and readers are not kept for no one."""
        self._arm_deadline()
        watch = _ClientWatch(self)
        try:
            with self._cancellable():
                yield
        except Exception as e:
            if watch.stop():
                raise _Closed from e
            if self.cancel.is_set():
                raise _canceled(self.timed_out) from e
            raise
        except BaseException:
            watch.stop()
            raise
        if watch.stop():
            raise _Closed
        if self.cancel.is_set():
            raise _canceled(self.timed_out)

    @contextlib.contextmanager
    def _statement(self) -> Iterator[None]:
        """One statement (a simple query's, or a Describe or Execute of a portal): a cancel
        that came before it does nothing to it, and its statement_timeout ends with it."""
        self.cancel.clear()
        self.timed_out = False
        try:
            yield
        finally:
            with self.deadline_lock:
                if self.deadline is not None:
                    self.deadline.cancel()
                    self.deadline = None

    def _arm_deadline(self) -> None:
        """Start the statement's statement_timeout, unless it runs already or is 0: past
        it, the statement is canceled as a CancelRequest cancels it."""
        ms = self.session.statement_timeout_ms
        with self.deadline_lock:
            if self.deadline is not None or ms <= 0:
                return
            timer = threading.Timer(ms / 1000, self._time_out)
            timer.daemon = True
            timer.args = (timer,)
            self.deadline = timer
        timer.start()

    def _time_out(self, timer: threading.Timer) -> None:
        with self.deadline_lock:
            if self.deadline is not timer:  # its statement ended first
                return
            self.timed_out = True
            self.interrupt()

    def _dispatch(self, msg: PGMessage) -> None:
        s = self.session
        if isinstance(msg, Query):
            self._simple(msg.query_string)
            return
        if isinstance(msg, Sync):
            s.skipping = s.pipelined = False
            if not s.in_transaction:  # the implicit transaction ends, and its portals
                self._close_portals(None)
                s.kept_timeout_ms = None
            self._send(ReadyForQuery(status=s.status))
            return
        if s.skipping or isinstance(msg, Flush):
            return
        try:
            if isinstance(msg, Parse):
                self._parse(msg)
            elif isinstance(msg, Bind):
                self._bind(msg)
            elif isinstance(msg, Describe):
                with self._statement():
                    self._describe(msg)
            elif isinstance(msg, Execute):
                with self._statement():
                    self._execute_portal(msg)
            elif isinstance(msg, Close):
                if msg.kind == "S":
                    s.statements.pop(msg.name, None)
                else:
                    self._close_portals(msg.name)
                self._send(CloseComplete())
        except Exception as e:
            self._fail(_sql_error(e))
            s.skipping = True
            s.roll_back_timeout()  # the pipeline's implicit transaction rolls back

    def _simple(self, text: str) -> None:
        # A simple query runs as if through the unnamed statement and portal, as
        # PostgreSQL's does: a prepared unnamed statement is dropped, and the portal closed.
        self.session.statements.pop("", None)
        self._close_portals("")
        try:
            statements = split(text)
        except SqlError as e:
            self._fail(e)
            statements = []
        else:
            if not statements:
                self._send(EmptyQueryResponse())
            s = self.session
            s.implicit = len(statements) > 1
            if s.implicit and not s.in_transaction:
                s.kept_timeout_ms = s.timeout_ms
            try:
                for sql in statements:
                    try:
                        with self._statement():
                            self._send_result(self._run(parse(sql)))
                    except Exception as e:
                        self._fail(_sql_error(e))
                        s.roll_back_timeout()
                        break
            finally:
                s.implicit = False
                if not s.in_transaction:  # an implicit transaction ends
                    self._close_cursors(None)
                    s.local_timeout_ms = None
                    s.kept_timeout_ms = None
        self._send(ReadyForQuery(status=self.session.status))

    def _fail(self, e: SqlError) -> None:
        self._send(_error(e))
        if self.session.in_transaction:
            self.session.failed = True

    def _run(self, statement: Statement | Empty) -> _Answer:
        s = self.session
        if isinstance(statement, Empty):
            return Result([], [], "")
        ends = isinstance(statement, Ignored) and statement.tag in ("COMMIT", "ROLLBACK")
        if s.failed and not ends:  # a failed block takes only its end, as PostgreSQL's does
            raise _aborted()
        ddl = _ddl_name(statement)
        if ddl is not None and (s.in_transaction or s.implicit):
            raise SqlError(f"{ddl} cannot be run inside a transaction block", "25001")
        if ddl is not None and s.pipelined:
            raise SqlError(f"{ddl} cannot be executed within a pipeline", "25001")
        if isinstance(statement, Deallocate):
            if statement.name is None:
                self._forget_named_statements()
            elif s.statements.pop(statement.name, None) is None:
                raise SqlError(f"prepared statement {statement.name!r} does not exist", "26000")
            return Result([], [], "DEALLOCATE" if statement.name else "DEALLOCATE ALL")
        if isinstance(statement, Ignored):
            if statement.tag in ("BEGIN", "START TRANSACTION"):
                s.keep_timeout()
                s.in_transaction = True
            elif ends:  # the COMMIT of a failed block rolls it back, and says so
                tag = "ROLLBACK" if s.failed else statement.tag
                if tag == "ROLLBACK" and s.kept_timeout_ms is not None:  # its SETs undone
                    s.timeout_ms = s.kept_timeout_ms
                # the rest of a message of several statements is a transaction of its own
                s.kept_timeout_ms = s.timeout_ms if s.implicit else None
                s.in_transaction = s.failed = False
                s.local_timeout_ms = None
                self._close_cursors(None)
                for name in [n for n, p in s.portals.items() if p is not s.running]:
                    self._close_portals(name)  # a transaction's portals end with it
                return Result([], [], tag)
            return Result([], [], statement.tag)
        if isinstance(statement, Setting) and statement.tag == "DISCARD ALL":
            return self._discard_all()
        if isinstance(statement, Setting):
            return self._set(statement)
        if isinstance(statement, ShowSetting):
            shown = show_timeout(s.statement_timeout_ms)
            return Result([(statement.name, "string")], [(shown,)], "SHOW")
        if isinstance(statement, Declare):
            return self._declare(statement)
        if isinstance(statement, Fetch):
            return self._fetch(statement)
        if isinstance(statement, CloseCursor):
            if statement.name is not None and statement.name not in s.cursors:
                raise SqlError(f"cursor {statement.name!r} does not exist", "34000")
            self._close_cursors(statement.name)
            return Result([], [], "CLOSE CURSOR" if statement.name else "CLOSE CURSOR ALL")
        return self._execute(statement)

    def _set(self, statement: Setting) -> Result:
        """SET or RESET of the statement_timeout (RESET ALL resets it). SET LOCAL holds until the
        transaction block ends (outside one, the message's statements), as PostgreSQL's."""
        s = self.session
        ms = statement.value_ms or 0
        if statement.local:
            if s.in_transaction or s.implicit:
                s.local_timeout_ms = ms
        else:
            s.timeout_ms = ms
            s.local_timeout_ms = None
        return Result([], [], statement.tag)

    def _discard_all(self) -> Result:
        """DISCARD ALL: the session as a new connection has it, as PostgreSQL's (a pool
        hands it to another client): every cursor and portal closed (their readers let
        go) but the portal running it, every named prepared statement forgotten (the
        unnamed one stays, as PostgreSQL's), statement_timeout reset. Refused in a
        transaction block (25001), as PostgreSQL refuses it, and in an extended-protocol
        pipeline once a statement of it was executed (25001 too)."""
        s = self.session
        if s.in_transaction or s.implicit:
            raise SqlError("DISCARD ALL cannot run inside a transaction block", "25001")
        if s.pipelined:
            raise SqlError("DISCARD ALL cannot be executed within a pipeline", "25001")
        self._close_cursors(None)
        for name in [n for n, p in s.portals.items() if p is not s.running]:
            self._close_portals(name)
        self._forget_named_statements()
        s.timeout_ms = 0
        s.local_timeout_ms = None
        if s.kept_timeout_ms is not None:  # it runs first in its pipeline, and at once: a
            s.kept_timeout_ms = s.timeout_ms  # later failure there rolls back to its reset
        return Result([], [], "DISCARD ALL")

    def _forget_named_statements(self) -> None:
        """Forget every named prepared statement (DEALLOCATE ALL, DISCARD ALL): the unnamed
        one stays, as PostgreSQL keeps it apart from them."""
        statements = self.session.statements
        self.session.statements = {"": statements[""]} if "" in statements else {}

    # -- cursors

    def _declare(self, statement: Declare) -> Result:
        s = self.session
        if not (s.in_transaction or s.implicit):
            raise SqlError("DECLARE CURSOR can only be used in transaction blocks", "25P01")
        if statement.name in s.cursors:
            raise SqlError(f"cursor {statement.name!r} already exists", "42P03")
        result = self._execute(statement.statement)
        if isinstance(result, Stream):
            s.cursors[statement.name] = _Cursor(result.columns, result.rows, waits=True)
        elif isinstance(result, QueryRows):
            s.cursors[statement.name] = _Cursor(result.columns, result, waits=False)
        else:
            assert isinstance(result, Result), result
            s.cursors[statement.name] = _Cursor(result.columns, iter(result.rows), waits=False)
        return Result([], [], "DECLARE CURSOR")

    def _fetch(self, statement: Fetch) -> Result | _Rows:
        """A FETCH's rows: a SUBSCRIBE cursor's once they are ready; a query cursor's
        taken as they are sent (as Spark makes them: its jobs run as a query's)."""
        cursor = self.session.cursors.get(statement.name)
        if cursor is None:
            raise SqlError(f"cursor {statement.name!r} does not exist", "34000")
        if statement.backward:  # as PostgreSQL's NO SCROLL cursors
            raise _scan_forward()
        if statement.position != "forward" and cursor.waits:
            raise SqlError(
                f"FETCH {statement.position.upper()} is not supported on a SUBSCRIBE cursor: "
                "its rows come as they happen; FETCH n takes those that are ready",
                "0A000",
            )
        if not cursor.waits:
            skip, count = _forward_move(cursor, statement)
            taken = cursor.take(skip, count)
            return _Rows(cursor.columns, taken, lambda n: f"FETCH {n}", streamed=True)
        rows = cursor.fetch(statement.count, statement.timeout_s, self._interrupted)
        return Result(cursor.columns, rows, f"FETCH {len(rows)}")

    def _interrupted(self) -> None:
        """Raise if the client canceled the statement or went away."""
        if self.cancel.is_set():
            raise _canceled(self.timed_out)
        self._client_input(copying=False)

    def _close_cursors(self, name: str | None) -> None:
        """Close the cursor ``name``, or every cursor of the session (None)."""
        cursors = self.session.cursors
        for key in [name] if name is not None else list(cursors):
            cursor = cursors.pop(key, None)
            if cursor is None:
                continue
            try:
                cursor.close()
            except Exception as e:  # a reader that cannot expire must not end the session
                log.warning("closing cursor %r: %s", key, e)

    def _close_portals(self, name: str | None) -> None:
        """Close the portal ``name``, or every portal of the session (None): a
        SUBSCRIBE's stream lets go of its reader, even if it was only described, and a
        query's rows of their readers (no job of theirs runs again)."""
        portals = self.session.portals
        for key in [name] if name is not None else list(portals):
            portal = portals.pop(key, None)
            if portal is None:
                continue
            try:
                _close_answer(portal.result)
            except Exception as e:  # a reader that cannot expire must not end the session
                log.warning("closing portal %r: %s", key, e)

    def _send_result(self, result: _Answer) -> None:
        """Send a simple query's ``result``: its row description, then its rows."""
        if isinstance(result, Stream):
            self._stream(result)
            return
        if isinstance(result, Result) and not result.tag:
            self._send(EmptyQueryResponse())
            return
        rows = _Rows.of(result)
        try:
            if rows.columns:
                self._send(RowDescription(fields=_fields(rows.columns)))
            self._send_rows(rows)
        finally:
            rows.close()

    def _send_rows(self, rows: _Rows, limit: int = 0) -> bool:
        """Send ``rows``, up to ``limit`` (0: all) as they are taken, then their
        CommandComplete; False, with no CommandComplete, if rows are left after
        ``limit`` (the portal is suspended). Taking a query's rows runs its Spark
        jobs: they are :meth:`_watched` as its planning is."""
        sent = 0
        with self._watched() if rows.streamed else contextlib.nullcontext():
            while not limit or sent < limit:
                row = rows.take()
                if row is _END:
                    break
                types = _types(rows.columns, len(row))
                values = [encode_value(v, t) for v, t in zip(row, types, strict=True)]
                self._send(DataRow(columns=values))
                sent += 1
            if limit and sent == limit and rows.more():
                return False
        self._send(CommandComplete(tag=rows.tag(sent)))  # the rows of this Execute, as PostgreSQL's
        return True

    def _stream(self, stream: Stream) -> None:
        before = self._phase()
        self._send(CopyOutResponse(overall_format=0, col_formats=[0] * len(stream.columns)))
        self._flush()
        sent = 0
        self.cancel.clear()
        flushed = time.monotonic()
        try:
            for row in stream.rows:
                if self.cancel.is_set():
                    raise _canceled(self.timed_out)
                self._client_input(copying=True)
                if not row:
                    self._flush()
                    continue
                types = _types(stream.columns, len(row))
                line = "\t".join(_copy_text(v, t) for v, t in zip(row, types, strict=True)) + "\n"
                self._send(CopyData(data=line.encode("utf-8")))
                sent += 1
                if time.monotonic() - flushed > 0.05:  # rows reach the client within 50 ms
                    self._flush()
                    flushed = time.monotonic()
        except BaseException:
            self._restore_phase(before)  # the ErrorResponse the caller sends ends the COPY
            raise
        finally:
            close = getattr(stream.rows, "close", None)
            if close is not None:
                close()
        self._send(CopyDone())
        self._restore_phase(before)
        self._send(CommandComplete(tag=f"COPY {sent}"))

    def _phase(self) -> Any:
        """The protocol state of the connection's codec (pygwire's), to restore after a
        COPY OUT: its CopyDone returns to the simple query protocol whatever the COPY
        started in, and then refused the ``Sync`` of an extended-protocol SUBSCRIBE."""
        return self.conn._state_machine._state

    def _restore_phase(self, state: Any) -> None:
        self.conn._state_machine._state = state
        self.conn._decoder.phase = state.phase

    # -- the extended protocol

    def _parse(self, msg: Parse) -> None:
        """Prepare ``msg``'s statement. A named one that exists is SqlError 42P05 and stays
        as it was (a driver that lost track of its names learns it, and the statement it
        binds is the one it prepared); the unnamed one is replaced, as PostgreSQL's.
        A text of several statements is refused (42601), as PostgreSQL refuses it."""
        s = self.session
        statements = split(msg.query)
        if len(statements) > 1:
            raise SqlError("cannot insert multiple commands into a prepared statement", "42601")
        if s.failed and not _ends_transaction(statements):
            raise _aborted()
        if msg.statement and msg.statement in s.statements:
            raise SqlError(f"prepared statement {msg.statement!r} already exists", "42P05")
        s.statements[msg.statement] = _Prepared.of(msg.query, list(msg.param_types))
        self._send(ParseComplete())

    def _bind(self, msg: Bind) -> None:
        s = self.session
        if msg.statement not in s.statements:
            raise SqlError(f"prepared statement {msg.statement!r} does not exist", "26000")
        prepared = s.statements[msg.statement]
        sql, types = prepared.sql, prepared.types
        # As many parameters as the statement has, as PostgreSQL counts them: no $n is left
        # in its text, none dropped. A statement without "$" nor declared types has none.
        counted = bool(types or msg.param_values) or "$" in sql
        required = max(len(types), parameter_count(sql)) if counted else 0
        if len(msg.param_values) != required:
            raise SqlError(
                f"bind message supplies {len(msg.param_values)} parameters, but prepared "
                f'statement "{msg.statement}" requires {required}',
                "08P01",
            )
        if s.failed and (msg.param_values or not _ends_transaction(split(sql))):
            raise _aborted()
        formats = msg.param_formats or [0]
        if len(formats) not in (1, len(msg.param_values)):  # PostgreSQL's rule for them
            raise SqlError(
                f"bind message has {len(formats)} parameter formats but "
                f"{len(msg.param_values)} parameters",
                "08P01",
            )
        params = []
        for i, value in enumerate(msg.param_values):
            declared = types[i] if i < len(types) else 0
            oid = prepared.bound_oid(i + 1)
            # A value is of the type Describe reports for it: an undeclared one of the type
            # inferred (``$1::interval``: a binary interval), a declared one of its own (a
            # text sent in binary is its UTF-8), then bound as ``oid``.
            sent = oid if declared == 0 else declared
            binary = (formats[i] if len(formats) > 1 else formats[0]) == 1
            params.append(Param(_param_text(value, sent, binary), oid))
        if any(f != 0 for f in msg.result_formats):
            raise SqlError("binary results are not supported; ask for text", "0A000")
        bound = bind(sql, params) if params else sql
        self._close_portals(msg.portal)  # a Bind replaces a portal of its name
        s.portals[msg.portal] = _Portal(
            bound,
            declared=kept_columns(prepared.columns, types),
            typed_as=_typed_as(prepared, params),
        )
        self._send(BindComplete())

    def _portal_result(self, portal: _Portal) -> _Answer:
        if portal.result is None:
            statements = split(portal.sql)
            assert len(statements) <= 1, f"Parse let several statements in: {statements}"
            portal.statement = parse(statements[0]) if statements else Empty()
            if portal.typed_as is not None and isinstance(portal.statement, SelectStatement):
                typed_as = portal.typed_as.typed_as()
                if typed_as is not None:
                    portal.statement = replace(portal.statement, typed_as=typed_as)
            s = self.session
            s.keep_timeout()  # a pipeline's first statement starts its implicit transaction
            self.session.running = portal
            try:
                portal.result = self._run(portal.statement)
            finally:
                self.session.running = None
        return portal.result

    def _describe(self, msg: Describe) -> None:
        s = self.session
        if msg.kind == "S":
            if msg.name not in s.statements:
                raise SqlError(f"prepared statement {msg.name!r} does not exist", "26000")
            prepared = s.statements[msg.name]
            if not s.failed:  # the columns it reads may be looked up
                prepared.infer_with(self._columns_reader())
            sql, oids = prepared.sql, _statement_oids(prepared)
            if s.failed and not _ends_transaction(split(sql)):
                if _may_answer_rows(sql):  # describing it may look the catalog up
                    raise _aborted()
                columns = None  # as PostgreSQL, which refuses only a statement with rows
            else:
                columns = self._statement_columns(prepared)
            if columns:
                columns = with_declared(columns, kept_columns(prepared.columns, oids))
            self._send(ParameterDescription(type_oids=oids))
            self._send(RowDescription(fields=_fields(columns)) if columns else NoData())
            return
        portal = s.portals.get(msg.name)
        if portal is None and msg.name in s.cursors:  # a cursor is a portal too
            self._send(RowDescription(fields=_fields(s.cursors[msg.name].columns)))
            return
        if portal is None:
            raise SqlError(f"portal {msg.name!r} does not exist", "34000")
        result = self._portal_result(portal)
        if not isinstance(result, Stream) and result.columns:
            columns = with_declared(result.columns, portal.declared)
            self._send(RowDescription(fields=_fields(columns)))
            portal.described = True
        else:
            self._send(NoData())

    def _columns_reader(self) -> ColumnsOf:
        """For one inference: the columns of the shard a query names ``name``, for the types
        of the parameters beside them (:func:`~timeshard.server.parameter_types.arrow_columns`);
        None if there is no such shard, or it cannot be read now (the parameters beside its
        columns stay text). The shards are listed once, and each shard read once."""
        engine = self.server.engine
        known: set[str] | None = None
        read: dict[str, dict[str, str | None] | None] = {}

        def columns_of(name: str) -> dict[str, str | None] | None:
            nonlocal known
            if name not in read:
                try:
                    if known is None:
                        known = set(engine.known_shards())
                    schema = engine.client.state(name).data_schema if name in known else None
                    read[name] = None if schema is None else arrow_columns(schema)
                except Exception as e:  # a fault: the parameters beside its columns stay text
                    log.warning("the columns of %r are not known: %s", name, e)
                    read[name] = None
            return read[name]

        return columns_of

    def _statement_columns(self, prepared: _Prepared) -> list[tuple[str, str]] | None:
        """The columns a prepared statement answers, found without running it: a client
        that describes before it executes (JDBC, a driver's prepared statements) reads
        its rows with them. None if it answers no rows (or COPY data).

        Its parameters stand as values of the types the client declared in Parse
        (:func:`_placeholders`; an undeclared one of the type inferred for it,
        :meth:`_Prepared.bound_oid`, else text, as the client then sends it), bound as
        Execute binds them:
        Describe answers the types Execute's rows have. A statement that does not resolve with them
        there is described once bound, by its portal; one without parameters that
        does not resolve is an error, as PostgreSQL answers it at once.
        """
        statements = split(prepared.sql)
        if len(statements) != 1:
            return None
        params = _placeholders(prepared)
        text = bind(statements[0], params) if params else statements[0]
        try:
            statement = parse(text)
            if isinstance(statement, Fetch):
                cursor = self.session.cursors.get(statement.name)
                return cursor.columns if cursor is not None else None
            if isinstance(statement, Empty | Deallocate | Declare | CloseCursor):
                return None
            return self.server.engine.describe(statement)
        except SqlError:
            if params:
                return None
            raise

    def _execute_portal(self, msg: Execute) -> None:
        portal = self.session.portals.get(msg.portal)
        if portal is None:
            raise SqlError(f"portal {msg.portal!r} does not exist", "34000")
        result = self._portal_result(portal)
        if isinstance(result, Stream):
            self._stream(result)
        elif isinstance(result, Result) and not result.tag:
            self._send(EmptyQueryResponse())
        else:
            if portal.rows is None:
                portal.rows = _Rows.of(result)
            if not self._send_rows(portal.rows, msg.max_rows):
                self._send(PortalSuspended())
                return
        assert portal.statement is not None, portal
        self.session.pipelined = _pipelined(portal.statement, self.session.pipelined)


__all__ = ["TYPE_OIDS", "PgServer", "check_access", "encode_value"]
