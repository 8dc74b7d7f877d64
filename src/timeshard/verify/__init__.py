"""``timeshard verify``: check that a location holds what its invariants say it must.

A location is verified object by object, against the semantics of DESIGN.md
("Semantics every test can check"). For every shard:

1. the shard is readable at ``upper - 1``: its since is at most ``upper - 1``
   (persist never moves it further, see ``persist/_internal/state``); a shard
   never written to (upper ``[0]``) has no readable time, which is a note;
2. the batch descriptions start at ``[0]``, are contiguous and
   non-overlapping, and end at the shard upper;
3. every part a batch references exists, has the size and SHA-256 the state
   recorded (as every reader checks), decodes (pyarrow path), and has the
   row count, ``_ts`` bounds, distinct ``_ts`` and err row count its
   :class:`PartMeta` claims (readers trust them unread), with every
   ``_ts`` inside its batch's description (or at the batch's since, to which
   compaction advances times);
4. at sampled times ``t`` in ``[since, upper)`` the shard can be read (a part
   that fails there, though check 3 passed it, is a finding), no row has a
   negative multiplicity; collections that must be *sets* (upsert exports, remap,
   status and catalog shards) have no multiplicity above 1 and at most one row
   per key. Views are multisets (SQL keeps duplicates, and a view counts its
   query's rows into multiplicities), and so are NONE-envelope exports. A
   remap shard's bindings are monotone in time: at none of them does a
   partition's offset go below the previous binding's.

The catalog (:mod:`timeshard.catalog`) says what each shard is. Then:

5. every view's upper is at most the frontier its inputs determine (the meet
   of their uppers; for a REFRESH EVERY view, the next refresh time at or
   beyond it), and every export's upper at most its remap shard's upper:
   beyond those no query and no binding says what the shard holds. Every SQL
   view's snapshot at sampled times below that frontier equals its query
   evaluated from scratch over its inputs' snapshots at that time (the very
   code path the sink evaluates a view with,
   :class:`~timeshard.compute.view.SparkViewDesired`), at times at or beyond
   the view's ``as_of`` where no input has compacted that time away (noted);
   a view defined by a Python function is reported as not recomputable;
6. every output of a source whose records can be read again from upstream
   (:data:`~timeshard.verify.replay.REPLAYABLE`: a FILE source's retained
   files, the KEY VALUE generator, a KAFKA topic while retention keeps its
   records, a POSTGRES source's tables and slot) equals, at sampled times
   ``t``, what those records bound at ``<= t`` by the remap shard make of
   it: under UPSERT the last value per key (the latest reclocked time wins,
   then the greatest position: partition or file name as UTF-8 bytes, then
   offset; a record whose value columns are all null deletes the key; a
   record that failed to decode makes the key's row an err row, as the
   upsert does), under NONE every record at its ``_diff``. Only times at or
   beyond the remap shard's since can be checked (ingestion lets it
   compact), and records bound before that since all read as bound at it,
   which loses the order between files: a key whose files' last records
   differ there is left out, counted in a note. A POSTGRES upstream keeps no
   history: its tables are read now and rewound to the slot's position, so
   only times bound at or beyond it are checked (the others are counted in a
   note); a KAFKA topic whose retention deleted records, or a FILE source's
   rewritten file, leaves the object unchecked, with a note saying why.

Sampled times: for each object, the first and last readable time and up to
``samples`` other change times in between, drawn with a generator seeded by
``(seed, object)``, so a run can be repeated exactly (the report names the
seed).

A difference is a :class:`Finding`: the object, the check, the time, and the
rows missing and extra (the first :data:`ROW_LIMIT` of each, and how many
there are). Corrupt state, a missing part or a check that cannot run is a
finding too; verify itself does not fail on bad data. Verify writes nothing:
it reads with unleased readers, so it holds back neither since nor GC -- a
time compacted away meanwhile is skipped and noted, and a part collected
meanwhile is re-checked against the newer state.

What runs where: checks 1-4 and the frontiers of 5 run on the driver with
pyarrow (no Spark); the rest of 5 and 6 submit Spark jobs (reads of parts
and input files, the query, and the difference as a ``groupBy``), started
only if the catalog has such objects.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial
from typing import Any

from timeshard.catalog import CATALOG_SHARD, CatalogEntry
from timeshard.errors import InvalidUsage
from timeshard.persist import PersistClient
from timeshard.storage.health import STATUS_SHARD
from timeshard.verify.replay import (
    REPLAYABLE,
    check_export_frontier,
    check_remap_bindings,
    check_replayed_export,
    upsert_model,
)
from timeshard.verify.report import (
    ROW_LIMIT,
    Finding,
    ObjectReport,
    VerifyReport,
    render_report,
)
from timeshard.verify.shards import (
    CatalogIndex,
    check_batches,
    check_shard,
    read_catalog_index,
    sample_times,
)
from timeshard.verify.views import check_view, check_view_frontier, differences

DEFAULT_SAMPLES = 8

SparkProvider = Callable[[list[str]], Any]
"""Returns the SparkSession to use; called at most once, with the Maven packages needed."""


def _guarded(report: VerifyReport, name: str, check: str, run: Callable[[], None]) -> None:
    """Run one check; if it cannot run at all, that is a finding, not a crash."""
    try:
        run()
    except Exception as e:  # corrupt state, unreadable data, a failing Spark job, ...
        message = str(e).splitlines()[0][:500] if str(e) else ""
        report.add(Finding(name, check, f"the check could not run: {type(e).__name__}: {message}"))


def _check_samples(samples: object) -> int:
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
        raise InvalidUsage(f"samples must be a non-negative int, got {samples!r}")
    return samples


def verify_location(
    client: PersistClient,
    *,
    spark: SparkProvider | None = None,
    samples: int = DEFAULT_SAMPLES,
    seed: int | None = None,
) -> VerifyReport:
    """Check every shard of ``client``'s location and every cataloged view and upsert.

    ``spark`` is called (once) only if a check needs Spark; without it those
    checks are skipped with a note. ``samples`` is the number of change times
    sampled per object besides the first and last readable time.
    """
    _check_samples(samples)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise InvalidUsage(f"seed must be an int, got {seed!r}")
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)
    report = VerifyReport(seed, samples)
    catalog = CatalogIndex()
    _guarded(report, CATALOG_SHARD, "catalog", lambda: _set(catalog, client, report))
    shards = sorted(client.list_shards())
    for shard_id in shards:
        _guarded(report, shard_id, "state", partial(check_shard, client, shard_id, catalog, report))
    for shard_id in shards:
        if shard_id in report.objects and report.objects[shard_id].kind == "remap":
            bindings = partial(check_remap_bindings, client, shard_id, report)
            _guarded(report, shard_id, "bindings", bindings)
    present = set(shards)
    if CATALOG_SHARD not in present and present - {STATUS_SHARD}:
        report.object(CATALOG_SHARD, "catalog").notes.append(
            "the location has no catalog: no view or export is recomputed"
        )
    for name, view in sorted(catalog.views.items()):
        if name in present:
            ahead = partial(check_view_frontier, client, view, report)
            _guarded(report, name, "frontiers", ahead)
    for name, export in sorted(catalog.exports.items()):
        source = catalog.sources.get(str(export.definition.get("source")))
        if name in present and source is not None:
            ahead = partial(check_export_frontier, client, source, export, report)
            _guarded(report, name, "frontiers", ahead)
    for name, kind in [
        *((n, "view") for n in catalog.views),
        *((n, "export") for n in catalog.exports),
    ]:
        if name not in present:
            report.add(
                Finding(name, "catalog", f"the catalog has {kind} {name!r} but no such shard")
            )
    spark_checks = _spark_checks(client, catalog, report)
    if spark_checks and spark is None:
        for name, _ in spark_checks:
            report.object(name, "?").notes.append("not recomputed: needs Spark")
        return report
    session: Any = None
    for name, check in spark_checks:
        if session is None:
            assert spark is not None
            session = spark(_packages(catalog))
        _guarded(report, name, "recompute", partial(check, session))
    return report


def _set(catalog: CatalogIndex, client: PersistClient, report: VerifyReport) -> None:
    found = read_catalog_index(client, report)
    catalog.views, catalog.sources, catalog.exports = found.views, found.sources, found.exports


def _spark_checks(
    client: PersistClient, catalog: CatalogIndex, report: VerifyReport
) -> list[tuple[str, Callable[[Any], None]]]:
    """The checks that need Spark, by object; objects that cannot be recomputed get a note."""
    present = set(client.list_shards())
    checks: list[tuple[str, Callable[[Any], None]]] = []
    for name, view in sorted(catalog.views.items()):
        if name not in present:
            continue
        if view.definition.get("sql") is None:
            function = view.definition.get("function")
            report.object(name, "view").notes.append(
                f"not recomputable: defined by a Python function ({function})"
            )
            continue
        checks.append((name, partial(_run_view_check, client, view, report)))
    for name, export in sorted(catalog.exports.items()):
        source = catalog.sources.get(str(export.definition.get("source")))
        if name not in present:
            continue
        if source is None:
            report.object(name, "export").notes.append(
                f"not recomputed: the catalog has no source {export.definition.get('source')!r}"
            )
            continue
        kind = source.definition.get("source_kind")
        if kind not in REPLAYABLE:
            report.object(name, "export").notes.append(
                f"not recomputed: a {kind} source cannot be read again from its start"
            )
            continue
        checks.append((name, partial(_run_replay_check, client, source, export, report)))
    return checks


def _run_view_check(
    client: PersistClient, view: CatalogEntry, report: VerifyReport, spark: Any
) -> None:
    check_view(spark, client, view, report)


def _run_replay_check(
    client: PersistClient,
    source: CatalogEntry,
    export: CatalogEntry,
    report: VerifyReport,
    spark: Any,
) -> None:
    check_replayed_export(spark, client, source, export, report)


def _packages(catalog: CatalogIndex) -> list[str]:
    """The Maven packages the checks need: spark-avro for Avro, the connector for Kafka."""
    from timeshard.spark.session import spark_avro_package, spark_kafka_package

    packages = set()
    for source in catalog.sources.values():
        options = source.definition.get("options") or {}
        if "avro" in (
            options.get("format"),
            options.get("value_format"),
            options.get("key_format"),
        ):
            packages.add(spark_avro_package())
        if source.definition.get("source_kind") == "kafka":
            packages.add(spark_kafka_package())
    return sorted(packages)


__all__ = [
    "DEFAULT_SAMPLES",
    "ROW_LIMIT",
    "Finding",
    "ObjectReport",
    "SparkProvider",
    "VerifyReport",
    "check_batches",
    "differences",
    "render_report",
    "sample_times",
    "upsert_model",
    "verify_location",
]
