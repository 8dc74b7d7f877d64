"""``timeshard status`` shows a view whose drop died after its release as a dropped view
(no Spark).

A drop marks the view's ``deploy`` hold, closes its shard, releases its holds (the
``deploy`` hold last) and then records its health as ``dropped``. A drop that dies, or
whose health write fails, after the release leaves a closed shard with no ``deploy``
hold and no ``dropped`` health: what tells it is a dropped view is durable all the
same -- the catalog records a view of that name, and its shard is closed without the
hold a complete view keeps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
from tests.unit.test_drop_crash_standby import cli_drop, view_drop
from tests.unit.test_mv_sink_faults import setup, write
from tests.unit.test_standby_dropped import written_view

from timeshard.catalog import Catalog
from timeshard.compute.mv_sink import DEPLOY_READER, drop_view
from timeshard.persist import PersistClient
from timeshard.status import status_rows
from timeshard.storage.health import Health


class Crash(Exception):
    """The drop's process dies here."""


def rows(client: PersistClient) -> dict[str, dict[str, Any]]:
    return {r["object"]: r for r in status_rows(client)}


def a_view_that_ran(client: PersistClient) -> None:
    """The view ``v`` over ``inp``, written, cataloged, and last reported ``running``."""
    upper = write(client.open_writer("inp"), 3, 1)
    written_view(client, upper)
    health = Health(client)
    health.report("v", "running")
    health.close()


@pytest.mark.parametrize("dropper", [view_drop, cli_drop], ids=["view", "cli"])
def test_a_view_whose_drop_died_after_its_release_shows_as_a_dropped_view(
    dropper: Callable[[PersistClient], Callable[[], None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: its row was kind ``shard``, status ``stopped`` (its last health, ``running``,
    on a shard without writers), with nothing saying it was a view, let alone dropped."""
    client, writer = setup()
    write(writer, 0, 3)
    a_view_that_ran(client)
    drop = dropper(client)

    def crash(self: Health, obj: str, status: str, error: str | None) -> None:
        raise Crash("the drop dies before it records its health")

    monkeypatch.setattr(Health, "_record", crash)
    with contextlib.suppress(Crash):  # the view's own drop raises it; `timeshard drop` logs it
        drop()
    monkeypatch.undo()
    state = client.state("v")
    assert state.upper.is_empty() and DEPLOY_READER not in state.critical_readers

    row = rows(client)["v"]
    assert (row["kind"], row["status"], row["error"]) == ("view", "dropped", None), row


def test_a_served_view_whose_drop_died_after_its_release_says_to_drop_it_again_there() -> None:
    """A DROP of timeshard serve forgets the view's statement last: a drop that died after
    the release still has it, and the server finishes the drop."""
    client, writer = setup()
    write(writer, 0, 3)
    a_view_that_ran(client)
    sql = "CREATE MATERIALIZED VIEW v AS SELECT * FROM inp"
    Catalog(client, lambda: 1).record_statement("v", {"sql": sql, "seq": 1, "object": "view"})
    drop_view(client, "v", ["inp"])  # the DROP dies here, before its health and forget

    row = rows(client)["v"]
    assert (row["kind"], row["status"]) == ("view", "dropped"), row
    assert "timeshard serve" in row["error"] and "did not finish" in row["error"], row


def test_a_closed_shard_that_is_no_view_still_shows_as_a_shard() -> None:
    client, writer = setup()
    write(writer, 0, 3)
    a_view_that_ran(client)
    writer.expire()
    client.close_shard("inp")

    row = rows(client)["inp"]
    assert (row["kind"], row["status"], row["error"]) == ("shard", None, None), row
    assert rows(client)["v"]["kind"] == "view"  # its deploy hold: a view that is not dropped
