"""An ingestion whose construction or reopening fails leaves no handle registered.

A writer or leased reader left registered holds its shard: a leased reader its
since (compaction stops there), every one of them the shard's old states
(GC keeps them), until its lease runs out -- and a handle still referenced is
renewed by the heartbeats for as long as the process lives. A fault in the
middle of opening a source (the catalog's write, the remap's first read, the
status shard) is retried by opening it again, so each failed try left a set
behind.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from timeshard.errors import Determinate
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage import ingest as ingest_module
from timeshard.storage import reclock as reclock_module
from timeshard.storage.health import STATUS_SHARD
from timeshard.storage.ingest import Ingestion
from timeshard.storage.sources import CounterGenerator


class Idle(CounterGenerator):
    """A counter that never counts: a step reads nothing (no Spark)."""

    def upper(self) -> dict[str, int]:
        return {}


@pytest.fixture
def client(tmp_path: Path) -> PersistClient:
    return PersistClient(Location.embedded(tmp_path / "loc"))


def registered(client: PersistClient, shards: list[str]) -> dict[str, list[str]]:
    """The writers and leased readers registered on each of ``shards`` that exists."""
    out = {}
    for shard in shards:
        try:
            state = client.state(shard)
        except Exception:  # never written: nothing registered
            continue
        handles = [*state.writers, *state.leased_readers]
        if handles:
            out[shard] = handles
    return out


SHARDS = ["c", "c.remap", STATUS_SHARD]


def fail(*args: object, **kwargs: object) -> None:
    raise Determinate("injected: storage down")


@pytest.mark.parametrize(
    "where",
    [
        (ingest_module.Ingestion, "_record_keeping_topic_id"),  # every output, the remap open
        (reclock_module.Remap, "sync"),  # the outputs are open, the remap's handles too
    ],
)
def test_a_failed_construction_leaves_no_handle(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch, where: tuple[object, str]
) -> None:
    Ingestion(None, client, CounterGenerator(name="c")).close()  # the shards exist
    owner, name = where
    monkeypatch.setattr(owner, name, fail)
    with pytest.raises(Determinate, match="injected"):
        Ingestion(None, client, CounterGenerator(name="c"))
    assert registered(client, SHARDS) == {}


def test_a_failed_status_shard_leaves_no_handle(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    Ingestion(None, client, CounterGenerator(name="c")).close()
    real = client.open_leased_reader

    def failing(shard: str, *args: object, **kwargs: object) -> object:
        if shard == STATUS_SHARD:
            fail()
        return real(shard, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(client, "open_leased_reader", failing)
    with pytest.raises(Determinate, match="injected"):
        Ingestion(None, client, CounterGenerator(name="c"))
    assert registered(client, SHARDS) == {}


def test_a_failed_reopen_leaves_no_handle_and_the_next_step_reopens(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lease lost, then the reopening fails halfway: the outputs it had opened stayed
    registered, and the next step ran on the handles it had released."""
    ingestion = Ingestion(None, client, Idle(name="c"), clock=lambda: 10)
    ingestion.step()
    ingestion.remap._writer.lease_lost = True  # the heartbeats could not renew it
    with monkeypatch.context() as m:
        m.setattr(reclock_module.Remap, "sync", fail)
        with pytest.raises(Determinate, match="injected"):
            ingestion.step()
        assert registered(client, ["c", "c.remap"]) == {}
    report = ingestion.step()  # opens the handles anew
    assert report.output_upper.time == 11
    assert ingestion.step().output_upper.time == 12
    assert ingestion.resume_upper().time == 13
    ingestion.close()
    assert registered(client, SHARDS) == {}


def test_a_reopen_that_fails_again_is_tried_once_a_step(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a failed reopen, a step reopens first; if that fails too, the step's failure
    handler reopened again at once (two attempts, the second's error raised in place of
    the first's)."""
    ingestion = Ingestion(None, client, Idle(name="c"), clock=lambda: 10)
    ingestion.step()
    ingestion.remap._writer.lease_lost = True
    calls: list[int] = []

    def failing(*args: object, **kwargs: object) -> None:
        calls.append(1)
        fail()

    with monkeypatch.context() as m:
        m.setattr(reclock_module.Remap, "sync", failing)
        with pytest.raises(Determinate, match="injected"):
            ingestion.step()
        calls.clear()
        with pytest.raises(Determinate, match="injected"):
            ingestion.step()
        assert len(calls) == 1
    assert ingestion.step().output_upper.time == 11
    ingestion.close()
    assert registered(client, SHARDS) == {}
