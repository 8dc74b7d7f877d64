"""Reclocking: binding a source's own progress (FromTime) to timestamps (IntoTime).

A partitioned source (Kafka, a directory of files, a load generator's
partitions) measures progress per partition: a :data:`SourceFrontier` maps a
partition to the next offset it will produce, so a record ``(p, o)`` is
complete once the frontier's offset for ``p`` exceeds ``o``. A partition that
is missing has frontier 0.

The *remap shard* holds durable bindings ``IntoTime t -> SourceFrontier``:
its content at time ``t`` is one row ``(partition, offset)`` per partition,
the source frontier bound at ``t``. Bindings only move forward. Reclocking
assigns each record the first ``t`` whose binding is beyond it. Several
instances of one source mint bindings with compare-and-append on the remap
shard; whoever loses re-reads the shard and adopts the winner's bindings, so
all instances reclock every record to the same time.

The resumption frontier of a source is the binding at ``upper - 1`` of its
outputs (the least output upper): every record below it is durably in every
output, and reading resumes there.

Invariants:

1. Bindings are monotone: for ``t1 < t2`` the binding at ``t2`` is at least
   the binding at ``t1`` in every partition.
2. ``reclock(p, o)`` is the least bound ``t`` with ``binding(t)[p] > o``, or
   None if no binding covers ``(p, o)`` yet.
3. Compaction of the remap shard to ``since`` collapses bindings below
   ``since`` into the binding at ``since``: records they covered reclock to
   ``since``, as compaction advances their times anyway.

Runs on the driver.
"""

from __future__ import annotations

import bisect
import contextlib
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage, LeaseExpired
from timeshard.persist import Appended, PersistClient, Updates, expire_all
from timeshard.persist._internal.parts import TS
from timeshard.progress import Frontier, Timestamp, check_timestamp

SourceFrontier = dict[str, int]

REMAP_SCHEMA = pa.schema([("partition", pa.string()), ("offset", pa.int64())])


#: The largest offset a remap shard holds (its ``offset`` column is int64).
MAX_OFFSET = 2**63 - 1


def check_source_frontier(value: object, what: str) -> SourceFrontier:
    """``value`` as a :data:`SourceFrontier`: a mapping of partition names (``str``) to
    offsets (integers, not bools, in ``[0, 2**63)``); InvalidUsage naming what is not."""
    if not isinstance(value, Mapping):
        raise InvalidUsage(f"{what} must map partitions to offsets, got {value!r}")
    out: SourceFrontier = {}
    for p, o in value.items():
        if not isinstance(p, str):
            raise InvalidUsage(f"{what}: partition {p!r} is not a str (in {value!r})")
        if (
            isinstance(o, bool)
            or not isinstance(o, numbers.Integral)
            or not 0 <= int(o) <= MAX_OFFSET
        ):
            raise InvalidUsage(
                f"{what}: the offset {o!r} of partition {p!r} is not an int in "
                f"[0, {MAX_OFFSET}] (in {value!r})"
            )
        out[str(p)] = int(o)
    return out


def join_frontiers(a: Mapping[str, int], b: Mapping[str, int]) -> SourceFrontier:
    """The least frontier beyond both: the larger offset per partition.

    >>> join_frontiers({"0": 3, "1": 5}, {"1": 4, "2": 1})
    {'0': 3, '1': 5, '2': 1}
    """
    out = dict(a)
    for p, o in b.items():
        out[p] = max(out.get(p, 0), o)
    return dict(sorted(out.items()))


class Remap:
    """The bindings of one source, kept in and agreed through a remap shard.

    Its own mints are applied where they are made; only bindings another
    instance minted are read back from the shard (with a listen that lives
    for that read), so a tick's mint is one compare-and-set.
    """

    def __init__(self, client: PersistClient, shard_id: str) -> None:
        self.shard_id = shard_id
        self._times: list[Timestamp] = []
        self._frontiers: list[SourceFrontier] = []
        self.upper = Frontier.minimum()
        opened: list[Any] = []
        try:  # whatever fails here, the handles opened so far are expired now
            self._writer = client.open_writer(shard_id, REMAP_SCHEMA, background_compaction=True)
            opened.append(self._writer)
            self._reader = client.open_leased_reader(shard_id, REMAP_SCHEMA)
            opened.append(self._reader)
            self.sync()
        except BaseException:
            with contextlib.suppress(Exception):  # the constructor's error is the one to see
                expire_all(opened)
            raise

    @property
    def lease_lost(self) -> bool:
        """Whether a handle's lease ran out (the remap must be opened anew)."""
        return self._reader.lease_lost or self._writer.lease_lost

    def close(self) -> None:
        """Release the remap shard: its writer and reader expire now."""
        expire_all([self._reader, self._writer])

    # -- reading the shard -------------------------------------------------------------------

    def sync(self) -> None:
        """Catch up with every binding minted so far (by anyone)."""
        upper = self._writer.fetch_recent_upper()
        if upper == self.upper:
            return
        if self.upper.time == 0:
            since = self._reader.since.time or 0
            if upper.time is None or upper.time > since:
                self._apply_rows(since, self._reader.snapshot(since).to_pylist())
            as_of = since
        else:
            assert self.upper.time is not None, "the remap shard is closed"
            as_of = self.upper.time - 1
        self._read_back(as_of, upper)
        self.upper = upper

    def _read_back(self, as_of: Timestamp, upper: Frontier) -> None:
        """Apply the bindings at times in ``(as_of, upper)`` from the shard."""
        listen = self._reader.listen(as_of)
        try:
            while listen.frontier < upper:
                for event in listen.next(timeout_s=5):
                    if isinstance(event, Updates):
                        by_time: dict[int, list[dict[str, object]]] = {}
                        for row in event.table.to_pylist():
                            by_time.setdefault(int(row["_ts"]), []).append(row)  # type: ignore[arg-type]
                        for t in sorted(by_time):
                            self._apply_rows(t, by_time[t])
        finally:
            with contextlib.suppress(LeaseExpired):
                listen.expire()

    def _apply_rows(self, t: Timestamp, rows: list[dict[str, object]]) -> None:
        current = dict(self._frontiers[-1]) if self._frontiers else {}
        counts: dict[tuple[str, int], int] = {}
        for r in rows:
            key = (str(r["partition"]), int(r["offset"]))  # type: ignore[call-overload]
            counts[key] = counts.get(key, 0) + int(r["_diff"])  # type: ignore[call-overload]
        for (p, o), d in counts.items():
            if d < 0 and current.get(p) == o:
                del current[p]
        for (p, o), d in counts.items():
            if d > 0:
                current[p] = o
        if self._times and self._times[-1] == t:
            self._frontiers[-1] = current
        else:
            self._times.append(t)
            self._frontiers.append(current)

    # -- queries -----------------------------------------------------------------------------

    def bindings(self) -> list[tuple[Timestamp, SourceFrontier]]:
        """Every binding ``(t, frontier)`` in time order (one per minted time)."""
        return list(zip(self._times, (dict(f) for f in self._frontiers), strict=True))

    def origin(self) -> SourceFrontier:
        """The first non-empty binding still held (empty if none was minted).

        While no output holds anything the remap's since stays at 0, so this
        is the first binding ever minted: every instance agrees on it. (Once
        the remap compacts, it is the first binding still held; a source reads
        from its origin only while nothing is ingested, and an instance with a
        stale view of the remap loses its compare-and-append.)
        """
        return dict(next((f for f in self._frontiers if f), {}))

    def frontier_at(self, t: Timestamp) -> SourceFrontier:
        """The source frontier bound at ``t`` (empty before the first binding)."""
        i = bisect.bisect_right(self._times, t)
        return dict(self._frontiers[i - 1]) if i else {}

    def reclock(self, partition: str, offset: int) -> Timestamp | None:
        """The first bound time whose frontier is beyond ``(partition, offset)``."""
        for t, f in zip(self._times, self._frontiers, strict=True):
            if f.get(partition, 0) > offset:
                return t
        return None

    def resume_frontier(self, output_upper: Frontier) -> SourceFrontier:
        """The source frontier to resume reading from, given the least output upper."""
        if output_upper.time is None:
            return self.frontier_at(self._times[-1]) if self._times else {}
        if output_upper.time == 0:
            return {}
        return self.frontier_at(output_upper.time - 1)

    # -- minting -----------------------------------------------------------------------------

    def mint(self, into_time: Timestamp, source_upper: Mapping[str, int]) -> bool:
        """Bind ``source_upper`` at ``into_time``; False if another instance minted first.

        A time below the remap shard's upper is already bound (False). The
        binding is joined with the previous one, so it never moves back: a
        ``source_upper`` behind it (another instance read further, or the
        source was truncated, which ingestion tells apart) binds nothing new.
        InvalidUsage, and nothing minted, if ``into_time`` is not a timestamp
        or ``source_upper`` is not a source frontier (:func:`check_source_frontier`).
        """
        check_timestamp(into_time, "into_time")
        source_upper = check_source_frontier(source_upper, f"the source upper of {self.shard_id!r}")
        self.sync()
        lower = self.upper.time
        if lower is None:
            raise InvalidUsage(f"remap shard {self.shard_id!r} is closed")
        if into_time < lower:
            return False  # another instance already bound this time
        previous = self.frontier_at(lower - 1) if lower > 0 else {}
        new = join_frontiers(previous, source_upper)
        updates = []
        for p, o in new.items():
            if previous.get(p) != o:
                if p in previous:
                    updates.append(((p, previous[p]), into_time, -1))
                updates.append(((p, o), into_time, 1))
        result = self._writer.compare_and_append(updates, lower, into_time + 1)
        if not isinstance(result, Appended) or lower == 0:
            self.sync()  # the winner's bindings, or the first ones (read as any reader does)
            return isinstance(result, Appended)
        if updates:
            rows = [{"partition": p, "offset": o, "_diff": d} for (p, o), _, d in updates]
            self._apply_rows(into_time, rows)  # type: ignore[arg-type]
        self.upper = Frontier(into_time + 1)
        return True

    def downgrade_since(self, since: Timestamp) -> None:
        """Let the remap shard compact bindings below ``since``, and forget them here.

        The binding in effect at ``since`` stays (``frontier_at(t)`` is
        unchanged for ``t >= since``); the earlier ones collapse into it, as
        compaction collapses them in the shard. A no-op unless ``since``
        moves forward.
        """
        if self._reader.since.less_than(since):
            self._reader.downgrade_since(since)
        i = bisect.bisect_right(self._times, since) - 1
        if i > 0:
            del self._times[:i]
            del self._frontiers[:i]


def reclock_df(
    spark: Any,
    records: Any,
    bindings: Sequence[tuple[Timestamp, SourceFrontier]],
    column: str = TS,
    start: SourceFrontier | None = None,
) -> Any:
    """``records`` (``_partition``, ``_offset``, ...) with ``column`` = the time that binds each.

    A record's time is the first binding whose frontier is beyond its offset;
    records no binding covers yet are dropped. ``bindings`` is in time order.
    The bindings become ``(partition, lo, hi, t)`` intervals, disjoint and
    sorted, and those a balanced tree of ``CASE`` expressions that Spark tasks
    evaluate per record: ``O(log intervals)`` comparisons, and no Spark job of
    its own (a table of the intervals, broadcast or not, would be one). Runs
    on the driver: it only builds the plan; ``spark`` is unused.

    ``start``, if given, promises that no record lies below it (the frontier
    the records were read from): intervals wholly below it are left out of
    the tree. A tick's records are then bound by the tick's few bindings, not
    by every binding the remap still keeps (each interval is about ten
    Column calls on the driver).
    """
    from pyspark.sql import functions as F

    intervals = binding_intervals(bindings)
    if start is not None:
        intervals = [i for i in intervals if i[2] > start.get(i[0], 0)]
    time = _interval_tree(intervals)
    timed = records.withColumn(column, time)
    return timed.where(F.col(column).isNotNull())


def binding_intervals(
    bindings: Sequence[tuple[Timestamp, SourceFrontier]],
) -> list[tuple[str, int, int, Timestamp]]:
    """The offsets each binding covers first: ``(partition, lo, hi, t)``, sorted, disjoint.

    >>> binding_intervals([(5, {"0": 3}), (7, {"0": 4, "1": 2})])
    [('0', 0, 3, 5), ('0', 3, 4, 7), ('1', 0, 2, 7)]
    """
    intervals: list[tuple[str, int, int, int]] = []
    previous: SourceFrontier = {}
    for t, frontier in bindings:
        for p, hi in frontier.items():
            lo = previous.get(p, 0)
            if hi > lo:
                intervals.append((p, lo, hi, t))
        previous = frontier
    # Python orders str by code point, as Spark orders strings (by UTF-8 bytes).
    return sorted(intervals)


def _interval_tree(intervals: Sequence[tuple[str, int, int, int]]) -> Any:
    """The time of the interval holding ``(_partition, _offset)``, or null (a Column).

    The tree of ``CASE`` expressions picks the interval's position, and the
    time is that element of an array constant. Spark's code generator spells
    a BIGINT literal out in a stage's Java source but refers to an array or a
    struct constant, and compiles each distinct source once: so the offsets
    are compared as one-field structs (:func:`~timeshard.spark.sqltext.bigint_where`)
    and the times read from the array, and a tick whose bindings have the
    shape of an earlier tick's compiles nothing new.
    """
    from pyspark.sql import functions as F

    if not intervals:
        return F.lit(None).cast("long")
    times = F.array(*[F.lit(int(t)).cast("long") for _p, _lo, _hi, t in intervals])
    return F.try_element_at(times, _position(intervals, 1))


#: A record's offset, compared as BIGINT whatever integral type the source gives it.
_OFFSET = "CAST(_offset AS BIGINT)"


def _position(intervals: Sequence[tuple[str, int, int, int]], first: int) -> Any:
    """The position (from ``first``) of the interval holding the record, or null (a Column)."""
    from pyspark.sql import functions as F

    from timeshard.spark.sqltext import bigint_where, bigint_within

    if len(intervals) == 1:
        [(p, lo, hi, _t)] = intervals
        inside = (F.col("_partition") == p) & F.expr(bigint_within(_OFFSET, lo, hi))
        return F.when(inside, F.lit(first))
    mid = len(intervals) // 2
    p, lo = intervals[mid][0], intervals[mid][1]
    before = F.expr(bigint_where(_OFFSET, "<", lo))
    below = (F.col("_partition") < p) | ((F.col("_partition") == p) & before)
    return F.when(below, _position(intervals[:mid], first)).otherwise(
        _position(intervals[mid:], first + mid)
    )


__all__ = [
    "REMAP_SCHEMA",
    "Remap",
    "SourceFrontier",
    "binding_intervals",
    "check_source_frontier",
    "join_frontiers",
    "reclock_df",
]
