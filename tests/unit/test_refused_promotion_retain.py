"""A promotion refused because the view completed meanwhile changes nothing of the view's:
not its ``deploy`` hold, not its input holds, and not its retained history (no Spark).

A read-only replica declares its own RETAIN HISTORY. Its promotion opens its writer, its
input holds and its retained history, then finds the shard closed: the view is complete
(its inputs closed and another generation's last append closed its shard). The complete
view's holds are the view's, and stay as that generation left them.
"""

from __future__ import annotations

import pytest
from tests.unit.test_drop_mark_followups import complete_during_promotion
from tests.unit.test_mv_sink_faults import Identity, setup, sink, write

from timeshard import Frontier
from timeshard.errors import InvalidUsage
from timeshard.persist.holds import RETAIN_READER


@pytest.mark.parametrize("replica_retain_ms", [None, 50], ids=["none", "longer"])
def test_a_promotion_refused_as_the_view_completes_keeps_the_views_retained_history(
    replica_retain_ms: int | None,
) -> None:
    """Before: the refused replica's RETAIN HISTORY replaced the complete view's (its token
    swapped to the replica's, or the hold released when the replica declares none)."""
    client, writer = setup()
    upper = write(writer, 0, 3)
    a = sink(client, Identity(client, "inp"), background_io=False, retain_history_ms=5)
    a.run_until(Frontier(upper))
    b = sink(
        client,
        Identity(client, "inp"),
        background_io=False,
        read_only=True,
        retain_history_ms=replica_retain_ms,
    )
    writer.expire()
    client.close_shard("inp")  # the view completes with a's next append
    complete_during_promotion(client, a, "open_writer", "")
    before = client.state("v").critical_readers[RETAIN_READER]
    with pytest.raises(InvalidUsage, match="closed"):
        b.promote()
    state = client.state("v")
    assert state.upper.is_empty()
    retain = state.critical_readers.get(RETAIN_READER)
    assert retain is not None, state.critical_readers
    assert (retain.opaque, retain.since) == ("5", before.since)
    b.close()
    a.close()
