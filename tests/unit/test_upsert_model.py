"""The feedback upsert against a model (hypothesis): last value per key at every time.

Commands of two files arrive with random reclocked times, at positions
``(file, offset)`` whose offsets repeat across the files; they are applied in
random chunks by two instances that race and restart, one of them given the
commands in reverse. The output at every time ``t`` must hold, per key, the
last command (by time, then position: file name, then offset) at or before
``t``: its value, nothing for a delete, an err row for an error.
"""

from __future__ import annotations

import re
from typing import Any

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

from timeshard.errors import InvalidUsage
from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient, PersistConfig
from timeshard.storage import FeedbackUpsert, UpsertCommand

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])

commands = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.one_of(st.integers(0, 9), st.none(), st.just("error")),
        st.integers(0, 2),  # time step after the previous command
        st.sampled_from(["x.jsonl", "y.jsonl"]),  # the file it is a line of
    ),
    max_size=30,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    commands,
    st.lists(
        st.tuples(st.integers(0, 1), st.integers(1, 5), st.booleans()), min_size=1, max_size=12
    ),
)
def test_upsert_is_last_value_per_key(
    raw: list[tuple[str, Any, int, str]], schedule: list[tuple[int, int, bool]]
) -> None:
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()), PersistConfig(backoff_ms=0.0))
    hold = client.open_leased_reader("out", SCHEMA)
    cmds, t, offsets = [], 0, {"x.jsonl": 0, "y.jsonl": 0}
    for key, value, step, name in raw:
        t += step
        place = (name, offsets[name])
        offsets[name] += 10
        if value == "error":
            cmds.append(UpsertCommand((key,), None, t, place, error=f"bad value @{place}"))
        else:
            cmds.append(UpsertCommand((key,), None if value is None else (value,), t, place))
    final_upper = t + 1
    instances = [FeedbackUpsert(client, "out", SCHEMA, ["k"]) for _ in range(2)]
    input_upper = 0
    for who, advance, restart in schedule:
        if restart:
            instances[who] = FeedbackUpsert(client, "out", SCHEMA, ["k"])
        input_upper = min(input_upper + advance, final_upper)
        instances[who].apply(cmds, input_upper)
        instances[1 - who].apply(cmds[::-1], input_upper)  # the other races, in reverse
    while (instances[0].upper.time or 0) < final_upper:
        instances[0].apply(cmds, final_upper)
    for at in range(final_upper):
        want: dict[str, tuple[Any, Any]] = {}
        for c in sorted((c for c in cmds if c.time <= at), key=lambda c: (c.time, c.order)):
            if c.error is not None:
                want[c.key[0]] = (None, c.error)
            elif c.value is None:
                want.pop(c.key[0], None)
            else:
                want[c.key[0]] = (c.value[0], None)
        rows = hold.snapshot(at).to_pylist()
        assert all(r["_diff"] == 1 for r in rows), rows
        got = {r["k"]: (r["v"], r["_err"]) for r in rows}
        assert got == want, (at, rows)


def test_two_different_commands_at_one_position_are_refused_in_any_order() -> None:
    """Whether they win or not (a tie below the winner was refused only if it came first)."""
    schema = pa.schema([("k", pa.string()), ("v", pa.int64())])
    a, b = (UpsertCommand(("a",), (v,), 0, (7,)) for v in (1, 2))
    later = UpsertCommand(("a",), (3,), 0, (8,))
    for commands in ([a, b], [b, a], [a, b, later], [later, a, b]):
        client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
        upsert = FeedbackUpsert(client, "out", schema, ["k"])
        with pytest.raises(InvalidUsage, match=r"two different upsert commands at one position"):
            upsert.apply(commands, 1)


@pytest.mark.parametrize(
    ("time", "input_upper", "named"),
    [(1.5, 3, "1.5"), (True, 3, "True"), (-1, 3, "-1"), (1, "3", "'3'"), (1, 2.5, "2.5")],
)
def test_a_time_that_is_no_timestamp_is_refused(
    time: object, input_upper: object, named: str
) -> None:
    """A command at 1.5 was written at 1 (Arrow truncated it), one at True failed in Arrow,
    an input upper '3' with a TypeError: InvalidUsage naming the value, nothing written."""
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    upsert = FeedbackUpsert(client, "out", SCHEMA, ["k"])
    with pytest.raises(InvalidUsage, match=re.escape(named)):
        upsert.apply([UpsertCommand(("a",), (1,), time, (0,))], input_upper)  # type: ignore[arg-type]
    assert client.state("out").upper.time == 0
