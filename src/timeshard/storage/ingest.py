"""Ingestion: a source into its output shard, exactly once, through reclocking.

```
 source.read(resume, bound) ──data──> reclock ──> envelope (NONE | UPSERT) ──> output shard
        │        \\──upper──> remap (mint binding at now) ──> remap shard       │
        ^───────────── resume frontier = binding at (output upper - 1) ─────────/
```

One ``step``:

1. the output upper ``U`` gives the resumption frontier: the source frontier
   bound at ``U - 1`` (every record below it is already in the output);
2. the remap mints a binding of the source's current upper at ``now`` (if
   another instance minted first, its binding is used instead);
3. the records between the resumption frontier and the latest binding are
   read by Spark tasks and reclocked: each gets the first bound time beyond
   it (an expression over the binding intervals, no job of its own);
4. the envelope turns them into updates at ``[U, bound upper)``: NONE
   appends them (with their ``_diff`` if the source has one), UPSERT runs the
   feedback upsert, and either appends with compare-and-append at ``U``;
5. the since holds (the upsert's reader, the remap reader, retained
   history) follow, lagging: at most one of them moves per step
   (:mod:`timeshard.storage.since_holds`). A hold that cannot move does not
   fail the step (its data is appended): its error is the health's error
   line while the source keeps running, and the hold is tried again later.
   A retained history follows the retention declared last: another instance
   of the source (a redeploy, a replica) that declares another one fences
   this instance's ``retain`` reader, which then takes the stored retention,
   or none if it was dropped.

Cost of a step: a data step of an UPSERT output is one Spark job, a step with
no records in range none (an empty batch is appended). Compare-and-sets: the
remap's mint, each output's append, and at most one since downgrade.

Crash anywhere and restart: the next step starts again from the output upper,
so nothing is lost and nothing is written twice. Two instances of one
ingestion agree on the bindings through the remap shard and on the output
through compare-and-append.

Runs on the driver; reading, reclocking and the envelopes run in Spark tasks.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from timeshard.catalog import (
    Catalog,
    CatalogEntry,
    check_redeclared,
    read_catalog,
    source_entries,
    stored_entry,
)
from timeshard.errors import (
    Fenced,
    InvalidUsage,
    LeaseExpired,
    SourceUnavailable,
    UpperMismatch,
)
from timeshard.persist import Appended, PersistClient, expire_all
from timeshard.persist._internal.parts import DIFF, ERR, TS
from timeshard.persist.holds import RetainedHistory, retained_ms
from timeshard.persist.write import not_appended
from timeshard.progress import Frontier, frontier
from timeshard.storage.health import Health
from timeshard.storage.reclock import Remap, SourceFrontier, reclock_df
from timeshard.storage.since_holds import LaggingHold, SinceHolds
from timeshard.storage.sources import Source, metadata_columns
from timeshard.storage.upsert_spark import DELETE, ORDER, SparkFeedbackUpsert

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepReport:
    """What one ingestion step did."""

    output_upper: Frontier
    bound_upper: Frontier
    appended: int


class Export:
    """One output of a source: its shard and its envelope (its own persist sink)."""

    def __init__(
        self,
        spark: Any,
        client: PersistClient,
        shard: str,
        payload: pa.Schema,
        envelope: str,
        key_columns: Sequence[str],
        holds: SinceHolds | None = None,
        metadata: Sequence[str] = (),
    ) -> None:
        if envelope not in ("none", "upsert"):
            raise InvalidUsage(f"envelope must be 'none' or 'upsert', got {envelope!r}")
        if envelope == "upsert" and DIFF in payload.names:
            raise _changes_upserted(shard)
        self.shard = shard
        self.schema = pa.schema([f for f in payload if f.name != DIFF])
        self.metadata = tuple(metadata)  # never null: no part of what makes a delete
        if envelope == "upsert" and set(self.schema.names) <= {*key_columns, *self.metadata}:
            # A command is a delete when its value columns are all null: with none, all were.
            raise InvalidUsage(
                f"UPSERT output {shard!r} has no value columns besides its key columns "
                f"{list(key_columns)} (and metadata): every command would read as a delete; "
                "use the NONE envelope"
            )
        if envelope == "upsert":  # refused before any handle is opened
            SparkFeedbackUpsert.spark_schema(client, shard, self.schema, key_columns)
        # An UPSERT output's own writer compacts it; this one only appends empty batches.
        self.writer = client.open_writer(
            shard, self.schema, background_compaction=envelope == "none"
        )
        try:
            if self.writer.fetch_recent_upper().is_empty():
                raise InvalidUsage(
                    f"output shard {shard!r} is closed (its source was dropped), and a dropped "
                    "name is not used again"
                )
            self.upsert = (
                SparkFeedbackUpsert(spark, client, shard, self.schema, key_columns, holds)
                if envelope == "upsert"
                else None
            )
        except BaseException:
            with contextlib.suppress(Exception):  # the constructor's error is the one to see
                self.writer.expire()
            raise

    def upper(self) -> Frontier:
        return self.writer.fetch_recent_upper()

    @property
    def lease_lost(self) -> bool:
        """Whether a handle's lease ran out (the export must be opened anew)."""
        return self.writer.lease_lost or (self.upsert is not None and self.upsert.lease_lost)

    def close(self) -> None:
        try:
            expire_all([self.writer])
        finally:  # the upsert's handles too, whatever the writer's expiry raised
            if self.upsert is not None:
                self.upsert.close()

    def advance(self, lower: int, upper: int) -> Appended | UpperMismatch:
        """Append an empty batch at ``[lower, upper)`` (no Spark job)."""
        if self.upsert is not None:
            return self.upsert.advance(lower, upper)
        return self.writer.compare_and_append_batch([], lower, upper)

    def write(self, records: Any, lower: int, upper: int) -> Appended | UpperMismatch | None:
        """Apply the envelope to reclocked ``records`` and append ``[lower, upper)``."""
        from pyspark.sql import functions as F

        from timeshard.spark.parts import column
        from timeshard.spark.sqltext import bigint_where

        # Quoted: a column name may hold dots or spaces (``v.x`` is no field of a struct ``v``).
        data = [column(c) for c in self.schema.names]
        err = F.col(ERR) if ERR in records.columns else F.lit(None).cast("string")
        records = records.where(bigint_where(TS, ">=", lower))
        if self.upsert is not None:
            if DIFF in records.columns:  # a source whose payload does not say it (TPCH)
                raise _changes_upserted(self.shard)
            deleted = F.lit(True)
            for c in [c for c in self.schema.names if c not in (*self.upsert.keys, *self.metadata)]:
                deleted = deleted & column(c).isNull()
            commands = records.select(
                *data,
                TS,
                F.struct("_partition", "_offset").alias(ORDER),  # the FromTime position
                deleted.alias(DELETE),
                err.alias(ERR),
            )
            return self.upsert.apply(commands, upper)
        diff = F.col(DIFF) if DIFF in records.columns else F.lit(1).cast("long")
        updates = records.select(*data, TS, diff.alias(DIFF), err.alias(ERR))
        batch = self.writer.batch(updates, lower, upper)
        try:
            result = self.writer.compare_and_append_batch([batch], lower, upper)
        except BaseException as e:
            if not_appended(e):  # else the batch may be in the shard: its parts stay
                batch.delete()
            raise
        if isinstance(result, UpperMismatch):
            batch.delete()
        return result


class Ingestion:
    """One source into its output shards (one per output, NONE or UPSERT each).

    A source with a single output writes the shard ``output`` (default: the
    source's name); one with subsources (``source.outputs()``) writes
    ``<output>.<subsource>`` for each. ``envelopes`` maps an output to
    ``("upsert", key_columns)``; the others use NONE. ``catalog``: the
    location's entries as :func:`~timeshard.catalog.read_catalog` read them
    (a pipeline reads them once for all its sources), else read here, once,
    for every check.

    ``ask_topic_id``: whether the build asks the broker for the id of a KAFKA
    source's topic that the catalog does not record yet
    (``KafkaSource.find_topic_id``), waiting for the answer. A broker that is
    down holds the build up for the source's timeout; without it, the first
    step that reaches the broker learns the id and records it before the
    source binds any offset (:meth:`_record_learned`), which keeps the same
    guarantees. A pipeline builds its sources so (its first steps still ask,
    once each). Either way an id the catalog records is never erased nor
    replaced (:meth:`_record_keeping_topic_id`).
    """

    def __init__(
        self,
        spark: Any,
        client: PersistClient,
        source: Source,
        *,
        output: str | None = None,
        envelope: str = "none",
        key_columns: Sequence[str] = (),
        envelopes: dict[str, tuple[str, Sequence[str]]] | None = None,
        clock: Callable[[], int] | None = None,
        retain_history_ms: int | None = None,
        catalog: Sequence[CatalogEntry] | None = None,
        ask_topic_id: bool = True,
    ) -> None:
        self.spark = spark
        self.client = client
        self.source = source
        self.output = output or source.name
        self.clock = clock or (lambda: time.time_ns() // 1_000_000)
        self.retain_history_ms = retain_history_ms
        if catalog is None:  # every check below looks at this one read
            catalog = read_catalog(client)
        pin = getattr(source, "pin_recorded", None)
        if pin is not None:  # what the first build saw upstream, which a restart must keep:
            stored = stored_entry(client, self.output, "source", catalog)  # before outputs()
            if stored is not None and isinstance(stored.definition.get("options"), dict):
                pin(stored.definition["options"])
        self._envelopes = envelopes or {"": (envelope, key_columns)}
        check_redeclared(  # before anything is written
            client, self.output, source, self._envelopes, catalog=catalog
        )
        outputs = getattr(source, "outputs", None)
        self._payloads = outputs() if outputs is not None else {"": source.payload_schema()}
        stray = sorted(
            sub
            for sub, (env, keys) in self._envelopes.items()
            if sub not in self._payloads and (env != "none" or list(keys))
        )
        if stray:
            raise InvalidUsage(
                f"source {source.name!r} writes the outputs {sorted(self._payloads)}, and "
                f"an envelope for {stray} names none of them"
                + (": give one per output with envelopes=" if "" in stray else "")
            )
        self._check_owners(catalog)
        self.exports: dict[str, Export] = {}
        self._open()
        #: The handles were released by a reopen that failed: the next step opens them.
        self._released = False
        try:
            find = getattr(source, "find_topic_id", None)
            if ask_topic_id and find is not None:
                find()  # recorded before the source binds offsets; else learned by a step
            self._record_keeping_topic_id()
            #: A KAFKA source whose topic id the broker could not tell at the recording
            #: (the topic not made yet, the broker unreachable): recorded again once known.
            self._topic_unrecorded = getattr(source, "topic_id", "") is None
            self.health = Health(client, self.clock)
        except BaseException:
            with contextlib.suppress(Exception):  # the constructor's error is the one to see
                self._release()
            raise
        self.paused = False
        self._report_or_log("starting")
        self._resume_source()

    def _check_owners(self, catalog: Sequence[CatalogEntry]) -> None:
        """InvalidUsage if an output or the remap is a shard another object of ``catalog``
        writes (:func:`~timeshard.spec.check_new_shard_owner`), or an output is the
        source's own remap shard (a table named ``remap`` of a source of several)."""
        from timeshard.spec import check_new_shard_owner, shard_owners, shard_writer

        remap = f"{self.output}.remap"
        owners = shard_owners(catalog)
        check_new_shard_owner(remap, shard_writer("remap", self.output), owners)
        owners[remap] = shard_writer("remap", self.output)
        for sub in self._payloads:
            shard = f"{self.output}.{sub}" if sub else self.output
            check_new_shard_owner(shard, shard_writer("source", self.output), owners)

    def _open(self) -> None:
        """Open every output's handles, the remap and the retained history.

        If any of them fails to open, those opened so far are released before
        the error is raised: nothing stays registered on a shard.
        """
        holds = SinceHolds()
        exports: dict[str, Export] = {}
        remap: Remap | None = None
        try:
            for sub, payload in self._payloads.items():
                shard = f"{self.output}.{sub}" if sub else self.output
                env, keys = self._envelopes.get(sub, ("none", ()))
                exports[sub] = Export(
                    self.spark,
                    self.client,
                    shard,
                    payload,
                    env,
                    keys,
                    holds,
                    metadata_columns(self.source),
                )
            remap = opened = Remap(self.client, f"{self.output}.remap")
            remap_hold = holds.add(remap.downgrade_since)
            retained: list[tuple[LaggingHold, _Retention, Callable[[], Frontier]]] = []
            outputs: list[tuple[str, Callable[[], Frontier]]] = [
                (e.shard, e.upper) for e in exports.values()
            ]
            outputs.append((remap.shard_id, lambda: opened.upper))
            for shard, upper in outputs:
                retention = _Retention(self.client, shard, self.retain_history_ms)
                if retention.history is not None:
                    hold = holds.add(retention.advance)
                    retained.append((hold, retention, upper))
        except BaseException:
            with contextlib.suppress(Exception):  # the error to see is the one raised
                _release(exports.values(), remap)
            raise
        self.holds, self.exports, self.remap = holds, exports, remap
        self._remap_hold, self._retained = remap_hold, retained

    def _release(self) -> None:
        _release(self.exports.values(), self.remap)

    def close(self) -> None:
        """Release every shard handle now (the writers' compactors stop).

        Without it they hold the shards' sinces and old states until their
        leases run out. The retained history stays held. The holds that lag
        behind move to where a restart resumes first (a stopped source lets its
        shards compact up to there). The ingestion is unusable afterwards.
        """
        with contextlib.suppress(Exception):  # a hold that cannot move only keeps more
            self.holds.flush()
        self._release()
        self.health.close()
        close_source = getattr(self.source, "close", None)
        if close_source is not None:
            close_source()

    def drop(self) -> None:
        """Record the source and its outputs as ``dropped``, then close.

        The caller closes the output shards (no writer appends again). The
        record is best effort: a failure to write it is logged, and the drop
        goes on.
        """
        self._report_or_log("dropped")
        self.close()

    def _lease_lost(self) -> bool:
        return self.remap.lease_lost or any(e.lease_lost for e in self.exports.values())

    def _objects(self) -> list[str]:
        """The names the source's health is reported under: its own and its outputs'."""
        return [self.output, *(e.shard for e in self.exports.values() if e.shard != self.output)]

    def _report(self, status: str, error: str | None = None) -> None:
        for obj in self._objects():
            self.health.report(obj, status, error)

    def _report_or_log(self, status: str, error: str | None = None) -> None:
        """:meth:`_report`, best effort: for work done whatever the health says (a step
        whose data is appended, a failure being raised, a start, a drop)."""
        for obj in self._objects():
            self.health.report_or_log(obj, status, error)

    def pause(self) -> None:
        """Stop reading; the outputs keep what they have. Done whatever the health says
        (its failure is logged)."""
        self.paused = True
        self._report_or_log("paused")

    def resume(self) -> None:
        """Read again; done whatever the health says (its failure is logged)."""
        self.paused = False
        self._report_or_log("running")

    def step(self) -> StepReport:
        """One tick; a failure marks the source stalled (with the error) and is raised."""
        if self.paused:
            upper = self.resume_upper()
            return StepReport(upper, self.remap.upper, 0)
        try:
            if self._released:  # the last reopen failed
                self._reopen()
            elif self._lease_lost():
                raise LeaseExpired(f"source {self.output!r}: a handle's lease ran out")
            report = self._step()
        except Exception as e:
            # health is best effort: the failure to raise is the step's
            self._report_or_log("stalled", f"{type(e).__name__}: {str(e)[:500]}")
            if not self._released and (isinstance(e, LeaseExpired) or self._lease_lost()):
                self._reopen()  # (a reopen that failed is tried again at the next step)
            raise
        # The data is appended: a failure to record the health does not fail the step.
        self._report_or_log("running", self._commit_progress() or self._holds_error())
        return report

    def _record_learned(self) -> None:
        """Record the source again once its ``upper`` learned its KAFKA topic's id, which
        the broker could not tell when the source was recorded: before any offset is
        bound under it, so that a restart is held to it (a topic made again while no
        process ran is refused: see ``KafkaSource.pin_recorded``).

        An id another instance of the source recorded meanwhile is kept, never
        overwritten (one compare-and-set of the catalog), and the source is held to it:
        if it learned another (the topic was made again between the two), the step fails
        (definite) before it binds anything."""
        if not self._topic_unrecorded or getattr(self.source, "topic_id", None) is None:
            return
        self._record_keeping_topic_id()
        self._topic_unrecorded = False
        self.source.upper()  # held to the recorded id: another one is refused (definite)

    def _record_keeping_topic_id(self) -> None:
        """Record the source and its exports (one compare-and-set of the catalog), never
        erasing nor replacing a KAFKA topic id recorded already, by a build or a step of
        any instance: the source is held to the stored id first (``pin_recorded``: the
        catalog read again, as another instance may have recorded it since the build's
        read), so its entry carries it; if one is recorded between that read and the
        compare-and-set, the stored source entry is kept whole where its id differs from
        this source's (None, or another id), and the source is held to it after."""
        exported = {sub: export.shard for sub, export in self.exports.items()}

        def kept(stored: CatalogEntry, new: CatalogEntry) -> bool:
            if stored.definition == new.definition:
                return True
            (recorded, topic), (mine, my_topic) = (_topic_of(e) for e in (stored, new))
            return bool(recorded) and topic == my_topic and recorded != mine

        pin = getattr(self.source, "pin_recorded", None)
        if getattr(self.source, "find_topic_id", None) is None or pin is None:
            pin = None  # no topic id: recorded as it is (a POSTGRES source pins at its build)

        def pin_stored() -> None:
            if pin is None:
                return
            stored = stored_entry(self.client, self.output, "source")
            if stored is not None and isinstance(stored.definition.get("options"), dict):
                pin(stored.definition["options"])

        # Held first to an id recorded since the build's catalog read, so that its entries
        # carry it whole (exports too); ``kept`` guards the moment between the two.
        pin_stored()
        entries = source_entries(self.output, self.source, self._envelopes, exported)
        Catalog(self.client).record(entries, same=kept)
        pin_stored()

    def _holds_error(self) -> str | None:
        """The failures of the since holds that could not move (tried again later)."""
        errors = self.holds.errors
        if not errors:
            return None
        said = "; ".join(f"{type(e).__name__}: {str(e)[:300]}" for e in errors)
        return f"since hold not moved (history kept longer): {said}"

    def _commit_progress(self) -> str | None:
        """Tell the source how far its outputs are durable, if it reports that upstream.

        A Kafka source commits the resumption frontier to its consumer group,
        for lag tools. A failure does not stall the source (its progress is
        in the remap shard, not upstream): it is the health's error line
        while the source keeps running, and the next tick commits again.
        """
        commit = getattr(self.source, "commit", None)
        if commit is None:
            return None
        try:
            commit(self.remap.resume_frontier(self.resume_upper()))
        except Exception as e:
            # A silence's line ends with how it is asked meanwhile: kept whole.
            return f"progress not reported upstream: {type(e).__name__}: {str(e)[:600]}"
        return None

    def _reopen(self) -> None:
        """A lease ran out anyway (the process was stopped too long): start from persist.

        If it fails, the handles stay released (none is left registered) and
        the next step reopens them.
        """
        self._released = True
        with contextlib.suppress(Exception):
            self._release()
        self._open()
        self._resume_source()
        self._released = False

    def _resume_source(self) -> None:
        """Tell a load generator how far the durable bindings already took it."""
        bound = self.remap.frontier_at(self.remap.upper.time or 0)
        resume = getattr(self.source, "resume", None)
        if resume is not None:
            resume(bound)

    def resume_upper(self) -> Frontier:
        """The least upper of the exports: everything below it is in every output."""
        upper = Frontier.empty()
        for export in self.exports.values():
            upper = upper.meet(export.upper())
        return upper

    def _step(self) -> StepReport:
        self.source.tick()
        out_upper = self.resume_upper()
        assert out_upper.time is not None, "the outputs are closed"
        into = max(self.clock(), self.remap.upper.time or 0, out_upper.time)
        observed = self.source.upper()
        self._record_learned()
        self.remap.mint(into, observed)
        self._check_not_behind(observed)
        # After the mint, which catches up with every binding: another instance's
        # bindings up to the output upper are known, so the read starts where the
        # outputs end (not earlier, which a source with a release point refuses).
        start = self.remap.resume_frontier(out_upper)
        bound = self.remap.upper
        assert bound.time is not None
        if not out_upper < bound:
            return StepReport(out_upper, bound, 0)
        end = self.remap.frontier_at(bound.time - 1)
        # No offset in the range (an idle source): every output only moves its upper.
        data = self._read(start, end) if start != end else {}
        frames = data if isinstance(data, dict) else {"": data}
        appended = 0
        for sub, export in self.exports.items():
            lower = export.upper().time
            assert lower is not None
            if lower >= bound.time:
                continue
            frame = frames.get(sub)
            result: Appended | UpperMismatch | None
            if frame is None:  # nothing in the range for this output
                result = export.advance(lower, bound.time)
            else:
                result = export.write(self._reclock(frame, start), lower, bound.time)
            appended += isinstance(result, Appended)
        # Resuming needs the binding at (least output upper - 1) and later ones only, and
        # the next sync reads back from this instance's remap upper - 1: another instance
        # may have written the outputs past that meanwhile.
        known = min(self.resume_upper().time or 1, self.remap.upper.time or 1)
        self._remap_hold.want(max(known - 1, 0))
        for hold, _, upper in self._retained:
            hold.want(upper().time or 0)
        self.holds.step()
        for hold, retention, upper in list(self._retained):
            if retention.history is None:  # another instance declared none
                self.holds.remove(hold)
                self._retained.remove((hold, retention, upper))
        return StepReport(out_upper, bound, appended)

    def _check_not_behind(self, observed: SourceFrontier) -> None:
        """Raise if a partition of the source ends before offsets already bound.

        A binding never moves back (it is joined with the previous one), so a
        file truncated or rewritten, or a Kafka topic deleted and made again,
        would otherwise be read on from the old offset: the records below it
        lost, and a range starting inside a line. Another instance's binding may
        be later than this instance's look at the source, so the source is asked
        again before it is called behind. Only for a source with one upstream
        whose upper never moves back (``shared_upper``): a load generator's upper
        is its own instance's progress, which another instance may be ahead of.
        """
        if not getattr(self.source, "shared_upper", False) or not self.remap.upper.time:
            return
        bound = self.remap.frontier_at(self.remap.upper.time - 1)
        behind = _behind(observed, bound) and _behind(self.source.upper(), bound)
        if behind:
            said = ", ".join(f"{p!r} ends at {o} below the bound {bound[p]}" for p, o in behind)
            raise SourceUnavailable(
                f"source {self.output!r}: {said}: it was truncated, rewritten or made "
                "again; offsets already bound are never read again, so nothing is read",
                definite=True,
            )

    def _read(self, start: SourceFrontier, end: SourceFrontier) -> Any:
        """The source's records in ``[start, end)``.

        A source that snapshots at its first binding (``reads_from_origin``,
        the MySQL source) is also told that binding, the ``origin``.
        """
        if getattr(self.source, "reads_from_origin", False):
            return self.source.read(self.spark, start, end, origin=self.remap.origin())  # type: ignore[call-arg]
        return self.source.read(self.spark, start, end)

    def _reclock(self, records: Any, start: SourceFrontier) -> Any:
        return reclock_df(self.spark, records, self.remap.bindings(), start=start)


def _changes_upserted(shard: str) -> InvalidUsage:
    return InvalidUsage(
        f"UPSERT output {shard!r}: its source's records carry {DIFF} (they are changes, "
        "insertions and retractions), and UPSERT takes commands, the last value per key: a "
        "retraction would read as an upsert of the row it retracts; use the NONE envelope"
    )


def _topic_of(entry: CatalogEntry) -> tuple[Any, Any]:
    """The KAFKA topic id and topic a source's catalog entry records (None if none)."""
    options = entry.definition.get("options")
    if entry.kind != "source" or not isinstance(options, dict):
        return None, None
    return options.get("topic_id"), options.get("topic")


def _release(exports: Iterable[Export], remap: Remap | None) -> None:
    """Release the handles of ``exports`` and ``remap``, all of them even if some fail;
    the first failure is raised then."""
    first: Exception | None = None
    for handles in [*exports, remap]:
        if handles is None:
            continue
        try:
            handles.close()
        except Exception as e:
            first = first or e
    if first is not None:
        raise first


def _behind(upper: SourceFrontier, bound: SourceFrontier) -> list[tuple[str, int]]:
    """The partitions of ``upper`` below their offset in ``bound``, with their offsets."""
    return [(p, o) for p, o in sorted(upper.items()) if p in bound and o < bound[p]]


class _Retention:
    """The retained history of one output shard, as declared last.

    This instance declares ``retain_ms`` when it opens the shard. Another
    instance that declares another retention later swaps the ``retain``
    reader's token (or drops the reader, for none), which fences this
    instance's downgrades: it then follows the retention stored now, or gives
    the hold up (``history`` None) if there is none.
    """

    def __init__(self, client: PersistClient, shard: str, retain_ms: int | None) -> None:
        self.client = client
        self.shard = shard
        self.history = RetainedHistory.configure(client, shard, retain_ms)

    def advance(self, t: int) -> None:
        """The shard's upper reached ``t``: forget history older than the retention."""
        if self.history is None:
            return
        try:
            self.history.advance(frontier(t))
        except Fenced:
            declared = retained_ms(self.client, self.shard)
            log.info(
                "shard %s: another instance declared RETAIN HISTORY %s ms (this one %s ms): "
                "following it",
                self.shard,
                declared,
                self.history.retain_ms,
            )
            self.history = (
                None if declared is None else RetainedHistory(self.client, self.shard, declared)
            )
            if self.history is not None:  # fenced again: the hold's error, tried again later
                self.history.advance(frontier(t))


__all__ = ["Export", "Ingestion", "StepReport"]
