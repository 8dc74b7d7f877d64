"""The engine of ``timeshard serve``: one SparkSession, every object ticking, SQL on top.

An :class:`Engine` holds the sources and materialized views created with
SQL (:mod:`timeshard.server.statements`) and steps each of them on a
thread of its own, one tick per ``tick_s``. It answers statements from any
number of client threads.

Durability: every CREATE is recorded in the catalog shard as an entry of
kind ``statement`` named after its object, holding the statement's text and
its sequence number; DROP removes it. A starting engine replays the recorded
statements in order, so a restart -- after a clean stop or ``kill -9`` --
restores every object, and each resumes where its shards end (an ingestion
from its remap, a view's sink from its shard's upper). Two engines on one
location are replicas of the same objects: both tick them and converge
through compare-and-append, as two ``timeshard run`` processes do. Each
follows the catalog (every ``follow_s``): it runs the objects another server
creates, and stops (closes, without dropping) those another server drops.

Read-only replicas: an engine started ``read_only`` builds and ticks no
object and writes nothing of its own; it follows the catalog (every
``follow_s``), so it lists the objects a writing server creates and drops,
and answers queries and SUBSCRIBEs from their shards. CREATE and DROP are
refused (25006). :meth:`Engine.promote` (``ALTER SYSTEM PROMOTE``) makes it a
writer: it restores every recorded object, as a restart does, and ticks it.

Failure isolation: one object's failing tick is caught, kept as that
object's last error (see ``timeshard_objects``) and reported as its health;
the others tick on. A statement's error is a :class:`SqlError` with an
SQLSTATE; nothing a client sends stops the engine.

Reads: ``SELECT ... [AS OF t]`` reads every shard it names at one time (the
greatest time all are readable at, unless ``AS OF`` says), each registered as
a temporary view of a Spark session of its own, so concurrent queries never
see each other's names. A query without ``AS OF`` over a shard that holds no
readable time yet (a view just created) waits for one, up to ``read_wait_s``, or
until the statement is canceled (:meth:`Engine.cancel`: 57014).
``timeshard_objects`` is the introspection relation: one row per shard with
its frontiers, lag, health, generation, rows and bytes, and its last error.
A client's SQL (a query, a view's) runs in the server's JVM: the functions
that call Java methods by name (``reflect``, ``java_method``, ``try_reflect``)
are refused (42501) before anything runs.

Invariants:

1. An object is created (its shards exist, its catalog entry is written,
   and a source's first tick is committed) before CREATE answers; a failed
   CREATE leaves no entry, no running object, no hold on an input and no
   replication slot it created (a view's shard, made first, stays holding
   nothing, and a source's shards stay: its retry takes them). CREATE claims its name in
   the catalog before it builds anything (a compare-and-set,
   :meth:`~timeshard.catalog.Catalog.claim_statement`): of two servers
   creating one name at once, one creates it and the other answers 42710,
   having written nothing; the loser's server then runs the winner's object
   as a replica, as it runs any object another server creates. A server
   killed in the middle of a CREATE (its client got no answer) may leave the
   claim behind: its restart then runs the statement, as any recorded one.
2. DROP of an object others read is refused unless CASCADE, which drops the
   readers first. DROP of an object that an object being created reads is
   refused (2BP01), CASCADE or not: a CREATE records the shards it reads
   before it builds anything, and refuses one being dropped. A name being
   dropped is not created (42710) until its shards are closed. Each object's
   statement is forgotten last, once the rest of it is dropped: a DROP that fails part
   way leaves the objects not dropped yet as objects (halted, recorded, their error
   saying so), and its retry completes it; a restart finishes the DROP of a view whose
   shard a crash left closed.
3. Every object ticks on a thread of its own, so a slow or failing object
   delays no other, and no statement waits for a tick: the engine's lock
   guards only the table of objects. An object is halted (its tick under way
   finished) before it is closed or dropped.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from timeshard.catalog import CATALOG_SHARD, Catalog, read_catalog
from timeshard.errors import CorruptState, InvalidUsage, SinceError, TimeshardError
from timeshard.persist import PersistClient
from timeshard.persist.as_of import common_as_of
from timeshard.server.dialect import DIALECT, STORED_DIALECT, overfull
from timeshard.server.parameter_types import arrow_columns
from timeshard.server.pgtypes import column_type
from timeshard.server.query_rewrites import (
    TYPING,
    _alias,
    _cte_references,
    _dates_moved_by_intervals,
    _int_limits,
    _interval_casts,
    _json_literals,
    _naive_timestamps,
    _numeric_casts,
    _refuse_java_calls,
    _refuse_writes,
)
from timeshard.server.rows import (
    QueryRows,
    _calendar_intervals_as_text,
    _months_of_intervals,
    _query_rows,
    _subscribe_rows,
    _typed_as,
    check_no_error,
    spark_error,
)
from timeshard.server.statements import (
    CreateSink,
    CreateSource,
    CreateView,
    Drop,
    Explain,
    Ignored,
    Promote,
    Query,
    Show,
    ShowCreate,
    SqlError,
    Statement,
    Subscribe,
    TypedAs,
    parse,
)
from timeshard.storage.health import STATUS_SHARD, Health

log = logging.getLogger(__name__)

#: The introspection relation's name, and its columns.
OBJECTS_RELATION = "timeshard_objects"
_OBJECT_COLUMNS = {
    "name": "string",
    "object": "string",
    "type": "string",
    "status": "string",
    "since": "long",
    "upper": "long",
    "lag_ms": "long",
    "generation": "long",
    "rows": "long",
    "bytes": "long",
    "error": "string",
}
_SYSTEM_SHARDS = (CATALOG_SHARD, STATUS_SHARD)
#: A source's remap shard is named ``<source>.remap``: its reclocking bindings, internal to it.
_REMAP_SUFFIX = ".remap"
#: The newest version of the typing rewrites (:meth:`Engine.resolve` without ``stored``:
#: an unconstrained numeric keeps its value, a timestamp has no zone, ...;
#: ``query_rewrites.TYPING``). The statement's entry of a view serve created records as
#: ``typed`` the lowest version whose rewrites resolve its query as it was installed: a
#: server refuses an entry of a version it does not know (CorruptState), so an older one
#: never types such a view's query otherwise, and a view no newer rewrite changes stays
#: readable to it. The entry records the query's resolution too (``resolved``), from
#: which the view is installed at a restore, by another server and at a promotion, not
#: resolved again: a change to those rewrites types the views created from then on
#: otherwise and leaves the views recorded before as they are. Only the entries recorded
#: before ``resolved`` was are resolved again, with the rewrites of their version (a
#: change that types a query otherwise is a new version). A view recorded without
#: ``typed`` keeps Spark's types.
TYPED_VIEWS = TYPING
#: Per CREATE statement type: its command tag, and the kind of object it records.
_CREATES: dict[type, tuple[str, str]] = {
    CreateSource: ("CREATE SOURCE", "source"),
    CreateView: ("CREATE MATERIALIZED VIEW", "view"),
    CreateSink: ("CREATE SINK", "sink"),
}


@dataclass
class Result:
    """Rows and their columns (name, Arrow-or-Spark type name), and the command tag."""

    columns: list[tuple[str, str]]
    rows: list[tuple[Any, ...]]
    tag: str


@dataclass
class Stream:
    """A SUBSCRIBE: its columns, and its rows as they become definite."""

    columns: list[tuple[str, str]]
    rows: Iterator[tuple[Any, ...]]


@dataclass
class _Object:
    name: str
    kind: str  # "source" | "view"
    sql: str
    seq: int
    runner: Any  # Ingestion | MaterializedView
    shards: list[str]
    reads: list[str] = field(default_factory=list)
    last_error: str | None = None
    ticks: int = 0
    #: On a read-only engine, every object is a standby: no runner, no ticks, no writes.
    standby: bool = False
    health: Any = None  # a sink's Health: an export reports no health of its own
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def step(self) -> None:
        """One tick; a failure is kept as ``last_error`` (and retried on the next tick)."""
        try:
            self.runner.step()
            error = getattr(getattr(self.runner, "sink", None), "last_error", None)
        except Exception as e:  # an ingestion marks itself stalled
            log.warning("%s %s: tick failed: %s", self.kind, self.name, e)
            error = f"{type(e).__name__}: {str(e)[:300]}"
        # Every tick: Health writes only if the stored row is not this one already, which
        # another replica's report may have replaced (an unchanged error is no reason to skip).
        self.report("running" if error is None else "stalled", error)
        self.last_error = error
        self.ticks += 1

    def report(self, status: str, error: str | None = None) -> None:
        """A sink's health (sources and views report their own)."""
        if self.health is None:
            return
        try:
            self.health.report(self.name, status, error)
        except Exception as e:  # best effort: the next change tries again
            log.warning("sink %s: cannot record health %s: %s", self.name, status, e)

    def run(self, tick_s: float) -> None:
        """Tick every ``tick_s`` until stopped."""
        while not self.stop.is_set():
            started = time.monotonic()
            self.step()
            self.stop.wait(max(0.0, tick_s - (time.monotonic() - started)))

    def start(self, tick_s: float) -> None:
        self.thread = threading.Thread(
            target=self.run, args=(tick_s,), name=f"timeshard-{self.name}", daemon=True
        )
        self.thread.start()

    def halt(self) -> None:
        """Stop ticking: wait for the tick under way to end."""
        self.stop.set()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join()


#: How soon, then how seldom at most, the jobs of a canceled statement are canceled again
#: while it runs (see :meth:`Engine.cancel`): the wait doubles from the first to the second.
CANCEL_REPEAT_S = (0.1, 5.0)


@dataclass
class _Cancel:
    """The cancel of one statement (:meth:`Engine.cancellable`): ``canceled`` once it is
    canceled, ``ended`` once the statement ended. ``lock`` orders a repeated cancel of its
    jobs before the end: one begun before the statement ended reaches Spark before the
    connection's next statement (under the same job tag) can submit a job."""

    canceled: threading.Event = field(default_factory=threading.Event)
    ended: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Engine:
    """The objects of one location, each ticking on its own thread, answering SQL."""

    def __init__(
        self,
        spark: Any,
        client: PersistClient,
        *,
        tick_s: float = 1.0,
        clock: Callable[[], int] | None = None,
        read_wait_s: float = 60.0,
        read_only: bool = False,
        follow_s: float = 1.0,
    ) -> None:
        self.spark = spark
        self.client = client
        self.tick_s = tick_s
        self.read_wait_s = read_wait_s
        self.clock = clock or (lambda: time.time_ns() // 1_000_000)
        self.objects: dict[str, _Object] = {}
        #: Guards objects, _creating, _dropping and _seq; held briefly.
        self._lock = threading.Lock()
        #: The objects being created, by name: the shards each reads, once it knows them.
        self._creating: dict[str, set[str]] = {}
        #: The names and shards of the objects being dropped, until their shards are closed.
        self._dropping: set[str] = set()
        self._seq = 0
        self._started = False
        self._catalog = Catalog(client, self.clock)
        self.read_only = read_only
        self.follow_s = follow_s
        #: Held by a promotion, a DROP and each pass of the follower: one at a time. A pass
        #: that read the catalog before a DROP forgot the object's entry would run it again.
        self._serial = threading.Lock()
        self._following = threading.Event()  # set: the follower stops
        self._follower: threading.Thread | None = None
        #: Per job tag a statement runs under (:meth:`cancellable`): its cancel.
        self._cancels: dict[str, _Cancel] = {}
        self._cancels_lock = threading.Lock()
        #: The calling thread's statement's cancel event (``canceled``), inside cancellable.
        self._statement = threading.local()
        #: The recorded objects that failed to restore or replicate, by name: their seq.
        #: The follower does not retry them every pass (a restart or promotion does).
        self._failed: dict[str, int] = {}

    # -- life

    def start(self) -> list[str]:
        """Restore the recorded objects and start each ticking; the restore failures.

        A read-only engine restores none: it lists them. Either follows the catalog.
        """
        failures = []
        if self.read_only:
            self._follow_once()
        else:
            failures = self._restore()
        self._follower = threading.Thread(
            target=self._follow, name="timeshard-follower", daemon=True
        )
        self._follower.start()
        return failures

    def promote(self) -> Result:
        """Make a read-only engine a writer: restore and tick every recorded object.

        The failures to restore are the objects' own: each is reported, as at a
        start, and the others run.
        """
        with self._serial:
            if not self.read_only:
                return Result([], [], "ALTER SYSTEM")
            with self._lock:
                self.objects = {n: o for n, o in self.objects.items() if not o.standby}
                self.read_only = False
            failures = self._restore()
        for failure in failures:
            log.error("promoted, but not restored: %s", failure)
        return Result([], [], "ALTER SYSTEM")

    def _follow(self) -> None:
        """Follow the catalog every ``follow_s`` until closed."""
        while not self._following.wait(self.follow_s):
            try:
                with self._serial:
                    self._follow_once()
            except Exception as e:  # the catalog unreadable for now: the objects stay as they are
                log.warning("cannot follow the catalog: %s", e)

    def _follow_once(self) -> None:
        with self._lock:
            before = dict(self.objects)  # each recorded before it was added: see _replicate
        catalog = read_catalog(self.client)
        entries = {e.name: e for e in catalog if e.kind == "statement"}
        if self.read_only:
            self._list(entries, catalog)
        else:
            self._replicate(entries, before)

    def _replicate(self, entries: dict[str, Any], before: dict[str, _Object]) -> None:
        """Run the objects another server created; stop those another server dropped.

        ``before`` are the objects this engine ran before ``entries`` were read:
        every one was recorded before it was added, so one whose entry is gone
        was dropped. (An object added since may be missing from ``entries``.)
        """
        with self._lock:
            known = set(self.objects) | set(self._creating)
        new = [
            e
            for n, e in entries.items()
            if n not in known and self._failed.get(n) != int(e.definition.get("seq", 0))
        ]
        for entry in sorted(new, key=lambda e: int(e.definition.get("seq", 0))):
            seq = int(entry.definition.get("seq", 0))
            with self._lock:
                self._seq = max(self._seq, seq)
            try:
                statement = _recorded(str(entry.definition["sql"]))
                self._create(
                    statement,
                    record=False,
                    seq=seq,
                    typed=_typed(entry.definition),
                    resolved=_resolution(entry.definition),
                    entry=entry.definition,
                )
                log.info("running %s, which another server created", entry.name)
            except SqlError as e:
                if e.sqlstate != "42710":  # created here meanwhile: nothing to do
                    self._failed[entry.name] = seq
                    log.error("cannot run %s, which another server created: %s", entry.name, e)
            except Exception as e:
                self._failed[entry.name] = seq
                log.error("cannot run %s, which another server created: %s", entry.name, e)
        for name, obj in before.items():
            if name in entries or obj.standby:
                continue
            with self._lock:
                if self.objects.get(name) is not obj:
                    continue  # dropped here
                del self.objects[name]
            log.info("stopping %s, which another server dropped", name)
            obj.halt()
            try:
                obj.runner.close()
                if obj.health is not None:
                    obj.health.close()
            except Exception as e:
                log.warning("closing %s: %s", name, e)

    def _list(self, entries: dict[str, Any], catalog: list[Any]) -> None:
        """A read-only engine's objects: a standby of each recorded CREATE."""
        with self._lock:
            listed = {n for n, o in self.objects.items() if o.standby}
        fresh = {}
        for name in set(entries) - listed:
            definition = entries[name].definition
            try:
                fresh[name] = self._standby(
                    str(definition["sql"]),
                    int(definition["seq"]),
                    catalog,
                    _resolution(definition),
                )
            except Exception as e:
                log.warning("read-only: cannot list %s: %s", name, e)
        with self._lock:
            if not self.read_only:
                return
            for name in listed - set(entries):
                del self.objects[name]
            self.objects.update(fresh)

    def _standby(
        self,
        sql: str,
        seq: int,
        catalog: list[Any],
        resolved: tuple[str, dict[str, str]] | None = None,
    ) -> _Object:
        """The object a recorded CREATE makes, as a read-only engine lists it (no runner);
        ``resolved``: its recorded resolution, if it has one (:func:`_resolution`)."""
        statement = _recorded(sql)
        if isinstance(statement, CreateSource):
            shards = sorted(
                e.name
                for e in catalog
                if e.kind == "export" and e.definition.get("source") == statement.name
            )
            return _Object(statement.name, "source", sql, seq, None, shards, standby=True)
        if isinstance(statement, CreateView):
            inputs = (resolved or self.resolve(statement.query, stored=True))[1]
            reads = sorted(set(inputs.values()))
            return _Object(
                statement.name, "view", sql, seq, None, [statement.name], reads, standby=True
            )
        return _Object(statement.name, "sink", sql, seq, None, [], [statement.input], standby=True)

    def _restore(self) -> list[str]:
        failures = []
        entries = [e for e in read_catalog(self.client) if e.kind == "statement"]
        for entry in sorted(entries, key=lambda e: int(e.definition.get("seq", 0))):
            self._seq = max(self._seq, int(entry.definition.get("seq", 0)))
            try:
                statement = _recorded(str(entry.definition["sql"]))
                self._create(
                    statement,
                    record=False,
                    seq=int(entry.definition["seq"]),
                    typed=_typed(entry.definition),
                    resolved=_resolution(entry.definition),
                    entry=entry.definition,
                )
            except Exception as e:  # one bad entry must not keep the others down
                log.error("cannot restore %s: %s", entry.name, e)
                failures.append(f"{entry.name}: {type(e).__name__}: {e}")
                self._failed[entry.name] = int(entry.definition.get("seq", 0))
        with self._lock:
            self._started = True
            for obj in self.objects.values():
                obj.start(self.tick_s)
        return failures

    def close(self) -> None:
        """Stop every object's ticks, then close them (views keep their durable holds)."""
        self._following.set()
        if self._follower is not None and self._follower is not threading.current_thread():
            self._follower.join()  # a pass under way may be creating an object
        with self._lock:
            objects = sorted(self.objects.values(), key=lambda o: -o.seq)
            self.objects.clear()
            self._started = False
        for obj in objects:
            obj.stop.set()
        for obj in objects:
            obj.halt()
            if obj.standby:
                continue
            try:
                obj.runner.close()
                if obj.health is not None:
                    obj.health.close()
            except Exception as e:
                log.warning("closing %s: %s", obj.name, e)

    # -- statements

    @contextlib.contextmanager
    def cancellable(self, tag: str) -> Iterator[None]:
        """The Spark jobs the calling thread starts inside carry the job tag ``tag``, and
        are interrupted when canceled: :meth:`cancel` (from any thread) stops them, and
        no other's. A client connection's statement runs inside it, tagged its own.

        A SparkContext job tag is a local property of the thread (each Python thread has
        its own JVM thread, PySpark's pinned threads), so queries running at once on other
        connections keep theirs. A SparkSession's tags (``addTag``/``interruptTag``) would
        not do: ``interruptTag`` finds only the tags the calling thread added.

        A wait of the statement that runs no job (a query waiting for a readable time)
        ends too when canceled: SqlError 57014.
        """
        context = self.spark.sparkContext
        interrupt = context.getLocalProperty("spark.job.interruptOnCancel")
        cancel = _Cancel()
        with self._cancels_lock:
            before = self._cancels.get(tag)
            self._cancels[tag] = cancel
        outer = getattr(self._statement, "canceled", None)
        self._statement.canceled = cancel.canceled
        context.addJobTag(tag)
        context.setInterruptOnCancel(True)
        try:
            yield
        finally:
            with cancel.lock:
                cancel.ended.set()
            context.removeJobTag(tag)
            context.setLocalProperty("spark.job.interruptOnCancel", interrupt)  # type: ignore[arg-type]
            self._statement.canceled = outer
            with self._cancels_lock:
                if before is None:
                    self._cancels.pop(tag, None)
                else:
                    self._cancels[tag] = before

    def cancel(self, tag: str) -> None:
        """Cancel the statement running with the job tag ``tag`` (see :meth:`cancellable`):
        its Spark jobs, and its wait for a readable time; nothing if none is.

        Spark cancels the jobs of a tag that run, not those that start later: a cancel
        that came between two jobs of the statement (before the first, or between two
        partitions of its rows) would let the next one run on. So the jobs of the tag are
        canceled again until the statement ends, at a wait that grows from 0.1 s to 5 s
        (:data:`CANCEL_REPEAT_S`: a statement stuck sending rows to a client that stopped
        reading costs one call every 5 s). Spark takes a tag's cancel in order with the job
        submissions, so a repeat begun before the statement ended never reaches the jobs
        of the connection's next statement, which carry the same tag."""
        with self._cancels_lock:
            cancel = self._cancels.get(tag)
        context = self.spark.sparkContext
        if cancel is None:
            context.cancelJobsWithTag(tag)
            return
        with self._cancels_lock:
            first = not cancel.canceled.is_set()
            cancel.canceled.set()
        context.cancelJobsWithTag(tag)
        if first:
            threading.Thread(
                target=self._cancel_until_ended,
                args=(tag, cancel),
                name=f"timeshard-cancel-{tag}",
                daemon=True,
            ).start()

    def _cancel_until_ended(self, tag: str, cancel: _Cancel) -> None:
        wait, longest = CANCEL_REPEAT_S
        while not cancel.ended.wait(wait):
            with cancel.lock:
                if cancel.ended.is_set():
                    return
                try:
                    self.spark.sparkContext.cancelJobsWithTag(tag)
                except Exception as e:  # the session stopped: no job runs any more
                    log.warning("canceling the jobs of %s again: %s", tag, e)
                    return
            wait = min(wait * 2, longest)

    def execute(self, statement: Statement) -> Result | Stream | QueryRows:
        """Run one statement; a :class:`SqlError` says why it failed. A query's rows come
        as Spark makes them (:class:`QueryRows`): the caller closes them."""
        try:
            return self._execute(statement)
        except SqlError:
            raise
        except SinceError as e:
            raise SqlError(str(e), "22023") from e
        except InvalidUsage as e:
            raise SqlError(str(e), "22023") from e
        except TimeshardError as e:
            raise SqlError(f"{type(e).__name__}: {e}", "XX000") from e

    def _execute(self, statement: Statement) -> Result | Stream | QueryRows:
        if isinstance(statement, Promote):
            return self.promote()
        if isinstance(statement, CreateSource | CreateView | CreateSink | Drop) and self.read_only:
            verb = "DROP" if isinstance(statement, Drop) else "CREATE"
            raise SqlError(
                f"cannot execute {verb} in a read-only server: ALTER SYSTEM PROMOTE makes it "
                "a writer",
                "25006",
            )
        if isinstance(statement, CreateSource | CreateView | CreateSink):
            return self._create(statement, record=True)
        if isinstance(statement, Drop):
            return self._drop(statement)
        if isinstance(statement, Show):
            return self._show(statement)
        if isinstance(statement, ShowCreate):
            obj = self._object(statement.name, statement.kind)
            return _select(["name", "create_sql"], [(obj.name, obj.sql)])
        if isinstance(statement, Explain):
            return self._explain(statement.name)
        if isinstance(statement, Query):
            return self.query_rows(statement.query, statement.as_of, statement.typed_as)
        if isinstance(statement, Subscribe):
            return self.subscribe(statement)
        if isinstance(statement, Ignored):
            return Result([], [], statement.tag)
        raise SqlError(f"statement {statement!r} is not supported", "0A000")

    def describe(self, statement: Statement) -> list[tuple[str, str]] | None:
        """The columns of the rows ``statement`` answers, without running it (no Spark job,
        no reader): what the extended protocol's Describe of a statement answers. None for
        a statement that answers no rows, or answers COPY data (a SUBSCRIBE).

        A query's columns come from Spark's analysis of it over empty relations of its
        shards' schemas; a :class:`SqlError` says why a query does not resolve.
        """
        if isinstance(statement, Query):
            return self._query_columns(statement.query)
        if isinstance(statement, Show):
            names = ["name", "type"] if statement.what == "objects" else _SHOWN[statement.what][1]
            return [(n, "string") for n in names]
        if isinstance(statement, ShowCreate):
            return [("name", "string"), ("create_sql", "string")]
        if isinstance(statement, Explain):
            return list(_EXPLAIN_COLUMNS)
        return None

    def _query_columns(self, query: str) -> list[tuple[str, str]]:
        from pyspark.errors import PySparkException

        from timeshard.spark.session import arrow_to_spark_schema
        from timeshard.spark.sqltext import empty_frame

        spark_sql, inputs = self.resolve(query)
        session = self.spark.newSession()
        for alias, shard in inputs.items():
            schema = arrow_to_spark_schema(self.client.state(shard).data_schema)
            empty_frame(session, schema).createOrReplaceTempView(alias)
        if OBJECTS_RELATION in spark_sql:
            empty_frame(session, _objects_schema()).createOrReplaceTempView(OBJECTS_RELATION)
        try:
            fields = session.sql(spark_sql).schema.fields
        except PySparkException as e:
            message = (e.getMessage() or str(e)).strip().splitlines()[0]
            raise SqlError(message, e.getSqlState() or "XX000") from e
        return [(f.name, column_type(f.dataType)) for f in fields]

    def _object(self, name: str, kind: str | None = None) -> _Object:
        obj = self.objects.get(name)
        if obj is None or (kind is not None and obj.kind != kind):
            what = {"source": "source", "view": "materialized view", "sink": "sink"}.get(
                kind or "", "object"
            )
            raise SqlError(f"unknown {what} {name!r}", "42P01")
        return obj

    def _create(
        self,
        statement: CreateSource | CreateView | CreateSink,
        *,
        record: bool,
        seq: int | None = None,
        typed: int | None = None,
        resolved: tuple[str, dict[str, str]] | None = None,
        entry: Mapping[str, Any] | None = None,
    ) -> Result:
        """Run a CREATE: claim its name in the catalog (``record``: a client's statement;
        else one the catalog records, restored or another server's, of sequence ``seq``).

        ``typed``, for a view: the version of the typing rewrites of ad-hoc queries
        (:meth:`resolve`) its query has, as its recorded entry says (:func:`_typed`; 0:
        none); None for a client's CREATE, which types a new view's query and records
        that it did, and leaves a view recorded before (a run file's, taken over) as its
        shard is (with the version that resolves it so, if any).

        ``resolved``, for a view the catalog records: the Spark SQL and inputs its
        statement's entry records (:func:`_resolution`; None for an entry recorded
        before entries had them). A client's CREATE resolves its query before it claims
        the name and records that in the claim: the view is installed from it at every
        restore, by another server and at a promotion, not resolved again (a later
        version of :meth:`resolve` may resolve it otherwise: the view would be
        redefined from its shard's upper on, or refused for its shard's schema).
        ``entry``: that statement's recorded definition; one recorded without a
        resolution (before entries had them) gets the one its view was installed
        from, once the view stands, so that a later version resolves it no more.
        """
        tag, kind = _CREATES[type(statement)]
        with self._lock:
            if statement.name in self._dropping:
                raise SqlError(
                    f"{statement.name!r} is being dropped: a name is not used twice", "42710"
                )
            if statement.name in self.objects or statement.name in self._creating:
                if statement.if_not_exists:
                    return Result([], [], tag)
                raise SqlError(f"{statement.name!r} already exists", "42710")
            if seq is None:
                self._seq += 1
                seq = self._seq
            self._creating[statement.name] = set()
        try:
            if statement.name in self.client.list_shards() and self._dropped(statement.name):
                if not record and isinstance(statement, CreateView):
                    self._finish_drop(statement.name)
                    return Result([], [], tag)
                raise SqlError(
                    f"{statement.name!r} was dropped, and its shard keeps the name: a name is "
                    "not used twice (choose another)",
                    "42710",
                )
            if not isinstance(statement, CreateSink):  # a sink writes no shard of its own
                _refuse_reserved(statement.name)
            if isinstance(statement, CreateView):
                self._refuse_foreign_shard(statement.name, record=record)
            self._refuse_canceled()
            # A view recorded before (a run file's, taken over) keeps its entry and holds
            # if this CREATE fails; one this CREATE records is undone.
            before = (
                self._recorded_view_sql(statement.name)
                if isinstance(statement, CreateView)
                else None
            )
            view_before = isinstance(statement, CreateView) and before is not None
            if isinstance(statement, CreateView) and typed is None:
                # A view taken over keeps the query its shard was made by: typed if that
                # is this query typed (a CREATE of this server's that failed once it was
                # recorded), else Spark's types (a run file's view, or one from before).
                typed = TYPING if before is None else self._version_of(statement.query, before)
            # The name is claimed in the catalog first: of two servers creating one name at
            # once, one gets it, and the other builds nothing (no write to its shards).
            claim = None
            if isinstance(statement, CreateView) and (record or resolved is None):
                # None if it does not resolve: its install says why, in its place.
                resolved = self._resolved(
                    statement.query, stored=not typed, version=typed or TYPING
                )
            if record:
                claim = {"sql": statement.sql, "seq": seq, "object": kind}
                if typed and isinstance(statement, CreateView):
                    claim["typed"] = self._lowest_version(statement.query, resolved, typed)
                if resolved is not None:
                    claim["resolved"] = {"sql": resolved[0], "inputs": dict(resolved[1])}
                if self._catalog.claim_statement(statement.name, claim) is not None:
                    if statement.if_not_exists:
                        return Result([], [], tag)
                    raise SqlError(
                        f"{statement.name!r} already exists (created by another server)", "42710"
                    )
            try:
                if isinstance(statement, CreateSource):
                    obj = self._create_source(statement, seq, undo=claim is not None)
                elif isinstance(statement, CreateView):
                    obj = self._create_view(statement, seq, typed=typed or 0, recorded=resolved)
                else:
                    obj = self._create_sink(statement, seq)
                self._refuse_dropped_inputs(obj)
                # The last moment: from here on, it stands. A source's is at the end of its
                # build, where what it made is undone.
                if claim is not None and not isinstance(statement, CreateSource):
                    self._refuse_canceled(obj)
            except BaseException:
                if claim is not None:
                    if isinstance(statement, CreateView) and not view_before:
                        self._undo_view(statement.name)
                    self._give_back(statement.name, claim)
                raise
            with self._lock:
                self.objects[obj.name] = obj
                if self._started:
                    obj.start(self.tick_s)
        finally:
            with self._lock:
                self._creating.pop(statement.name, None)
        if entry is not None and "resolved" not in entry and resolved is not None:
            # Only the view its creator's install recorded, installed the same again: not a
            # CREATE still under way on another server (an older one, whose claim has no
            # resolution), nor a view this version's rewrites redefined.
            if before == resolved[0]:
                self._record_resolution(statement.name, entry, resolved)
            elif before is not None:
                log.warning(
                    "%s: its query resolves otherwise than when its view was recorded; it is "
                    "the new query from its shard's upper on",
                    statement.name,
                )
        return Result([], [], tag)

    def _refuse_foreign_shard(self, name: str, *, record: bool) -> None:
        """SqlError 42710 if the location has a shard ``name`` that is not a view's own: the
        view would write into it (a source's output, or a shard another program wrote).

        A view's shard is its own when the catalog records a view of its name. Restoring
        a recorded CREATE (``record`` false), a shard that is no source's output is its
        own too: the statement claimed the name before the shard was made, and a crash
        may have come before the view was recorded. So is a shard no source writes that
        holds nothing (its upper the least): a failed CREATE made it, and nothing was
        written to it.
        """
        if name not in self.client.list_shards():
            return
        recorded = {(e.name, e.kind) for e in read_catalog(self.client)}
        if (name, "view") in recorded or (not record and (name, "export") not in recorded):
            return
        if (name, "export") not in recorded and _holds_nothing(self.client.state(name)):
            return
        raise SqlError(
            f"the location has a shard {name!r} that is no view's: a view {name!r} would "
            "write into it (choose another name)",
            "42710",
        )

    def _claim_inputs(self, name: str, shards: set[str]) -> None:
        """Record that ``name``, being created, reads ``shards``: from now on a DROP of any
        of them is refused (2BP01) until the CREATE ends. SqlError 42P01 if one is being
        dropped."""
        with self._lock:
            dropping = sorted(shards & self._dropping)
            if not dropping:
                self._creating[name] = set(shards)
        if dropping:
            raise SqlError(f"relation {dropping[0]!r} is being dropped", "42P01")

    def _refuse_dropped_inputs(self, obj: _Object) -> None:
        """SqlError 42P01, ``obj`` closed, if an input of ``obj`` was dropped while it was
        built (before :meth:`_claim_inputs`, or by another server)."""
        dropped = [s for s in obj.reads if self._dropped(s)]
        if dropped:
            try:
                obj.runner.close()
            except Exception as e:
                log.warning("closing %s, whose input was dropped: %s", obj.name, e)
            raise SqlError(f"relation {dropped[0]!r} was dropped", "42P01")

    def _refuse_canceled(self, obj: _Object | None = None) -> None:
        """SqlError 57014, ``obj`` closed, if the statement was canceled (:meth:`cancel`):
        a CREATE is canceled up to the moment it is added, its failure path undoing what
        it did; a CREATE added is never reported canceled."""
        canceled = getattr(self._statement, "canceled", None)
        if canceled is None or not canceled.is_set():
            return
        if obj is not None:
            try:
                obj.runner.close()
            except Exception as e:
                log.warning("closing %s, whose CREATE was canceled: %s", obj.name, e)
        raise SqlError("canceling statement due to user request", "57014")

    def _typed_sql(self, query: str, version: int = TYPING) -> str | None:
        """``query`` resolved with the typing rewrites of ``version``; None if it does not
        resolve (its view's install says why, in its place)."""
        try:
            return self.resolve(query, version=version)[0]
        except SqlError:
            return None

    def _lowest_version(
        self, query: str, resolved: tuple[str, dict[str, str]] | None, version: int
    ) -> int:
        """The lowest version of the typing rewrites, up to ``version``, that resolves
        ``query`` as ``version`` did (``resolved``; ``version`` itself if it did not
        resolve): the one a view's entry records (:data:`TYPED_VIEWS`)."""
        if resolved is None:
            return version
        versions = range(1, version)
        return next((v for v in versions if resolved[0] == self._typed_sql(query, v)), version)

    def _version_of(self, query: str, recorded: str) -> int:
        """The version of the typing rewrites that resolve ``query`` to the Spark SQL
        ``recorded`` (a view's, taken over), the newest first; 0 if none does (Spark's
        types: a run file's view, or one from before views were typed)."""
        versions = range(TYPING, 0, -1)
        return next((v for v in versions if recorded == self._typed_sql(query, v)), 0)

    def _record_resolution(
        self, name: str, entry: Mapping[str, Any], resolved: tuple[str, dict[str, str]]
    ) -> None:
        """Record in the statement ``entry`` of view ``name`` (one recorded before entries
        had it) the resolution its view was installed from: from then on it is installed
        from it, whatever a later version's :meth:`resolve` makes of its query. A failure
        is logged: the next restore records it.

        The caller records it only for a view whose catalog entry was already its SQL
        (a CREATE under way on an older server has none yet). A narrow window stays: a
        CREATE whose install has recorded its view but that is then refused (an input
        dropped, the statement canceled) gives its claim back by a compare-and-set that
        misses an entry amended in between, and its statement stays."""
        amended = {**entry, "resolved": {"sql": resolved[0], "inputs": dict(resolved[1])}}
        try:
            self._catalog.amend_statement(name, entry, amended)
        except Exception as e:
            log.warning("cannot record the resolution of %s in its statement: %s", name, e)

    def _resolved(
        self, query: str, *, stored: bool, version: int = TYPING
    ) -> tuple[str, dict[str, str]] | None:
        """:meth:`resolve`; None if ``query`` does not resolve."""
        try:
            return self.resolve(query, stored=stored, version=version)
        except SqlError:
            return None

    def _recorded_view_sql(self, name: str) -> str | None:
        """The Spark SQL of the view ``name`` the catalog records, None if it records none."""
        for e in read_catalog(self.client):
            if e.name == name and e.kind == "view":
                return str(e.definition.get("sql"))
        return None

    def _undo_view(self, name: str) -> None:
        """Undo what a failed CREATE of the view ``name`` did to the location, as far as
        it got: its holds on its inputs go (they would keep them from compacting for
        good) and so does its catalog entry. Its shard stays, holding nothing: the
        CREATE's retry takes it (:meth:`_refuse_foreign_shard`)."""
        from timeshard.compute.mv_sink import DEPLOY_READER
        from timeshard.persist.holds import release_view_holds

        with self._lock:
            inputs = sorted(self._creating.get(name, set()))
        try:
            release_view_holds(self.client, name, inputs)
            if name in self.client.list_shards():
                self.client.drop_critical_since(name, DEPLOY_READER)
            self._catalog.forget([(name, "view")])
        except Exception as e:  # the location unwritable: the retry or a DROP releases them
            log.error("cannot undo the failed CREATE of %s: %s", name, e)

    def _give_back(self, name: str, claim: dict[str, Any]) -> None:
        """Forget the statement a failed CREATE claimed (another server's stays)."""
        try:
            self._catalog.forget_statement(name, claim)
        except Exception as e:  # the catalog unwritable: a restart replays it, and it fails again
            log.error("cannot forget the statement of %s, whose CREATE failed: %s", name, e)

    def _create_source(self, statement: CreateSource, seq: int, *, undo: bool) -> _Object:
        """Build the source of ``statement`` and run its first tick.

        A KAFKA source's build does not ask its broker for its topic's id (a broker that
        is down would hold the CREATE up for the admin's timeout before its first read
        waits again): the first tick that reaches the broker learns the id and records it
        before it binds an offset (``ask_topic_id`` of
        :class:`~timeshard.storage.ingest.Ingestion`).

        If it fails part way, or its statement was canceled by then, and ``undo`` (the
        CREATE recorded its statement), what it made goes (:meth:`_undo_source`): the
        catalog entries it recorded and the replication slot it created. Its shards
        stay (persist deletes no shard), and its retry takes them.
        """
        from timeshard.spec import RunSpec, SourceSpec, build_source, check_spec
        from timeshard.storage.ingest import Ingestion

        self._refuse_passwords(statement)
        self._refuse_lacking_packages(statement)
        taken = self._shards_of_objects()
        try:
            spec = SourceSpec(
                name=statement.name,
                kind=statement.kind,  # type: ignore[arg-type]
                envelope=statement.envelope,  # type: ignore[arg-type]
                key_columns=list(statement.key_columns),
                options=statement.options,
                columns=statement.columns,
                retain_history=statement.retain_history,
            )
        except ValueError as e:
            raise SqlError(str(e).splitlines()[0], "22023") from None
        # The check builds the source too, not its slot: only the build kept makes it (and
        # so knows it made it).
        check_spec(RunSpec(source=[spec]), existing=self.client.list_shards())
        recorded = {(e.name, e.kind) for e in read_catalog(self.client)}
        source = build_source(spec)
        ingestion = None
        try:
            ingestion = Ingestion(
                self.spark,
                self.client,
                source,
                envelope=spec.envelope,
                key_columns=spec.key_columns,
                clock=self.clock,
                retain_history_ms=spec.retain_history_ms,
                ask_topic_id=False,  # its first read learns the id: one wait on a down broker
            )
            shards = [e.shard for e in ingestion.exports.values()]
            clash = sorted(set(shards) & taken)
            if clash:
                raise SqlError(f"the shards {clash} belong to another object", "42710")
            try:  # its first tick, here: what it has read is readable once CREATE answers
                ingestion.step()
            except Exception as e:
                raise SqlError(
                    f"source {statement.name!r}: its first read failed: {e}", "58000"
                ) from e
            self._refuse_canceled()
        except BaseException:
            self._undo_source(statement.name, source, ingestion, recorded if undo else None)
            raise
        return _Object(statement.name, "source", statement.sql, seq, ingestion, shards)

    def _undo_source(
        self, name: str, source: Any, ingestion: Any, recorded: set[tuple[str, str]] | None
    ) -> None:
        """Close a source whose CREATE failed; unless ``recorded`` is None, undo what it
        made: the catalog entries of it that are not among ``recorded`` (those before the
        CREATE: a run file's source it took over keeps its entries) and the replication
        slot it created (one it found stays). A failure is logged: the location or the
        upstream unreachable, the retry or a DROP finds what is left."""
        try:
            if ingestion is not None:
                ingestion.close()  # closes the source too
            else:
                close = getattr(source, "close", None)
                if close is not None:
                    close()
        except Exception as e:
            log.warning("closing the source %s, whose CREATE failed: %s", name, e)
        if recorded is None:
            return
        try:
            made = [
                (e.name, e.kind)
                for e in read_catalog(self.client)
                if (e.name, e.kind) not in recorded
                and (
                    (e.kind == "source" and e.name == name)
                    or (e.kind == "export" and e.definition.get("source") == name)
                )
            ]
            if made:
                self._catalog.forget(made)
        except Exception as e:
            log.error("cannot forget the entries of %s, whose CREATE failed: %s", name, e)
        # PostgresSource knows whether it created its slot (not whether another instance
        # did since: one that shares a slot names it, and it is never dropped here). A
        # first tick that appended anything bound offsets the retry resumes from, which
        # only this slot still has: it stays then.
        if getattr(source, "slot_created", False) and not self._appended(ingestion):
            try:
                source.drop()
            except Exception as e:
                log.error(
                    "cannot drop the replication slot of %s, whose CREATE failed (it keeps "
                    "the server's WAL until dropped): %s",
                    name,
                    e,
                )

    def _appended(self, ingestion: Any) -> bool:
        """Whether ``ingestion`` (None: never built) appended to its outputs or its remap
        shard; True when that cannot be read (keep what a retry may need)."""
        if ingestion is None:
            return False
        shards = [e.shard for e in ingestion.exports.values()] + [ingestion.remap.shard_id]
        try:
            known = set(self.client.list_shards())
            return any(s in known and self.client.state(s).upper.time != 0 for s in shards)
        except Exception:
            return True

    @staticmethod
    def _refuse_passwords(statement: CreateSource) -> None:
        """A source's DSN or URLs hold no password: the statement is kept in the catalog,
        which anyone reading the location reads."""
        from urllib.parse import urlsplit

        options = statement.options
        if statement.kind == "postgres":
            _refuse_dsn_password("a POSTGRES source", options.get("dsn"))
        for key, where in (("url", "URL"), ("schema_registry_url", "SCHEMA REGISTRY URL")):
            url = options.get(key)
            if not isinstance(url, str):
                continue
            try:
                password = urlsplit(url).password
            except ValueError as e:  # an unclosed IPv6 address: the text is not shown
                raise SqlError(
                    f"a {statement.kind.upper()} source's {where} does not parse: {e}", "22023"
                ) from None
            if password:
                elsewhere = (
                    "give it in MYSQL_PWD, in the server's environment"
                    if statement.kind == "mysql" and key == "url"
                    else "the source reads it from nowhere else: use an account without one"
                )
                raise SqlError(
                    f"a {statement.kind.upper()} source's {where} must not hold a password "
                    "(the statement is kept in the catalog, which anyone reading the location "
                    f"reads); {elsewhere}, or declare the source in a run file (timeshard run)",
                    "28P01",
                )

    def _refuse_lacking_packages(self, statement: CreateSource) -> None:
        """A source whose Maven packages the session did not load is refused, naming the
        ``--packages`` to restart ``timeshard serve`` with (jars load only at its start)."""
        from timeshard.server.packages import lacking

        names = lacking(self.spark, statement)
        if names:
            raise SqlError(
                f"source {statement.name!r} needs the Spark packages {', '.join(names)}, which "
                "this server's SparkSession did not load (Spark loads jars only when it "
                f"starts): restart timeshard serve with --packages {','.join(names)}",
                "0A000",
            )

    def _create_view(
        self,
        statement: CreateView,
        seq: int,
        *,
        typed: int,
        recorded: tuple[str, dict[str, str]] | None = None,
    ) -> _Object:
        """Install the view of ``statement``; ``typed``: the version of the typing rewrites
        its query has (its entry's ``typed``; see :meth:`_create`), else (0) it keeps
        Spark's types (a view recorded before :data:`TYPED_VIEWS` was, or a run file's).

        ``recorded``: the Spark SQL and inputs the statement's entry records (see
        :meth:`_create`), installed as they are; None: resolved here.
        """
        from timeshard.compute import MaterializedView, ViewDefinition
        from timeshard.spec import parse_duration

        if statement.name in self._shards_of_objects():
            raise SqlError(f"{statement.name!r} is a shard of another object", "42710")
        if recorded is not None:
            spark_sql, inputs = recorded[0], dict(recorded[1])
            for shard in inputs.values():
                if self._dropped(shard):
                    raise SqlError(f"relation {shard!r} was dropped", "42P01")
        else:
            spark_sql, inputs = self.resolve(
                statement.query, stored=not typed, version=typed or TYPING
            )
        if not inputs:
            raise SqlError("a materialized view must read at least one source or view", "22023")
        for shard in inputs.values():
            if shard == statement.name:
                raise SqlError(f"view {statement.name!r} cannot read itself", "42P17")
        self._claim_inputs(statement.name, set(inputs.values()))
        refresh = (
            None if statement.refresh_every is None else parse_duration(statement.refresh_every)
        )
        retain = (
            None if statement.retain_history is None else parse_duration(statement.retain_history)
        )
        view = MaterializedView.install(
            self.spark,
            self.client,
            ViewDefinition(
                statement.name,
                inputs,
                spark_sql,
                refresh_every_ms=refresh,
                retain_history_ms=retain,
            ),
            tick_interval_s=self.tick_s,
        )
        return _Object(
            statement.name,
            "view",
            statement.sql,
            seq,
            view,
            [statement.name],
            reads=sorted(set(inputs.values())),
        )

    def _create_sink(self, statement: CreateSink, seq: int) -> _Object:
        from timeshard.controller import build_export
        from timeshard.spec import ExportSpec, RunSpec, check_spec, export_target
        from timeshard.storage.health import Health

        if statement.input not in self.known_shards() or self._dropped(statement.input):
            _refuse_remap(statement.input)
            raise SqlError(f"unknown relation {statement.input!r}", "42P01")
        self._claim_inputs(statement.name, {statement.input})
        _refuse_dsn_password("a sink", statement.options.get("dsn"))
        try:
            spec = ExportSpec(
                name=statement.name,
                kind=statement.kind,  # type: ignore[arg-type]
                input=statement.input,
                envelope=statement.envelope,  # type: ignore[arg-type]
                key_columns=list(statement.key_columns),
                version=statement.version,
                options=statement.options,
            )
        except ValueError as e:
            raise SqlError(str(e).splitlines()[0], "22023") from None
        check_spec(RunSpec(export=[spec]), existing=self.client.list_shards())
        target = export_target(spec.kind, spec.options)
        for other in list(self.objects.values()):
            sink = _recorded(other.sql) if other.kind == "sink" else None
            if (
                target is not None
                and isinstance(sink, CreateSink)
                and export_target(sink.kind, sink.options) == target
            ):
                raise SqlError(
                    f"sink {other.name!r} writes that table: two sinks would overwrite each "
                    "other's rows",
                    "42710",
                )
        export = build_export(self.spark, self.client, spec)
        return _Object(
            statement.name,
            "sink",
            statement.sql,
            seq,
            export,
            [],
            reads=[statement.input],
            health=Health(self.client, self.clock),
        )

    def _shards_of_objects(self) -> set[str]:
        """The shards of every object, and of every object being dropped."""
        with self._lock:
            return {s for o in self.objects.values() for s in o.shards} | self._dropping

    def _drop(self, statement: Drop) -> Result:
        with self._serial:  # no follower pass reads the entry between halt and forget
            return self._drop_now(statement)

    def _drop_now(self, statement: Drop) -> Result:
        tag = {"source": "DROP SOURCE", "view": "DROP MATERIALIZED VIEW", "sink": "DROP SINK"}[
            statement.kind
        ]
        with self._lock:
            if statement.name not in self.objects and statement.if_exists:
                return Result([], [], tag)
            obj = self._object(statement.name, statement.kind)
            readers = self._readers_of(obj)
            if readers and not statement.cascade:
                raise SqlError(
                    f"cannot drop {obj.name!r}: it is read by "
                    f"{', '.join(repr(r.name) for r in readers)} (DROP ... CASCADE drops them too)",
                    "2BP01",
                )
            victims = [*readers, obj]
            dropping = {v.name for v in victims} | {s for v in victims for s in v.shards}
            building = sorted(n for n, reads in self._creating.items() if reads & dropping)
            if building:
                raise SqlError(
                    f"cannot drop {obj.name!r}: {', '.join(map(repr, building))}, being "
                    "created, reads it (DROP once that CREATE has answered)",
                    "2BP01",
                )
            for victim in victims:
                del self.objects[victim.name]
            self._dropping |= dropping
        dropped = 0
        try:
            # Every victim stops ticking before any is dropped: none ticks beside a DROP.
            for victim in victims:
                victim.halt()
            for victim in victims:  # readers first
                self._drop_victim(victim)
                dropped += 1
        except BaseException as e:
            # The victims not dropped yet (the one that failed part way too) are objects
            # again, halted, each still recorded: the DROP's retry finds them and completes
            # what this one began (every step is idempotent), as a restart would run them.
            why = f"DROP failed part way ({type(e).__name__}: {e}): DROP it again"
            with self._lock:
                for victim in victims[dropped:]:
                    victim.last_error = why
                    self.objects[victim.name] = victim
            raise
        finally:
            with self._lock:
                self._dropping -= dropping
        return Result([], [], tag)

    def _drop_victim(self, victim: _Object) -> None:
        """Drop one halted object. Its statement is forgotten last, once nothing of it is
        left to drop: until then the catalog records it, and a DROP (or a restart) finds
        it. Idempotent."""
        # A view's and a sink's holds go (the inputs may compact); a source and a view
        # record their health as dropped (a sink's is reported below).
        victim.runner.drop()
        if victim.kind == "source":
            _drop_upstream(victim)
        for shard in victim.shards:  # no writer appends again; the name is not reused
            self.client.close_shard(shard)
        victim.report("dropped")
        if victim.health is not None:
            victim.health.close()
        self._catalog.forget_statement(victim.name)

    def _finish_drop(self, name: str) -> None:
        """Finish the DROP of the view ``name`` that a crash cut short: its shard is marked
        dropped or closed, and its statement still recorded (forgotten last). Its shard
        is marked dropped (its mark is made again if gone) and closed, its holds on its
        inputs go, as its catalog entry lists them, then its own holds
        (:func:`~timeshard.compute.mv_sink.drop_view`); its health is recorded as
        ``dropped``, as a DROP done in one go records it (``timeshard status`` and the
        health history read the same either way); then its statement goes.

        The input holds go before the ``deploy`` hold, as every drop releases them: a
        promotion that finds the shard closed tells a dropped view from a complete one
        by that order (``MvSink._completed``)."""
        from timeshard.compute.mv_sink import drop_view, mark_dropped

        log.info("finishing the DROP of view %s, which its shard says was dropped", name)
        mark_dropped(self.client, name)
        self.client.close_shard(name)
        entry = next(
            (e for e in read_catalog(self.client) if (e.name, e.kind) == (name, "view")), None
        )
        holds = entry.definition.get("holds") if entry is not None else None
        shards = set(self.client.list_shards())
        for shard, hold in (holds or {}).items():
            if shard in shards and isinstance(hold, str):
                self.client.drop_critical_since(shard, hold)
        drop_view(self.client, name, ())  # marked and closed already: its own holds go
        health = Health(self.client, self.clock)
        try:  # as a DROP done in one go: a failure to record it is logged, the drop goes on
            health.report_or_log(name, "dropped")
        finally:
            health.close()
        self._catalog.forget_statement(name)

    def _readers_of(self, obj: _Object) -> list[_Object]:
        """Every object that reads ``obj``'s shards, directly or not, readers last-first."""
        out: list[_Object] = []
        frontier = set(obj.shards)
        for other in sorted(self.objects.values(), key=lambda o: o.seq):
            if other is not obj and frontier & set(other.reads):
                out.append(other)
                frontier |= set(other.shards)
        return list(reversed(out))

    def _show(self, statement: Show) -> Result:
        objects = sorted(list(self.objects.values()), key=lambda o: o.name)
        if statement.what == "objects":
            return _select(["name", "type"], [(o.name, _KIND_NAMES[o.kind]) for o in objects])
        kind, columns, row = _SHOWN[statement.what]
        return _select(columns, [row(o) for o in objects if o.kind == kind])

    def _explain(self, name: str) -> Result:
        obj = self._object(name, "view")
        if obj.standby:
            raise SqlError(
                f"a read-only server plans no view: EXPLAIN {name!r} where it runs, or "
                "ALTER SYSTEM PROMOTE",
                "25006",
            )
        path, reason = _view_path(obj)
        return Result(
            list(_EXPLAIN_COLUMNS),
            [(obj.name, path, path in ("linear", "grouped"), reason)],
            "EXPLAIN",
        )

    # -- reads

    def _dropped(self, shard: str) -> bool:
        """Whether ``shard`` belonged to a dropped object: DROP closes its shards. A view's
        drop marks its shard's ``deploy`` hold first, then releases it: a view's shard
        that keeps the hold unmarked is not dropped, closed or not (a complete view's: every
        input closed), and one whose hold is marked is, open or not (a drop cut short
        between the mark and the close: :func:`~timeshard.compute.mv_sink.mark_dropped`)."""
        from timeshard.compute.mv_sink import DEPLOY_READER, DROPPED_OPAQUE

        state = self.client.state(shard)
        deploy = state.critical_readers.get(DEPLOY_READER)
        if deploy is not None:
            return deploy.opaque == DROPPED_OPAQUE
        return state.upper.is_empty()

    def known_shards(self) -> list[str]:
        """The shards SQL reads: all but the location's own and the sources' remap shards."""
        return [
            s
            for s in self.client.list_shards()
            if s not in _SYSTEM_SHARDS and not s.endswith(_REMAP_SUFFIX)
        ]

    def resolve(
        self, query: str, *, stored: bool = False, version: int = TYPING
    ) -> tuple[str, dict[str, str]]:
        """``query`` (PostgreSQL) in Spark SQL, every shard it reads renamed; alias -> shard.

        A query's result is typed as PostgreSQL types it where Spark's differs (a date
        moved by an interval, :func:`_dates_moved_by_intervals`; an unconstrained numeric,
        :func:`_numeric_casts`; a timestamp without time zone, :func:`_naive_timestamps`)
        unless ``stored``: the query of a view recorded before serve typed views' queries
        (:data:`TYPED_VIEWS`), or of a run file's view, keeps Spark's types, the schema
        its shard holds. ``version``: of the typing rewrites (:data:`TYPED_VIEWS`): a
        recorded view's ``typed``, the lowest that resolves its query alike.

        A table name is a shard's id: ``kv``, ``auction.bids`` or ``"auction.bids"``.
        ``timeshard_objects`` is the introspection relation (alias ``timeshard_objects``).
        Unquoted names fold to lower case, as PostgreSQL folds them (``FROM Ev`` reads
        ``ev``, and ``AS N`` names a column ``n``); quoted ones stay as written.

        A query nested past Python's stack (``((((...1...))))`` 400 deep) is PostgreSQL's
        SqlError 54001 ("stack depth limit exceeded"), not an internal error.
        """
        try:
            return self._resolve(query, stored=stored, version=version)
        except RecursionError:  # nesting past Python's stack, in sqlglot or the rewrites
            raise SqlError("stack depth limit exceeded", "54001") from None
        except SqlglotError as e:  # sqlglot's tokenizer makes a RecursionError its own error
            if isinstance(e.__cause__, RecursionError):
                raise SqlError("stack depth limit exceeded", "54001") from None
            raise

    def _resolve(self, query: str, *, stored: bool, version: int) -> tuple[str, dict[str, str]]:
        """:meth:`resolve`, nesting past Python's stack its RecursionError."""
        from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

        try:
            tree = sqlglot.parse_one(query, read=STORED_DIALECT if stored else DIALECT)
        except SqlglotError as e:
            if isinstance(e.__cause__, RecursionError):
                raise
            raise SqlError(f"syntax error: {str(e).splitlines()[0]}") from None
        if tree is None:
            raise SqlError("expected a query")
        tree = normalize_identifiers(tree, dialect=DIALECT)
        known = set(self.known_shards())
        checked = not stored and version >= 4  # a call of too many arguments: 42883
        if not checked and (overfull_call := overfull(tree)) is not None:
            raise SqlError(f"syntax error: {overfull_call}")
        if not stored:
            _numeric_casts(tree, functools.partial(self._shard_columns, known), version)
            _naive_timestamps(tree)
        if checked and (overfull_call := overfull(tree)) is not None:
            raise SqlError(f"syntax error: {overfull_call}")  # of a function not PostgreSQL's
        _int_limits(tree)
        _refuse_writes(tree)
        _refuse_java_calls(tree)
        _json_literals(tree)
        _interval_casts(tree)
        if not stored:
            _dates_moved_by_intervals(tree)
        ctes = {c.alias for c in tree.find_all(exp.CTE)}
        cte_references = _cte_references(tree, ctes)
        inputs: dict[str, str] = {}
        aliases: dict[str, str] = {}
        for table in list(tree.find_all(exp.Table)):
            parts = [p for p in (table.catalog, table.db, table.name) if p]
            shard = ".".join(parts)
            if id(table) in cte_references:
                continue
            if shard == OBJECTS_RELATION:
                alias = OBJECTS_RELATION
            elif shard in known and shard not in aliases and self._dropped(shard):
                raise SqlError(f"relation {shard!r} was dropped", "42P01")
            elif shard in known:  # an alias no CTE has: Spark resolves a CTE's name first
                alias = aliases.get(shard) or _alias(shard, set(aliases.values()) | ctes)
                aliases[shard] = alias
                inputs[alias] = shard
            else:
                _refuse_remap(shard)
                listed = ", ".join(sorted(known | {OBJECTS_RELATION}))
                raise SqlError(f"unknown relation {shard!r}; the location has: {listed}", "42P01")
            if not table.alias:
                table.set("alias", exp.TableAlias(this=exp.to_identifier(shard.split(".")[-1])))
            table.set("this", exp.to_identifier(alias))
            table.set("db", None)
            table.set("catalog", None)
        return tree.sql("spark"), inputs

    def _shard_columns(self, known: set[str], name: str) -> dict[str, str | None] | None:
        """The columns of shard ``name`` (one of ``known``), all in order, as sqlglot types
        them (:func:`~timeshard.server.parameter_types.arrow_columns`); None if it is none."""
        schema = self.client.state(name).data_schema if name in known else None
        return None if schema is None else arrow_columns(schema)

    def query(self, query: str, as_of: int | None) -> Result:
        """Run ``query`` over the shards it names, all read at one time: its rows, all of
        them (:meth:`query_rows` streams them)."""
        rows = self.query_rows(query, as_of)
        try:
            out = list(rows)
        finally:
            rows.close()
        return Result(rows.columns, out, f"SELECT {len(out)}")

    def query_rows(
        self, query: str, as_of: int | None, typed_as: TypedAs | None = None
    ) -> QueryRows:
        """Run ``query`` over the shards it names, all read at one time: its rows as Spark
        makes them (:class:`QueryRows`), which hold the shards' readers until closed.
        A column whose PostgreSQL type differs from the same column of the query
        ``typed_as`` (see :class:`~timeshard.server.statements.Query`) is cast to its type.

        What runs here is the query's planning (and the job that looks for err rows in
        parts that may hold them); its rows' jobs run as they are taken."""
        from pyspark.errors import PySparkException

        from timeshard.spark.snapshot import parts_snapshot_df
        from timeshard.spark.sqltext import quoted

        spark_sql, inputs = self.resolve(query)
        readers: dict[str, Any] = {}
        try:
            for shard in sorted(set(inputs.values())):  # a failure expires those opened
                readers[shard] = self.client.open_leased_reader(shard)
            session = self.spark.newSession()
            as_of = self._readable_time(readers, as_of)
            for alias, shard in inputs.items():
                assert as_of is not None
                parts = readers[shard].snapshot_parts(as_of)
                snap = parts_snapshot_df(session, readers[shard], parts, as_of)
                check_no_error(shard, parts, snap, as_of)
                data = [quoted(c) for c in snap.columns if c not in ("_ts", "_diff", "_err")]
                snap.selectExpr(*data, "explode(sequence(1, CAST(_diff AS INT))) AS _n").drop(
                    "_n"
                ).createOrReplaceTempView(alias)
            if OBJECTS_RELATION in spark_sql:
                self._objects_df(session).createOrReplaceTempView(OBJECTS_RELATION)
            try:
                df = session.sql(spark_sql)
                if typed_as is not None:
                    df = self._typed_as(df, session, typed_as)
                columns = [(f.name, column_type(f.dataType)) for f in df.schema.fields]
                # One partition at a time, its job run when the rows before it are taken.
                collectable = _months_of_intervals(_calendar_intervals_as_text(df))
                partitions = collectable.toLocalIterator(prefetchPartitions=False)
            except PySparkException as e:
                raise spark_error(e) from e
        except BaseException:
            for reader in readers.values():
                reader.expire()
            raise
        return QueryRows(columns, _query_rows(partitions, readers), readers)

    def _typed_as(self, df: Any, session: Any, typed_as: TypedAs) -> Any:
        """``df`` typed as the query ``typed_as`` (:func:`_typed_as`), resolved once for
        its prepared statement (kept in ``typed_as``); as it is if ``typed_as`` does not
        resolve: its Describe answered no columns then, and the query itself did
        resolve."""
        if typed_as.spark_sql is None:
            try:
                typed_as.spark_sql = self.resolve(typed_as.query)[0]
            except SqlError:
                return df
        return _typed_as(df, session, typed_as.spark_sql)

    def _readable_time(self, readers: dict[str, Any], as_of: int | None) -> int | None:
        """``as_of``, checked; without one, the latest time every reader can read at --
        waited for up to ``read_wait_s`` when there is none yet (a view just created).
        A cancel of the statement (:meth:`cancel`) ends the wait: SqlError 57014."""
        canceled = getattr(self._statement, "canceled", None) or threading.Event()
        deadline = time.monotonic() + self.read_wait_s
        delay = 0.05
        while True:
            try:
                return common_as_of(readers, as_of)
            except InvalidUsage as e:
                if as_of is not None or time.monotonic() + delay > deadline:
                    raise SqlError(str(e), "22023") from e
            if canceled.wait(delay):
                raise SqlError("canceling statement due to user request", "57014")
            delay = min(delay * 2, 0.5)

    def object_rows(self) -> list[dict[str, Any]]:
        """One row per shard of the location: the introspection relation's rows."""
        from timeshard.status import status_rows

        objects = list(self.objects.values())
        owner = {s: o for o in objects for s in o.shards}
        sinks = {o.name for o in objects if o.kind == "sink"}
        out = []
        for row in status_rows(self.client):
            shard = row["object"]
            if shard in sinks and row["kind"] == "export":
                continue  # its health, with no shard: the sink's own row below
            obj = owner.get(shard)
            state = None
            with contextlib.suppress(TimeshardError):  # status_rows has shown why already
                state = self.client.state(shard)
            count = state.num_rows() if state is not None else None
            size = state.size_in_bytes() if state is not None else None
            out.append(
                {
                    "name": shard,
                    "object": obj.name if obj is not None else None,
                    "type": _type_of(obj, row["kind"]),
                    "status": row["status"],
                    "since": _first_time(row["since"]),
                    "upper": row["write_frontier"],
                    "lag_ms": row["lag_ms"],
                    "generation": row["generation"],
                    "rows": count,
                    "bytes": size,
                    "error": (obj.last_error if obj is not None else None) or row["error"],
                }
            )
        for obj in list(self.objects.values()):  # a sink owns no shard: a row of its own
            if obj.kind == "sink":
                out.append(
                    {
                        **dict.fromkeys(_OBJECT_COLUMNS),
                        "name": obj.name,
                        "object": obj.name,
                        "type": "sink",
                        "status": _sink_status(obj),
                        "error": obj.last_error,
                    }
                )
        return out

    def _objects_df(self, session: Any) -> Any:
        rows = [tuple(r[n] for n in _OBJECT_COLUMNS) for r in self.object_rows()]
        return session.createDataFrame(rows, _objects_schema())

    def subscribe(self, statement: Subscribe) -> Stream:
        """Every row of a shard at AS OF (default: its latest readable time), then
        every update after it as it becomes definite, before UP TO if given (exclusive,
        as Materialize's: an UP TO at or before the AS OF answers no row).

        A SUBSCRIBE whose relation is dropped (its shard closed) before UP TO ends with
        SqlError 42P01 naming it, and lets go of its readers.
        """
        shard = statement.name
        if shard not in self.known_shards():
            _refuse_remap(shard)
            raise SqlError(f"unknown relation {shard!r}", "42P01")
        if self._dropped(shard):
            raise SqlError(f"relation {shard!r} was dropped", "42P01")
        reader = self.client.open_leased_reader(shard)
        try:
            as_of = statement.as_of
            if as_of is not None and not reader.since.less_equal(as_of):
                raise SqlError(
                    f"{shard!r} is not readable at {as_of}: its since is {reader.since}", "22023"
                )
            names = [n for n in reader.schema.names]
            columns = [("mz_timestamp", "long"), ("mz_diff", "long")] + [
                (n, _arrow_type(reader.schema.field(n).type)) for n in names
            ]
        except Exception:
            reader.expire()
            raise
        rows = _subscribe_rows(reader, names, as_of, statement.up_to)
        return Stream(columns, QueryRows(columns, rows, {"": reader}))


def _refuse_reserved(name: str) -> None:
    """SqlError 42939 if an object named ``name`` would write a shard that the location,
    the server or a source keeps for itself: the catalog and the status collection (whose
    rows a view's would make unreadable: the server could not start again), the
    introspection relation (which hides a shard of its name from every query), and a
    source's remap shard (a view's DROP closed it under the source, which stalled for good;
    a source created later under the prefix would take the view's shard for its remap)."""
    if name in _SYSTEM_SHARDS:
        why = "the location's own shard (its catalog or status collection)"
    elif name == OBJECTS_RELATION:
        why = "the introspection relation"
    elif name.endswith(_REMAP_SUFFIX):
        why = f"the remap shard of a source {name.removesuffix(_REMAP_SUFFIX)!r}"
    else:
        return
    raise SqlError(f"the name {name!r} is reserved: it is {why}", "42939")


def _refuse_remap(shard: str) -> None:
    """SqlError 42501 if ``shard`` names a source's remap shard: its reclocking bindings are
    internal to the source (compacted, rewritten and closed with it), and an object reading
    them would not be one of the source's readers, which DROP SOURCE refuses to strand."""
    if shard.endswith(_REMAP_SUFFIX):
        raise SqlError(
            f"relation {shard!r} is the remap shard of source "
            f"{shard.removesuffix(_REMAP_SUFFIX)!r}, internal to it: read the source's "
            "outputs, or timeshard_objects for its frontiers",
            "42501",
        )


def _holds_nothing(state: Any) -> bool:
    """Whether a shard was never written: no update, its upper still the least."""
    return not state.batches and state.upper.time == 0


def _first_time(since: Any) -> int | None:
    if isinstance(since, list):
        return since[0] if since else None
    return since if isinstance(since, int) else None


_KIND_NAMES = {"source": "source", "view": "materialized view", "sink": "sink"}
#: The columns EXPLAIN answers.
_EXPLAIN_COLUMNS = (
    ("view", "string"),
    ("path", "string"),
    ("incremental", "boolean"),
    ("reason", "string"),
)


def _objects_schema() -> Any:
    """The introspection relation's Spark schema."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    return StructType(
        [
            StructField(n, LongType() if kind == "long" else StringType())
            for n, kind in _OBJECT_COLUMNS.items()
        ]
    )


def _select(names: list[str], rows: list[tuple[Any, ...]]) -> Result:
    """Rows of text columns, as SHOW answers them."""
    return Result([(n, "string") for n in names], rows, f"SELECT {len(rows)}")


#: SHOW SINKS | SOURCES | MATERIALIZED VIEWS: the kind listed, its columns, a row of each.
_SHOWN: dict[str, tuple[str, list[str], Callable[[_Object], tuple[Any, ...]]]] = {
    "sinks": (
        "sink",
        ["name", "type", "from"],
        lambda o: (o.name, type(o.runner).__name__, ", ".join(o.reads)),
    ),
    "sources": (
        "source",
        ["name", "type", "shards"],
        lambda o: (o.name, _source_type(o), ", ".join(o.shards)),
    ),
    "views": (
        "view",
        ["name", "path", "reads"],
        lambda o: (o.name, _view_path(o)[0], ", ".join(o.reads)),
    ),
}


def _type_of(obj: _Object | None, kind: str) -> str:
    return kind if obj is None else _KIND_NAMES[obj.kind]


def _typed(definition: Mapping[str, Any]) -> int:
    """The version of the typing rewrites a recorded CREATE's view has (:data:`TYPED_VIEWS`;
    0 without ``typed``: Spark's types).

    CorruptState (an entry this server cannot read) for a version it does not know: a
    newer server's view, whose query it would type otherwise."""
    typed = definition.get("typed")
    if typed is None:
        return 0
    if isinstance(typed, bool) or not isinstance(typed, int) or not 1 <= typed <= TYPED_VIEWS:
        raise CorruptState(
            f"the view's typing rewrites are version {typed!r}; this server has versions "
            f"1 to {TYPED_VIEWS} (a newer server recorded it)"
        )
    return typed


def _resolution(definition: Mapping[str, Any]) -> tuple[str, dict[str, str]] | None:
    """The Spark SQL and inputs (alias -> shard) a recorded CREATE's entry records of its
    view's query (None: it records none, as entries from before it did).

    CorruptState for one it records but this server cannot read."""
    resolved = definition.get("resolved")
    if resolved is None:
        return None
    sql = resolved.get("sql") if isinstance(resolved, Mapping) else None
    inputs = resolved.get("inputs") if isinstance(resolved, Mapping) else None
    if (
        not isinstance(sql, str)
        or not isinstance(inputs, Mapping)
        or not all(isinstance(a, str) and isinstance(i, str) for a, i in inputs.items())
    ):
        raise CorruptState(f"the view's recorded resolution is not one: {resolved!r}")
    return sql, dict(inputs)


def _recorded(sql: str) -> CreateSource | CreateView | CreateSink:
    """The CREATE statement a catalog entry of kind ``statement`` records."""
    statement = parse(sql)
    if not isinstance(statement, CreateSource | CreateView | CreateSink):
        raise CorruptState(f"not a CREATE statement: {sql!r}")
    return statement


def _drop_upstream(source: _Object) -> None:
    """Drop what a dropped source made upstream (a PostgreSQL replication slot, which
    keeps WAL for as long as it exists); a failure is logged, and the DROP stands."""
    drop = getattr(source.runner.source, "drop", None)
    if drop is None:
        return
    try:
        drop()
    except Exception as e:
        log.warning("source %s: dropped, but not what it made upstream: %s", source.name, e)


def _refuse_dsn_password(what: str, dsn: Any) -> None:
    """Refuse a libpq DSN that holds a password: the statement is kept in the catalog."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    if not isinstance(dsn, str):
        return
    try:
        has_password = "password" in conninfo_to_dict(dsn)
    except psycopg.Error as e:
        raise SqlError(f"DSN is not a libpq connection string: {e}", "22023") from None
    if has_password:
        raise SqlError(
            f"{what}'s DSN must not hold a password (the statement is kept in the catalog, "
            "which anyone reading the location reads): give it in PGPASSWORD or ~/.pgpass",
            "28P01",
        )


def _sink_status(obj: _Object) -> str:
    if obj.standby:
        return "standby"
    return "stalled" if obj.last_error else "running"


def _source_type(obj: _Object) -> str:
    if obj.standby:
        statement = parse(obj.sql)
        assert isinstance(statement, CreateSource)
        return statement.kind
    return type(obj.runner.source).__name__


def _view_path(obj: _Object) -> tuple[str, str]:
    if obj.standby:
        return "standby", "a read-only server plans no view"
    classification = obj.runner.desired.plan.classification
    return str(classification.path), str(classification.reason)


def _arrow_type(t: pa.DataType) -> str:
    """How a column of Arrow type ``t`` is described to pgwire's ``encode_value``."""
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_struct(t)
        or pa.types.is_map(t)
    ):
        from pyspark.sql.pandas.types import from_arrow_type

        return column_type(from_arrow_type(t, prefer_timestamp_ntz=True))
    if pa.types.is_integer(t):
        return "long" if t.bit_width == 64 else "integer"
    if pa.types.is_floating(t):
        return "double"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "binary"
    if pa.types.is_decimal(t):
        return "decimal"
    return "string"


__all__ = ["OBJECTS_RELATION", "Engine", "Result", "Stream", "check_no_error"]
