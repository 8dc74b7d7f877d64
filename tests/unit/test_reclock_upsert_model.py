"""Reclock plus upsert against a model (hypothesis).

A command stream (key, value or delete, by offset) is bound to timestamps at
random tick boundaries through the remap shard, reclocked, and applied by the
feedback upsert, with restarts of both. At every time ``t`` the output must
hold the last value per key among the commands reclocked to ``t`` or before.
"""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pyarrow as pa
from hypothesis import HealthCheck, given, settings

from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient, PersistConfig
from timeshard.storage import FeedbackUpsert, Remap, UpsertCommand

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stream=st.lists(
        st.tuples(st.sampled_from("abc"), st.one_of(st.none(), st.integers(0, 9))),
        min_size=1,
        max_size=30,
    ),
    ticks=st.lists(
        st.tuples(st.integers(0, 6), st.integers(1, 3), st.booleans()), min_size=1, max_size=10
    ),
)
def test_reclocked_upsert_is_last_value_per_key(
    stream: list[tuple[str, Any]], ticks: list[tuple[int, int, bool]]
) -> None:
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()), PersistConfig(backoff_ms=0.0))
    hold = client.open_leased_reader("out", SCHEMA)
    remap = Remap(client, "out.remap")
    upsert = FeedbackUpsert(client, "out", SCHEMA, ["k"])
    offset, now = 0, 0
    for advance, gap, restart in [*ticks, (len(stream), 1, False)]:
        if restart:  # a restart: fresh operators, state from the shards
            remap, upsert = Remap(client, "out.remap"), FeedbackUpsert(client, "out", SCHEMA, ["k"])
        offset = min(offset + advance, len(stream))
        now += gap
        remap.mint(now, {"0": offset})
        out_upper = upsert.upper.time or 0
        start = remap.resume_frontier(upsert.upper).get("0", 0)
        end = remap.frontier_at((remap.upper.time or 1) - 1).get("0", 0)
        commands = []
        for o in range(start, end):
            t = remap.reclock("0", o)
            assert t is not None and t >= out_upper, (o, t, out_upper)
            k, v = stream[o]
            commands.append(UpsertCommand((k,), None if v is None else (v,), t, (o,)))
        upsert.apply(commands, remap.upper.time or 0)
    assert remap.frontier_at(now) == {"0": len(stream)}
    for at in range(now + 1):
        want: dict[str, int] = {}
        for o, (k, v) in enumerate(stream):
            t = remap.reclock("0", o)
            assert t is not None
            if t <= at:
                if v is None:
                    want.pop(k, None)
                else:
                    want[k] = v
        rows = hold.snapshot(at).to_pylist()
        assert all(r["_diff"] == 1 for r in rows)
        assert {r["k"]: r["v"] for r in rows} == want, at
