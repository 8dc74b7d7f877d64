"""Checks 1-4 of ``timeshard verify``: each shard on its own, without Spark.

The catalog says what each shard is (:class:`CatalogIndex`), and so what its
multiplicities must satisfy (:class:`ShardRule`: a set, maybe keyed, or a
multiset). :func:`check_shard` checks the head state's frontiers and batch
descriptions, every part the state references, and the multiplicities at
sampled times. The sampling (:func:`sample_times`, seeded by seed, object
and check) is shared with the recomputations of
:mod:`timeshard.verify.views` and :mod:`timeshard.verify.replay`. The
numbered checks are those of :mod:`timeshard.verify`.

Everything here runs on the driver with pyarrow: parts are read from the
blob store and snapshots computed in process; no Spark job is started.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from timeshard.catalog import CATALOG_KEYS, CATALOG_SHARD, CatalogEntry, catalog_rows
from timeshard.errors import CorruptState, PartError, SinceError, TimeshardError
from timeshard.persist import PersistClient, ShardState, UnleasedReader
from timeshard.persist._internal.blobio import retry_external
from timeshard.persist._internal.parts import (
    DIFF,
    ERR,
    TS,
    PartMeta,
    check_part_bytes,
    decode_part,
    ts_bounds,
)
from timeshard.progress import MAX_TIMESTAMP, Description, Frontier, Timestamp
from timeshard.storage.health import STATUS_SHARD
from timeshard.storage.reclock import REMAP_SCHEMA
from timeshard.verify.report import ROW_LIMIT, Finding, VerifyReport, _row

# -- what each shard is --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShardRule:
    """What a shard is, and what its multiplicities must satisfy."""

    kind: str
    is_set: bool
    keys: tuple[str, ...] = ()


@dataclass
class CatalogIndex:
    """The catalog's entries by kind."""

    views: dict[str, CatalogEntry] = field(default_factory=dict)
    sources: dict[str, CatalogEntry] = field(default_factory=dict)
    exports: dict[str, CatalogEntry] = field(default_factory=dict)


def read_catalog_index(client: PersistClient, report: VerifyReport) -> CatalogIndex:
    """The catalog; a row that does not decode is a finding on the catalog shard."""
    index = CatalogIndex()
    by_kind = {"view": index.views, "source": index.sources, "export": index.exports}
    for row in catalog_rows(client):
        try:
            entry = CatalogEntry.from_row(row)
        except TimeshardError as e:
            report.add(Finding(CATALOG_SHARD, "catalog", str(e), rows=(_row(row),), rows_total=1))
            continue
        if entry.kind in by_kind:  # a ``statement`` entry (timeshard serve) holds no shard
            by_kind[entry.kind][entry.name] = entry
    return index


def shard_rule(shard_id: str, schema: pa.Schema, catalog: CatalogIndex) -> ShardRule:
    """The rule of ``shard_id``: set or multiset, and its key if it has one."""
    if shard_id == STATUS_SHARD:
        return ShardRule("status", True, ("object",))
    if shard_id == CATALOG_SHARD:
        return ShardRule("catalog", True, CATALOG_KEYS)
    if shard_id in catalog.views:
        return ShardRule("view", False)
    export = catalog.exports.get(shard_id)
    if export is not None:
        if export.definition.get("envelope") == "upsert":
            keys = tuple(str(k) for k in export.definition.get("key_columns", ()))
            return ShardRule("upsert export", True, keys)
        return ShardRule("export", False)
    remaps = {str(s.definition.get("remap")) for s in catalog.sources.values()}
    if shard_id in remaps or (shard_id.endswith(".remap") and schema.equals(REMAP_SCHEMA)):
        return ShardRule("remap", True, ("partition",))
    return ShardRule("shard", False)


# -- sampling ------------------------------------------------------------------------------


def checked_upper(client: PersistClient, name: str, kind: str, report: VerifyReport) -> Frontier:
    """The upper that shard ``name``'s frontier is checked at: its upper, or for a closed
    shard (dropped: from its last time on, its content is the drop's) its upper when it
    closed, with a note saying so."""
    state = client.state(name)
    closed_at = state.closed_at()
    if closed_at is None:
        return state.upper
    report.object(name, kind).notes.append(
        f"closed (dropped): its frontier checked at {closed_at}, its upper when it closed"
    )
    return closed_at


def sample_times(
    rng: random.Random, candidates: Iterable[Timestamp], first: Timestamp, last: Timestamp, n: int
) -> list[Timestamp]:
    """``first``, ``last`` and up to ``n`` of the candidates strictly between them."""
    if last < first:
        return []
    inner = sorted({t for t in candidates if first < t < last})
    return sorted({first, last, *rng.sample(inner, min(n, len(inner)))})


def _rng(seed: int, name: str, check: str) -> random.Random:
    return random.Random(f"{seed}:{name}:{check}")


def readable_range(state: ShardState) -> tuple[Timestamp, Timestamp] | None:
    """``[since, end)``: the readable times (``end`` is the upper, or the greatest
    time for a closed shard), or None if no time is readable."""
    since, upper = state.since.time, state.upper.time
    if since is None:
        return None
    end = MAX_TIMESTAMP if upper is None else upper
    return (since, end) if since < end else None


def _last(state: ShardState, changes: Sequence[Timestamp], first: Timestamp) -> Timestamp:
    """The last time worth reading: ``upper - 1``, or the last change of a closed shard."""
    if state.upper.time is not None:
        return state.upper.time - 1
    return max([first, *changes])


# -- checks 1-4: the shard itself (driver, pyarrow) ----------------------------------------


def check_batches(state: ShardState) -> list[Finding]:
    """Invariant 2: contiguous, non-overlapping descriptions from [0] to the upper."""
    out = []
    sid = state.shard_id
    expected = Frontier.minimum()
    for i, b in enumerate(state.batches):
        lo, hi = b.desc.lower, b.desc.upper
        if lo < expected:
            what = f"overlaps the previous batch (which ends at {expected})"
            out.append(Finding(sid, "batches", f"batch {i} [{lo}, {hi}) {what}"))
        elif expected < lo:
            first = "the shard's start [0]" if i == 0 else f"the previous batch's upper {expected}"
            out.append(Finding(sid, "batches", f"gap: batch {i} [{lo}, {hi}) starts after {first}"))
        expected = hi
    if expected != state.upper:
        out.append(
            Finding(
                sid,
                "batches",
                f"the batches end at {expected} but the shard upper is {state.upper}",
            )
        )
    return out


def check_parts(client: PersistClient, state: ShardState) -> dict[str, list[Finding]]:
    """Invariant 3: every part exists, decodes and matches its PartMeta and description.

    The findings by part key (a part that passes has none).
    """
    out = {}
    schema = state.data_schema
    for i, b in enumerate(state.batches):
        where = f"of batch {i} [{b.desc.lower}, {b.desc.upper})"
        for part in b.parts:
            out[part.key] = _check_part(client, state.shard_id, schema, part, b.desc, where)
    return out


def _check_part(
    client: PersistClient,
    shard_id: str,
    schema: pa.Schema,
    part: PartMeta,
    desc: Description,
    where: str,
) -> list[Finding]:
    blob = client.location.blob
    data = retry_external(
        client.config, f"reading part {part.key!r}", lambda: blob.get(part.key), reads=True
    )
    try:  # as every reader does: the recorded size and digest first
        table = decode_part(part.key, check_part_bytes(part, data), schema)
    except PartError as e:
        return [Finding(shard_id, "part", f"part {part.key!r} {where} is {e.reason}")]
    out = []
    problems = []
    if table.num_rows != part.num_rows:
        problems.append(f"{table.num_rows} rows, the state says {part.num_rows}")
    lo, hi = ts_bounds(table)
    if (part.ts_min, part.ts_max) != (None, None) and (lo, hi) != (part.ts_min, part.ts_max):
        problems.append(f"_ts in [{lo}, {hi}], the state says [{part.ts_min}, {part.ts_max}]")
    # Readers trust these without reading the part: err_rows 0 skips its errors, and
    # times decide which parts a read of an interval (and verify's sampling) looks at.
    errs = table.num_rows - table.column(ERR).null_count
    if part.err_rows is not None and errs != part.err_rows:
        problems.append(f"{errs} err rows, the state says {part.err_rows}")
    if part.times is not None:
        times = sorted(pc.unique(table.column(TS)).to_pylist())
        if tuple(times) != part.times:
            shown = times if len(times) <= 2 * ROW_LIMIT else [*times[:ROW_LIMIT], "..."]
            problems.append(f"_ts values {shown}, the state says {list(part.times)}")
    if problems:
        out.append(
            Finding(shard_id, "part", f"part {part.key!r} {where} has " + "; ".join(problems))
        )
    ts = table.column(TS)
    inside = pc.greater_equal(ts, desc.lower.time or 0)
    if desc.upper.time is not None:
        inside = pc.and_(inside, pc.less(ts, desc.upper.time))
    if desc.since.time is not None and desc.since.time >= (desc.lower.time or 0):
        # Compaction advanced them (to the since, never below the batch's lower).
        inside = pc.or_(inside, pc.equal(ts, desc.since.time))
    outside = table.filter(pc.invert(inside))
    if outside.num_rows:
        rows = outside.slice(0, ROW_LIMIT).to_pylist()
        out.append(
            Finding(
                shard_id,
                "part",
                f"part {part.key!r} {where} holds {outside.num_rows} updates at times outside "
                f"its description (since {desc.since})",
                rows=tuple(rows),
                rows_total=outside.num_rows,
            )
        )
    return out


def check_structure(
    client: PersistClient, shard_id: str
) -> tuple[ShardState, list[Finding], set[str], set[str]]:
    """Invariants 2 and 3 on the head state, re-checked if the state moved meanwhile.

    A part compacted away and collected while it was being read is missing in
    an old state but no longer referenced by the new one: not a finding. If
    the state moved at each of three checks, the parts at fault that the head
    no longer references are left out. Returns the state, the findings, the
    keys of the parts found at fault and those left out.
    """
    for _ in range(3):
        state = client.state(shard_id)
        by_part = check_parts(client, state)
        findings = check_batches(state) + [f for found in by_part.values() for f in found]
        if not findings:
            break
        head = client.state(shard_id)
        if head.seqno == state.seqno:
            break
    else:
        gone = {key for key, found in by_part.items() if found and not _references(head, key)}
        by_part = {key: found for key, found in by_part.items() if key not in gone}
        findings = check_batches(state) + [f for found in by_part.values() for f in found]
        return state, findings, {key for key, found in by_part.items() if found}, gone
    return state, findings, {key for key, found in by_part.items() if found}, set()


def check_multiplicities(reader: UnleasedReader, rule: ShardRule, t: Timestamp) -> list[Finding]:
    """Invariant 4 at ``t``: no negative multiplicity; for sets, at most 1 and one row per key."""
    snap = reader.snapshot(t)
    sid = reader.shard_id
    out = []
    negative = snap.filter(pc.less(snap.column(DIFF), 0))
    if negative.num_rows:
        out.append(_rows_finding(sid, "multiplicity", t, "negative multiplicity", negative))
    if rule.is_set:
        many = snap.filter(pc.greater(snap.column(DIFF), 1))
        if many.num_rows:
            msg = f"multiplicity above 1 in this {rule.kind}, which must be a set"
            out.append(_rows_finding(sid, "multiplicity", t, msg, many))
    if rule.keys and all(k in snap.column_names for k in rule.keys):
        out += _duplicate_keys(sid, rule, t, snap)
    return out


def _rows_finding(sid: str, check: str, t: Timestamp, what: str, rows: pa.Table) -> Finding:
    n = rows.num_rows
    return Finding(
        sid,
        check,
        f"{n} row{'s' if n != 1 else ''} with {what}",
        time=t,
        rows=tuple(_row(r) for r in rows.slice(0, ROW_LIMIT).to_pylist()),
        rows_total=n,
    )


def _duplicate_keys(sid: str, rule: ShardRule, t: Timestamp, snap: pa.Table) -> list[Finding]:
    positive = snap.filter(pc.greater(snap.column(DIFF), 0))
    # Unkeyed err rows (``_err`` set, every key null) belong to no key: an upsert keeps each.
    unkeyed = pc.is_valid(positive.column(ERR))
    for k in rule.keys:
        unkeyed = pc.and_(unkeyed, pc.is_null(positive.column(k)))
    positive = positive.filter(pc.invert(unkeyed))
    counts = positive.group_by(list(rule.keys), use_threads=False).aggregate([(DIFF, "count")])
    dup = counts.filter(pc.greater(counts.column(f"{DIFF}_count"), 1))
    if not dup.num_rows:
        return []
    keys = {tuple(r[k] for k in rule.keys) for r in dup.to_pylist()}
    rows = [r for r in positive.to_pylist() if tuple(r[k] for k in rule.keys) in keys]
    return [
        Finding(
            sid,
            "key",
            f"{len(keys)} key{'s' if len(keys) != 1 else ''} of {list(rule.keys)} with more than "
            f"one row in this {rule.kind}",
            time=t,
            rows=tuple(_row(r) for r in rows[:ROW_LIMIT]),
            rows_total=len(rows),
        )
    ]


def check_shard(
    client: PersistClient,
    shard_id: str,
    catalog: CatalogIndex,
    report: VerifyReport,
) -> None:
    """Checks 1-4 of one shard, into ``report``."""
    try:
        state, findings, broken, gone = check_structure(client, shard_id)
    except CorruptState as e:
        report.object(shard_id, "shard").checks.append("state")
        report.add(Finding(shard_id, "state", str(e)))
        return
    rule = shard_rule(shard_id, state.data_schema, catalog)
    obj = report.object(shard_id, rule.kind)
    obj.kind = rule.kind
    if gone:
        obj.notes.append(
            f"{len(gone)} parts not checked: the state moved at every check, and its head "
            "no longer references them (compacted away)"
        )
    obj.checks += ["frontiers", "batches", "parts", "multiplicity"]
    for f in findings:
        report.add(f)
    names = state.data_schema.names
    if rule.kind == "upsert export" and (not rule.keys or any(k not in names for k in rule.keys)):
        keyed = (
            f"keys this upsert export by {list(rule.keys)}, which are not all columns of its "
            f"shard ({', '.join(names)})"
            if rule.keys
            else "gives this upsert export no key columns"
        )
        report.add(Finding(shard_id, "key", f"the catalog {keyed}: one row per key is not checked"))
    span = readable_range(state)
    if span is None:
        if state.upper.time:  # written to, yet upper - 1 is not readable
            report.add(
                Finding(
                    shard_id,
                    "frontiers",
                    f"since {state.since} is beyond upper - 1 (upper {state.upper}): "
                    "the last written time is not readable",
                )
            )
        else:
            obj.notes.append(f"no readable time: since {state.since}, upper {state.upper}")
        return
    reader = client.open_unleased_reader(shard_id)
    first, end = span
    try:
        changes = reader.change_times(first, end)
    except PartError:  # reported above; sample the times the parts' metadata names
        bounds = {t for b in state.batches for p in b.parts for t in (p.ts_min, p.ts_max)}
        changes = sorted(t for t in bounds if t is not None and first <= t < end)
    last = _last(state, changes, first)
    rng = _rng(report.seed, shard_id, "multiplicity")
    times = sample_times(rng, changes, first, last, report.samples)
    unreadable: dict[str, list[Timestamp]] = {}
    for t in times:
        try:
            found = check_multiplicities(reader, rule, t)
        except SinceError:
            obj.notes.append(f"time {t} was compacted away during the check")
            continue
        except PartError as e:
            # The reader already read the new head if the state moved meanwhile: a part
            # the head still references is unreadable, and so is the shard at ``t``.
            if e.key in broken or not _references(client.state(shard_id), e.key):
                obj.notes.append(f"multiplicities at {t} not checked: {e}")
            else:
                unreadable.setdefault(str(e), []).append(t)
            continue
        obj.checked("multiplicity", t)
        for f in found:
            report.add(f)
    for error, at in unreadable.items():
        report.add(
            Finding(
                shard_id,
                "multiplicity",
                f"the shard cannot be read at {len(at)} of {len(times)} sampled times "
                f"{at[:5]}: {error}",
                time=at[0],
            )
        )


def _references(state: ShardState, key: str) -> bool:
    return any(p.key == key for b in state.batches for p in b.parts)
