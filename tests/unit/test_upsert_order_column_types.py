"""Each position of an order has one type across the commands of one key and time.

An order is a tuple of columns (a source's ``(partition, offset)``); a column
has one type. Two commands of one key and time whose orders differ in the type
of some column, or in their number of columns, are a caller's mistake
(InvalidUsage naming both orders, nothing written), also when an earlier
column already decides the comparison, whatever the order of the commands (two
commands: test_upsert_order_types.py).
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from timeshard.errors import InvalidUsage
from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient, PersistConfig
from timeshard.storage import FeedbackUpsert, UpsertCommand

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])


def test_a_third_command_of_another_column_type_is_refused() -> None:
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()), PersistConfig())
    upsert = FeedbackUpsert(client, "s", SCHEMA, ["k"])
    cmds = [
        UpsertCommand(("a",), (1,), 0, ("f", 2)),
        UpsertCommand(("a",), (2,), 0, ("g", 1)),
        UpsertCommand(("a",), (3,), 0, ("e", "x")),
    ]
    with pytest.raises(InvalidUsage, match="'x'"):
        upsert.apply(cmds, 1)
    assert client.state("s").upper.time == 0
    upsert.close()


def test_orders_of_one_type_per_column_still_rank() -> None:
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()), PersistConfig())
    upsert = FeedbackUpsert(client, "s", SCHEMA, ["k"])
    cmds = [
        UpsertCommand(("a",), (1,), 0, ("g", 1)),
        UpsertCommand(("a",), (2,), 0, ("f", 9)),
        UpsertCommand(("a",), (3,), 0, ("g", 0)),
    ]
    upsert.apply(cmds, 1)
    rows = client.open_leased_reader("s", SCHEMA).snapshot(0).to_pylist()
    assert [(r["k"], r["v"], r["_diff"]) for r in rows] == [("a", 1, 1)]
    upsert.close()
