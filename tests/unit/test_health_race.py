"""Two health writers in one process race on the status shard (a source and a view stall at once).

The loser of a compare-and-append must not move its since hold past the
shard's upper: a since beyond the upper leaves no readable time, and every
later status read and report fails.
"""

from __future__ import annotations

from typing import Any

from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient
from timeshard.storage.health import STATUS_SHARD, Health, latest_health


def test_the_loser_of_a_race_keeps_the_status_shard_readable() -> None:
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    now = {"source": 1_000, "view": 1_000}
    source = Health(client, clock=lambda: now["source"])
    view = Health(client, clock=lambda: now["view"])
    view.report("v", "running")  # the shard exists, with a time to read
    now["source"], now["view"] = 2_000, 3_000  # the view reads its clock after the source

    writer: Any = view._upsert._writer
    append = writer.compare_and_append
    raced: list[bool] = []

    def source_appends_first(*args: Any, **kwargs: Any) -> Any:
        if not raced:  # between the view's read of the upper and its append
            raced.append(True)
            source.report("s", "stalled", "storage down")
        return append(*args, **kwargs)

    writer.compare_and_append = source_appends_first
    view.report("v", "stalled", "storage down")  # lost once, then retried and landed

    source.close()  # its hold gone (closed, or its lease ran out): the view's is the since
    state = client.state(STATUS_SHARD)
    assert state.upper.time is not None and state.since.time is not None
    assert state.since.time < state.upper.time, (state.since, state.upper)
    latest = latest_health(client)
    assert latest["v"]["status"] == "stalled" and latest["s"]["status"] == "stalled", latest
    view.report("v", "running")  # and the view still reports
    assert latest_health(client)["v"]["status"] == "running"
