"""``timeshard drop`` of a view while a read-only deployment of it runs (no Spark).

A read-only deployment writes nothing to consensus -- no writer, no leased reader, no
hold -- so drop cannot see it, and cannot refuse as it refuses a view some process
runs. It fences it instead: the view's shard closes before its holds go, so the
standby can never be promoted over the dropped view, and holds nothing afterwards.
"""

from __future__ import annotations

import pytest
from tests.unit.test_mv_sink_faults import Identity, setup, sink, write

from timeshard import Frontier
from timeshard.catalog import record_view
from timeshard.compute.view import ViewDefinition
from timeshard.controller import drop_object
from timeshard.errors import InvalidUsage
from timeshard.persist.holds import view_hold_id


def test_drop_fences_a_read_only_deployment_it_cannot_see() -> None:
    client, writer = setup()
    upper = write(writer, 0, 3)
    old = sink(client, Identity(client, "inp"), background_io=False)
    old.run_until(Frontier(upper))
    old.close()
    record_view(client, ViewDefinition("v", {"inp": "inp"}, "SELECT k FROM inp"), 0)
    standby = sink(client, Identity(client, "inp"), background_io=False, read_only=True)
    standby.step()
    state = client.state("v")
    assert not state.writers and not state.leased_readers  # nothing to see

    assert [d.name for d in drop_object(client, "v")] == ["v"]
    assert client.state("v").upper.is_empty()
    with pytest.raises(InvalidUsage, match="closed"):
        standby.promote()
    write(writer, upper, 2)
    standby.step()
    standby.close()
    assert standby.read_only
    assert set(client.state("inp").critical_readers) == {"test"}  # the input compacts again
    assert set(client.state("v").critical_readers) == {"test"}
    assert not client.state("v").writers
    assert view_hold_id("v") not in client.state("inp").critical_readers
