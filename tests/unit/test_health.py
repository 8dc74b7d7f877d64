"""Health: what a report writes, with several reporters of one object."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from timeshard.compute.materialized_view import MaterializedView
from timeshard.controller import Pipeline
from timeshard.errors import Determinate
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage import health as health_module
from timeshard.storage.health import STATUS_SHARD, Health, latest_health
from timeshard.storage.ingest import Ingestion
from timeshard.storage.sources import CounterGenerator


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


def overtake(health: Health, client: PersistClient, times: int | None) -> list[int]:
    """Make another reporter append between ``health``'s read of the upper and its append,
    ``times`` times (None: always)."""
    other = Health(client, lambda: 10**12)
    apply = health._upsert.apply
    n = [0]

    def overtaken(*args: Any, **kwargs: Any) -> Any:
        if times is None or n[0] < times:
            n[0] += 1
            other.report(f"o{n[0]}", "running")
        return apply(*args, **kwargs)

    health._upsert.apply = overtaken  # type: ignore[method-assign]
    return n


def test_a_report_overtaken_more_than_ten_times_is_decided_again(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It raised AssertionError after 10 lost races."""
    monkeypatch.setattr(health_module.random, "uniform", lambda a, b: 0.0)
    a = Health(client, lambda: 10**12)
    a.report("x", "running")
    n = overtake(a, client, 15)
    a.report("y", "stalled", "boom")
    assert n[0] == 15
    assert latest_health(client)["y"]["status"] == "stalled"


def test_a_report_overtaken_for_retry_for_s_is_a_determinate_fault(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(health_module, "RETRY_FOR_S", 0.3)
    a = Health(client, lambda: 10**12)
    a.report("x", "running")
    overtake(a, client, None)
    with pytest.raises(Determinate, match=r"other reporters' appends landed first \d+ times"):
        a.report("y", "stalled", "boom")
    assert "y" not in latest_health(client)


@dataclass
class _Idle(CounterGenerator):
    """A counter that never produces a record: a step runs no Spark job."""

    def upper(self) -> dict[str, int]:
        return {}


def test_a_step_whose_data_is_appended_does_not_fail_for_its_health(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The success path's report raised out of a step that had appended its data (and the
    start's out of the constructor)."""

    def down(*args: Any) -> None:
        raise Determinate("status shard unreachable")

    monkeypatch.setattr(Health, "_record", down)
    ingestion = Ingestion(None, client, _Idle(name="c"), clock=lambda: 10**12)
    report = ingestion.step()
    assert report.bound_upper.time == 10**12 + 1 and client.state("c").upper == report.bound_upper
    ingestion.close()


def test_pause_and_resume_take_effect_whether_or_not_their_health_is_recorded(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pause() set the source paused, then raised the health's failure: the caller took
    the pause for failed."""
    ingestion = Ingestion(None, client, _Idle(name="c"), clock=lambda: 10**12)

    def down(*args: Any) -> None:
        raise Determinate("status shard unreachable")

    monkeypatch.setattr(Health, "_record", down)
    ingestion.pause()
    assert ingestion.paused
    ingestion.resume()
    assert not ingestion.paused
    ingestion.close()


def test_an_exports_health_that_cannot_be_recorded_fails_no_step(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The export's report raised out of Pipeline.step, after its step, skipping the other
    exports' steps."""
    stepped: list[str] = []
    pipeline = Pipeline.__new__(Pipeline)
    pipeline.client, pipeline.ingestions, pipeline.views, pipeline._closed = client, [], [], False
    pipeline._unbuilt = []  # every view and export built
    pipeline._unbuilt_sources = {}  # and every source
    pipeline.exports = [  # type: ignore[list-item]
        SimpleNamespace(export_id=e, step=lambda e=e: stepped.append(e)) for e in ("e1", "e2")
    ]
    pipeline.health = Health(client)

    def down(*args: Any) -> None:
        raise Determinate("status shard unreachable")

    monkeypatch.setattr(Health, "_record", down)
    assert pipeline.step() == {}
    assert stepped == ["e1", "e2"]
