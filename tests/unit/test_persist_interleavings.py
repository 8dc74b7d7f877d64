"""The shard against a dict-based model, with its steps interleaved (hypothesis).

``test_shard_model`` runs each operation to its end before the next starts.
Here the slow ones are cut at the points where other processes race them:

* a merge is planned (read, consolidated, output written) against one state
  and applied later, after appends, other merges, GC and since downgrades;
* GC runs other operations after it listed the blob, and again after it read
  the head and before it scans consensus;
* a leased reader plans a snapshot's parts and reads them later, after GC
  (invariant 4 of ``persist.read``: they stay readable until its next call);
* a compare-and-set commits and then reports a timeout.

At every step each readable time's snapshot must equal the model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import hypothesis.strategies as st
import pyarrow as pa
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from timeshard import Frontier, Indeterminate
from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import Appended, PersistClient, PersistConfig, Updates
from timeshard.persist._internal.blobio import delete_keys, read_part
from timeshard.persist._internal.parts import advance_times, consolidate
from timeshard.persist.compaction import _apply_merge, choose_merge, merge

SCHEMA = pa.schema([("k", pa.string())])
KEYS = st.sampled_from(["a", "b", "c"])


def model_at(log: list[tuple[str, int, int]], as_of: int) -> Counter[str]:
    out: Counter[str] = Counter()
    for k, t, d in log:
        if t <= as_of:
            out[k] += d
    return Counter({k: v for k, v in out.items() if v})


def counted(table: pa.Table) -> Counter[str]:
    out: Counter[str] = Counter()
    for r in table.to_pylist():
        out[r["k"]] += r["_diff"]
    return Counter({k: v for k, v in out.items() if v})


class HookedBlob(MemoryBlob):
    """Runs ``after_list`` once listing returned (another process acts meanwhile)."""

    after_list: Callable[[], None] | None = None

    def list_keys(self, prefix: str = "") -> Any:
        listed = list(super().list_keys(prefix))
        hook, self.after_list = self.after_list, None
        if hook is not None:
            hook()
        return listed


class HookedConsensus(MemoryConsensus):
    """Runs ``before_scan`` once before a scan; commits and then times out when armed."""

    before_scan: Callable[[], None] | None = None
    commit_then_timeout = False

    def scan(self, key: str, from_seqno: int, limit: int) -> Any:
        hook, self.before_scan = self.before_scan, None
        if hook is not None:
            hook()
        return super().scan(key, from_seqno, limit)

    def compare_and_set(self, key: str, expected: Any, new: Any) -> Any:
        result = super().compare_and_set(key, expected, new)
        if self.commit_then_timeout:
            self.commit_then_timeout = False
            raise Indeterminate("injected: committed, then timed out")
        return result


class Interleavings(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.blob = HookedBlob()
        self.consensus = HookedConsensus()
        self.config = PersistConfig(
            backoff_ms=0.0, max_backoff_ms=0.0, blob_target_part_rows=2, heartbeat_interval_ms=0
        )
        self.client = PersistClient(Location(self.blob, self.consensus), self.config)
        self.writers = [self.client.open_writer("s", SCHEMA) for _ in range(2)]
        self.reader = self.client.open_leased_reader("s", SCHEMA)
        self.planner = self.client.open_leased_reader("s", SCHEMA)
        self.log: list[tuple[str, int, int]] = []
        self.upper = 0
        self.since = 0
        self.pending: list[tuple[Any, Any]] = []
        self.planned: tuple[int, list[Any]] | None = None
        self.listen: Any = None
        self.listen_as_of = 0
        self.listened: Counter[tuple[str, int]] = Counter()

    # -- actions another process may take in the middle of a step ------------------

    def _append(self, data: st.DataObject) -> None:
        width = data.draw(st.integers(0, 3), label="width")
        lower, upper = self.upper, self.upper + width
        ups = []
        if width:
            ups = data.draw(
                st.lists(
                    st.tuples(KEYS, st.integers(lower, upper - 1), st.sampled_from([-1, 1, 2])),
                    max_size=5,
                ),
                label="updates",
            )
        w = data.draw(st.integers(0, 1), label="writer")
        self.consensus.commit_then_timeout = data.draw(st.booleans(), label="timeout")
        result = self.writers[w].compare_and_append([((k,), t, d) for k, t, d in ups], lower, upper)
        self.consensus.commit_then_timeout = False
        assert isinstance(result, Appended), result
        self.log += ups
        self.upper = upper

    def _plan_merge(self) -> None:
        state = self.client.state("s")
        request = choose_merge(state, self.config)
        if request is not None:
            wid = self.writers[0].writer_id
            self.pending.append((request, merge(state, request, self.blob, wid, self.config)))

    def _apply_merge(self, data: st.DataObject) -> None:
        if not self.pending:
            return
        request, output = self.pending.pop(data.draw(st.integers(0, len(self.pending) - 1)))
        self.consensus.commit_then_timeout = data.draw(st.booleans(), label="timeout")
        ok = self.writers[0]._machine.apply(
            lambda s: _apply_merge(
                s, inputs=request.inputs, output=output, writer_id=self.writers[0].writer_id
            )
        )
        self.consensus.commit_then_timeout = False
        if not ok:
            delete_keys(self.blob, output.keys(), self.config)

    def _downgrade(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(0, self.upper + 1), label="since")
        self.reader.downgrade_since(target)
        self.since = max(self.since, target)

    def _poll(self) -> None:
        if self.listen is None:
            return
        before = self.listen.frontier
        for event in self.listen.poll():
            if isinstance(event, Updates):
                for r in event.table.to_pylist():
                    assert before.less_equal(r["_ts"]), (r, before)
                    self.listened[(r["k"], r["_ts"])] += r["_diff"]
        expected: Counter[tuple[str, int]] = Counter()
        for k, t, d in self.log:
            if self.listen_as_of < t and not self.listen.frontier.less_equal(t):
                expected[(k, t)] += d
        got = Counter({k: v for k, v in self.listened.items() if v})
        assert got == Counter({k: v for k, v in expected.items() if v}), self.log

    def _racer(self, data: st.DataObject) -> Callable[[], None]:
        which = data.draw(
            st.sampled_from(["append", "plan", "apply", "since", "poll"]), label="racer"
        )
        if which == "poll":
            return self._poll
        if which == "append":
            return lambda: self._append(data)
        if which == "plan":
            return self._plan_merge
        if which == "apply":
            return lambda: self._apply_merge(data)
        return lambda: self._downgrade(data)

    # -- rules --------------------------------------------------------------------

    @rule(data=st.data())
    def append(self, data: st.DataObject) -> None:
        self._append(data)

    @rule()
    def plan_merge(self) -> None:
        self._plan_merge()

    @rule(data=st.data())
    def apply_merge(self, data: st.DataObject) -> None:
        self._apply_merge(data)

    @rule(data=st.data())
    def downgrade_since(self, data: st.DataObject) -> None:
        self._downgrade(data)

    @rule(data=st.data())
    def gc(self, data: st.DataObject) -> None:
        if data.draw(st.booleans(), label="race after listing"):
            self.blob.after_list = self._racer(data)
        if data.draw(st.booleans(), label="race before scan"):
            self.consensus.before_scan = self._racer(data)
        self.client.gc("s")
        self.blob.after_list = None
        self.consensus.before_scan = None

    @precondition(lambda self: self.listen is None and self.upper > 0)
    @rule(data=st.data())
    def start_listen(self, data: st.DataObject) -> None:
        reader = self.client.open_leased_reader("s")
        since = reader.since.time or 0
        if since < self.upper:
            self.listen_as_of = data.draw(st.integers(since, self.upper - 1), label="listen as_of")
            self.listen = reader.listen(self.listen_as_of)
        reader.expire()

    @rule()
    def poll_listen(self) -> None:
        self._poll()

    @precondition(lambda self: self.upper > 0)
    @rule(data=st.data())
    def plan_read(self, data: st.DataObject) -> None:
        since = max(self.client.state("s").since.time or 0, self.planner.since.time or 0)
        if since < self.upper:
            as_of = data.draw(st.integers(since, self.upper - 1), label="as_of")
            self.planner.downgrade_since(as_of)
            self.planned = (as_of, self.planner.snapshot_parts(as_of))

    @precondition(lambda self: self.planned is not None)
    @rule()
    def read_planned(self) -> None:
        assert self.planned is not None
        as_of, parts = self.planned
        self.planned = None
        tables = [
            advance_times(read_part(self.blob, p, self.planner.schema, self.config), as_of)
            for p in parts
        ]
        got = counted(consolidate(pa.concat_tables(tables))) if tables else Counter()
        assert got == model_at(self.log, as_of), (as_of, self.log)

    @invariant()
    def every_readable_time_is_the_model(self) -> None:
        if not hasattr(self, "client"):
            return
        state = self.client.state("s")
        state.check_invariants()
        assert state.upper == Frontier(self.upper)
        since = state.since.time or 0
        for as_of in range(since, self.upper):
            got = counted(self.client.open_unleased_reader("s").snapshot(as_of))
            assert got == model_at(self.log, as_of), (as_of, self.log)


TestInterleavings = Interleavings.TestCase
TestInterleavings.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
