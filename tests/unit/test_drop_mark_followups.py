"""A view's drop that began (its ``deploy`` hold marked) stops its replicas, and the holds
and rows that tell it stay right (no Spark).

A drop marks the view's ``deploy`` hold :data:`~timeshard.compute.mv_sink.DROPPED_OPAQUE`,
closes the view's shard, then releases the holds. A drop cut short between the mark and
the close leaves an open shard whose hold is marked: no generation can be promoted over
it, so it is a drop to every replica of the view, as to ``timeshard serve``.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.test_drop_crash_standby import writing_view
from tests.unit.test_mv_sink_faults import Identity, setup, sink, write
from tests.unit.test_standby_dropped import standby_of_a_written_view, written_view

from timeshard import Frontier
from timeshard.compute.mv_sink import DEPLOY_READER, MvSink, mark_dropped, view_dropped
from timeshard.errors import InvalidUsage
from timeshard.persist import PersistClient
from timeshard.persist.holds import RETAIN_READER, view_hold_id
from timeshard.status import status_rows


def test_a_marked_open_shard_is_a_dropped_view() -> None:
    client, writer = setup()
    upper = write(writer, 0, 3)
    written_view(client, upper)
    assert not view_dropped(client.state("v"))
    mark_dropped(client, "v")  # the drop dies here, before the close
    assert not client.state("v").upper.is_empty()
    assert view_dropped(client.state("v"))


def test_a_standby_stops_with_dropped_when_a_drop_died_between_its_mark_and_the_close() -> None:
    """Before: the standby stepped on for ever against the open, marked shard, running
    and never promotable, with no status saying why."""
    client, writer, upper, view = standby_of_a_written_view()
    view.step()
    assert view.dropped is None

    mark_dropped(client, "v")  # the drop dies here, before the close
    write(writer, upper, 2)
    view.step()  # its sink reads the shard's state: the hold is marked
    assert view.dropped is not None and "'v' was dropped" in view.dropped, view.status
    assert view.status == ("dropped", view.dropped)
    ticks = view.sink.stats.ticks
    view.step()
    assert view.sink.stats.ticks == ticks  # nothing is stepped any more
    view.close()


def test_a_writing_view_fenced_by_a_drop_mark_stops_with_dropped() -> None:
    """Before: the writing generation's sink, fenced by the mark, turned read-only and
    stepped on for ever as a standby of a view that can never be promoted again."""
    client, writer = setup()
    upper = write(writer, 0, 3)
    view = writing_view(client)
    view.sink.run_until(client.state("inp").upper)
    assert not view.sink.read_only

    mark_dropped(client, "v")  # a drop elsewhere dies here, before the close
    written = client.state("v").upper
    write(writer, upper, 2)
    for _ in range(3):
        view.step()
    assert view.sink.read_only
    assert client.state("v").upper == written  # the mark fences its appends
    assert view.dropped is not None and "'v' was dropped" in view.dropped, view.status
    assert view.status[0] == "dropped"
    # Its writer went with it: `timeshard drop v` would take a shard with a live writer for
    # a running view and refuse to finish the drop (review: it was kept until close).
    assert not client.state("v").writers
    view.close()


def complete_during_promotion(
    client: PersistClient, completer: MvSink, hooked: str, reader: str
) -> None:
    """``completer`` writes the view's last batch (its inputs closed: the shard closes)
    when the promotion calls ``client.<hooked>`` (for ``reader``, if it names one)."""
    original = getattr(client, hooked)

    def complete_first(shard_id: str, *args: Any, **kw: Any) -> Any:
        if shard_id == "v" and (not args or args[0] == reader):
            setattr(client, hooked, original)
            while not client.state("v").upper.is_empty():
                completer.step()
        return original(shard_id, *args, **kw)

    setattr(client, hooked, complete_first)


@pytest.mark.parametrize(
    ("generation", "hooked", "reader"),
    [(1, "open_critical_since", DEPLOY_READER), (0, "open_writer", "")],
    ids=["newer-generation-as-it-registers", "same-generation-as-it-opens-its-writer"],
)
def test_a_promotion_racing_the_views_completion_leaves_the_complete_views_holds(
    generation: int, hooked: str, reader: str
) -> None:
    """Before: the refused promotion released the deploy hold (and the view's input holds and
    retained history) by name, so the complete view was taken for dropped."""
    client, writer = setup()
    upper = write(writer, 0, 3)
    a = sink(client, Identity(client, "inp"), background_io=False, retain_history_ms=5)
    a.run_until(Frontier(upper))
    b = sink(
        client,
        Identity(client, "inp"),
        background_io=False,
        read_only=True,
        generation=generation,
        retain_history_ms=5,
    )
    writer.expire()
    client.close_shard("inp")  # the view completes with a's next append
    complete_during_promotion(client, a, hooked, reader)
    with pytest.raises(InvalidUsage, match="closed"):
        b.promote()
    state = client.state("v")
    assert state.upper.is_empty()
    assert not view_dropped(state), state.critical_readers
    assert state.critical_readers[DEPLOY_READER].opaque == "0" * 12  # a's, which completed it
    assert RETAIN_READER in state.critical_readers
    assert view_hold_id("v") in client.state("inp").critical_readers
    b.close()
    a.close()
    assert not client.state("v").writers


@pytest.mark.parametrize("closed", [False, True], ids=["before-the-close", "after-the-close"])
def test_status_shows_a_view_whose_drop_was_cut_short_as_dropped(closed: bool) -> None:
    """Before: its row was a view of generation None, ``running`` as its last health said
    (or ``stopped``), with nothing saying a drop began."""
    client, writer = setup()
    upper = write(writer, 0, 3)
    view = writing_view(client)
    view.sink.run_until(Frontier(upper))
    view.step()  # reports running
    mark_dropped(client, "v")  # the drop dies here, or after the close
    if closed:
        client.close_shard("v")
    row = {r["object"]: r for r in status_rows(client)}["v"]
    assert row["generation"] is None
    assert row["status"] == "dropped", row
    assert "timeshard drop v" in row["error"], row
    view.close()


def test_status_tells_to_drop_a_view_of_timeshard_serve_again_there() -> None:
    """`timeshard drop` refuses a view that timeshard serve created: the hint said to run it."""
    from timeshard.catalog import Catalog

    client, writer = setup()
    upper = write(writer, 0, 3)
    view = writing_view(client)
    view.sink.run_until(Frontier(upper))
    sql = "CREATE MATERIALIZED VIEW v AS SELECT * FROM inp"
    Catalog(client, lambda: 1).record_statement("v", {"sql": sql, "seq": 1, "object": "view"})
    mark_dropped(client, "v")
    row = {r["object"]: r for r in status_rows(client)}["v"]
    assert row["status"] == "dropped"
    assert "timeshard serve" in row["error"] and "timeshard drop" not in row["error"], row
    view.close()
