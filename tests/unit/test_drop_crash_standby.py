"""A view's drop that crashes part way is a drop to a standby, and a re-run finishes it.

The drop closes the view's shard and releases its holds, the ``deploy`` hold among them;
a standby tells a dropped view from a complete one (whose shard is closed too) by that
hold. So the drop marks the hold as dropped before the shard closes: a crash between
the close and the release leaves a closed shard whose deploy hold says so (no Spark).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest
from tests.unit.test_mv_sink_faults import setup, sink, write
from tests.unit.test_standby_dropped import (
    DEFINITION,
    Desired,
    standby_of_a_written_view,
    written_view,
)

from timeshard.compute.materialized_view import MaterializedView
from timeshard.compute.mv_sink import DEPLOY_READER, DROPPED_OPAQUE, drop_view, mark_dropped
from timeshard.controller import drop_object
from timeshard.errors import InvalidUsage
from timeshard.persist import PersistClient
from timeshard.persist.holds import view_hold_id


class Crash(Exception):
    """The drop's process dies here."""


def crash_releasing_deploy(client: PersistClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Releasing the view's deploy hold crashes (every other release goes through)."""
    release = client.drop_critical_since

    def crashing(shard_id: str, reader_id: str) -> bool:
        if (shard_id, reader_id) == ("v", DEPLOY_READER):
            raise Crash("the drop dies before its deploy hold goes")
        return release(shard_id, reader_id)

    monkeypatch.setattr(client, "drop_critical_since", crashing)


def writing_view(client: PersistClient) -> MaterializedView:
    desired = Desired(client, "inp")
    s = sink(client, desired, background_io=False)
    return MaterializedView(DEFINITION, s, desired, 1.0)  # type: ignore[arg-type]


def assert_standby_sees_the_drop(view: MaterializedView) -> None:
    view.step()  # its sink sees the shard closed
    view.step()  # the shard's state says it was dropped
    assert view.dropped is not None and "'v' was dropped" in view.dropped, view.status
    assert view.status[0] == "dropped"
    with pytest.raises(InvalidUsage, match=r"dropped|closed"):
        view.sink.promote()


def assert_finished(client: PersistClient) -> None:
    assert client.state("v").upper.is_empty()
    assert DEPLOY_READER not in client.state("v").critical_readers
    assert view_hold_id("v") not in client.state("inp").critical_readers


def view_drop(client: PersistClient) -> Callable[[], None]:
    """The drop of a view this process runs (as ``DROP`` in ``timeshard serve``)."""
    return writing_view(client).drop


def cli_drop(client: PersistClient) -> Callable[[], None]:
    """``timeshard drop v`` (no process runs the view)."""

    def drop() -> None:
        drop_object(client, "v")

    return drop


@pytest.mark.parametrize("dropper", [view_drop, cli_drop], ids=["view", "cli"])
def test_a_drop_that_crashes_before_its_deploy_hold_goes_is_a_drop_to_a_standby(
    dropper: Callable[[PersistClient], Callable[[], None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the standby took the closed shard, still held by ``deploy``, for a complete
    view, and ran on (``dropped`` None) until the drop was run again."""
    client, _writer, _upper, view = standby_of_a_written_view()
    view.step()
    assert view.dropped is None
    drop = dropper(client)

    with monkeypatch.context() as m:
        crash_releasing_deploy(client, m)
        with pytest.raises(Crash):
            drop()
    assert client.state("v").upper.is_empty()
    assert DEPLOY_READER in client.state("v").critical_readers  # the crash left it
    assert_standby_sees_the_drop(view)

    drop()  # run again, it finishes the drop
    assert_finished(client)
    view.close()


def test_a_standby_promoted_after_the_drop_began_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The drop's mark lands before the shard closes: a promotion in between is refused
    (it would otherwise register holds on a shard about to close)."""
    client, _writer, _upper, view = standby_of_a_written_view()
    close = client.close_shard

    def promote_then_close(shard_id: str) -> None:
        with pytest.raises(InvalidUsage, match="dropped"):
            view.sink.promote()
        close(shard_id)

    monkeypatch.setattr(client, "close_shard", promote_then_close)
    drop_object(client, "v")
    assert_finished(client)
    assert view.sink.read_only
    view.close()


def test_a_drop_run_again_after_its_release_registers_no_hold_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A drop that got past its release and is run again (it died before recording the drop
    elsewhere) must not register the deploy hold again: if that run died before its own
    release, the hold would linger on the closed shard for good."""
    client, writer = setup()
    upper = write(writer, 0, 3)
    written_view(client, upper)
    drop_view(client, "v", ["inp"])
    assert_finished(client)

    def crash(shard_id: str, reader_id: str) -> bool:
        raise Crash("the drop run again dies before its release")

    monkeypatch.setattr(client, "drop_critical_since", crash)
    with contextlib.suppress(Crash):
        drop_view(client, "v", ["inp"])
    assert DEPLOY_READER not in client.state("v").critical_readers


def test_a_deploy_hold_released_by_another_drop_meanwhile_is_marked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two drops of one view at once: the other's release takes the deploy hold between
    this one's registration and its mark. This one registers it again, marked (before:
    Fenced, 'critical reader ... is gone', out of the drop)."""
    client, writer = setup()
    upper = write(writer, 0, 3)
    written_view(client, upper)
    opened = client.open_critical_since
    raced: list[bool] = []

    def open_then_lose(shard_id: str, reader_id: str, opaque: str) -> object:
        handle = opened(shard_id, reader_id, opaque)
        if reader_id == DEPLOY_READER and not raced:
            raced.append(True)
            client.drop_critical_since(shard_id, reader_id)  # the other drop's release
        return handle

    monkeypatch.setattr(client, "open_critical_since", open_then_lose)
    mark_dropped(client, "v")
    assert raced
    assert client.state("v").critical_readers[DEPLOY_READER].opaque == DROPPED_OPAQUE
