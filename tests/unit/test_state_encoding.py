"""The stored state document: round trips, versioning, corrupt input."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import given

from timeshard import CorruptState, Description, Frontier
from timeshard.persist._internal.parts import MAX_PART_TIMES, PartMeta
from timeshard.persist._internal.state import (
    CriticalReaderState,
    HollowBatch,
    LeasedReaderState,
    ShardState,
    WriterState,
    decode_state,
    encode_schema,
    encode_state,
)

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.list_(pa.int32())), ("m", pa.float64())])
times = st.integers(0, 2**40)
fronts = st.one_of(st.just(Frontier.empty()), times.map(Frontier))
ids = st.text("abcdef0123456789", min_size=1, max_size=8)
keys = ids.map(lambda s: f"s/w/{s}/part-0.parquet")
#: Parts of states written before parts recorded their times: any bounds, no times.
legacy_parts = st.builds(PartMeta, keys, times, times, st.none() | times, st.none() | times)


@st.composite
def parts_with_times(draw: st.DrawFn) -> PartMeta:
    """A part as writers record it now: bounds, and its distinct times or None."""
    distinct = sorted(draw(st.sets(times, min_size=1, max_size=MAX_PART_TIMES + 2)))
    recorded = tuple(distinct) if len(distinct) <= MAX_PART_TIMES else None
    sha256 = draw(st.none() | st.text("0123456789abcdef", min_size=64, max_size=64))
    rows = len(distinct) + draw(st.integers(0, 5))
    return PartMeta(draw(keys), draw(times), rows, distinct[0], distinct[-1], sha256, recorded)


parts = legacy_parts | parts_with_times()


@st.composite
def states(draw: st.DrawFn) -> ShardState:
    uppers = sorted(draw(st.lists(times, max_size=5)))
    batches = []
    lower = Frontier(0)
    for u in uppers:
        upper = lower.join(Frontier(u))
        batches.append(
            HollowBatch(
                Description(lower, upper, draw(fronts)), tuple(draw(st.lists(parts, max_size=3)))
            )
        )
        lower = upper
    # An open shard stays readable at upper - 1: its since is at most that (at most 0
    # when it is empty); a closed shard's since is any.
    last = None if lower.time is None else max(lower.time - 1, 0)
    since = draw(fronts if last is None else st.integers(0, last).map(Frontier))
    return ShardState(
        shard_id="s",
        schema=encode_schema(SCHEMA),
        seqno=draw(st.integers(0, 1000)),
        since=since,
        upper=lower,
        batches=tuple(batches),
        writers=draw(
            st.dictionaries(
                ids, st.builds(WriterState, times, times, st.none() | ids, fronts), max_size=3
            )
        ),
        leased_readers=draw(
            st.dictionaries(
                ids, st.builds(LeasedReaderState, fronts, times, times, times), max_size=3
            )
        ),
        critical_readers=draw(
            st.dictionaries(ids, st.builds(CriticalReaderState, fronts, ids), max_size=2)
        ),
        walltime_ms=draw(times),
    )


@given(states())
def test_round_trip(state: ShardState) -> None:
    decoded = decode_state("s", state.seqno, encode_state(state))
    assert decoded == state
    assert decoded.data_schema == SCHEMA
    decoded.check_invariants()


@pytest.mark.parametrize(
    "garbage",
    [b"", b"\x00\xff", b"{}", b"[1,2]", b'{"version": 99}', b'{"version": 1, "shard_id": "s"}'],
)
def test_garbage_raises_corrupt_state(garbage: bytes) -> None:
    with pytest.raises(CorruptState, match="shard 's' at seqno 3"):
        decode_state("s", 3, garbage)


def test_the_same_bytes_decode_once_and_other_bytes_afresh() -> None:
    state = ShardState(shard_id="s", schema=encode_schema(SCHEMA), seqno=3)
    data = encode_state(state)
    first = decode_state("s", 3, data)
    assert decode_state("s", 3, bytearray(data)) is first  # equal bytes, another object
    moved = replace(state, walltime_ms=state.walltime_ms + 1)
    other = decode_state("s", 3, encode_state(moved))  # same seqno, other bytes
    assert other == moved and other is not first
    corrupt = data.replace(b'"seqno":3', b'"seqno":"3"')
    for _ in range(2):  # an error is raised again, never kept as a state
        with pytest.raises(CorruptState, match="shard 's' at seqno 3"):
            decode_state("s", 3, corrupt)


def test_state_of_another_shard_is_corrupt() -> None:
    data = encode_state(ShardState(shard_id="other", schema=encode_schema(SCHEMA), seqno=3))
    with pytest.raises(CorruptState, match="claims to be shard 'other'"):
        decode_state("s", 3, data)


def _one_part_state(part: dict[str, Any]) -> bytes:
    """A stored document with one batch [0, 10) holding ``part`` (a JSON part)."""
    state = ShardState(
        shard_id="s",
        schema=encode_schema(SCHEMA),
        seqno=3,
        upper=Frontier(10),
        batches=(HollowBatch(Description(Frontier(0), Frontier(10))),),
    )
    doc = state.to_json()
    doc["batches"][0]["parts"] = [part]
    return json.dumps(doc).encode()


PART = {"key": "s/w/b/part-0.parquet", "size": 10, "rows": 4, "ts_min": 2, "ts_max": 7}


def test_part_without_times_decodes_unchanged() -> None:
    """A state written before parts recorded their times decodes, and encodes back as it was."""
    state = decode_state("s", 3, _one_part_state(PART))
    [part] = state.batches[0].parts
    assert part == PartMeta("s/w/b/part-0.parquet", 10, 4, 2, 7, None, None)
    assert part.to_json() == PART


def test_part_times_round_trip() -> None:
    state = decode_state("s", 3, _one_part_state({**PART, "times": [2, 3, 7]}))
    [part] = state.batches[0].parts
    assert part.times == (2, 3, 7)
    assert decode_state("s", 3, encode_state(state)) == state


@pytest.mark.parametrize(
    ("times", "problem"),
    [
        ([3, 2, 7], "ascending and distinct"),
        ([2, 2, 7], "ascending and distinct"),
        ([1, 7], r"not within \[ts_min, ts_max\] = \[2, 7\]"),
        ([2, 8], r"not within \[ts_min, ts_max\] = \[2, 7\]"),
        ([2, 3, 4, 5, 7], "5 times for 4 rows"),
        ([], "0 times for 4 rows"),
        ([2, "3"], "list of integers"),
        ([2, True], "list of integers"),
        ([2.0, 7], "list of integers"),
        ({"2": 7}, "list of integers"),
    ],
)
def test_bad_part_times_are_corrupt(times: Any, problem: str) -> None:
    with pytest.raises(CorruptState, match=f"shard 's' at seqno 3.*{problem}"):
        decode_state("s", 3, _one_part_state({**PART, "times": times}))


def test_part_times_need_bounds() -> None:
    with pytest.raises(CorruptState, match="not within"):
        decode_state("s", 3, _one_part_state({**PART, "ts_min": None, "times": [2, 7]}))


@pytest.mark.parametrize(
    ("since", "upper"),
    [(Frontier(0), Frontier(0)), (Frontier(9), Frontier(10)), (Frontier(9), Frontier.empty())],
)
def test_a_since_at_most_upper_minus_one_decodes(since: Frontier, upper: Frontier) -> None:
    batches = () if upper == Frontier(0) else (HollowBatch(Description(Frontier(0), upper)),)
    state = ShardState("s", encode_schema(SCHEMA), 3, since, upper, batches)
    assert decode_state("s", 3, encode_state(state)) == state


@pytest.mark.parametrize(
    ("since", "upper"),
    [(Frontier(1), Frontier(0)), (Frontier(10), Frontier(10)), (Frontier.empty(), Frontier(10))],
)
def test_a_since_beyond_upper_minus_one_is_corrupt(since: Frontier, upper: Frontier) -> None:
    """An open shard is readable at upper - 1 (state invariant 1)."""
    batches = () if upper == Frontier(0) else (HollowBatch(Description(Frontier(0), upper)),)
    state = ShardState("s", encode_schema(SCHEMA), 3, since, upper, batches)
    with pytest.raises(CorruptState, match=f"shard 's' at seqno 3.*since {re.escape(str(since))}"):
        decode_state("s", 3, encode_state(state))


def test_a_part_of_another_shard_is_corrupt() -> None:
    """GC deletes by the shard's prefix: a part key elsewhere is not this shard's."""
    with pytest.raises(CorruptState, match=r"'t/w/b/part-0\.parquet' is not under 's/'"):
        decode_state("s", 3, _one_part_state({**PART, "key": "t/w/b/part-0.parquet"}))


def _versions(shard: str, parts: list[dict[str, Any]], seqno: int) -> bytes:
    """A stored document of ``shard`` at ``seqno``: one batch per part, [i, i + 1)."""
    n = len(parts)
    state = ShardState(
        shard_id=shard,
        schema=encode_schema(SCHEMA),
        seqno=seqno,
        upper=Frontier(n),
        batches=tuple(HollowBatch(Description(Frontier(i), Frontier(i + 1))) for i in range(n)),
    )
    doc = state.to_json()
    for b, part in zip(doc["batches"], parts, strict=True):
        b["parts"] = [part]
    return json.dumps(doc, sort_keys=True).encode()


def _part(shard: str, i: int, rows: int = 1) -> dict[str, Any]:
    return {"key": f"{shard}/w/b{i}/part-0.parquet", "size": 10, "rows": rows, "ts_min": i}


def test_a_batch_stored_as_before_is_not_decoded_again() -> None:
    parts = [_part("memo", i) for i in range(3)]
    first = decode_state("memo", 1, _versions("memo", parts, 1))
    parts[2] = _part("memo", 2, rows=2)  # the last batch changed, under the same part key
    second = decode_state("memo", 2, _versions("memo", parts, 2))
    assert second.batches[0] is first.batches[0] and second.batches[1] is first.batches[1]
    assert second.batches[2] is not first.batches[2]
    assert second.batches[2].parts[0].num_rows == 2


@pytest.mark.parametrize("bad", [True, 1.0, -1, "1"])
def test_a_batch_known_but_stored_otherwise_is_decoded_and_checked(bad: Any) -> None:
    shard = f"memo-{type(bad).__name__}-{bad!r}".replace(".", "_").replace("'", "")
    parts = [_part(shard, i) for i in range(2)]
    decode_state(shard, 1, _versions(shard, parts, 1))
    parts[1] = {**parts[1], "rows": bad}  # equal to 1 as a Python value for True and 1.0
    with pytest.raises(CorruptState, match=f"shard '{shard}' at seqno 2"):
        decode_state(shard, 2, _versions(shard, parts, 2))
