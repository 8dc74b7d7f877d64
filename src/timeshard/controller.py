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

Invariants:

1. Sources are built (and their options checked) before anything touches the
   location; a bad declaration fails with InvalidUsage and writes nothing.
2. A view is installed after one step of every source, so its inputs exist. A
   first step that fails is a failure as a later one's is (``first_failures``).
3. ``close`` stops every view's background I/O; a step after it is an error.
   A pipeline whose building fails closes what it had built.
4. A step ticks every object even when some fail (faults are retried on the
   next step and shown as health), and returns the failures.

Runs on the driver; the ingestions and views submit Spark jobs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from timeshard.catalog import check_redeclared, read_catalog
from timeshard.compute import MaterializedView, ViewDefinition
from timeshard.persist import PersistClient
from timeshard.progress import Frontier
from timeshard.spec import (
    ExportSpec,
    RunSpec,
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
    ) -> None:
        sources = [build_source(s) for s in spec.source]
        self.client = client
        self.ingestions: list[Ingestion] = []
        self.views: list[MaterializedView] = []
        self.exports: list[ShardExport] = []
        self.health: Health | None = None
        self._closed = False
        #: The objects whose first tick failed (as :meth:`step` returns them).
        self.first_failures: dict[str, str] = {}
        try:
            # Before any object writes: no shard of another object (of the location, or of
            # the declaration), no source redeclared. One read of the catalog for all: each
            # ingestion checks itself against it too, and the checks above keep the
            # declaration's objects apart, which an ingestion built later would see recorded.
            catalog = read_catalog(client)
            check_spec_writers(spec, spec_shard_writers(spec, sources), shard_owners(catalog))
            for s, source in zip(spec.source, sources, strict=True):
                envelopes = {"": (s.envelope, s.key_columns)}
                check_redeclared(client, s.name, source, envelopes, catalog=catalog)
            for s, source in zip(spec.source, sources, strict=True):
                self.ingestions.append(
                    Ingestion(
                        spark,
                        client,
                        source,
                        envelope=s.envelope,
                        key_columns=s.key_columns,
                        clock=clock,
                        retain_history_ms=s.retain_history_ms,
                        catalog=catalog,
                    )
                )
            self.first_failures = self._step_ingestions()
            for v in spec.view:
                definition = ViewDefinition(
                    v.name,
                    v.inputs,
                    v.sql,
                    refresh_every_ms=v.refresh_every_ms,
                    retain_history_ms=v.retain_history_ms,
                )
                self.views.append(
                    MaterializedView.install(spark, client, definition, tick_interval_s=view_tick_s)
                )
            for e in spec.export:
                self.exports.append(build_export(spark, client, e))
            self.health = Health(client, clock)
            for export in self.exports:
                self.health.report_or_log(export.export_id, "starting")
        except BaseException:
            self.close()  # the leases of what was built would linger until they expire
            raise

    def _step_ingestions(self) -> dict[str, str]:
        failures = {}
        for ingestion in self.ingestions:
            try:
                ingestion.step()
            except Exception as e:  # marked stalled by the ingestion; tried again next step
                failures[ingestion.output] = f"{type(e).__name__}: {str(e)[:300]}"
        return failures

    def step(self) -> dict[str, str]:
        """One tick of every source, then of every view; the failures, by object.

        One object's failure does not keep the others from their tick: a
        failing source is marked ``stalled`` (with the error) and tried again
        on the next step; a view's sink recovers by itself and reports its
        health. The returned dict names each object whose tick failed.
        """
        assert not self._closed, "step after close"
        assert self.health is not None
        failures = self._step_ingestions()
        for view in self.views:
            view.step()
            if view.sink.last_error is not None:
                failures[view.name] = view.sink.last_error
        for export in self.exports:
            try:
                export.step()
            except Exception as e:
                failures[export.export_id] = f"{type(e).__name__}: {str(e)[:300]}"
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
        if not self._closed:
            self._closed = True
            for export in self.exports:
                export.close()
            if self.health is not None:
                self.health.close()
            for view in self.views:
                view.close()
            for ingestion in self.ingestions:
                ingestion.close()


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


__all__ = ["Pipeline", "spec_shard_writers", "spec_shards"]
