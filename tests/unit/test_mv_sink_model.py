"""The self-correcting sink against a model, on random histories (hypothesis).

Desired is a dict-based history of snapshots. Several sink replicas step in
random order, are killed and restarted, race with a writer that appends junk,
and compaction runs in between. At the end the shard must equal desired at
every time the sink wrote -- every time at or beyond ``as_of`` except the
intervals the junk writer itself appended (those are definite and cannot be
rewritten; the sink corrects them at its next batch).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import hypothesis.strategies as st
import pyarrow as pa
from hypothesis import HealthCheck, given, settings

from timeshard import Frontier
from timeshard.compute import ArrowEngine, MvSink
from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import Appended, PersistClient, PersistConfig

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])
ROWS = st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 2))


class ModelDesired:
    """Desired snapshots at chosen times; known before ``upper``."""

    def __init__(self) -> None:
        self.snapshots: dict[int, Counter[tuple[str, int]]] = {0: Counter()}
        self.upper: int | None = 1  # None: the inputs are closed

    def at(self, t: int) -> Counter[tuple[str, int]]:
        return self.snapshots[max(x for x in self.snapshots if x <= t)]

    def frontier(self) -> Frontier:
        return Frontier(self.upper)

    def change_times(self, lower: int, upper: int) -> list[int]:
        return sorted(t for t in self.snapshots if lower <= t < upper)

    def snapshot(self, t: int) -> pa.Table:
        assert self.upper is None or t < self.upper, (t, self.upper)
        rows = [{"k": k, "v": v, "_diff": d, "_err": None} for (k, v), d in self.at(t).items()]
        return pa.Table.from_pylist(
            rows, schema=pa.schema([*SCHEMA, ("_diff", pa.int64()), ("_err", pa.string())])
        )

    def error_snapshot(self, t: int, error: BaseException) -> pa.Table:
        raise AssertionError(f"the model query never fails: {error!r}")


actions = st.lists(
    st.one_of(
        st.tuples(
            st.just("advance"),
            st.integers(1, 4),
            st.dictionaries(ROWS, st.integers(1, 2), max_size=4),
        ),
        st.tuples(st.just("step"), st.integers(0, 2), st.just(None)),
        st.tuples(st.just("restart"), st.integers(0, 2), st.just(None)),
        st.tuples(
            st.just("junk"),
            st.integers(1, 3),
            st.lists(st.tuples(ROWS, st.sampled_from([-1, 1])), max_size=3),
        ),
        st.tuples(st.just("compact"), st.just(0), st.just(None)),
    ),
    max_size=40,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=actions, as_of=st.integers(0, 3))
def test_sink_converges_to_desired(actions: list[tuple[str, Any, Any]], as_of: int) -> None:
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()), PersistConfig(backoff_ms=0.0))
    client.open_writer("view", SCHEMA).expire()
    reader = client.open_leased_reader("view")  # holds since at 0 for the final check
    desired = ModelDesired()
    engine = ArrowEngine()

    def replica() -> MvSink:
        return MvSink(client, "view", SCHEMA, desired, engine, as_of, background_io=False)

    replicas = [replica(), replica(), replica()]
    junk_writer = client.open_writer("view")
    junk: list[tuple[int, int]] = []
    for kind, n, payload in actions:
        assert desired.upper is not None
        if kind == "advance":
            desired.snapshots[desired.upper + n - 1] = Counter(payload)
            desired.upper += n
        elif kind == "step":
            replicas[n].step()
        elif kind == "restart":
            replicas[n] = replica()
        elif kind == "junk":
            upper = junk_writer.fetch_recent_upper().time
            assert upper is not None
            ups = [(row, upper, d) for row, d in payload]
            if isinstance(junk_writer.compare_and_append(ups, upper, upper + n), Appended):
                junk.append((upper, upper + n))
        else:
            junk_writer.compact()
    assert desired.upper is not None
    desired.upper += 1
    final = Frontier(max(desired.upper, as_of + 1))
    desired.upper = final.time or 0
    for r in replicas:
        r.run_until(final)
    upper = client.state("view").upper.time
    assert upper is not None and upper >= final.time
    for t in range(as_of, desired.upper):
        if any(lo <= t < hi for lo, hi in junk):
            continue
        got: Counter[tuple[str, int]] = Counter()
        for r in reader.snapshot(t).to_pylist():
            got[(r["k"], r["v"])] += r["_diff"]
        want = Counter({k: v for k, v in desired.at(t).items() if v})
        assert Counter({k: v for k, v in got.items() if v}) == want, (t, junk)


def test_inputs_closed_with_changes_ahead_are_all_written_before_the_shard_closes() -> None:
    """With desired's upper empty, the batch was ``[lower, empty)`` but only the first time
    of it was computed: the changes after it were never written, and the shard closed."""
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()), PersistConfig(backoff_ms=0.0))
    client.open_writer("view", SCHEMA).expire()
    reader = client.open_leased_reader("view")
    desired = ModelDesired()
    desired.snapshots[0] = Counter({("a", 1): 1})
    desired.upper = 5
    sink = MvSink(client, "view", SCHEMA, desired, ArrowEngine(), 0, background_io=False)
    sink.run_until(Frontier(5))
    desired.snapshots[5] = Counter({("b", 1): 1})
    desired.snapshots[7] = Counter({("c", 1): 1})
    desired.upper = None
    for _ in range(3):
        sink.step()
    assert client.state("view").upper.is_empty(), sink.last_error
    for t in (4, 5, 6, 7, 100):
        got: Counter[tuple[str, int]] = Counter()
        for r in reader.snapshot(t).to_pylist():
            got[(r["k"], r["v"])] += r["_diff"]
        assert Counter({k: v for k, v in got.items() if v}) == desired.at(t), t
