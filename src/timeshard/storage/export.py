"""Exports: a shard's changes to an external system, exactly once, progress in the target.

What every export does on the driver (:class:`ShardExport`); the target's
part (reading the progress it recorded, the task that writes) is in
``kafka_export.py`` and ``postgres_export.py``.

A tick reads the progress the **target** records (``frontier``, ``version``:
every change of the shard below ``frontier`` is there, once), and if the
shard's upper is beyond it, runs one Spark job whose single task writes the
changes at ``[frontier, upper)`` and the new progress in one transaction of
the target. The task checks, inside that transaction, that the progress is
still the one the driver planned from (else another instance went first and
the task writes nothing) and that no newer ``version`` owns the target (else
this export is fenced). A tick with nothing new runs no Spark job: one whose
upper did not move does nothing, and one whose interval has no update (the
shard's part metadata tells) runs the task on the driver, which records the
new progress alone.

The export holds its input's since one below its progress with a critical
since handle (``export.<id>``), so the changes it has not written stay
readable, and apart from those it has (compaction moves times below since up
to it), while it is stopped; if they are gone anyway (the hold was dropped), it says
in one line that it cannot resume and why.

The hold's opaque token is the export's version (a newer version fences the
older ones), followed by ``+`` once the export has committed a progress to
the target (a step committed, or found a progress there): ``"2"``, ``"2+"``.
A target with no progress of the export while its hold says it committed one
lost that progress (deleted by hand, lost with the target): exporting from
time 0 again would write again every change the target has, over an input
whose changes below its since are merged. The step refuses it with
InvalidUsage, saying how to start over: delete what is left of the progress
from the target and drop the export (``timeshard drop NAME``, which releases
its hold), then declare it again. A hold without ``+`` (a first step that
committed nothing, or a hold written before the token recorded commits) says
nothing of a commit, and is never refused. (A process that dies between its
commit and marking the hold leaves it unmarked until a step finds the
progress.)

A map column, at any depth, is exported as a value, with its entries sorted by
key as consolidation gives them (two maps with the same entries are one value);
no key column may hold one (InvalidUsage when declared): a tick sorts by the
keys, which Spark does for no map.

The shard's err rows cannot be exported. As a Materialize sink does, an
export stalls at an error while the shard has it, and goes on once it is
retracted; the tick raises :class:`ExportError` naming it:

* a target that holds the shard's snapshot (PostgreSQL, Delta ``upsert``)
  sums a tick's err rows per error, and commits nothing if one is left at
  ``upper - 1``; an error inserted and retracted within the tick is passed;
* a target written per time (Kafka, Delta ``append``) commits the changes
  before the first time from which an error stays through ``upper - 1``,
  with that time as the progress (status ``blocked``), and nothing after it.
  The next ticks start there and stop again until the error is retracted;
  then they write the ok changes at the times it was present, and the
  target's history lacks what the error stood for at those times.

Either way an error retracted before the progress reached it never blocks:
the changes are read from the progress on, where the shard had no error
(which is why the export may stop there), so an error's insertion and its
retraction are always read together.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import decimal
import itertools
import json
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from timeshard.errors import Fenced, InvalidUsage, LeaseExpired, TimeshardError
from timeshard.persist import PersistClient, SinceHandle
from timeshard.persist._internal.parts import DIFF, ERR, TS

_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")
RESULT = pa.schema(
    [
        ("status", pa.string()),
        ("records", pa.int64()),
        ("detail", pa.string()),
        ("frontier", pa.int64()),
    ]
)
RESULT_DDL = "status string, records long, detail string, frontier long"


class ExportError(TimeshardError):
    """The export cannot go on from the data it has (err rows, a key that is not unique)."""


@dataclass(frozen=True)
class Progress:
    """What the target holds: every change below ``frontier``, written by ``version`` to
    ``target`` (the target's identity, :attr:`ShardExport.identity`) as ``declared``
    (:attr:`ShardExport.declaration`); either is None in a progress recorded before it
    was, or by a target that does not record it."""

    frontier: int
    version: int
    target: str | None = None
    declared: str | None = None


@dataclass(frozen=True)
class ExportStep:
    """One tick: the interval it exported (empty if idle), the records written, how it ended."""

    lower: int
    upper: int
    records: int
    status: str
    #: What the task said of how it ended (None if it said nothing).
    detail: str | None = None


def step_of(result: Any, lower: int, upper: int) -> ExportStep:
    """The step of a task's ``result`` (:data:`RESULT_DDL`'s fields) over ``[lower,
    upper)``: a pyspark Row (the job's, which has no ``get``) or a dict (no job)."""
    detail = result["detail"]
    return ExportStep(
        lower,
        upper,
        int(result["records"]),
        str(result["status"]),
        None if detail is None else str(detail),
    )


class ShardExport(ABC):
    """The driver side of an export (module doc); subclasses name the target."""

    #: The envelopes the target supports.
    envelopes: tuple[str, ...] = ("upsert",)

    @classmethod
    def check_declared(
        cls, *, envelope: str, key_columns: Sequence[str], export_id: str, version: int
    ) -> None:
        """What can be checked before the shard is opened (``timeshard run`` checks a
        declaration with it before Spark starts): InvalidUsage names an envelope the
        target does not support, a bad id or version, or an upsert without keys."""
        if envelope not in cls.envelopes:
            raise InvalidUsage(f"envelope must be one of {cls.envelopes}, got {envelope!r}")
        if not isinstance(export_id, str) or not _ID.fullmatch(export_id):
            raise InvalidUsage(f"export_id must be 1-200 of [A-Za-z0-9._-], got {export_id!r}")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise InvalidUsage(f"version must be a positive integer, got {version!r}")
        if isinstance(key_columns, (str, bytes)) or not all(
            isinstance(k, str) for k in key_columns
        ):
            raise InvalidUsage(f"key_columns must be a list of column names, got {key_columns!r}")
        if envelope == "upsert" and not list(key_columns):
            raise InvalidUsage("envelope 'upsert' needs key_columns")

    def __init__(
        self,
        spark: Any,
        client: PersistClient,
        shard: str,
        *,
        envelope: str,
        key_columns: Sequence[str],
        export_id: str,
        version: int,
    ) -> None:
        self.check_declared(
            envelope=envelope, key_columns=key_columns, export_id=export_id, version=version
        )
        self.reader = client.open_leased_reader(shard, name=reader_name(export_id))
        names = list(self.reader.schema.names)
        keys = list(key_columns)
        if [k for k in keys if k not in names] or len(set(keys)) != len(keys):
            self.reader.expire()
            raise InvalidUsage(
                f"key_columns must be distinct columns of shard {shard!r} {names}, got {keys}"
            )
        sorted_by = [f for f in self.reader.schema if f.name in keys and has_map(f.type)]
        if sorted_by:  # a tick sorts by the keys, which Spark does for no map
            self.reader.expire()
            raise InvalidUsage(
                f"shard {shard!r} cannot be exported keyed by {sorted_by[0].name!r} of type "
                f"{sorted_by[0].type}: Spark orders no maps (a map is exported as a value)"
            )
        self.spark = spark
        self.client = client
        self.shard = shard
        self.envelope = envelope
        self.key_columns = keys
        self.export_id = export_id
        self.version = version
        self._hold: SinceHandle | None = None

    @property
    def hold(self) -> SinceHandle:
        """The critical since hold that keeps the input's changes from the progress on.

        Registered at the first step, not when the export is declared: a
        declaration the subclass refuses after this constructor (a column
        type the target lacks, a target out of reach) must leave no hold,
        which would keep the input from compacting for ever.
        """
        if self._hold is None:
            self._hold = self.client.open_critical_since(
                self.shard, f"export.{self.export_id}", str(self.version)
            )
        return self._hold

    @contextlib.contextmanager
    def _declaring(self) -> Iterator[None]:
        """A subclass's checks of its declaration: a refusal lets go of the reader."""
        try:
            yield
        except BaseException:
            self.reader.expire()
            raise

    # -- the target's part --------------------------------------------------------------------

    @property
    @abstractmethod
    def target(self) -> str:
        """The target, for messages (``topic 'x'``, ``table 'public.t'``)."""

    @property
    def identity(self) -> str | None:
        """What the progress records of the target it was written to, where the progress
        is kept apart from the target (a table, a topic) and may outlive a change of it
        (None: the progress lives in the target itself)."""
        return None

    @property
    def declaration(self) -> str:
        """How the export writes the shard's rows, which the target's rows below the
        progress depend on: the envelope and the key columns, in any order (a subclass
        adds its own: a format, the columns' order in its records). The progress records
        it where the target can hold it."""
        return f"envelope {self.envelope!r}, key columns {sorted(self.key_columns)}"

    @abstractmethod
    def progress(self) -> Progress | None:
        """The progress the target records (None: nothing exported yet)."""

    @abstractmethod
    def _task(self, lower: int, upper: int) -> Callable[[Iterable[pa.RecordBatch]], Any]:
        """The single task of a tick: write ``[lower, upper)`` and the progress, or nothing."""

    def _order(self) -> list[str]:
        """The order the task gets the consolidated changes in."""
        return [TS, *self.key_columns]

    # -- the tick -----------------------------------------------------------------------------

    def step(self) -> ExportStep:
        """Export the changes the target lacks, up to the shard's upper: 0 or 1 Spark job.

        Raises Fenced if a newer version owns the target, ExportError if the
        changes cannot be exported, and TimeshardError naming why the export
        cannot resume if its input no longer holds its progress. A reader whose
        lease ran out (the process was paused past it) raises LeaseExpired once
        and is replaced: the critical hold kept the changes, the next step reads
        them through a new one.
        """
        if self.reader.lease_lost:
            self._reopen()
        try:
            return self._step()
        except LeaseExpired:
            self._reopen()
            raise

    def _reopen(self) -> None:
        with contextlib.suppress(Exception):
            self.reader.expire()
        self.reader = self.client.open_leased_reader(self.shard, name=reader_name(self.export_id))

    def _step(self) -> ExportStep:
        from timeshard.spark.snapshot import consolidate_df, updates_df

        progress = self.progress()
        if progress is None:
            progress = self._check_never_committed()
        if progress is not None and progress.version > self.version:
            raise Fenced(
                f"export {self.export_id!r}: version {progress.version} owns {self.target}, "
                f"this is version {self.version}"
            )
        lower = progress.frontier if progress is not None else 0
        upper = self.reader.fetch_recent_upper().time
        if upper is None:
            raise InvalidUsage(f"shard {self.shard!r} is closed (its upper is empty)")
        if progress is not None:
            self._check_target(progress)
            self._check_declaration(progress)
        if progress is not None and self._hold is None:
            self._check_own_progress(progress)
        self._hold_at(lower, committed=progress is not None)
        if lower >= upper:
            return ExportStep(lower, upper, 0, "idle")
        if progress is not None:
            self._check_resumable(lower)
        if self.reader.has_updates(lower, upper):
            data = list(self.reader.schema.names)
            changes = consolidate_df(updates_df(self.spark, self.reader, lower, upper), data)
            [result] = (
                changes.repartition(1)
                .sortWithinPartitions(*self._order())
                .mapInArrow(self._task(lower, upper), RESULT_DDL)
                .collect()
            )
        else:  # only the progress to record (the upper moved, nothing changed): no job
            [result] = [b.to_pylist()[0] for b in self._task(lower, upper)(iter(()))]
        if result["status"] == "fenced":
            raise Fenced(f"export {self.export_id!r}: {result['detail']}")
        if result["status"] == "error":
            raise ExportError(f"export {self.export_id!r}: {result['detail']}")
        if result["status"] == "blocked":
            self._hold_at(int(result["frontier"]), committed=True)
            raise ExportError(
                f"export {self.export_id!r}: exported up to {result['frontier']}, then "
                f"stopped: {result['detail']}"
            )
        if result["status"] == "committed":
            self._hold_at(upper, committed=True)
        return step_of(result, lower, upper)

    def close(self) -> None:
        """Release the reader (the critical hold stays: the export resumes from it)."""
        self.reader.expire()

    def drop(self) -> None:
        """Forget the export: its critical since hold goes, so the shard may compact (also
        when the reader cannot be expired: its lease runs out by itself)."""
        try:
            self.close()
        finally:
            self.client.drop_critical_since(self.shard, f"export.{self.export_id}")

    def _check_target(self, progress: Progress) -> None:
        """Raise InvalidUsage unless ``progress`` was written to this export's target.

        An export whose target was changed under the same id would start the new target
        at the old one's progress, and never write it the changes below. A progress
        recorded before the identity was is accepted (and gets it at the next commit):
        refusing it would stop every export at an upgrade, and nothing tells its target.
        """
        if progress.target is not None and progress.target != self.identity:
            raise InvalidUsage(
                f"export {self.export_id!r}: its progress {progress.frontier} was written to "
                f"{progress.target}, not to {self.identity}, which would get none of the "
                "changes below it. Give this export another name for the new target, or "
                "declare the old target again"
            )

    def _check_declaration(self, progress: Progress) -> None:
        """Raise InvalidUsage unless ``progress`` was written as this export writes.

        An export declared again under the same id with another envelope or key
        columns would go on from the old declaration's progress in a target whose
        rows below it are the old declaration's (a history where a snapshot is
        expected, rows keyed otherwise). A progress recorded before the declaration
        was is accepted, as :meth:`_check_target` accepts one without a target.
        """
        if progress.declared is not None and progress.declared != self.declaration:
            raise InvalidUsage(
                f"export {self.export_id!r}: {self.target} holds its progress "
                f"{progress.frontier} written with {progress.declared}, not with "
                f"{self.declaration}: the rows below it are not what this declaration "
                "writes. Declare the export as before, or give this one another name and "
                "a target of its own"
            )

    def _check_never_committed(self) -> Progress | None:
        """Raise InvalidUsage if this export's hold says it committed a progress, which the
        target no longer has (module doc); else None, or the progress another instance of
        the export committed after this step read none (it marks the hold after its
        commit: a progress read again now has it)."""
        hold_id = f"export.{self.export_id}"
        hold = self.client.state(self.shard).critical_readers.get(hold_id)
        if hold is None or not _parse_hold(hold_id, hold.opaque)[1]:
            return None
        progress = self.progress()
        if progress is not None:
            return progress
        raise InvalidUsage(
            f"export {self.export_id!r}: its hold {hold_id!r} on shard {self.shard!r} (since "
            f"{hold.since.to_json()}) records a committed progress that {self.target} no "
            "longer has (deleted, or lost with the target); going on from time 0 would write "
            f"every change again. {self._start_over()}"
        )

    def _start_over(self, *, held: bool = True) -> str:
        """How to export the shard anew, from its since, for messages (the drop first: a
        status line keeps only the start of a message); ``held``: this shard holds the
        export (else another may, or none)."""
        where = "" if held else " if a shard still holds it"
        return (
            f"To start over from the shard's since: stop the export, drop it{where} "
            f"(`timeshard drop {self.export_id}`, or DROP SINK in timeshard serve: it releases "
            f"the hold), {self.fresh_target}, and declare it again"
        )

    @property
    def fresh_target(self) -> str:
        """How to take the export's progress out of the target (and what to do with its
        rows) for the export to start over, for messages (a subclass names its target's
        way)."""
        return f"delete its progress from {self.target}"

    def _check_own_progress(self, progress: Progress) -> None:
        """Raise InvalidUsage unless ``progress`` is this export's of this shard.

        The target names its progress by export id only. An export whose
        input was changed under the same id, or another location's export of
        that id, would go on from a frontier of another shard, and skip this
        one's changes below it. This export's first step registers a hold on
        its shard that stays until :meth:`drop`: a progress with no such hold
        on the shard is another input's, or a dropped export's (which nothing
        kept readable since).
        """
        if f"export.{self.export_id}" not in self.client.state(self.shard).critical_readers:
            raise InvalidUsage(
                f"export {self.export_id!r}: {self.target} records the progress "
                f"{progress.frontier} of an export {self.export_id!r}, and shard {self.shard!r} "
                "holds no hold of that export: that progress is another input's (or another "
                "location's), or that export was dropped, and the shard may have compacted past "
                f"it. Give this export another name. {self._start_over(held=False)} (if that "
                "progress is no other export's)"
            )

    def _check_resumable(self, lower: int) -> None:
        """Raise TimeshardError unless the changes from ``lower`` on are readable apart from
        the exported ones: no time at or after ``lower`` was compacted away (since at most
        ``lower``), and no batch merged times before ``lower`` up to ``lower`` or later
        (a since of ``lower`` allows that; the hold at ``lower - 1`` does not)."""
        state = self.client.state(self.shard)
        since = state.since.time
        if since is not None and since > lower:
            raise TimeshardError(
                f"export {self.export_id!r} cannot resume: shard {self.shard!r} was compacted "
                f"to since {since}, past the export's progress {lower} in {self.target}; "
                f"its changes at [{lower}, {since}) are gone. {self._start_over()}"
            )
        for batch in state.batches:
            first, merged_at = batch.desc.lower.time, batch.desc.since.time
            if first is not None and merged_at is not None and first < lower <= merged_at:
                raise TimeshardError(
                    f"export {self.export_id!r} cannot resume: shard {self.shard!r} merged its "
                    f"changes from {first} on at since {merged_at}, so those before the "
                    f"export's progress {lower} in {self.target} cannot be told apart from "
                    f"the later ones. {self._start_over()}"
                )

    def _hold_at(self, frontier: int, *, committed: bool = False) -> None:
        """Keep the changes from ``frontier`` on readable apart from the earlier ones: hold
        the input at ``frontier - 1``; ``committed``: the target has a progress of the
        export, which the hold then records (module doc).

        A since of ``frontier`` itself would let compaction move the changes
        before it, which the target has, up to ``frontier``, where the next tick
        reads them again. The critical hold keeps it while the export is
        stopped; the leased reader, which reads the changes, moves along with
        it (sinces only move forward).
        """
        held = _held(frontier)
        if self.reader.since.less_than(held):
            self.reader.downgrade_since(held)
        hold = self.hold
        mark = committed and not _parse_hold(hold.reader_id, hold.opaque)[1]
        since = hold.since.time
        if since is None or (since >= held and not mark):
            return
        opaque = hold.current_opaque()
        version, marked = _parse_hold(hold.reader_id, opaque)
        if version > self.version:
            raise Fenced(
                f"export {self.export_id!r}: version {version} holds shard {self.shard!r}, "
                f"this is version {self.version}"
            )
        new = _hold_opaque(self.version, committed=marked or committed)
        if new == opaque and since >= held:
            hold.opaque = opaque  # marked by another instance: nothing to write
            return
        hold.compare_and_downgrade_since(opaque, new, held)


_HOLD_OPAQUE = re.compile(r"([1-9][0-9]*)(\+?)")


def _hold_opaque(version: int, *, committed: bool) -> str:
    """The opaque token of an export's hold (module doc)."""
    return f"{version}+" if committed else str(version)


def _parse_hold(hold_id: str, opaque: str) -> tuple[int, bool]:
    """The version an export's hold token names, and whether it records a commit (a token
    of older code, the version alone, records none). TimeshardError names a token that is
    neither, which no export wrote."""
    match = _HOLD_OPAQUE.fullmatch(opaque)
    if match is None:
        raise TimeshardError(
            f"hold {hold_id!r}: its opaque token {opaque!r} is no export's (a version, "
            "and '+' once the export committed)"
        )
    return int(match.group(1)), match.group(2) == "+"


def json_value(value: Any, arrow: pa.DataType) -> Any:
    """``value`` (a Python value of Arrow type ``arrow``) as a JSON-able value (tasks): a
    struct a dict of its fields, a map (pairs, in Python) a dict of its entries (a key
    that is not a string as its JSON text: ``1`` as ``"1"``), an array a list."""
    if value is None:
        return None
    if pa.types.is_struct(arrow):
        return {f.name: json_value(value[f.name], f.type) for f in arrow}
    if pa.types.is_map(arrow):
        return {
            _json_key(json_value(k, arrow.key_type)): json_value(v, arrow.item_type)
            for k, v in value
        }
    if _is_list(arrow):
        return [json_value(v, arrow.value_type) for v in value]
    return value


def _json_key(key: Any) -> str:
    return key if isinstance(key, str) else to_json(key).decode()


def has_map(arrow: pa.DataType) -> bool:
    """Whether ``arrow`` holds a map, at any depth."""
    if pa.types.is_map(arrow):
        return True
    if _is_list(arrow):
        return has_map(arrow.value_type)
    if pa.types.is_struct(arrow):
        return any(has_map(field.type) for field in arrow)
    return False


def _is_list(arrow: pa.DataType) -> bool:
    t = pa.types
    return bool(t.is_list(arrow) or t.is_large_list(arrow) or t.is_fixed_size_list(arrow))


def reader_name(export_id: str) -> str:
    """The name of the export's leased reader (its id is ``<name>.<random>``): by its
    heartbeats, others tell that the export runs (``timeshard drop`` refuses it then).
    Cut to the length a reader's name may have (two ids alike in their first 160
    characters share it)."""
    return f"export.{export_id}"[:160]


def _held(frontier: int) -> int:
    """The since that keeps the changes at ``frontier`` and later apart from the earlier."""
    return max(frontier - 1, 0)


class DataError(Exception):
    """The changes cannot be exported (a task reports it; nothing is committed)."""


class ErrorNet:
    """The err rows among a tick's changes, summed per error (its message and data) (tasks).

    The changes come consolidated per time, so an error's insertion at one time
    and its retraction at a later one are two rows: only their sum says whether
    the shard still has it.
    """

    def __init__(self) -> None:
        self._net: dict[Any, int] = {}
        self._first: dict[Any, tuple[int, str]] = {}

    def ok_rows(
        self, batches: Iterable[pa.RecordBatch], before: int | None = None
    ) -> Iterator[dict[str, Any]]:
        """The ok rows of ``batches`` (at times below ``before``, if given); the err rows
        are summed."""
        for batch in batches:
            for row in batch.to_pylist():
                if before is not None and row[TS] >= before:
                    continue
                if row[ERR] is None:
                    yield row
                else:
                    self.add(row)

    def add(self, row: dict[str, Any]) -> None:
        """Count the err row ``row``."""
        error = _error_of(row)
        self._net[error] = self._net.get(error, 0) + row[DIFF]
        if self._net[error] == 0:
            del self._net[error]
        first = self._first.get(error)
        if first is None or row[TS] < first[0]:
            self._first[error] = (row[TS], row[ERR])

    def left(self) -> tuple[int, str] | None:
        """An error the shard still has after the rows counted: the first time it was
        seen, and its message (None: none)."""
        return min((self._first[e] for e in self._net), default=None)

    def check_none_left(self) -> None:
        """DataError naming an error the shard still has after the rows counted."""
        left = self.left()
        if left is not None:
            raise DataError(_error_message(*left))


def blocked_at(batches: Sequence[pa.RecordBatch]) -> tuple[int, str] | None:
    """The first time from which the shard has an error at every time to the tick's end,
    and the message saying so (None: no error is left at the end); for targets written
    per time (tasks)."""
    import pyarrow.compute as pc

    rows: list[dict[str, Any]] = []
    for batch in batches:
        mask = pc.is_valid(batch.column(ERR))
        if pc.any(mask).as_py():
            rows.extend(batch.filter(mask).to_pylist())
    rows.sort(key=lambda row: row[TS])
    since: tuple[int, str] | None = None  # the time, and an error it has
    errors = ErrorNet()
    for time, at in itertools.groupby(rows, key=lambda row: row[TS]):
        for row in at:
            errors.add(row)
        left = errors.left()
        if left is None:
            since = None
        elif since is None:
            since = (time, left[1])
    return None if since is None else (since[0], _error_message(*since))


def _error_of(row: dict[str, Any]) -> Any:
    return hashable((row[ERR], *(v for k, v in row.items() if k not in _META)))


_META = (TS, DIFF, ERR)


def _error_message(time: int, message: str) -> str:
    return f"the shard has an error at time {time}, which an export cannot write: {message[:300]}"


@dataclass(frozen=True)
class KeyChange:
    """A key's net change over a tick: its row after it (data columns in order), or None;
    ``had_row``: the tick retracted a row of it, so the key had one before the tick."""

    key: tuple[Any, ...]
    row: tuple[Any, ...] | None
    had_row: bool


def net_per_key(
    rows: Iterable[dict[str, Any]], key_columns: Sequence[str], data_columns: Sequence[str]
) -> list[KeyChange]:
    """The net change per key of consolidated changes sorted by key (tasks).

    A row's diffs summed over the tick: a key's one row with a sum of 1 is its
    row after the tick; none, with one negative, means it has no row left;
    every sum zero (it changed and changed back) means no change. Positive sums
    adding up past 1 (two rows, or one row twice) are a DataError: a keyed
    target holds one row per key, once.
    """
    out: list[KeyChange] = []
    key: tuple[Any, ...] | None = None
    net: dict[Any, int] = {}
    kept: dict[Any, tuple[Any, ...]] = {}

    def flush() -> None:
        assert key is not None
        live = [(kept[h], n) for h, n in net.items() if n > 0]
        count = sum(n for _, n in live)
        if count > 1:
            how = f"{len(live)} rows" if len(live) > 1 else f"the row {live[0][0]!r} {count} times"
            raise DataError(
                f"key {key!r} has {count} rows after the tick's changes ({how}); a target "
                f"keyed by {list(key_columns)} holds one row per key"
            )
        retracted = any(n < 0 for n in net.values())
        if live or retracted:
            out.append(KeyChange(key, live[0][0] if live else None, retracted))

    for row in rows:
        this = tuple(row[k] for k in key_columns)
        if key is not None and hashable(this) != hashable(key):
            flush()
            net.clear()
            kept.clear()
        key = this
        values = tuple(row[c] for c in data_columns)
        h = hashable(values)
        net[h] = net.get(h, 0) + row[DIFF]
        kept[h] = values
    if key is not None:
        flush()
    return out


def result(
    status: str, records: int, detail: str | None, frontier: int | None = None
) -> pa.RecordBatch:
    """The one row a task returns: how it ended (``blocked``: it committed the changes
    below ``frontier`` and stopped there at an error, which ``detail`` names)."""
    row = {"status": status, "records": records, "detail": detail, "frontier": frontier}
    return pa.RecordBatch.from_pylist([row], schema=RESULT)


class _Nan:
    """What every NaN hashes as: Spark groups NaNs together, while ``nan != nan`` in Python."""

    def __repr__(self) -> str:
        return "NaN"


_NAN = _Nan()


def hashable(value: Any) -> Any:
    """``value`` (a Python value of an Arrow type, or a tuple of them) as a dict key that is
    equal where Spark finds values equal: every NaN is one value and -0.0 is 0.0, at any
    depth (as persist's consolidation normalises them)."""
    if isinstance(value, float):
        if math.isnan(value):
            return _NAN
        return 0.0 if value == 0 else value
    if isinstance(value, list | tuple):
        return tuple(hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, hashable(v)) for k, v in value.items()))
    return value


def to_json(value: Any) -> bytes:
    """``value`` as strict JSON: a NaN or an infinity is the string ``"NaN"``,
    ``"Infinity"`` or ``"-Infinity"`` (as proto3's JSON mapping writes them)."""
    try:
        text = json.dumps(value, default=_json_default, separators=(",", ":"), allow_nan=False)
    except ValueError:  # rare: walk the value only then
        text = json.dumps(_finite(value), default=_json_default, separators=(",", ":"))
    return text.encode()


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


__all__ = [
    "reader_name",
    "RESULT",
    "DataError",
    "ExportError",
    "ExportStep",
    "KeyChange",
    "Progress",
    "ShardExport",
    "ErrorNet",
    "blocked_at",
    "has_map",
    "hashable",
    "json_value",
    "net_per_key",
    "result",
    "to_json",
]
