"""Compaction: size-tiered merges of adjacent batches, consolidated at since.

Like a spine, the batches of a shard are kept roughly geometric in size from
oldest to newest: whenever a batch is not more than twice the size of the one
after it, the two are merged. A merge reads both batches' parts, advances every
time below the shard's since to that since, consolidates, and writes one new
batch covering both intervals. It then asks the machine to swap the inputs for
the output, which succeeds only if the inputs are still there. No writer waits
for compaction: appends never look at it.

Runs on the driver (pyarrow); a background :class:`Compactor` thread runs it
after appends, and collects garbage every ``gc_interval_versions`` versions of
the shard's state, so that neither the state document, the blob nor the
consensus log grows with the number of appends.

Invariants:

1. A merge never changes the snapshot at any time ``>= since``.
2. A merge whose inputs were replaced meanwhile changes nothing; its output
   parts are deleted, as are those of a merge whose swap surely failed
   (Determinate). Not so if an attempt of its swap may have committed (an
   indeterminate compare-and-set), the output is gone when the outcome is
   decided, and a retained state version names it: it was swapped in and
   merged away by another compactor, a reader may hold that state, and GC
   deletes it once none does.
3. Input parts are not deleted here: readers may hold older states. GC
   deletes them once no held state references them.
4. Output parts record the times of the updates they hold, after advancing
   (``write_part``), so change times stay answerable from metadata. Those
   times may lie beyond the output batch's upper when since is.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass
from functools import partial

import pyarrow as pa

from timeshard.errors import Determinate, ExternalError, LeaseExpired, PartError
from timeshard.location.blob import Blob
from timeshard.location.consensus import Consensus
from timeshard.persist._internal import transitions as tr
from timeshard.persist._internal.blobio import delete_keys, read_part, retry_external, write_part
from timeshard.persist._internal.machine import Machine
from timeshard.persist._internal.parts import advance_since, consolidate
from timeshard.persist._internal.state import HollowBatch, ShardState, decode_state
from timeshard.persist._internal.threads import stop_at_exit
from timeshard.persist.config import PersistConfig
from timeshard.persist.gc import collect_garbage
from timeshard.progress import Description

log = logging.getLogger(__name__)

#: Versions read at a time when looking for a merge output in the retained states.
_SCAN_PAGE = 1000


@dataclass(frozen=True, slots=True)
class MergeRequest:
    """Two or more adjacent batches to merge."""

    inputs: tuple[HollowBatch, ...]


def choose_merge(state: ShardState, config: PersistConfig) -> MergeRequest | None:
    """The oldest adjacent pair that breaks the geometric size order, if any."""
    batches = state.batches
    for i in range(len(batches) - 1):
        a, b = batches[i], batches[i + 1]
        if not a.parts and not b.parts:
            return MergeRequest((a, b))
        if a.num_rows + b.num_rows > config.compaction_max_rows:
            continue
        if a.num_rows <= 2 * b.num_rows:
            return MergeRequest((a, b))
    return None


def merge(
    state: ShardState, request: MergeRequest, blob: Blob, writer_id: str, config: PersistConfig
) -> HollowBatch:
    """Read, advance to since, consolidate and write the merged batch (staged)."""
    schema = state.data_schema
    tables = [read_part(blob, p, schema, config) for b in request.inputs for p in b.parts]
    desc = Description(request.inputs[0].desc.lower, request.inputs[-1].desc.upper, state.since)
    if not tables:
        return HollowBatch(desc)
    table = pa.concat_tables(tables)
    if state.since.time is not None:
        table = advance_since(table, state.since.time)
    table = consolidate(table)
    if table.num_rows == 0:
        return HollowBatch(desc)
    prefix = f"{state.shard_id}/{writer_id}/{uuid.uuid4().hex}"
    step = config.blob_target_part_rows
    parts = tuple(
        write_part(blob, f"{prefix}/part-{i:05d}.parquet", table.slice(start, step), config)
        for i, start in enumerate(range(0, table.num_rows, step))
    )
    return HollowBatch(desc, parts)


def compact_shard(
    machine: Machine, blob: Blob, writer_id: str, config: PersistConfig, max_merges: int = 64
) -> int:
    """Merge until the size order holds (or ``max_merges``); return merges applied."""
    applied = 0
    for _ in range(max_merges):
        state = machine.fetch()
        request = choose_merge(state, config)
        if request is None:
            break
        try:
            output = merge(state, request, blob, writer_id, config)
        except PartError:
            if _still_present(machine.fetch(), request):
                raise
            continue  # inputs were replaced and collected meanwhile
        try:
            ok, maybe_swapped = machine.apply_telling(
                partial(_apply_merge, inputs=request.inputs, output=output, writer_id=writer_id)
            )
        except Determinate:  # surely not swapped in: nothing references the output
            delete_keys(blob, output.keys(), config)
            raise
        if ok:
            applied += 1
        elif not maybe_swapped or not _named_since(machine, state.seqno, output.keys(), config):
            delete_keys(blob, output.keys(), config)
        else:  # swapped in, then merged away by another: a retained state references it
            log.info("merge output of %s named by a retained state: left to GC", machine.shard_id)
    return applied


def _named_since(machine: Machine, seqno: int, keys: list[str], config: PersistConfig) -> bool:
    """Whether a retained state version after ``seqno`` references any of ``keys`` (a merge
    output an indeterminate swap may have put in: then a reader may hold that state, and GC,
    which scans the same versions, deletes the keys once none is held)."""
    wanted = set(keys)
    start = seqno + 1
    while True:
        page = retry_external(
            config,
            f"scanning consensus of {machine.shard_id!r}",
            partial(machine.consensus.scan, machine.shard_id, start, _SCAN_PAGE),
            reads=True,
        )
        for v in page:
            if wanted & decode_state(machine.shard_id, v.seqno, v.data).referenced_keys():
                return True
        if len(page) < _SCAN_PAGE:
            return False
        start = page[-1].seqno + 1


def _apply_merge(
    state: ShardState, *, inputs: tuple[HollowBatch, ...], output: HollowBatch, writer_id: str
) -> tuple[ShardState | None, object]:
    return tr.apply_merge(state, inputs, output, writer_id)


def _still_present(state: ShardState, request: MergeRequest) -> bool:
    return all(b in state.batches for b in request.inputs)


class Compactor:
    """Runs compaction and GC of one shard on a background thread when asked.

    ``request`` never blocks; requests made while a run is going coalesce.
    The first run collects garbage; later runs do once the state advanced
    ``gc_interval_versions`` versions past the last collection.
    """

    def __init__(
        self,
        machine: Machine,
        consensus: Consensus,
        blob: Blob,
        writer_id: str,
        config: PersistConfig,
    ):
        self._machine = machine
        self._consensus = consensus
        self._blob = blob
        self._writer_id = writer_id
        self._config = config
        self._wake = threading.Event()
        self._stop = False
        self._progress = threading.Condition()
        self._requested = 0
        self._done = 0
        self._gc_seqno: int | None = None
        self.merges = 0
        self.collections = 0
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._run, name="timeshard-compactor", daemon=True)
        self._thread.start()
        stop_at_exit(self.close)

    def request(self) -> None:
        with self._progress:
            self._requested += 1
        self._wake.set()

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Wait until every request made so far has been served; False on timeout."""
        with self._progress:
            return self._progress.wait_for(
                lambda: self._done >= self._requested or self._stop, timeout_s
            )

    def close(self) -> None:
        with self._progress:
            self._stop = True
            self._progress.notify_all()
        self._wake.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stop:
                return
            with self._progress:
                serving = self._requested
            try:
                self._compact()
                self._collect_if_due()
            except LeaseExpired:
                self._stop = True  # the writer is gone: nothing more to serve
                return
            except (ExternalError, PartError) as e:
                self.errors.append(str(e))
                log.warning("compaction of %s failed: %s", self._machine.shard_id, e)
            except Exception as e:  # a bug must not kill the thread that serves appends
                self.errors.append(repr(e))
                log.exception("compaction of %s failed", self._machine.shard_id)
            finally:
                with self._progress:
                    self._done = serving
                    self._progress.notify_all()

    def _compact(self) -> None:
        """Merge until the size order holds: a fast writer may need more than one round.

        Stops early when a round applied nothing (its merges lost races); the
        next request tries again.
        """
        while not self._stop:
            applied = compact_shard(self._machine, self._blob, self._writer_id, self._config)
            self.merges += applied
            if applied == 0 or choose_merge(self._machine.state, self._config) is None:
                return

    def _collect_if_due(self) -> None:
        seqno = self._machine.state.seqno
        if (
            self._gc_seqno is not None
            and seqno - self._gc_seqno < self._config.gc_interval_versions
        ):
            return
        collect_garbage(self._machine, self._consensus, self._blob, self._config)
        self._gc_seqno = seqno
        self.collections += 1


__all__ = ["Compactor", "MergeRequest", "choose_merge", "compact_shard", "merge"]
