"""Materialized views: a view definition kept in its own shard by the sink.

    view = MaterializedView.install(spark, client, ViewDefinition(
        name="bids_per_user", inputs={"bids": "auction_bids"},
        sql="SELECT user_id, count(*) AS n FROM bids GROUP BY user_id"))
    view.run_for(10.0)              # tick every tick_interval until 10 s passed
    view.frontiers()                # desired frontier, write frontier, lag

``install`` creates the view's shard (unless read-only) with the schema Spark
derives from the query, and starts a sink at ``as_of`` -- by default the
earliest time every input can still be read at, or the view shard's upper - 1
if the view already exists. A read-only install writes nothing to consensus
until ``promote``; ``generation`` is the deploy generation (a newer one fences
the older ones when it is promoted).

A writing view holds its inputs durably (``view.<name>`` critical since
handles, named in its catalog entry), so that its inputs stay readable where
it resumes while no replica runs; ``close`` keeps those holds, ``drop``
releases them. Each step reports the view's health (``running``, or
``stalled`` with the error while its sink retries a fault).

A read-only replica (a standby, or a generation fenced by a newer one or by a
drop) writes no health; it notices a drop of the view by itself. A drop marks
the ``deploy`` hold of the view's shard before the shard closes, then releases
it; a complete view (every input closed) has a closed shard too, and keeps the
hold unmarked. A read-only sink's tick reads the shard's state, and so sees the
mark while the shard is still open (a drop cut short before its close). Once
its sink saw the shard closed, each step reads the shard's state in place of
the sink's tick (which has nothing left to do on a closed shard): one read of
consensus, where the sink's tick read the shard's upper and its inputs'. A
marked ``deploy`` hold, or a closed shard without one, stops the view:
:attr:`MaterializedView.dropped` (also the sink's ``last_error``) says so, and
:attr:`MaterializedView.status` is ``dropped``, as the drop recorded it in the
status collection.

Runs on the driver; Spark does the data work.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from timeshard.catalog import record_view
from timeshard.compute.engine import SparkEngine
from timeshard.compute.mv_sink import (
    MvSink,
    SinkFrontiers,
    SinkStats,
    mark_dropped,
    view_dropped,
)
from timeshard.compute.view import SparkViewDesired, ViewDefinition, query_settings
from timeshard.errors import InvalidUsage
from timeshard.persist import PersistClient, UnleasedReader
from timeshard.persist.client import check_shard_id
from timeshard.progress import Frontier, Timestamp
from timeshard.storage.health import Health

log = logging.getLogger(__name__)


class MaterializedView:
    """A view and the sink that maintains it."""

    def __init__(
        self,
        definition: ViewDefinition,
        sink: MvSink,
        desired: SparkViewDesired,
        tick_interval_s: float,
    ) -> None:
        self.definition = definition
        self.sink = sink
        self.desired = desired
        self.tick_interval_s = tick_interval_s
        self._health: Health | None = None
        #: Why this read-only replica stopped: the view was dropped (None while it runs).
        self.dropped: str | None = None
        #: Reads the view's shard once its sink saw it closed (module doc).
        self._closed_reader: UnleasedReader | None = None

    @staticmethod
    def install(
        spark: Any,
        client: PersistClient,
        definition: ViewDefinition,
        *,
        as_of: Timestamp | None = None,
        read_only: bool = False,
        generation: int = 0,
        background_io: bool = True,
        tick_interval_s: float = 1.0,
        check_every_s: float | None = 300.0,
    ) -> MaterializedView:
        check_shard_id(definition.name)
        for shard in definition.inputs.values():
            check_shard_id(shard)
        desired = SparkViewDesired(spark, client, definition)
        schema = desired.data_schema()
        exists = definition.name in client.list_shards()
        if not exists:
            if read_only:
                raise InvalidUsage(
                    f"view {definition.name!r} does not exist yet; a read-only "
                    "replica cannot create it"
                )
            client.open_writer(definition.name, schema).expire()
        state = client.state(definition.name)
        if state.upper.is_empty():
            raise InvalidUsage(
                f"view {definition.name!r}: its shard is closed (the view was dropped, or every "
                "input closed and it is complete), and a closed view is not installed again"
            )
        stored = state.data_schema
        if not stored.equals(schema):
            raise InvalidUsage(
                f"view {definition.name!r} exists with schema {stored}; the "
                f"definition produces {schema}"
            )
        defaulted = as_of is None
        if as_of is None:
            as_of = MaterializedView._default_as_of(client, definition)
        else:
            # The sink resumes where the shard ends: its first read of the inputs is at
            # the later of as_of and the shard's last time (as _default_as_of has it).
            resume = max(as_of, (state.upper.time or 0) - 1)
            MaterializedView._check_as_of(definition, resume, _inputs_since(client, definition))
        sink = MvSink(
            client,
            definition.name,
            schema,
            desired,
            SparkEngine(spark),
            as_of,
            read_only=read_only,
            generation=generation,
            input_shards=tuple(definition.inputs.values()),
            background_io=background_io,
            retain_history_ms=definition.retain_history_ms,
            check_every_s=check_every_s,
        )
        if read_only:  # a read-only replica records its definition when promoted
            return MaterializedView(definition, sink, desired, tick_interval_s)
        try:
            # The inputs' since may have moved on between choosing as_of and holding it.
            held = sink.inputs_since()
            if held.time is not None and definition.refresh_time(sink.as_of) < held.time:
                if defaulted:
                    sink.as_of = definition.first_shown_from(held.time)
                elif definition.refresh_time(resume) < held.time:
                    MaterializedView._check_as_of(definition, resume, held)
            desired.use_leases()
            record_view(
                client,
                definition,
                sink.as_of,
                desired.plan.classification,
                query_settings(desired.spark),
            )
        except BaseException:  # a refusal, or a fault: no sink is left open (run retries)
            with contextlib.suppress(Exception):  # the first error is the one to see
                MaterializedView._abandon(sink, desired, created=not exists)
            raise
        return MaterializedView(definition, sink, desired, tick_interval_s)

    @staticmethod
    def _check_as_of(definition: ViewDefinition, as_of: Timestamp, since: Frontier) -> None:
        """InvalidUsage if the view at ``as_of`` (its first time to compute: the as_of of a
        new view, the last time of a resumed one's shard) reads its inputs before ``since``,
        the join of their sinces (no query can produce it there: its sink would stall for
        ever)."""
        if since.time is None or definition.refresh_time(as_of) >= since.time:
            return
        raise InvalidUsage(
            f"view {definition.name!r}: as_of {as_of} reads its inputs at "
            f"{definition.refresh_time(as_of)}, before their since {since.time} (they are "
            f"readable from it on: an as_of at or after {definition.first_shown_from(since.time)})"
        )

    @staticmethod
    def _abandon(sink: MvSink, desired: SparkViewDesired, *, created: bool) -> None:
        """Undo an install that cannot go on: a view this install created loses the holds
        its sink registered, as if it never was; an existing view keeps its own."""
        if created:
            sink.drop()
        else:
            sink.close()
        desired.close()

    @staticmethod
    def _default_as_of(client: PersistClient, definition: ViewDefinition) -> Timestamp:
        """Resume where the view's shard ends -- or later, where its inputs are readable.

        A view whose inputs compacted past its shard's upper while no replica
        held them can only be correct again from the inputs' since on: with
        REFRESH EVERY, from the first refresh time at or after it (a time before
        shows inputs below their since).
        """
        readable = _inputs_since(client, definition).time or 0
        view_upper = client.state(definition.name).upper
        if view_upper.time is not None and view_upper.time > 0:
            resume = view_upper.time - 1
            if definition.refresh_time(resume) >= readable:
                return resume
        return definition.first_shown_from(readable)

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def stats(self) -> SinkStats:
        return self.sink.stats

    @property
    def status(self) -> tuple[str, str | None]:
        """The view's health as this replica sees it: ``running``, ``stalled`` with the
        sink's last error, or ``dropped`` with :attr:`dropped`."""
        if self.dropped is not None:
            return "dropped", self.dropped
        error = self.sink.last_error
        return ("running", None) if error is None else ("stalled", error)

    def step(self) -> None:
        """One tick of the sink, then its health (faults are retried, not raised). A
        read-only replica whose shard its sink saw closed reads the shard's state instead;
        it stops once the view was dropped (module doc), and a step after that does
        nothing."""
        if self.dropped is not None:
            return
        if self.sink.read_only and self._seen_closed():
            self._notice_drop()
            return
        self.sink.step()
        if self.sink.read_only and self.sink.dropped_seen:
            self._stop_dropped()
            return
        self._report_health()

    def _seen_closed(self) -> bool:
        """Whether the sink's last step saw the view's shard closed (no read: its upper
        watch's observation)."""
        return self.sink.persist_upper.is_empty()

    def _notice_drop(self) -> None:
        """Read the closed shard's state: without the ``deploy`` hold, or with it marked by
        a drop, the view was dropped (a complete view keeps it as it was). A fault reading
        it is the sink's ``last_error``, and the next step reads again."""
        try:
            if self._closed_reader is None:
                self._closed_reader = self.sink.client.open_unleased_reader(self.name)
            state = self._closed_reader.state()
        except Exception as e:
            self.sink.last_error = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:500]}"
            return
        self.sink.last_error = None
        if not view_dropped(state):
            return  # complete (every input closed)
        self._stop_dropped()

    def _stop_dropped(self) -> None:
        """Stop this read-only replica: the view was dropped (:attr:`dropped` says so)."""
        self.dropped = (
            f"view {self.name!r} was dropped: its deploy hold is marked by its drop, or its "
            "shard is closed and no deploy generation holds it; this read-only replica "
            f"(generation {self.sink.generation}) stops and cannot be promoted"
        )
        self.sink.last_error = f"Dropped: {self.dropped}"
        log.warning("%s", self.dropped)
        # Its writer (a generation the drop's mark fenced still has one) goes now, not at
        # close: while its lease is renewed, `timeshard drop` takes the view for running
        # and refuses to finish the drop.
        with contextlib.suppress(Exception):
            self.sink.close()

    def _report_health(self) -> None:
        if self.sink.read_only:
            return  # a read-only replica writes nothing
        status = self.status
        try:  # unchanged: Health writes nothing, unless another replica wrote meanwhile
            if self._health is None:
                self._health = Health(self.sink.client)
            self._health.report(self.name, *status)
        except Exception as e:  # health is best effort: the next step tries again
            log.warning("view %s: cannot record health %s: %s", self.name, status, e)

    def run_for(self, seconds: float) -> None:
        """Tick every ``tick_interval_s`` for ``seconds`` (or until the view was dropped)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self.dropped is None:
            started = time.monotonic()
            self.step()
            time.sleep(max(0.0, self.tick_interval_s - (time.monotonic() - started)))

    def catch_up(self, timeout_s: float = 300.0) -> Frontier:
        """Step until the view's shard reaches the desired frontier as it is now."""
        target = self.desired.frontier()
        self.sink.run_until(target, timeout_s)
        return target

    def promote(self) -> None:
        self.sink.promote()
        self.desired.use_leases()
        record_view(
            self.sink.client,
            self.definition,
            self.sink.as_of,
            self.desired.plan.classification,
            query_settings(self.desired.spark),
        )

    def frontiers(self) -> SinkFrontiers:
        return self.sink.frontiers()

    def close(self) -> None:
        """Stop: release the writer, leases and I/O thread; the durable holds stay."""
        self.sink.close()
        self.desired.close()
        if self._health is not None:
            self._health.close()
            self._health = None

    def drop(self) -> None:
        """Close, mark the view dropped, close its shard, release its durable holds, and
        record it as dropped.

        The mark (the ``deploy`` hold's token, :func:`~timeshard.compute.mv_sink.mark_dropped`)
        lands first, then the shard closes: a standby promoted from then on finds the view
        dropped and holds nothing, and one promoted before loses the holds it registered
        with the rest (they are released by name). A drop cut short at any step is a drop
        to a standby, and running it again finishes it. A dropped name is not used again.
        """
        self.sink.close()
        mark_dropped(self.sink.client, self.name)
        self.sink.client.close_shard(self.name)
        self.sink.drop()
        self.desired.close()
        health = self._health or Health(self.sink.client)
        health.report(self.name, "dropped")
        health.close()
        self._health = None


def _inputs_since(client: PersistClient, definition: ViewDefinition) -> Frontier:
    """The join of the sinces of the view's inputs: the first time all are readable at."""
    since = Frontier.minimum()
    for shard in definition.inputs.values():
        since = since.join(client.state(shard).since)
    return since


__all__ = ["MaterializedView"]
