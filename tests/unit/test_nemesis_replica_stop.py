"""A nemesis replica asked to stop while its first read of the catalog faults, stops (no
Spark: the session and the task fault hook are stand-ins).

The replica builds its pipeline at its first tick, and the build reads the location's
catalog, retrying each fault after a pause that doubles up to a minute. The retries
ignored the replica's stop flag: a replica whose consensus stayed unreachable never
stopped by itself, and the runner had to kill it when its stop timed out.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

import timeshard.controller as controller
import timeshard.spark
import timeshard.spark.parts
from timeshard.errors import Indeterminate
from timeshard.nemesis.control import Control
from timeshard.nemesis.liveness import Heartbeat
from timeshard.nemesis.pipeline import pipeline_spec
from timeshard.nemesis.replica import run_replica

#: Generous: a replica that obeys stops within a control poll (0.1 s) of the flag.
STOP_DEADLINE_S = 60.0


class StandInSpark:
    stopped = False

    def stop(self) -> None:
        self.stopped = True


def test_a_replica_retrying_its_first_catalog_read_stops_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = tmp_path / "events"
    events.mkdir()
    spec = pipeline_spec(f"file://{tmp_path / 'blob'}", f"sqlite:///{tmp_path / 'c.db'}", events)
    (tmp_path / "pipeline.json").write_text(spec.model_dump_json())
    spark = StandInSpark()
    monkeypatch.setattr(timeshard.spark, "spark_session", lambda **kw: spark)
    monkeypatch.setattr(timeshard.spark.parts, "inject_task_faults", lambda faults: None)
    reads = []

    def unreachable(client: Any) -> Any:
        reads.append(time.monotonic())
        raise Indeterminate("consensus unreachable")

    monkeypatch.setattr(controller, "read_catalog", unreachable)
    replica = threading.Thread(
        target=run_replica, args=(tmp_path, 0, 0, 7), name="replica", daemon=True
    )
    replica.start()
    beat = Heartbeat.path(tmp_path, 0)
    deadline = time.monotonic() + STOP_DEADLINE_S
    while (Heartbeat.read(beat) or Heartbeat(0, 0)).failing < 2:  # two reads failed
        assert time.monotonic() < deadline, "the replica never retried its catalog read"
        time.sleep(0.05)
    Control(stop=True).write(tmp_path / "control-0.json")
    replica.join(STOP_DEADLINE_S)
    assert not replica.is_alive(), (
        f"asked to stop {STOP_DEADLINE_S:.0f} s ago, the replica still retries its catalog "
        f"read ({len(reads)} reads)"
    )
    assert spark.stopped


class SlotMakingSource:
    """A built source that created its replication slot (as a POSTGRES source's build
    does); ``drop`` records that it was dropped."""

    slot_created = True

    def __init__(self, name: str) -> None:
        self.name = name
        self.dropped = False

    def drop(self) -> None:
        self.dropped = True


def test_a_build_stopped_at_its_first_catalog_read_keeps_the_slots_its_sources_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sources are built before the catalog's read at the start. A stop is this
    process's alone: a peer of the same declaration may read through a slot a source of
    this one made before it first advances it, and ``drop``'s guard (not active, not
    moved) cannot see that, so a drop at the stop would lose the peer's changes. The
    slots stay, for the next start (a refusal, which every replica meets, drops them)."""
    from timeshard.location import Location, MemoryBlob, MemoryConsensus
    from timeshard.persist import PersistClient

    events = tmp_path / "events"
    events.mkdir()
    spec = pipeline_spec(f"file://{tmp_path / 'blob'}", f"sqlite:///{tmp_path / 'c.db'}", events)
    built: list[SlotMakingSource] = []

    def build(s: Any) -> SlotMakingSource:
        built.append(SlotMakingSource(s.name))
        return built[-1]

    def unreachable(client: Any) -> Any:
        raise Indeterminate("consensus unreachable")

    monkeypatch.setattr(controller, "build_source", build)
    monkeypatch.setattr(controller, "read_catalog", unreachable)
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    stop = threading.Event()
    stop.set()
    with pytest.raises(controller.StartStopped):
        controller.Pipeline(StandInSpark(), client, spec, stop=stop)
    assert [s.name for s in built] == ["kv", "events"]
    assert [s.name for s in built if s.dropped] == []
