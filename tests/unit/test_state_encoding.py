"""The stored state document: round trips, versioning, corrupt input."""

from __future__ import annotations

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import given

from timeshard import CorruptState, Description, Frontier
from timeshard.persist._internal.parts import PartMeta
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
parts = st.builds(
    PartMeta,
    ids.map(lambda s: f"s/w/{s}/part-0.parquet"),
    times,
    times,
    st.none() | times,
    st.none() | times,
)


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
    return ShardState(
        shard_id="s",
        schema=encode_schema(SCHEMA),
        seqno=draw(st.integers(0, 1000)),
        since=draw(fronts),
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


def test_state_of_another_shard_is_corrupt() -> None:
    data = encode_state(ShardState(shard_id="other", schema=encode_schema(SCHEMA), seqno=3))
    with pytest.raises(CorruptState, match="claims to be shard 'other'"):
        decode_state("s", 3, data)
