"""The shard against a dict-based model, on random histories (hypothesis).

The model is a list of ``(row, time, diff)`` plus ``upper`` and ``since``.
Every snapshot at every readable time and every listen must equal it,
whatever writers raced, batches were staged and transmitted, or compaction
and GC merged and deleted.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from timeshard import Frontier, InvalidUsage, SinceError, UpperMismatch
from timeshard.location import Blob, Location, MemoryBlob, MemoryConsensus, open_blob
from timeshard.persist import (
    Appended,
    PersistClient,
    PersistConfig,
    Progress,
    Updates,
)

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])
ROWS = st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 2))


def model_snapshot(log: list[tuple[Any, int, int]], as_of: int) -> Counter[Any]:
    out: Counter[Any] = Counter()
    for row, t, d in log:
        if t <= as_of:
            out[row] += d
    return Counter({k: v for k, v in out.items() if v != 0})


def table_counter(table: pa.Table) -> Counter[Any]:
    out: Counter[Any] = Counter()
    for r in table.to_pylist():
        out[(r["k"], r["v"])] += r["_diff"]
    return Counter({k: v for k, v in out.items() if v != 0})


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class ShardModel(RuleBasedStateMachine):
    def make_blob(self) -> Blob:
        return MemoryBlob()

    @initialize()
    def setup(self) -> None:
        self.clock = FakeClock()
        self.location = Location(self.make_blob(), MemoryConsensus())
        config = PersistConfig(clock=self.clock, blob_target_part_rows=3, backoff_ms=0.0)
        self.client = PersistClient(self.location, config)
        self.writers = [self.client.open_writer("s1", SCHEMA) for _ in range(2)]
        self.reader = self.client.open_leased_reader("s1", SCHEMA)
        self.log: list[tuple[Any, int, int]] = []
        self.upper = 0
        self.since = 0
        self.listen = None
        self.listen_as_of = 0
        self.listened: Counter[Any] = Counter()

    def _updates(self, data: st.DataObject, lower: int, upper: int) -> list[tuple[Any, int, int]]:
        if upper == lower:
            return []
        return data.draw(
            st.lists(
                st.tuples(ROWS, st.integers(lower, upper - 1), st.sampled_from([-1, 1, 2])),
                max_size=6,
            )
        )

    @rule(data=st.data(), w=st.integers(0, 1), width=st.integers(0, 4))
    def compare_and_append(self, data: st.DataObject, w: int, width: int) -> None:
        lower, upper = self.upper, self.upper + width
        updates = self._updates(data, lower, upper)
        result = self.writers[w].compare_and_append(updates, lower, upper)
        assert result == Appended(Frontier(upper), result.seqno)  # type: ignore[union-attr]
        self.log += updates
        self.upper = upper

    @rule(data=st.data(), w=st.integers(0, 1), transmit=st.booleans())
    def staged_batch(self, data: st.DataObject, w: int, transmit: bool) -> None:
        lower, upper = self.upper, self.upper + data.draw(st.integers(1, 3))
        updates = self._updates(data, lower, upper)
        batch = self.writers[w].batch(updates, lower, upper)
        if transmit:
            batch = self.writers[1 - w].batch_from_transmittable(batch.into_transmittable())
        result = self.writers[1 - w].compare_and_append_batch([batch], lower, upper)
        assert isinstance(result, Appended)
        self.log += updates
        self.upper = upper

    @precondition(lambda self: self.upper > 0)
    @rule(data=st.data(), w=st.integers(0, 1))
    def stale_append(self, data: st.DataObject, w: int) -> None:
        stale = data.draw(st.integers(0, self.upper - 1))
        result = self.writers[w].compare_and_append([(("a", 0), stale, 1)], stale, stale + 1)
        assert result == UpperMismatch(Frontier(stale), Frontier(self.upper))

    @rule(data=st.data())
    def snapshot(self, data: st.DataObject) -> None:
        if self.upper <= self.since:
            with pytest.raises((SinceError, InvalidUsage)):
                self.reader.snapshot(self.since)
            return
        as_of = data.draw(st.integers(self.since, self.upper - 1))
        got = table_counter(self.reader.snapshot(as_of))
        assert got == model_snapshot(self.log, as_of), (as_of, self.log)

    @precondition(lambda self: self.since > 0)
    @rule(data=st.data())
    def snapshot_below_since(self, data: st.DataObject) -> None:
        with pytest.raises(SinceError):
            self.reader.snapshot(data.draw(st.integers(0, self.since - 1)))

    @rule(data=st.data())
    def downgrade_since(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(0, self.upper + 2))
        self.reader.downgrade_since(target)
        self.since = max(self.since, target)

    @precondition(lambda self: self.listen is None and self.upper > self.since)
    @rule(data=st.data())
    def start_listen(self, data: st.DataObject) -> None:
        self.listen_as_of = data.draw(st.integers(self.since, self.upper - 1))
        self.listen = self.reader.listen(self.listen_as_of)
        self.listened = Counter()

    @precondition(lambda self: self.listen is not None)
    @rule()
    def poll_listen(self) -> None:
        assert self.listen is not None
        before = self.listen.frontier
        for event in self.listen.poll():
            if isinstance(event, Updates):
                for r in event.table.to_pylist():
                    t = r["_ts"]
                    assert before.less_equal(t) and not event.upper.less_equal(t), (t, event)
                    self.listened[((r["k"], r["v"]), t)] += r["_diff"]
            else:
                assert isinstance(event, Progress)
                assert event.frontier == Frontier(self.upper)
        expected: Counter[Any] = Counter()
        for row, t, d in self.log:
            if self.listen_as_of < t < self.upper:
                expected[(row, t)] += d
        got = Counter({k: v for k, v in self.listened.items() if v != 0})
        assert got == Counter({k: v for k, v in expected.items() if v != 0})

    @rule()
    def compact(self) -> None:
        self.writers[0].compact()

    @rule()
    def gc(self) -> None:
        self.client.gc("s1")

    @invariant()
    def state_is_consistent(self) -> None:
        if not hasattr(self, "client"):
            return
        state = self.client.state("s1")
        state.check_invariants()
        assert state.upper == Frontier(self.upper)
        assert state.since <= Frontier(max(self.since, 0)).join(state.since)


ShardModel.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestShardModel = ShardModel.TestCase


@pytest.mark.s3
def test_the_shard_model_holds_with_its_parts_on_s3(s3_server: Any) -> None:
    """The same histories with every part and rollup on SeaweedFS's S3 (fewer: each is slower)."""

    class OnS3(ShardModel):
        def make_blob(self) -> Blob:
            return open_blob(s3_server.uri(f"shard-model/{uuid.uuid4().hex}"))

    run_state_machine_as_test(
        OnS3,
        settings=settings(
            max_examples=15,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
