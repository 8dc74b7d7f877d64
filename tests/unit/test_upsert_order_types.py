"""Orders of one key and time that Python cannot compare are a caller's mistake.

A source's positions have one type per column; two commands of one key and time
whose orders do not compare (an int and a str, a value and None, a tuple and an
int), also in a column after the one that decides, or whose orders differ in
length, raise InvalidUsage naming both orders, and nothing is written, whatever
the order of the commands.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from timeshard.errors import InvalidUsage
from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient, PersistConfig
from timeshard.storage import FeedbackUpsert, UpsertCommand

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ((1,), ("x",)),
        ((1,), (None,)),
        (("f", 2), ("f", "x")),
        ((1,), 5),
        # another type in a column after the one that decides, or another length
        (("f", 2), ("g", "x")),
        ((1, "a"), (2, 3)),
        ((1, 5), (2, None)),
        ((1,), (2.0,)),
        ((1,), (2, "x")),
    ],
)
@pytest.mark.parametrize("swapped", [False, True])
def test_orders_that_do_not_compare_are_refused(first: Any, second: Any, swapped: bool) -> None:
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()), PersistConfig())
    upsert = FeedbackUpsert(client, "s", SCHEMA, ["k"])
    cmds = [UpsertCommand(("a",), (1,), 0, first), UpsertCommand(("a",), (2,), 0, second)]
    if swapped:
        cmds.reverse()
    with pytest.raises(InvalidUsage) as e:
        upsert.apply(cmds, 1)
    assert repr(first) in str(e.value) and repr(second) in str(e.value)
    assert client.state("s").upper.time == 0
    upsert.close()


def test_orders_of_other_keys_need_not_compare() -> None:
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()), PersistConfig())
    upsert = FeedbackUpsert(client, "s", SCHEMA, ["k"])
    cmds = [UpsertCommand(("a",), (1,), 0, (1,)), UpsertCommand(("b",), (2,), 0, ("x",))]
    upsert.apply(cmds, 1)
    assert client.state("s").upper.time == 1
    upsert.close()


@pytest.mark.parametrize("command", [{"k": "a", "_ts": 0}, ("a", 1, 0, (1,)), None])
def test_a_command_that_is_no_upsert_command_is_refused(command: Any) -> None:
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()), PersistConfig())
    upsert = FeedbackUpsert(client, "s", SCHEMA, ["k"])
    good = UpsertCommand(("b",), (2,), 0, (1,))
    with pytest.raises(InvalidUsage, match="must be UpsertCommand, got") as e:
        upsert.apply([good, command], 1)
    assert repr(command) in str(e.value)
    assert client.state("s").upper.time == 0
    upsert.close()
