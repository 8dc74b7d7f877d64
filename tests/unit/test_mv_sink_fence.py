"""Deploy generations of one view: an older one never appends after a newer took over.

The takeover (the newer generation's promotion) may land at any moment of the
older one's tick, also just before its append: the append itself is fenced by
the deploy token, in the same compare-and-set (no Spark).
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.test_mv_sink_faults import Identity, check_every_time, setup, sink, write

from timeshard import Frontier


@pytest.mark.parametrize("background_io", [False, True])
def test_a_promotion_just_before_the_older_generations_append_fences_it(
    background_io: bool,
) -> None:
    client, writer = setup()
    upper = write(writer, 0, 3)
    old = sink(client, Identity(client, "inp"), background_io=background_io, generation=0)
    old.run_until(Frontier(upper))
    new = sink(client, Identity(client, "inp"), background_io=False, generation=1, read_only=True)
    upper = write(writer, upper, 2)
    assert old._writer is not None
    append = old._writer.compare_and_append_batch

    def promoted_first(*args: Any, **kw: Any) -> Any:
        new.promote()  # the newer deployment takes over as the older one appends
        return append(*args, **kw)

    old._writer.compare_and_append_batch = promoted_first  # type: ignore[method-assign]
    before = client.state("v").upper
    assert old.step() is not None  # minted, and (maybe in the background) appending
    old._collect_inflight()
    assert client.state("v").upper == before  # nothing of generation 0 after the takeover
    assert old.read_only and old.last_error is None and old.stats.failures == 0
    assert not new.read_only
    old.step()  # still nothing
    assert client.state("v").upper == before
    new.run_until(Frontier(upper))
    check_every_time(client, 0, upper)
    old.close()
    new.close()
