"""The controller: a declared pipeline of sources and views, stepped together.

A :class:`Pipeline` is built from a :class:`~timeshard.spec.RunSpec`: one
:class:`~timeshard.storage.ingest.Ingestion` per source, one
:class:`~timeshard.compute.MaterializedView` per view and one
:class:`~timeshard.storage.export.ShardExport` per export, over one
location. A step runs one tick of every ingestion, then of every view, then
of every export (whose health is reported under its name). Any number of
processes may run the same pipeline over the same location at once: each
object converges through compare-and-append, so they are replicas of it.

Frontiers: :meth:`Pipeline.uppers` is the write frontier of every shard the
pipeline writes (each source's exports and each view), read from consensus.

Undeclared objects: a view or an export the location still has but the
declaration no longer declares keeps its durable holds on its inputs (its
``view.<name>`` or ``export.<name>`` critical since handle), so they never
compact past it. :func:`undeclared_holders` finds them: the catalog's views,
and the ``export.<name>`` holds of every shard, that the declaration does not
name, that no ``timeshard serve`` statement created (serve keeps its own), and
that still hold a shard; a view whose shard has a live writer (another
process runs it) is left out. A pipeline reports each as ``stalled`` with
what it holds (:attr:`Pipeline.undeclared`), and :func:`drop_object`
(``timeshard drop NAME [--cascade]``) releases it as ``DROP`` in ``timeshard
serve`` does: a view's shard is closed and its holds, retained history and
deploy reader go; an export's holds go; both report ``dropped``.

Invariants:

1. Sources are built (and their options checked) before anything touches the
   location; a bad declaration fails with InvalidUsage and writes nothing. A
   source whose build, or the build of its ingestion, faults (its server or the
   location's consensus unreachable: not the declaration's fault) is
   ``stalled`` with the fault and built again by a later step, after a pause
   that doubles from ``build_backoff_s`` up to a minute; the other objects run
   meanwhile, and a view or export that reads a shard it would write, which the
   location does not have yet, waits for it. A KAFKA source's build does not
   ask its broker for its topic's id, which a broker that is down would make
   it wait for, source after source (its first step still asks, once): the
   first step that reaches the broker learns the id and records it before
   binding an offset (``ask_topic_id`` of
   :class:`~timeshard.storage.ingest.Ingestion`). Once it builds, it is checked as
   at the start. A refusal, or a shard's state that does not decode
   (CorruptState), ends the run, at the start as later: retrying cannot help.
   The catalog's read at the start, before any object is built, is retried so
   too (its faults are logged: no object has a health yet), until it succeeds or
   the caller's stop flag is set (then the build raises :class:`StartStopped`,
   keeping the replication slots its sources made: a stop is this process's, and
   a peer running the same declaration may read through a slot it has not
   advanced yet, which a drop would take from it).
2. A view is installed after one step of every source, so its inputs exist. A
   first step that fails is a failure as a later one's is (``first_failures``).
   So is a fault while a view is installed or an export built: the object is
   ``stalled`` with it, what reads a view not installed yet waits for it, and
   each step tries again until each is built, once. A refusal (InvalidUsage,
   a query Spark rejects) ends the build: retrying cannot help.
3. ``close`` stops every view's background I/O, and closes every object even
   if some close fails; a step after it is an error. A pipeline whose
   building fails closes what it had built.
4. A step ticks every object even when some fail (faults are retried on the
   next step and shown as health), and returns the failures. The objects tick
   one after another: a KAFKA source whose broker did not answer is not asked
   again in full on every step (which would hold every other object up for its
   whole timeout), only probed for at most a second after a pause that doubles
   up to 30 s (:meth:`~timeshard.storage.kafka_source.KafkaSource.upper`).

Runs on the driver; the ingestions and views submit Spark jobs.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from timeshard.catalog import CatalogEntry, check_redeclared, read_catalog
from timeshard.compute import MaterializedView, ViewDefinition
from timeshard.errors import CorruptState, InvalidUsage, TimeshardError
from timeshard.persist import PersistClient
from timeshard.persist.holds import release_view_holds, view_hold_id
from timeshard.progress import Frontier
from timeshard.spec import (
    ExportSpec,
    RunSpec,
    SourceSpec,
    ViewSpec,
    build_source,
    check_spec_writers,
    shard_owners,
    shard_writer,
)
from timeshard.storage.delta_export import DeltaExport
from timeshard.storage.export import ShardExport
from timeshard.storage.health import Health
from timeshard.storage.ingest import Ingestion
from timeshard.storage.kafka_export import KafkaExport
from timeshard.storage.postgres_export import PostgresExport

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class Pipeline:
    """The sources and views of one declaration, over one location."""

    def __init__(
        self,
        spark: Any,
        client: PersistClient,
        spec: RunSpec,
        *,
        clock: Callable[[], int] | None = None,
        view_tick_s: float = 1.0,
        build_backoff_s: float = 1.0,
        on_retry: Callable[[str], None] | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        """``on_retry``: called with the fault each time a read at the start fails and
        is tried again (:func:`read_at_start`), for a caller that reports progress
        (the nemesis replica's heartbeat). ``stop``: the caller's stop flag; set while
        that read is being retried, the build raises :class:`StartStopped`."""
        self.client = client
        self._spark = spark
        self._spec = spec
        self._clock = clock
        self._view_tick_s = view_tick_s
        #: The declared sources whose build faulted (a server unreachable): each retried.
        self._unbuilt_sources: dict[str, _Retry] = {}
        #: The location's shards, as listed since the last build attempt of such a source.
        self._listed: set[str] | None = None
        #: The declared sources built, with their ingestions (in ``ingestions``).
        self._sources: list[tuple[SourceSpec, Any]] = []
        built: list[tuple[SourceSpec, Any]] = []
        for s in spec.source:  # a refusal raises here, before anything touches the location
            try:
                built.append((s, build_source(s)))
            except _ENDS_RUN:
                raise
            except Exception as e:
                self._unbuilt_sources[s.name] = _Retry(s, build_backoff_s, _failure(e))
        #: The declared views and exports not built yet, in declaration order.
        self._unbuilt: list[ViewSpec | ExportSpec] = [*spec.view, *spec.export]
        self.ingestions: list[Ingestion] = []
        self.views: list[MaterializedView] = []
        self.exports: list[ShardExport] = []
        self.health: Health | None = None
        self._closed = False
        #: The objects whose first tick failed (as :meth:`step` returns them).
        self.first_failures: dict[str, str] = {}
        try:
            try:
                # Before any object writes: no shard of another object (of the location, or
                # of the declaration), no source redeclared. One read of the catalog for
                # all: each ingestion checks itself against it too, and the checks above
                # keep the declaration's objects apart, which an ingestion built later
                # would see recorded.
                catalog = read_at_start(
                    lambda: read_catalog(client),
                    "the location's catalog",
                    build_backoff_s,
                    on_retry,
                    stop,
                )
                self._check_sources(built, catalog)
                for s, source in built:
                    try:
                        ingestion = self._ingestion(s, source, catalog)
                    except _ENDS_RUN:
                        raise
                    except Exception as e:  # built again later, as a build's fault is
                        retry = _Retry(s, build_backoff_s, _failure(e), made=source)
                        self._unbuilt_sources[s.name] = retry
                        continue
                    self.ingestions.append(ingestion)
                    self._sources.append((s, source))
            except _ENDS_RUN:  # the run ends before any source ran (a stop keeps its slots)
                _drop_new_slots(source for _, source in built)
                raise
            self.first_failures = self._step_ingestions()
            self.health = Health(client, clock)
            for name, retry in self._unbuilt_sources.items():
                self.first_failures[name] = retry.failure
                self.health.report_or_log(name, "stalled", retry.failure)
            self.first_failures |= self._build()
            #: The objects the location has, the declaration does not, that hold shards
            #: (advice, not a build: a fault finding them is logged, and none is listed).
            self.undeclared: list[Holder] = []
            try:
                self.undeclared = undeclared_holders(client, spec, catalog)
            except _ENDS_RUN:
                raise
            except Exception as e:
                log.warning(
                    "the run cannot list the objects that hold shards and are not declared "
                    "(not reported this run): %s",
                    _failure(e),
                )
            for held in self.undeclared:
                self.health.report_or_log(held.name, "stalled", held.line())
        except BaseException as e:
            if isinstance(e, _ENDS_RUN):  # a view refused, say: no stalled source ran
                _drop_new_slots(self._unrun_builds())
            # The leases of what was built would linger until they expire; the error to
            # see is the build's.
            with contextlib.suppress(Exception):
                self.close()
            raise

    def _check_sources(
        self,
        built: Sequence[tuple[SourceSpec, Any]],
        catalog: Sequence[CatalogEntry],
        new: int | None = None,
    ) -> None:
        """Refuse (InvalidUsage) a built source that would write another object's shard, or
        that redeclares a source the location has with other meanings (invariant 1); the
        ``new`` last of ``built`` only are checked against their record (all by default)."""
        declared = self._spec.model_copy(update={"source": [s for s, _ in built]})
        writers = spec_shard_writers(declared, [source for _, source in built])
        check_spec_writers(declared, writers, shard_owners(catalog))
        for s, source in built[-(new or len(built)) :]:
            envelopes = {"": (s.envelope, s.key_columns)}
            check_redeclared(self.client, s.name, source, envelopes, catalog=catalog)

    def _ingestion(self, s: SourceSpec, source: Any, catalog: Sequence[CatalogEntry]) -> Ingestion:
        return Ingestion(
            self._spark,
            self.client,
            source,
            envelope=s.envelope,
            key_columns=s.key_columns,
            clock=self._clock,
            retain_history_ms=s.retain_history_ms,
            catalog=catalog,
            ask_topic_id=False,  # a broker that is down must not hold up the start
        )

    def _build_sources(self) -> dict[str, str]:
        """Build the sources whose build faulted and whose backoff ran out; the failures of
        those still unbuilt, by source (each reported ``stalled``). A refusal is raised,
        as at the start: the declaration is wrong, and retrying cannot help."""
        assert self.health is not None
        failures: dict[str, str] = {}
        now = time.monotonic()
        for name, retry in list(self._unbuilt_sources.items()):
            if now < retry.next_at:
                failures[name] = retry.failure
                continue
            source, self._listed = None, None
            try:
                source = build_source(retry.spec)
                catalog = read_catalog(self.client)
                self._check_sources([*self._sources, (retry.spec, source)], catalog, new=1)
                ingestion = self._ingestion(retry.spec, source, catalog)
            except _ENDS_RUN:
                _drop_new_slots([source])  # and the stalled sources' earlier builds (step)
                raise
            except Exception as e:
                retry.failed(_failure(e), made=source)
                failures[name] = retry.failure
                self.health.report_or_log(name, "stalled", retry.failure)
                continue
            self.ingestions.append(ingestion)
            self._sources.append((retry.spec, source))
            del self._unbuilt_sources[name]
        return failures

    def _unrun_builds(self) -> list[Any]:
        """The builds of the stalled sources that made a replication slot before a fault
        (:attr:`_Retry.made`): none of them ran."""
        return [made for retry in self._unbuilt_sources.values() for made in retry.made]

    def _step_ingestions(self) -> dict[str, str]:
        failures = {}
        for ingestion in self.ingestions:
            try:
                ingestion.step()
            except Exception as e:  # marked stalled by the ingestion; tried again next step
                failures[ingestion.output] = _failure(e)
        return failures

    def _build(self) -> dict[str, str]:
        """Install the views and build the exports not built yet, in declaration order; the
        failures, by object (each reported ``stalled``).

        A fault (I/O, consensus, the JVM) leaves the object to the next step; an object
        that reads a view not installed yet waits for it. A refusal (InvalidUsage, a query
        Spark rejects) is raised: the declaration is wrong, and retrying cannot help.
        """
        assert self.health is not None
        failures: dict[str, str] = {}
        waiting: set[str] = set()
        unbuilt = self._unbuilt_shards()
        for declared in list(self._unbuilt):
            view = isinstance(declared, ViewSpec)
            reads = _reads(declared)
            waits = sorted(reads & waiting)
            if waits:
                failures[declared.name] = f"waits for view {waits[0]!r}, not installed yet"
                waiting.add(declared.name)
                continue
            sources = sorted(unbuilt[shard] for shard in reads & set(unbuilt))
            if sources:
                failures[declared.name] = f"waits for source {sources[0]!r}, not built yet"
                waiting.add(declared.name)
                continue
            try:
                if isinstance(declared, ViewSpec):
                    self.views.append(self._install(declared))
                else:
                    self.exports.append(build_export(self._spark, self.client, declared))
            except Exception as e:
                refusal = _refusal(declared.name, e, view=view)
                if refusal is not None:
                    raise refusal from e
                failures[declared.name] = _failure(e)
                waiting.add(declared.name)
                continue
            self._unbuilt.remove(declared)
            if not view:
                self.health.report_or_log(declared.name, "starting")
        for name, failure in failures.items():
            self.health.report_or_log(name, "stalled", failure)
        return failures

    def _unbuilt_shards(self) -> dict[str, str]:
        """The shards the views and exports not built yet read that no source writes yet,
        because the source that would is not built (a fault): shard -> that source."""
        if not self._unbuilt_sources:
            return {}
        reads = {shard for declared in self._unbuilt for shard in _reads(declared)}
        ours = {
            shard: name
            for shard in reads
            for name in self._unbuilt_sources
            if shard == name or shard.startswith(f"{name}.")
        }
        if not ours:
            return {}
        if self._listed is None:  # listed again after each build attempt, not each step
            self._listed = set(self.client.list_shards())
        # written by an earlier run: readable
        return {shard: name for shard, name in ours.items() if shard not in self._listed}

    def _install(self, v: ViewSpec) -> MaterializedView:
        definition = ViewDefinition(
            v.name,
            v.inputs,
            v.sql,
            refresh_every_ms=v.refresh_every_ms,
            retain_history_ms=v.retain_history_ms,
        )
        return MaterializedView.install(
            self._spark, self.client, definition, tick_interval_s=self._view_tick_s
        )

    def step(self) -> dict[str, str]:
        """One tick of every source, then of every view; the failures, by object. A view
        or export not built yet (a fault) is built first (invariant 2).

        One object's failure does not keep the others from their tick: a
        failing source is marked ``stalled`` (with the error) and tried again
        on the next step; a view's sink recovers by itself and reports its
        health. The returned dict names each object whose tick failed.
        """
        assert not self._closed, "step after close"
        assert self.health is not None
        try:
            failures = self._build_sources() if self._unbuilt_sources else {}
            failures |= self._step_ingestions()
            if self._unbuilt:
                failures |= self._build()
        except _ENDS_RUN:  # the run ends: no stalled source will run
            _drop_new_slots(self._unrun_builds())
            raise
        for view in self.views:
            view.step()
            if view.sink.last_error is not None:
                failures[view.name] = view.sink.last_error
        for export in self.exports:
            try:
                export.step()
            except Exception as e:
                failures[export.export_id] = _failure(e)
                self.health.report_or_log(export.export_id, "stalled", failures[export.export_id])
            else:  # its step is done: a health that cannot be recorded now is tried next step
                self.health.report_or_log(export.export_id, "running")
        return failures

    def shards(self) -> list[str]:
        """Every shard the pipeline writes: the sources' exports, then the views."""
        exports = [e.shard for i in self.ingestions for e in i.exports.values()]
        return [*exports, *(v.name for v in self.views)]

    def uppers(self) -> dict[str, Frontier]:
        """The write frontier of every shard the pipeline writes, as consensus has it."""
        return {shard: self.client.state(shard).upper for shard in self.shards()}

    def close(self) -> None:
        """Close every object; one whose close fails does not keep the others open (their
        leases would linger until they expire): the first failure is raised after all."""
        if self._closed:
            return
        self._closed = True
        closes: list[Callable[[], None]] = [e.close for e in self.exports]
        if self.health is not None:
            closes.append(self.health.close)
        closes += [v.close for v in self.views]
        closes += [i.close for i in self.ingestions]
        failure: BaseException | None = None
        for close in closes:
            try:
                close()
            except Exception as e:
                failure = failure or e
        if failure is not None:
            raise failure


def _drop_new_slots(sources: Iterable[Any]) -> None:
    """Drop the replication slot each of ``sources`` created as it was built (a POSTGRES source's;
    no other kind makes one), once the run ends before any of them ran (the declaration
    refused, or corrupt state; not the caller's stop: :class:`StartStopped`), as the
    checks before a run build their sources without a slot
    (:func:`~timeshard.spec.checked_only`). A slot that cannot be dropped is logged: the
    error that ended the run is the one to see. A source
    built again after a fault finds the slot an earlier build made (``slot_created`` false):
    that earlier build, kept by its :class:`_Retry`, drops it, for every source still
    stalled when the run ends. A slot dropped twice is no error (``drop`` deletes it if it
    is there). A stalled source may by then share its slot with a source of its name that
    runs elsewhere (another deployment's): ``drop`` leaves a slot another process uses (in
    use now, or moved on since the build created it) and logs it."""
    for source in sources:
        if not getattr(source, "slot_created", False):
            continue
        try:
            source.drop()
        except Exception as e:
            log.error(
                "cannot drop the replication slot of %s, made for a declaration then refused "
                "(it keeps the server's WAL until dropped): %s",
                getattr(source, "name", source),
                e,
            )


def read_at_start(
    read: Callable[[], _T],
    what: str,
    backoff_s: float = 1.0,
    on_retry: Callable[[str], None] | None = None,
    stop: threading.Event | None = None,
) -> _T:
    """``read()`` (``what`` it reads, for the log), at the start of a run: a fault (the
    location's consensus unreachable) is logged, passed to ``on_retry`` if given, and
    the read tried again after a pause that doubles from ``backoff_s`` up to a minute,
    as a build's is (invariant 1). No object is built yet to report it as its health.
    A refusal or a state that does not decode is raised: retrying cannot help.

    ``stop``: the caller's stop flag. Once it is set, no read is tried again and
    :class:`StartStopped` is raised; a pause ends as soon as it is set (a process
    asked to stop while its consensus stays unreachable would otherwise retry until
    it is killed)."""
    pause = backoff_s
    while True:
        if stop is not None and stop.is_set():
            raise StartStopped(f"asked to stop while reading {what} at the start")
        try:
            return read()
        except _ENDS_RUN:
            raise
        except Exception as e:
            log.warning(
                "the run cannot read %s (no object to report health for yet), trying again "
                "in %.1f s: %s",
                what,
                pause,
                _failure(e),
            )
            if on_retry is not None:
                on_retry(_failure(e))
        if stop is not None:
            stop.wait(pause)
        else:
            time.sleep(pause)
        pause = min(pause * 2, _Retry.MAX_BACKOFF_S)


class StartStopped(Exception):
    """The caller asked to stop while a read at the start of its run was being retried
    (:func:`read_at_start`): no source ran, nor was any view or export built. The
    sources were built before the read; the replication slots they made stay, unlike
    when a refusal ends the run (:func:`_drop_new_slots`): a stop is this process's
    alone, and a peer of the same declaration may be reading through such a slot
    before it first advances it, which ``drop``'s guard cannot see. A later start of
    the source finds its slot and goes on from it."""


#: What ends the run when a source or its ingestion is built: a refusal (the declaration
#: is wrong) or a shard's state that does not decode. Retrying cannot help either; any
#: other failure is a fault, retried (invariant 1).
_ENDS_RUN = (InvalidUsage, CorruptState)


class _Retry:
    """A source whose build faulted: when to try again (the pause doubles, up to a
    minute), the last failure, and the builds of it that made a replication slot before
    a fault (``made``: the run drops their slots if it ends before the source runs)."""

    MAX_BACKOFF_S = 60.0

    def __init__(
        self, spec: SourceSpec, backoff_s: float, failure: str, made: Any | None = None
    ) -> None:
        self.spec = spec
        self.backoff_s = backoff_s
        self.failure = failure
        self.next_at = time.monotonic() + backoff_s
        self.made: list[Any] = []
        self._keep(made)

    def failed(self, failure: str, made: Any | None = None) -> None:
        self.failure = failure
        self.backoff_s = min(self.backoff_s * 2, self.MAX_BACKOFF_S)
        self.next_at = time.monotonic() + self.backoff_s
        self._keep(made)

    def _keep(self, source: Any | None) -> None:
        if getattr(source, "slot_created", False):
            self.made.append(source)


def _reads(declared: ViewSpec | ExportSpec) -> set[str]:
    """The shards a declared view or export reads."""
    if isinstance(declared, ViewSpec):
        return set(declared.inputs.values())
    return {declared.input}


def _refusal(name: str, error: Exception, *, view: bool) -> InvalidUsage | None:
    """The refusal ``error`` is, building the object ``name`` (None for a fault, to retry):
    an InvalidUsage, or the query of a view that Spark's analysis rejects (the analysis
    reads no part: a fault never reaches it)."""
    if isinstance(error, InvalidUsage):
        return error
    if not view:
        return None
    try:
        from pyspark.errors import AnalysisException
    except ImportError:  # no Spark: no query was analysed
        return None
    if isinstance(error, AnalysisException):
        first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        return InvalidUsage(f"view {name!r}: Spark rejects its query: {first[:1000]}")
    return None


def _failure(error: Exception) -> str:
    """An object's failure, for its ``stalled`` line and health: timeshard's own messages
    (a refusal saying how to go on) up to 1,000 characters, others' (a JVM's stack
    trace) up to 300."""
    limit = 1000 if isinstance(error, TimeshardError) else 300
    return f"{type(error).__name__}: {str(error)[:limit]}"


def build_export(spark: Any, client: PersistClient, spec: ExportSpec) -> ShardExport:
    """The export a spec declares (its options were checked by ``check_spec``)."""
    opts = spec.options
    if spec.kind == "delta":
        return DeltaExport(
            spark,
            client,
            spec.input,
            opts["table_uri"],
            envelope=spec.envelope,
            key_columns=spec.key_columns,
            export_id=spec.name,
            version=spec.version,
        )
    if spec.kind == "postgres":
        return PostgresExport(
            spark,
            client,
            spec.input,
            opts["dsn"],
            opts["table"],
            key_columns=spec.key_columns,
            export_id=spec.name,
            version=spec.version,
            **({"schema": opts["schema"]} if "schema" in opts else {}),
        )
    return KafkaExport(
        spark,
        client,
        spec.input,
        opts["bootstrap_servers"],
        opts["topic"],
        envelope=spec.envelope,
        key_columns=spec.key_columns,
        export_id=spec.name,
        version=spec.version,
        **{
            k: opts[k]
            for k in ("progress_topic", "format", "key_schema_id", "value_schema_id")
            if k in opts
        },
    )


def spec_shards(spec: RunSpec) -> list[str]:
    """The shards a declaration's pipeline writes, without building it: the sources'
    outputs, then the views."""
    return [shard for shard, _ in spec_shard_writers(spec)]


def spec_shard_writers(spec: RunSpec, sources: list[Any] | None = None) -> list[tuple[str, str]]:
    """:func:`spec_shards`, each with what writes it (``source 'a'``, ``view 'v'``, as
    :func:`~timeshard.spec.shard_writer` names it); ``sources``: the spec's sources built
    already (else built here)."""
    if sources is None:
        sources = [build_source(s) for s in spec.source]
    shards: list[tuple[str, str]] = []
    for s, source in zip(spec.source, sources, strict=True):
        outputs = getattr(source, "outputs", None)
        subs = list(outputs()) if outputs is not None else [""]
        writer = shard_writer("source", s.name)
        shards += [(f"{s.name}.{sub}" if sub else s.name, writer) for sub in subs]
    return [*shards, *((v.name, shard_writer("view", v.name)) for v in spec.view)]


@dataclass(frozen=True)
class Holder:
    """A view or an export, and the shards it holds (shard -> the since it holds it at)."""

    name: str
    kind: str  # "view" | "export"
    holds: dict[str, Frontier]

    def line(self) -> str:
        """What it holds and how to release it, on one line."""
        held = ", ".join(f"{s!r} at since {f.to_json()}" for s, f in sorted(self.holds.items()))
        return (
            f"{self.kind} {self.name!r} is not declared, and holds {held} (compacted no "
            f"further): `timeshard drop {self.name}` releases it"
        )


_VIEW_HOLD, _EXPORT_HOLD = view_hold_id(""), "export."


def undeclared_holders(
    client: PersistClient, spec: RunSpec, catalog: Sequence[CatalogEntry]
) -> list[Holder]:
    """The views of ``catalog`` and the exports of the location that ``spec`` does not
    declare and that hold shards (module doc), by name."""
    declared = {v.name for v in spec.view} | {e.name for e in spec.export}
    held = _holders(client)
    statements = {e.name for e in catalog if e.kind == "statement"}
    views = {e.name for e in catalog if e.kind == "view"}
    out = []
    for (kind, name), holds in sorted(held.items(), key=lambda kv: kv[0][1]):
        if name in declared or name in statements or (kind == "view" and name not in views):
            continue
        if _running(client, name) if kind == "view" else _export_running(client, name, holds):
            continue
        out.append(Holder(name, kind, holds))
    return out


def drop_object(client: PersistClient, name: str, *, cascade: bool = False) -> list[Holder]:
    """Drop the view or export ``name`` of the location, as ``DROP`` in ``timeshard serve``
    does (module doc); with ``cascade``, first the views and exports that hold its shard.

    Returns what was dropped, readers first. InvalidUsage, before anything is dropped,
    names an object that is none of these, one ``timeshard serve`` created (DROP it
    there), a view some process runs (its shard has a live writer: stop it first) or
    follows (its shard has a live leased reader: a subscribe, a query), and, without
    ``cascade``, the objects that hold the shard of ``name``.

    A read-only deployment of a view (a standby not promoted) writes nothing to
    consensus, so no drop can see it or refuse for it; the drop fences it instead: the
    view is marked dropped and its shard closes before its holds go, so the standby is
    never promoted over the dropped view (its promotion is refused), holds nothing
    afterwards, and takes a drop cut short for a drop.
    """
    catalog = read_catalog(client)
    held = _holders(client)
    victims: list[Holder] = []
    _plan_drop(client, name, cascade, catalog, held, victims, [])
    health = Health(client)
    try:
        for victim in victims:
            _drop(client, victim)
            health.report_or_log(victim.name, "dropped")
    finally:
        health.close()
    return victims


def _plan_drop(
    client: PersistClient,
    name: str,
    cascade: bool,
    catalog: Sequence[CatalogEntry],
    held: dict[tuple[str, str], dict[str, Frontier]],
    victims: list[Holder],
    path: list[str],
) -> None:
    """Append ``name`` to ``victims``, after what holds its shard (with ``cascade``)."""
    if any(v.name == name for v in victims):
        return
    kinds = {e.kind for e in catalog if e.name == name}
    if "statement" in kinds:
        raise InvalidUsage(
            f"{name!r} was created by timeshard serve: DROP it there (its server keeps it)"
        )
    is_view = "view" in kinds
    is_export = ("export", name) in held
    if is_view and is_export:
        raise InvalidUsage(f"{name!r} names both a view and an export: drop it in Python")
    if not is_view and not is_export:
        what = "a source (it holds no input)" if "source" in kinds else "no view or export"
        views = sorted(e.name for e in catalog if e.kind == "view")
        exports = sorted(n for kind, n in held if kind == "export")
        raise InvalidUsage(
            f"{name!r} is {what}: timeshard drop drops a view of the catalog or an export "
            f"that holds a shard; the location's views: {views}, exports: {exports}"
        )
    if not is_view:
        holds = held[("export", name)]
        if _export_running(client, name, holds):
            raise InvalidUsage(
                f"export {name!r} is running (its reader renewed its lease in the last three "
                "heartbeat intervals): stop the process that runs it, then drop it"
            )
        victims.append(Holder(name, "export", holds))
        return
    if _running(client, name):
        raise InvalidUsage(
            f"view {name!r} is running (its shard has a writer that renewed its lease in the "
            "last three heartbeat intervals): stop the process that runs it, then drop it"
        )
    readers = sorted(
        n for (kind, n), holds in held.items() if name in holds and (kind, n) != ("view", name)
    )
    if readers and not cascade:
        raise InvalidUsage(
            f"cannot drop {name!r}: {', '.join(map(repr, readers))} hold its shard "
            "(--cascade drops them too)"
        )
    for reader in readers:
        if reader in path:
            continue
        _plan_drop(client, reader, cascade, catalog, held, victims, [*path, name])
    follower = _follower(client, name)
    if follower is not None:
        raise InvalidUsage(
            f"view {name!r} is followed by a live process (its shard's reader {follower!r} "
            "renewed its lease in the last three heartbeat intervals: a subscribe or a "
            "query): stop that process, then drop it"
        )
    victims.append(Holder(name, "view", held.get(("view", name), {})))


def _drop(client: PersistClient, victim: Holder) -> None:
    """Release what ``victim`` holds; a view is marked dropped and its shard closes first
    (no replica writes again, as in :meth:`~timeshard.compute.MaterializedView.drop`).
    Idempotent."""
    from timeshard.compute.mv_sink import drop_view

    if victim.kind == "export":
        for shard in victim.holds:
            client.drop_critical_since(shard, f"{_EXPORT_HOLD}{victim.name}")
        return
    if victim.name not in client.list_shards():  # no shard: its input holds alone
        release_view_holds(client, victim.name, victim.holds)
        return
    drop_view(client, victim.name, victim.holds)


def _holders(client: PersistClient) -> dict[tuple[str, str], dict[str, Frontier]]:
    """Every view and export that holds a shard of the location: ``(kind, name)`` -> the
    shards it holds, each with the since it holds it at. A shard whose state cannot be
    read is left out (logged)."""
    out: dict[tuple[str, str], dict[str, Frontier]] = {}
    for shard in client.list_shards():
        try:
            readers = client.state(shard).critical_readers
        except TimeshardError as e:  # ``timeshard status`` shows the shard unreadable
            log.warning("shard %s: its holders are unknown: %s", shard, e)
            continue
        for reader, state in readers.items():
            for kind, prefix in (("view", _VIEW_HOLD), ("export", _EXPORT_HOLD)):
                if reader.startswith(prefix) and len(reader) > len(prefix):
                    out.setdefault((kind, reader[len(prefix) :]), {})[shard] = state.since
    return out


def _export_running(client: PersistClient, export: str, holds: Mapping[str, Frontier]) -> bool:
    """Whether a process runs ``export``: a shard it holds has its leased reader
    (:func:`~timeshard.storage.export.reader_name`) that renewed its lease in the last
    three heartbeat intervals."""
    from timeshard.storage.export import reader_name

    name = reader_name(export)
    now, interval = client.config.now_ms(), client.config.heartbeat_interval_ms
    for shard in holds:
        readers = client.state(shard).leased_readers
        for rid, reader in readers.items():
            if rid.rpartition(".")[0] == name and now - reader.last_heartbeat_ms <= 3 * interval:
                return True
    return False


def _follower(client: PersistClient, view: str) -> str | None:
    """A leased reader of ``view``'s open shard that renewed its lease in the last three
    heartbeat intervals (a process that follows the view: a subscribe, a query), or None.
    A read-only deployment reads unleased: it is never one (see :func:`drop_object`)."""
    state = _open_state(client, view)
    if state is None:
        return None
    return next(_live(client, sorted(state.leased_readers.items())), None)


def _running(client: PersistClient, view: str) -> bool:
    """Whether a process runs ``view``: its open shard has a writer that renewed its lease
    in the last three heartbeat intervals (as ``timeshard status`` tells liveness)."""
    state = _open_state(client, view)
    return state is not None and next(_live(client, state.writers.items()), None) is not None


def _open_state(client: PersistClient, shard: str) -> Any:
    """The state of ``shard`` if it exists and is open (not closed: dropped), else None."""
    if shard not in client.list_shards():
        return None
    state = client.state(shard)
    return None if state.upper.is_empty() else state


def _live(client: PersistClient, handles: Iterable[tuple[str, Any]]) -> Iterator[str]:
    """The ids of ``handles`` (writers or leased readers) that renewed their lease in the
    last three heartbeat intervals."""
    now, interval = client.config.now_ms(), client.config.heartbeat_interval_ms
    return (i for i, h in handles if now - h.last_heartbeat_ms <= 3 * interval)


__all__ = [
    "Pipeline",
    "Holder",
    "drop_object",
    "StartStopped",
    "read_at_start",
    "spec_shard_writers",
    "spec_shards",
    "undeclared_holders",
]
