"""Check 6 of ``timeshard verify``: an UPSERT export against its source's records, read again.

The source is a FILE source (its retained input files) or the KEY VALUE
generator (a pure function of its options): :func:`replayable_source`.

The remap shard's bindings (:func:`remap_bindings`) say up to which offset
of each input file the source was bound at each time. The retained input
files, read over ``[0, binding at t)`` and reclocked with those bindings,
give by :func:`upsert_model` the last value per key at each sampled time,
which the export's snapshot must equal. Bindings that compaction merged into
the remap shard's since have lost the order between files: keys that makes
ambiguous are left out, counted in a note.

Driver vs executors: the bindings are decoded on the driver with pyarrow,
and the input files' sizes checked there; reading and decoding the input
files, the reclocking join, the upsert (window functions) and the
difference run as Spark jobs on the executors.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from timeshard.catalog import CatalogEntry
from timeshard.errors import InvalidUsage, SinceError
from timeshard.persist import PersistClient, UnleasedReader
from timeshard.persist._internal.parts import DIFF, ERR, TS, advance_since, decode_part
from timeshard.persist.fetch import parts_at
from timeshard.progress import MAX_TIMESTAMP, Timestamp
from timeshard.storage.reclock import SourceFrontier, reclock_df
from timeshard.storage.upsert_state import unkeyed_error
from timeshard.verify.report import VerifyReport
from timeshard.verify.shards import _rng, readable_range, sample_times
from timeshard.verify.views import AT, _report_differences, _union, differences


def file_source(options: Mapping[str, Any]) -> Any:
    """The FileSource the catalog options of a FILE source declare (InvalidUsage if they can't)."""
    from timeshard.storage.file_source import FileSource

    try:
        columns = [(str(n), pa.type_for_alias(str(t))) for n, t in options["columns"]]
        fmt = str(options["format"])
        schema = pa.schema(columns) if fmt in ("json", "csv") else None
        limit = (
            {"max_line_bytes": int(options["max_line_bytes"])}
            if "max_line_bytes" in options
            else {}
        )
        return FileSource(
            str(options["name"]),
            str(options["path"]),
            fmt,
            schema,
            options.get("avro_schema"),
            **limit,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise InvalidUsage(f"cannot rebuild the FILE source from {dict(options)!r}: {e}") from e


def replayable_source(definition: Mapping[str, Any]) -> Any:
    """The source a catalog definition declares, if its records can be read again.

    A FILE source (its retained files) and the KEY VALUE generator (a pure
    function of its options) can; InvalidUsage says why another cannot.
    """
    kind = definition.get("source_kind")
    options = definition.get("options") or {}
    if kind == "file":
        return file_source(options)
    if kind == "key_value":
        from timeshard.storage.sources import KeyValueGenerator

        try:
            return KeyValueGenerator(**options)
        except TypeError as e:
            raise InvalidUsage(f"cannot rebuild the KEY VALUE source from {options!r}: {e}") from e
    raise InvalidUsage(f"a {kind!r} source cannot be read again to check its upsert")


def remap_bindings(
    client: PersistClient, reader: UnleasedReader, upto: Timestamp
) -> list[tuple[Timestamp, SourceFrontier]]:
    """The bindings of a remap shard at times ``<= upto`` (times below since read as since)."""
    state = reader.state()
    tables = []
    for part in parts_at(state, upto):
        data = client.location.blob.get(part.key)
        tables.append(decode_part(part.key, data, reader.schema))
    if not tables:
        return []
    table = pa.concat_tables(tables)
    table = table.filter(pc.less_equal(table.column(TS), upto))
    if state.since.time is not None:
        table = advance_since(table, state.since.time)
    by_time: dict[int, list[dict[str, Any]]] = {}
    for r in table.to_pylist():
        by_time.setdefault(int(r[TS]), []).append(r)
    counts: Counter[tuple[str, int]] = Counter()
    out: list[tuple[Timestamp, SourceFrontier]] = []
    for t in sorted(by_time):
        for r in by_time[t]:
            counts[(str(r["partition"]), int(r["offset"]))] += int(r[DIFF])
        frontier: SourceFrontier = {}
        for (p, o), c in counts.items():
            if c > 0:
                frontier[p] = max(frontier.get(p, 0), o)
        out.append((t, dict(sorted(frontier.items()))))
    return out


def frontier_at(
    bindings: Sequence[tuple[Timestamp, SourceFrontier]], t: Timestamp
) -> SourceFrontier:
    """The source frontier bound at ``t`` (empty before the first binding)."""
    found: SourceFrontier = {}
    for bt, f in bindings:
        if bt > t:
            break
        found = f
    return dict(found)


def _retained(source: Any, end: SourceFrontier) -> str | None:
    """Why the input files no longer hold ``[0, end)``, or None if they do (or it has none)."""
    if not hasattr(source, "path"):
        return None
    base = Path(source.path) if Path(source.path).is_dir() else Path(source.path).parent
    for partition, offset in sorted(end.items()):
        path = base / partition
        if not path.is_file():
            return f"input file {str(path)!r} is gone"
        if path.stat().st_size < offset:
            return (
                f"input file {str(path)!r} holds {path.stat().st_size} bytes, fewer than {offset}"
            )
    return None


def upsert_model(
    spark: Any,
    records: Any,
    schema: pa.Schema,
    keys: Sequence[str],
    times: Sequence[Timestamp],
    collapsed: Timestamp,
) -> tuple[Any, Any]:
    """The upsert over reclocked ``records`` at each of ``times`` (rows tagged ``_at``).

    Per key the record with the latest reclocked time wins, then the highest
    offset; an unkeyed err record (``_err`` set, every key null) is an err row
    of its own from its time on. Records reclocked to ``collapsed`` (the remap shard's since, into
    which compaction merged the earlier bindings) were bound at times no
    longer known, so there the last record of each file is a candidate.
    Returns ``(expected, ambiguous)``: the expected snapshots (data columns,
    ``_err``, ``_diff``) and the ``(_at, key)`` pairs with several different
    candidates (left out of ``expected``).
    """
    from functools import reduce

    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from timeshard.spark.parts import column

    values = [n for n in schema.names if n not in keys]
    at = spark.createDataFrame([(t,) for t in times], f"{AT} long")
    # An unkeyed err record (no key decoded) stays an err row of its own from its time on.
    kept = (
        records.where(unkeyed_error(keys))
        .join(F.broadcast(at), F.col("_bt") <= F.col(AT))
        .select(
            F.col(AT),
            *[column(c) for c in schema.names],
            F.col(ERR),
            F.lit(1).cast("long").alias(DIFF),
        )
    )
    records = records.where(~unkeyed_error(keys))
    tagged = records.join(F.broadcast(at), F.col("_bt") <= F.col(AT))
    per_key = [F.col(AT), *[column(k) for k in keys]]
    latest = tagged.withColumn("_top", F.max("_bt").over(Window.partitionBy(*per_key)))
    latest = latest.where(F.col("_bt") == F.col("_top"))
    # At a collapsed time the files' original order is lost: each file's last record competes.
    group = F.when(F.col("_bt") == F.lit(collapsed), F.col("_partition"))
    per_group = Window.partitionBy(*per_key, group.alias("_group"))
    top = latest.withColumn("_last", F.max("_offset").over(per_group))
    top = top.where(F.col("_offset") == F.col("_last"))
    no_value = reduce(lambda a, b: a & b, [column(v).isNull() for v in values], F.lit(True))
    rows = top.select(
        F.col(AT),
        *[
            column(c) if c in keys else F.when(F.col(ERR).isNull(), column(c)).alias(c)
            for c in schema.names
        ],
        F.col(ERR),
        (no_value & F.col(ERR).isNull()).alias("_gone"),
    ).distinct()
    ambiguous = (
        rows.groupBy(F.col(AT), *[column(k) for k in keys])
        .agg(F.count(F.lit(1)).alias("_n"))
        .where(F.col("_n") > 1)
        .select(F.col(AT), *[column(k) for k in keys])
    )
    expected = _without_keys(rows, ambiguous, [AT, *keys]).where(~F.col("_gone"))
    expected = expected.select(
        F.col(AT),
        *[column(c) for c in schema.names],
        F.col(ERR),
        F.lit(1).cast("long").alias(DIFF),
    )
    return expected.unionByName(kept), ambiguous


def _without_keys(df: Any, keys_df: Any, keys: Sequence[str]) -> Any:
    """``df`` without the rows whose key is in ``keys_df`` (keys compared null-safely)."""
    from pyspark.sql import functions as F

    from timeshard.spark.parts import column

    renamed = keys_df.select(*[column(k).alias(f"_vk{i}") for i, k in enumerate(keys)])
    cond = None
    for i, k in enumerate(keys):
        eq = df[k].eqNullSafe(F.col(f"_vk{i}"))
        cond = eq if cond is None else cond & eq
    return df.join(renamed, cond, "left_anti")


def check_file_upsert(
    spark: Any,
    client: PersistClient,
    source: CatalogEntry,
    export: CatalogEntry,
    report: VerifyReport,
) -> None:
    """Check 6: an UPSERT export against last-value-per-key of its source's records."""
    from pyspark.sql import functions as F

    from timeshard.spark.snapshot import snapshot_df

    obj = report.object(export.name, "upsert export")
    obj.checks.append("upsert")
    try:
        files = replayable_source(source.definition)
    except InvalidUsage as e:
        obj.notes.append(f"upsert not checked: {e}")
        return
    keys = [str(k) for k in export.definition.get("key_columns", ())]
    out = client.open_unleased_reader(export.name)
    remap = client.open_unleased_reader(str(source.definition["remap"]))
    out_state, remap_state = out.state(), remap.state()
    out_span, remap_span = readable_range(out_state), readable_range(remap_state)
    if out_span is None or remap_span is None:
        obj.notes.append("upsert not checked: the export or its remap shard has no readable time")
        return
    first, end = max(out_span[0], remap_span[0]), min(out_span[1], remap_span[1])
    if end <= first:
        obj.notes.append("upsert not checked: no time readable in both the export and its remap")
        return
    candidates = set(out.change_times(first, end)) | set(remap.change_times(first, end))
    last = end - 1 if end < MAX_TIMESTAMP else max([first, *candidates])
    rng = _rng(report.seed, export.name, "upsert")
    times = sample_times(rng, candidates, first, last, report.samples)
    bindings = remap_bindings(client, remap, times[-1])
    bound = frontier_at(bindings, times[-1])
    why = _retained(files, bound)
    if why is not None:
        obj.notes.append(f"upsert not checked: {why}")
        return
    read = files.read(spark, {}, bound)
    if ERR not in read.columns:  # a generator decodes nothing, so it has no errors
        read = read.withColumn(ERR, F.lit(None).cast("string"))
    records = reclock_df(spark, read, bindings, column="_bt")
    collapsed = remap_state.since.time or 0
    expected, ambiguous = upsert_model(spark, records, out.schema, keys, times, collapsed)
    got = []
    for t in times:
        try:
            got.append(snapshot_df(spark, out, t).drop(TS).withColumn(AT, F.lit(t)))
        except SinceError:
            obj.notes.append(f"time {t} was compacted away during the check")
    if not got:
        return
    ambiguous = ambiguous.persist()
    try:
        for r in ambiguous.groupBy(AT).count().collect():
            obj.notes.append(
                f"{r['count']} keys whose last value is ambiguous between files at {r[AT]} "
                "were not compared"
            )
        found = differences(
            expected, _without_keys(_union(got), ambiguous, [AT, *keys]), list(out.schema.names)
        )
    finally:
        ambiguous.unpersist()
    what = "the export differs from the last value per key of its source's records"
    _report_differences(report, export.name, "upsert", found, what)
    for t in times:
        obj.checked("upsert", t)
