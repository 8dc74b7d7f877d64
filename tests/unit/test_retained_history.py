"""RETAIN HISTORY's hold (``persist.holds.RetainedHistory``)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from timeshard import InvalidUsage
from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient, PersistConfig
from timeshard.persist.holds import RetainedHistory, retained_ms

SCHEMA = pa.schema([("k", pa.string())])


@pytest.mark.parametrize("retain", [True, False, -1, 1.5, "5"])
def test_a_retention_that_is_not_milliseconds_is_refused_naming_it(retain: object) -> None:
    client = PersistClient(
        Location(MemoryBlob(), MemoryConsensus()), PersistConfig(heartbeat_interval_ms=0)
    )
    client.open_writer("s", SCHEMA)
    with pytest.raises(InvalidUsage, match=repr(retain).replace(".", r"\.")):
        RetainedHistory.configure(client, "s", retain)  # type: ignore[arg-type]
    assert retained_ms(client, "s") is None
