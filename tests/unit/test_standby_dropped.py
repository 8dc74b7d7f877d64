"""A read-only replica of a view notices that the view was dropped (no Spark).

The drop closes the view's shard and releases its ``deploy`` hold; a view that is
complete (every input closed) has a closed shard too, and keeps that hold. The
replica tells them apart from the shard's state, which it reads in place of its
sink's tick once the sink saw the shard closed: it writes nothing and reads no more
than a tick did.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.test_mv_sink_faults import Identity, setup, sink, write

from timeshard import Frontier
from timeshard.catalog import record_view
from timeshard.compute.materialized_view import MaterializedView
from timeshard.compute.view import ViewDefinition
from timeshard.controller import drop_object
from timeshard.errors import InvalidUsage
from timeshard.persist import PersistClient

DEFINITION = ViewDefinition("v", {"inp": "inp"}, "SELECT k FROM inp")


class Desired(Identity):
    """The identity, with what a view's desired collection also offers."""

    def use_leases(self) -> None:
        pass

    def close(self) -> None:
        pass


def standby(client: PersistClient) -> MaterializedView:
    desired = Desired(client, "inp")
    s = sink(client, desired, background_io=False, read_only=True)
    return MaterializedView(DEFINITION, s, desired, 1.0)  # type: ignore[arg-type]


def written_view(client: PersistClient, upper: int) -> None:
    """The view written up to ``upper`` by a sink that then stopped, and cataloged."""
    old = sink(client, Identity(client, "inp"), background_io=False)
    old.run_until(Frontier(upper))
    old.close()
    record_view(client, DEFINITION, 0)


def standby_of_a_written_view() -> tuple[PersistClient, Any, int, MaterializedView]:
    """A location whose input ``inp`` holds 3 rows and whose view is written up to them, and
    a standby of the view: the client, the input's writer, its upper and the standby."""
    client, writer = setup()
    upper = write(writer, 0, 3)
    written_view(client, upper)
    return client, writer, upper, standby(client)


def seqnos(client: PersistClient) -> dict[str, int]:
    return {shard: client.state(shard).seqno for shard in client.list_shards()}


def count_heads(client: PersistClient) -> list[int]:
    """Count the consensus head reads from now on (in a one-element list)."""
    consensus: Any = client.location.consensus
    head, n = consensus.head, [0]

    def counted(key: str) -> Any:
        n[0] += 1
        return head(key)

    consensus.head = counted
    return n


def test_a_standby_stops_with_dropped_once_the_view_is_dropped() -> None:
    """It stepped on for ever, its last_error None and no status saying why."""
    client, writer, upper, view = standby_of_a_written_view()
    view.step()
    assert view.sink.last_error is None

    drop_object(client, "v")
    write(writer, upper, 2)
    before = seqnos(client)
    view.step()  # its sink sees the shard closed
    view.step()  # the shard's state says it was dropped
    assert view.sink.last_error is not None and "'v' was dropped" in view.sink.last_error
    assert view.dropped is not None and "'v' was dropped" in view.dropped
    assert view.status == ("dropped", view.dropped)
    ticks = view.sink.stats.ticks
    view.step()
    view.run_for(60.0)  # returns at once: nothing is stepped any more
    assert view.sink.stats.ticks == ticks
    assert seqnos(client) == before  # a read-only replica writes nothing
    with pytest.raises(InvalidUsage, match="closed"):
        view.promote()
    view.close()


def test_a_standby_of_a_complete_view_runs_until_the_view_is_dropped() -> None:
    """An empty upper alone is no drop: every input closed, and the view is complete."""
    client, writer = setup()
    upper = write(writer, 0, 3)
    writer.expire()
    client.close_shard("inp")
    written_view(client, upper)
    view = standby(client)
    assert client.state("v").upper.is_empty()  # complete
    for _ in range(3):
        view.step()
    assert view.sink.last_error is None
    assert view.dropped is None and view.status == ("running", None)

    drop_object(client, "v")
    view.step()
    assert view.sink.last_error is not None and "dropped" in view.sink.last_error
    assert view.dropped is not None
    assert view.status[0] == "dropped"
    view.close()


def test_a_standby_on_a_closed_shard_reads_no_more_per_tick_than_a_tick_did() -> None:
    client, writer, _upper, view = standby_of_a_written_view()
    view.step()
    heads = count_heads(client)
    view.step()
    open_tick = heads[0]

    writer.expire()
    client.close_shard("inp")  # the view completes: its shard closes, the deploy hold stays
    closer = sink(client, Identity(client, "inp"), background_io=False)
    for _ in range(3):
        closer.step()
    closer.close()
    assert client.state("v").upper.is_empty()
    view.step()  # its sink sees the shard closed
    view.step()  # it opens a reader of the shard (once)
    heads[0] = 0
    view.step()
    view.step()
    assert heads[0] == 2 <= 2 * open_tick, (heads[0], open_tick)  # one read a tick
    assert view.dropped is None
    view.close()
