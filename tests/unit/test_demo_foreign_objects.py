"""``timeshard demo`` never deletes objects another command wrote to its location.

The demo and ``timeshard run`` both default to ``.timeshard``: after a demo,
a run there writes its own objects beside the demo's, and a demo run again
would delete them with its own. It refuses, naming the location and such an
object, and leaves everything as it is.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from timeshard import InvalidUsage
from timeshard.cli.demo import demo_shards, fresh_location
from timeshard.location import Location
from timeshard.persist import PersistClient

SCHEMA = pa.schema([("id", pa.int64())])


def test_a_demo_location_with_another_command_s_objects_is_refused(tmp_path: Path) -> None:
    client = PersistClient(fresh_location(tmp_path))
    for shard in ("kv", "auction.bids", "my_orders"):
        client.open_writer(shard, SCHEMA).expire()
    with pytest.raises(InvalidUsage, match=r"'my_orders'") as e:
        fresh_location(tmp_path)
    assert str(tmp_path) in str(e.value)
    shards = PersistClient(Location.embedded(tmp_path)).list_shards()
    assert sorted(shards) == ["auction.bids", "kv", "my_orders"]


def test_a_demo_location_with_the_demo_s_objects_only_is_made_afresh(tmp_path: Path) -> None:
    client = PersistClient(fresh_location(tmp_path))
    for shard in sorted(demo_shards()):
        client.open_writer(shard, SCHEMA).expire()
    assert PersistClient(fresh_location(tmp_path)).list_shards() == []


def test_the_demo_s_shards() -> None:
    assert {"kv", "kv.remap", "auction.bids", "auction.remap", "winning_bids"} <= demo_shards()
