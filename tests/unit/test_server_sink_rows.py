"""A sink in serve's introspection relation and its health, without Spark."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.server.engine import Engine, _Object
from timeshard.storage.health import Health, latest_health


class Runner:
    """A sink's runner that fails while ``error`` is set."""

    def __init__(self) -> None:
        self.error: str | None = None

    def step(self) -> None:
        if self.error is not None:
            raise OSError(self.error)


def sink(client: PersistClient, runner: Runner) -> _Object:
    return _Object(
        "s",
        "sink",
        "CREATE SINK s FROM t INTO DELTA (URI '/x')",
        1,
        runner,
        [],
        ["t"],
        health=Health(client),
    )


def test_a_sink_is_one_row_of_timeshard_objects(tmp_path: Path) -> None:
    """Its health has no shard: the status rows list it as an export, and the engine
    lists it as a sink; the relation shows it once (it was twice)."""
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    engine = Engine(SimpleNamespace(), client)  # type: ignore[arg-type]
    obj = sink(client, Runner())
    engine.objects["s"] = obj
    obj.step()
    rows: list[dict[str, Any]] = [r for r in engine.object_rows() if r["name"] == "s"]
    assert [(r["type"], r["status"]) for r in rows] == [("sink", "running")]


def test_a_sinks_health_is_written_again_after_another_reporters(tmp_path: Path) -> None:
    """Another replica recorded the sink stalled and went away; this one, running as
    before, records running again (its unchanged error skipped the report)."""
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    obj = sink(client, Runner())
    obj.step()
    Health(client).report("s", "stalled", "OSError: the other replica's")
    obj.step()
    assert latest_health(client)["s"]["status"] == "running"
