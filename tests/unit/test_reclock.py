"""Reclocking against a model: racing instances agree, bindings are monotone."""

from __future__ import annotations

import re
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from timeshard import Frontier
from timeshard.errors import InvalidUsage
from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient, PersistConfig
from timeshard.storage import Remap, join_frontiers

mints = st.lists(
    st.tuples(
        st.integers(0, 1),  # which instance
        st.integers(0, 3),  # how far past the current upper
        st.dictionaries(st.sampled_from(["p0", "p1", "p2"]), st.integers(0, 20), max_size=3),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mints)
def test_racing_instances_agree_with_model(
    steps: list[tuple[int, int, dict[str, int]]],
) -> None:
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()), PersistConfig(backoff_ms=0.0))
    a, b = Remap(client, "remap"), Remap(client, "remap")
    model: list[tuple[int, dict[str, int]]] = []  # (time, frontier) as the shard agreed
    for who, gap, upper in steps:
        inst = (a, b)[who]
        stale = inst.upper.time or 0
        t = stale + gap
        if inst.mint(t, upper):
            prev = model[-1][1] if model else {}
            model.append((t, join_frontiers(prev, upper)))
        else:  # another instance had minted: the loser adopted its bindings
            assert inst.upper.time is not None and inst.upper.time > stale
    a.sync()
    b.sync()
    assert a.bindings() == b.bindings()
    for t in range(0, (a.upper.time or 0) + 2):
        want: dict[str, int] = {}
        for mt, f in model:
            if mt <= t:
                want = f
        assert a.frontier_at(t) == want, t
    # Bindings are monotone per partition.
    seen: dict[str, int] = {}
    for _, f in a.bindings():
        for p, o in seen.items():
            assert f.get(p, 0) >= o
        seen = f
    # reclock(p, o) is the first bound time beyond the record.
    for p in ["p0", "p1", "p2"]:
        for o in range(0, 21):
            expected = next((mt for mt, f in model if f.get(p, 0) > o), None)
            assert a.reclock(p, o) == expected, (p, o)


def test_resume_frontier_and_compaction() -> None:
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    remap = Remap(client, "remap")
    assert remap.mint(5, {"p0": 10})
    assert remap.mint(8, {"p0": 15, "p1": 3})
    assert remap.resume_frontier(Frontier(0)) == {}
    assert remap.resume_frontier(Frontier(6)) == {"p0": 10}
    assert remap.resume_frontier(Frontier(9)) == {"p0": 15, "p1": 3}
    assert Remap(client, "remap").mint(8, {"p0": 99}) is False  # 8 is already bound
    remap.downgrade_since(8)
    client.compact("remap")
    fresh = Remap(client, "remap")
    assert fresh.frontier_at(8) == remap.frontier_at(8)
    assert fresh.reclock("p1", 2) == 8


def test_concurrent_minting_threads_agree(tmp_path: object) -> None:
    import threading

    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()), PersistConfig(backoff_ms=0.0))
    wins = [0, 0]

    def run(i: int) -> None:
        remap = Remap(client, "remap")
        for n in range(30):
            t = remap.upper.time or 0
            if remap.mint(t, {f"p{i}": n + 1}):
                wins[i] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    a, b = Remap(client, "remap"), Remap(client, "remap")
    assert a.bindings() == b.bindings()
    assert len(a.bindings()) == sum(wins)
    last = a.bindings()[-1][1]
    assert last.get("p0", 0) <= 30 and last.get("p1", 0) <= 30


def test_downgrade_since_forgets_bindings_below_it(tmp_path: Path) -> None:
    """Bindings below since collapse into the one in effect at since; later ones stay."""
    client = PersistClient(Location.embedded(tmp_path))
    remap = Remap(client, "src.remap")
    for t, offset in [(0, 1), (3, 4), (5, 6), (9, 7)]:
        assert remap.mint(t, {"0": offset})
    remap.downgrade_since(6)
    assert [t for t, _ in remap.bindings()] == [5, 9]
    assert remap.frontier_at(6) == {"0": 6} and remap.frontier_at(9) == {"0": 7}
    assert remap.resume_frontier(Frontier(8)) == {"0": 6}
    client.compact("src.remap")
    again = Remap(client, "src.remap")  # a new instance reads the compacted shard
    assert again.frontier_at(6) == {"0": 6} and again.frontier_at(9) == {"0": 7}
    assert again.mint(10, {"0": 9}) and again.frontier_at(10) == {"0": 9}


@pytest.mark.parametrize("into_time", [-1, 2**63, 1.5, True, "3"])
def test_mint_refuses_a_time_that_is_no_timestamp(into_time: object) -> None:
    """mint(-1, ...) returned False, as if another instance had bound the time first."""
    remap = Remap(PersistClient(Location(MemoryBlob(), MemoryConsensus())), "remap")
    assert remap.mint(3, {"p0": 1})
    with pytest.raises(InvalidUsage, match=rf"into_time must be an int .*got {into_time!r}"):
        remap.mint(into_time, {"p0": 2})  # type: ignore[arg-type]
    assert remap.upper == Frontier(4) and remap.frontier_at(3) == {"p0": 1}


@pytest.mark.parametrize(
    ("source_upper", "named"),
    [
        ({"p0": 3.7}, "3.7"),  # was bound as offset 3
        ({"p0": 5.0}, "5.0"),  # was bound as offset 5
        ({"p0": float("nan")}, "nan"),  # was accepted as no progress
        ({"p0": True}, "True"),  # was accepted as offset 1
        ({"p0": -5}, "-5"),  # was accepted as no progress
        ({"p0": 2**63}, str(2**63)),  # failed as a schema mismatch of the remap shard
        ({"p0": "7"}, "'7'"),  # TypeError
        ({"p0": None}, "None"),  # TypeError
        ({0: 5}, "0"),  # TypeError: a partition is named by a str
        ({("p", 0): 5}, "('p', 0)"),
        ([("p0", 5)], "[('p0', 5)]"),  # AttributeError
        (None, "None"),  # AttributeError
    ],
)
def test_mint_refuses_a_source_upper_that_is_no_frontier(source_upper: object, named: str) -> None:
    """A source frontier maps partition names (str) to offsets (int, 0 <= offset < 2**63):
    anything else is InvalidUsage naming it, and the remap shard keeps its bindings."""
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    remap = Remap(client, "remap")
    assert remap.mint(3, {"p0": 1})
    with pytest.raises(InvalidUsage, match=re.escape(named)):
        remap.mint(5, source_upper)  # type: ignore[arg-type]
    assert remap.upper == Frontier(4) and remap.frontier_at(5) == {"p0": 1}
    assert Remap(client, "remap").bindings() == remap.bindings()
