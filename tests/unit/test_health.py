"""Health: what a report writes, with several reporters of one object."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from timeshard.compute.materialized_view import MaterializedView
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.health import STATUS_SHARD, Health, latest_health


@pytest.fixture
def client(tmp_path: Path) -> PersistClient:
    return PersistClient(Location.embedded(tmp_path / "loc"))


def status_upper(client: PersistClient) -> int | None:
    return client.state(STATUS_SHARD).upper.time


def test_a_report_repeated_after_another_reporters_is_written(client: PersistClient) -> None:
    """A replica's running was skipped as unchanged after another replica wrote stalled (and
    exited): the status showed stalled for ever."""
    a = Health(client, lambda: 10**12)
    b = Health(client, lambda: 10**12)
    a.report("src", "running")
    b.report("src", "stalled", "IOError: boom")
    b.close()
    a.report("src", "running")
    assert latest_health(client)["src"]["status"] == "running"
    assert latest_health(client)["src"]["error"] is None


def test_a_report_repeated_writes_nothing_while_its_row_is_the_latest(
    client: PersistClient,
) -> None:
    a = Health(client, lambda: 10**12)
    b = Health(client, lambda: 10**12)
    a.report("src", "running")
    upper = status_upper(client)
    a.report("src", "running")
    assert status_upper(client) == upper
    b.report("other", "running")  # another object's row: src's is still a's
    upper = status_upper(client)
    a.report("src", "running")
    a.report("src", "running")
    assert status_upper(client) == upper
    a.report("src", "stalled", "x")  # a change is written
    assert status_upper(client) != upper
    assert latest_health(client)["src"]["status"] == "stalled"


def test_a_views_unchanged_health_is_written_again_after_another_replicas(
    client: PersistClient,
) -> None:
    """The view cached its last status and never called report again while it stayed."""
    sink = SimpleNamespace(read_only=False, last_error=None, client=client)
    definition: Any = SimpleNamespace(name="v")
    view = MaterializedView(definition, sink, SimpleNamespace(), 1.0)  # type: ignore[arg-type]
    view._report_health()
    other = Health(client, lambda: 10**15)
    other.report("v", "stalled", "Determinate: blob down")  # another replica, then it exits
    other.close()
    view._report_health()
    assert latest_health(client)["v"]["status"] == "running"
    upper = status_upper(client)
    view._report_health()
    assert status_upper(client) == upper
    assert view._health is not None
    view._health.close()
