"""Change times from part metadata: every writer records them, readers use them.

``change_times`` and ``has_updates`` are compared with a from-scratch
recomputation (every part's ``_ts`` decoded) on random histories, with parts
over the bound, parts from states written before times were recorded, and
compaction; the blob ``get`` calls they make are counted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import given, settings

from timeshard import InvalidUsage, PartError
from timeshard.location import Location, MemoryBlob, MemoryConsensus, VersionedData
from timeshard.location.consensus import CaSResult
from timeshard.persist import PersistClient, PersistConfig
from timeshard.persist._internal import parts as parts_module
from timeshard.persist._internal.parts import MAX_PART_TIMES, PartMeta, distinct_times
from timeshard.persist._internal.state import ShardState

SCHEMA = pa.schema([("k", pa.string())])


class CountingBlob(MemoryBlob):
    """A memory blob that records the key of every ``get``."""

    def __init__(self) -> None:
        super().__init__()
        self.gets: list[str] = []

    def get(self, key: str) -> bytes | None:
        self.gets.append(key)
        return super().get(key)


def make_client() -> tuple[PersistClient, CountingBlob]:
    blob = CountingBlob()
    config = PersistConfig(backoff_ms=0.0, heartbeat_interval_ms=0)
    return PersistClient(Location(blob, MemoryConsensus()), config), blob


def updates(times: Iterable[int]) -> list[tuple[tuple[str], int, int]]:
    return [((f"k{t}",), t, 1) for t in times]


def all_parts(state: ShardState) -> list[PartMeta]:
    return [p for b in state.batches for p in b.parts]


def strip_times(client: PersistClient, shard: str, keys: set[str] | None = None) -> None:
    """Rewrite the head state as a writer from before recorded times would have
    (the parts named by ``keys``, or all of them, lose their times)."""
    consensus = client.location.consensus
    head = consensus.head(shard)
    assert head is not None
    doc = json.loads(head.data)
    for batch in doc["batches"]:
        for part in batch["parts"]:
            if keys is None or part["key"] in keys:
                part.pop("times", None)
    doc["seqno"] = head.seqno + 1
    new = VersionedData(head.seqno + 1, json.dumps(doc).encode())
    assert consensus.compare_and_set(shard, head.seqno, new) == CaSResult.COMMITTED


def stored_times(client: PersistClient, shard: str) -> list[int]:
    """From scratch: the ``_ts`` of every row of every part of the head state."""
    reader = client.open_unleased_reader(shard)
    state = reader.state()
    times: list[int] = []
    for part in all_parts(state):
        data = client.location.blob.get(part.key)
        table = parts_module.decode_part(part.key, data, SCHEMA)
        times += table.column("_ts").to_pylist()
    return times


# -- what writers record ---------------------------------------------------------------------


def test_distinct_times_up_to_the_bound() -> None:
    assert distinct_times(pa.array([5, 3, 5, None, 3], pa.int64())) == (3, 5)
    assert distinct_times(pa.array(range(MAX_PART_TIMES), pa.int64())) == tuple(
        range(MAX_PART_TIMES)
    )
    assert distinct_times(pa.array(range(MAX_PART_TIMES + 1), pa.int64())) is None
    half = MAX_PART_TIMES // 2 + 1
    known = distinct_times(pa.array(range(half), pa.int64()))
    assert distinct_times(pa.array(range(half, 2 * half), pa.int64()), known) is None
    assert distinct_times(pa.array([1], pa.int64()), None) is None


def test_driver_writes_and_compaction_record_times() -> None:
    client, _ = make_client()
    writer = client.open_writer("s", SCHEMA)
    writer.append(updates([0, 2, 2, 4]), 0, 5)
    many = range(5, 6 + MAX_PART_TIMES)  # one more distinct time than the bound
    writer.append(updates(many), 5, 6 + MAX_PART_TIMES)
    small, big = all_parts(client.state("s"))
    assert (small.ts_min, small.ts_max, small.times) == (0, 4, (0, 2, 4))
    assert (big.ts_min, big.ts_max, big.times) == (5, 5 + MAX_PART_TIMES, None)
    # A staged batch carries its times to another process.
    batch = writer.batch(updates([77, 79]), writer.upper, 100)
    rebuilt = writer.batch_from_transmittable(batch.into_transmittable())
    assert [p.times for p in rebuilt.parts] == [(77, 79)]
    batch.delete()
    # Compaction output records the times of what it wrote: advanced to since, consolidated.
    writer.append([(("x",), 70, 1)], 6 + MAX_PART_TIMES, 72)
    reader = client.open_leased_reader("s")
    reader.downgrade_since(71)
    assert writer.compact() > 0
    merged, last = client.state("s").batches
    [part] = merged.parts
    assert merged.desc.upper.time == 6 + MAX_PART_TIMES  # its times were advanced beyond it
    assert (part.num_rows, part.ts_min, part.ts_max, part.times) == (len(many) + 3, 71, 71, (71,))
    assert [p.times for p in last.parts] == [(70,)]
    # Its times are found although they lie beyond its batch's upper.
    assert client.open_unleased_reader("s").change_times(71, 72) == [71]
    assert reader.has_updates(71, 72) is True


# -- reading times from metadata -------------------------------------------------------------


def test_recorded_times_answer_without_a_blob_read() -> None:
    """The issue's counting test: parts with recorded times are never fetched."""
    client, blob = make_client()
    writer = client.open_writer("s", SCHEMA)
    writer.append(updates([0, 1, 1]), 0, 2)
    writer.append(updates([3]), 2, 4)
    writer.append(updates([]), 4, 6)  # an idle tick: an empty batch
    writer.append(updates([6, 8]), 6, 9)
    unleased, leased = client.open_unleased_reader("s"), client.open_leased_reader("s")
    blob.gets.clear()
    for reader in (unleased, leased):
        assert reader.change_times(0, 9) == [0, 1, 3, 6, 8]
        assert reader.change_times(2, 8) == [3, 6]
        assert reader.change_times(4, 6) == []
        assert reader.change_times(7, 8) == []  # inside the part's bounds, not one of its times
        assert reader.change_times(5, 5) == []
        assert reader.has_updates(4, 6) is False
        assert reader.has_updates(7, 8) is False
        assert reader.has_updates(8, 9) is True
        assert reader.has_updates(0, 100) is True
    assert blob.gets == []
    # Compacted parts record their times too.
    assert writer.compact() > 0
    blob.gets.clear()
    assert unleased.change_times(0, 9) == [0, 1, 3, 6, 8]
    assert leased.has_updates(4, 6) is False
    assert blob.gets == []


def test_parts_without_recorded_times_read_only_what_metadata_cannot_tell() -> None:
    """Parts from older states: bounds settle what they can; the rest is read, its ``_ts`` only."""
    client, blob = make_client()
    writer = client.open_writer("s", SCHEMA)
    writer.append(updates([0, 4]), 0, 5)
    writer.append(updates([5, 5]), 5, 6)
    writer.append(updates([6, 9]), 6, 10)
    strip_times(client, "s")
    first, single, last = all_parts(client.state("s"))
    reader = client.open_unleased_reader("s")
    blob.gets.clear()
    assert reader.change_times(5, 6) == [5]  # one time: its bounds are equal
    assert reader.has_updates(4, 7) is True  # ts_max 4 of the first part is in the interval
    assert reader.has_updates(10, 20) is False  # beyond every part's bounds
    assert blob.gets == []
    assert reader.change_times(1, 4) == []
    assert blob.gets == [first.key]
    blob.gets.clear()
    assert reader.has_updates(7, 9) is False
    assert blob.gets == [last.key]
    blob.gets.clear()
    assert reader.change_times(0, 10) == [0, 4, 5, 6, 9]
    assert sorted(blob.gets) == sorted([first.key, last.key])
    assert single.key not in blob.gets


def test_a_damaged_part_is_reported_when_read_and_not_read_when_its_times_are_known() -> None:
    client, _ = make_client()
    writer = client.open_writer("s", SCHEMA)
    writer.append(updates([0, 3]), 0, 4)
    [part] = all_parts(client.state("s"))
    blob = client.location.blob
    assert isinstance(blob, MemoryBlob)
    blob.delete(part.key)
    reader = client.open_unleased_reader("s")
    assert reader.change_times(0, 4) == [0, 3]
    assert reader.has_updates(1, 3) is False
    strip_times(client, "s")
    for read in (lambda: reader.change_times(1, 3), lambda: reader.has_updates(1, 3)):
        with pytest.raises(PartError, match=f"part '{part.key}' is missing"):
            read()


def test_bad_intervals() -> None:
    client, _ = make_client()
    client.open_writer("s", SCHEMA).append(updates([0]), 0, 1)
    reader = client.open_unleased_reader("s")
    with pytest.raises(InvalidUsage, match="lower must be an int"):
        reader.change_times(-1, 3)
    with pytest.raises(InvalidUsage, match="upper must be an int"):
        reader.has_updates(0, "3")  # type: ignore[arg-type]
    assert reader.change_times(3, 1) == [] and reader.has_updates(3, 1) is False


# -- the model -------------------------------------------------------------------------------


def part_with(times: list[int], recorded: bool, rows: int) -> PartMeta:
    distinct = sorted(set(times))
    return PartMeta(
        "s/w/b/part-0.parquet",
        1,
        rows,
        distinct[0] if distinct else None,
        distinct[-1] if distinct else None,
        None,
        tuple(distinct) if recorded else None,
    )


@given(
    st.lists(st.integers(0, 20), max_size=6),
    st.booleans(),
    st.integers(0, 25),
    st.integers(0, 25),
)
def test_part_meta_is_exact_or_does_not_know(
    times: list[int], recorded: bool, lower: int, upper: int
) -> None:
    part = part_with(times, recorded, len(times))
    expected = tuple(sorted({t for t in times if lower <= t < upper}))
    known = part.times_in(lower, upper)
    assert known is None or known == expected
    assert known is not None or not recorded
    has = part.has_update_in(lower, upper)
    assert has is None or has == bool(expected)
    assert known is not None or has is not None or (min(times) < lower and max(times) >= upper)


History = list[tuple[list[int], bool]]  # per batch: its update times, whether to compact after


@st.composite
def histories(draw: st.DrawFn) -> tuple[History, set[int], int]:
    """Batches of updates over [0, 40), which of them lose their recorded times, a since."""
    batches = draw(
        st.lists(
            st.tuples(st.lists(st.integers(0, 7), max_size=6), st.booleans()),
            min_size=1,
            max_size=6,
        )
    )
    stripped = draw(st.sets(st.integers(0, 5)))
    return batches, stripped, draw(st.integers(0, 10))


@settings(max_examples=60, deadline=None)
@given(histories(), st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), max_size=6))
def test_change_times_equal_a_recomputation(
    history: tuple[History, set[int], int], intervals: list[tuple[int, int]]
) -> None:
    batches, stripped, since = history
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(parts_module, "MAX_PART_TIMES", 3)  # many parts over the bound
        client, blob = make_client()
        writer, leased = client.open("s", SCHEMA)
        lower = 0
        for i, (offsets, compact) in enumerate(batches):
            upper = lower + 8
            rows = [((f"k{t % 3}",), lower + t, 1 - 2 * (t % 2)) for t in offsets]
            writer.append(rows, lower, upper)
            if i in stripped:
                strip_times(client, "s", {p.key for p in all_parts(client.state("s"))})
            if compact:
                leased.downgrade_since(min(since, upper - 1))
                writer.compact()
            lower = upper
    stored = stored_times(client, "s")
    without = {p.key for p in all_parts(client.state("s")) if p.times is None}
    unleased = client.open_unleased_reader("s")
    for lo, hi in [*intervals, (0, lower)]:
        expected = sorted({t for t in stored if lo <= t < hi})
        for reader in (unleased, leased):
            blob.gets.clear()
            assert reader.change_times(lo, hi) == expected
            assert reader.has_updates(lo, hi) == bool(expected)
            assert set(blob.gets) <= without, (blob.gets, without)


def test_updates_of_an_idle_history_read_nothing() -> None:
    """Idle ticks append empty batches; asking about their intervals reads no part."""
    client, blob = make_client()
    writer = client.open_writer("s", SCHEMA)
    writer.append(updates(range(0, 100, 7)), 0, 100)
    reader = client.open_leased_reader("s")
    for tick in range(100, 110):
        writer.append(updates([]), tick, tick + 1)
    blob.gets.clear()
    assert not any(reader.has_updates(t, t + 1) for t in range(100, 110))
    assert reader.change_times(100, 110) == []
    assert blob.gets == []
