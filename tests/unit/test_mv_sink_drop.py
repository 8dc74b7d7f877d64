"""A view dropped by one replica while another, read-only, is promoted (no Spark).

Dropping a view releases its holds and closes its shard. A standby promoted
after that, or while it happens, must not register them again: nothing would
ever move or release them, and the inputs could never compact.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.test_mv_sink_faults import Identity, setup, sink, write

from timeshard import Frontier
from timeshard.errors import InvalidUsage
from timeshard.persist.holds import RETAIN_READER, view_hold_id


def test_promoting_a_standby_of_a_dropped_view_is_refused_and_holds_nothing() -> None:
    client, writer = setup()
    upper = write(writer, 0, 3)
    a = sink(client, Identity(client, "inp"), background_io=False)
    a.run_until(Frontier(upper))
    b = sink(client, Identity(client, "inp"), background_io=False, read_only=True)
    b.step()
    a.drop()
    client.close_shard("v")
    with pytest.raises(InvalidUsage, match="closed"):
        b.promote()
    assert b.read_only
    b.step()
    b.close()
    assert view_hold_id("v") not in client.state("inp").critical_readers
    assert set(client.state("v").critical_readers) == {"test"}


def test_a_drop_racing_the_promotion_releases_what_the_promotion_registered() -> None:
    client, writer = setup()
    upper = write(writer, 0, 3)
    a = sink(client, Identity(client, "inp"), background_io=False, retain_history_ms=5)
    a.run_until(Frontier(upper))
    b = sink(
        client, Identity(client, "inp"), background_io=False, read_only=True, retain_history_ms=5
    )
    register = client.open_critical_since

    def drop_first(shard_id: str, reader_id: str, *args: Any, **kw: Any) -> Any:
        if reader_id == "deploy":  # the drop lands after the promotion found the shard open
            client.open_critical_since = register  # type: ignore[method-assign]
            a.drop()
            client.close_shard("v")
        return register(shard_id, reader_id, *args, **kw)

    client.open_critical_since = drop_first  # type: ignore[method-assign]
    with pytest.raises(InvalidUsage, match="closed"):
        b.promote()
    assert b.read_only
    b.close()
    assert view_hold_id("v") not in client.state("inp").critical_readers
    readers = client.state("v").critical_readers
    assert "deploy" not in readers and RETAIN_READER not in readers, sorted(readers)
    assert not client.state("v").writers
