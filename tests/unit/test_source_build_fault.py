"""A source whose build faults (its server unreachable) is stalled and built again, while
the other objects run; a refusal at build still ends the run (no Spark: the ingestions
and views are stand-ins, and the source's build fails as an unreachable server's does)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

import timeshard.controller as controller
import timeshard.spark
import timeshard.spec
from timeshard.errors import InvalidUsage, SourceUnavailable
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spec import RunSpec, SourceSpec, ViewSpec
from timeshard.storage.health import latest_health

SPEC = RunSpec(
    source=[SourceSpec(name="a", kind="counter"), SourceSpec(name="pg", kind="counter")],
    view=[ViewSpec(name="v", inputs={"t": "pg"}, sql="SELECT * FROM t")],
)


class Ingestion:
    """Counts its steps, by output."""

    steps: ClassVar[dict[str, int]] = {}

    def __init__(self, spark: Any, client: Any, source: Any, **kw: Any) -> None:
        self.output = source.name
        self.exports: dict[str, Any] = {}
        Ingestion.steps[self.output] = 0

    def step(self) -> None:
        Ingestion.steps[self.output] += 1

    def close(self) -> None:
        pass


class View:
    installed: ClassVar[list[str]] = []

    def __init__(self, name: str) -> None:
        self.name = name
        self.sink = type("Sink", (), {"last_error": None})()

    @classmethod
    def install(cls, spark: Any, client: Any, definition: Any, **kw: Any) -> View:
        cls.installed.append(definition.name)
        return cls(definition.name)

    def step(self) -> None:
        pass

    def close(self) -> None:
        pass


class Unreachable:
    """``build_source`` whose build of ``pg`` raises ``faults`` (one a build), then builds."""

    def __init__(self, faults: list[Exception]) -> None:
        self.faults = faults
        self.builds = 0

    def __call__(self, spec: SourceSpec) -> Any:
        if spec.name == "pg":
            self.builds += 1
            if self.faults:
                raise self.faults.pop(0)
        return type("Source", (), {"name": spec.name})()


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PersistClient:
    monkeypatch.setattr(controller, "Ingestion", Ingestion)
    monkeypatch.setattr(controller, "MaterializedView", View)
    Ingestion.steps, View.installed = {}, []
    return PersistClient(Location.embedded(tmp_path / "loc"))


@contextlib.contextmanager
def pipeline_of(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch, build: Any, backoff_s: float
) -> Iterator[controller.Pipeline]:
    """A pipeline of SPEC whose sources ``build`` builds, closed after the block."""
    monkeypatch.setattr(controller, "build_source", build)
    pipeline = controller.Pipeline(None, client, SPEC, build_backoff_s=backoff_s)
    try:
        yield pipeline
    finally:
        pipeline.close()


def unreachable(n: int) -> list[Exception]:
    return [
        SourceUnavailable(f"POSTGRES source 'pg': the server is unreachable ({i})")
        for i in range(n)
    ]


def test_a_source_whose_build_faults_is_retried_while_the_others_run(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It ended the run: the pipeline's build raised the fault, and nothing ran."""
    build = Unreachable(unreachable(3))
    with pipeline_of(client, monkeypatch, build, 0.001) as pipeline:
        assert "the server is unreachable (0)" in pipeline.first_failures["pg"]
        assert pipeline.first_failures["v"] == "waits for source 'pg', not built yet"
        health = latest_health(client)
        assert health["pg"]["status"] == "stalled", health
        assert "unreachable" in health["pg"]["error"]
        assert Ingestion.steps == {"a": 1} and View.installed == []
        deadline = time.monotonic() + 120.0  # stuck, not slow, if it passes
        while "pg" not in Ingestion.steps:
            assert time.monotonic() < deadline, (build.builds, Ingestion.steps)
            failures = pipeline.step()
            if "pg" not in Ingestion.steps:
                assert "unreachable" in failures["pg"], failures
        assert build.builds == 4  # three faults, then built
        assert Ingestion.steps["a"] >= 2  # the other source ticked meanwhile
        assert View.installed == ["v"]  # built once its input's source is
        assert pipeline.step() == {}
        assert Ingestion.steps["pg"] == 2 and View.installed == ["v"]


def test_a_source_is_built_again_only_after_its_pause(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = Unreachable(unreachable(2))
    with pipeline_of(client, monkeypatch, build, 3600.0) as pipeline:
        for _ in range(3):  # not yet due: no build, no connection attempt
            assert "unreachable (0)" in pipeline.step()["pg"]
        assert build.builds == 1


def test_a_refusal_when_the_source_builds_at_last_ends_the_run(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    refusal = InvalidUsage("POSTGRES source 'pg': no publication 'p'")
    build = Unreachable([*unreachable(1), refusal])
    with (
        pipeline_of(client, monkeypatch, build, 0.0) as pipeline,
        pytest.raises(InvalidUsage, match="no publication"),
    ):
        pipeline.step()


def test_a_refusal_at_the_start_ends_the_run(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    refusal = InvalidUsage("POSTGRES source 'pg': no publication 'p'")
    monkeypatch.setattr(controller, "build_source", Unreachable([refusal]))
    with pytest.raises(InvalidUsage, match="no publication"):
        controller.Pipeline(None, client, SPEC)
    assert Ingestion.steps == {}  # nothing ran, nothing was written


def test_run_goes_on_while_a_source_is_unreachable(
    tmp_path: Path, client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``timeshard run`` checks the declaration by building its sources: an unreachable
    server ended it there (``error: ...``, exit code 2), before any object ran."""
    from timeshard.cli.main import app

    class Spark:
        def stop(self) -> None:
            pass

    build = Unreachable(unreachable(1000))
    monkeypatch.setattr(timeshard.spark, "spark_session", lambda **kw: Spark())
    monkeypatch.setattr(timeshard.spec, "build_source", build)
    monkeypatch.setattr(controller, "build_source", build)
    f = tmp_path / "run.toml"
    f.write_text(
        f'[location]\ndir = "{tmp_path / "loc"}"\n'
        '[[source]]\nname = "a"\nkind = "counter"\n'
        '[[source]]\nname = "pg"\nkind = "counter"\n'
        '[[view]]\nname = "v"\nsql = "SELECT * FROM t"\n[view.inputs]\nt = "pg"\n'
    )
    out = CliRunner().invoke(app, ["run", str(f), "--seconds", "1.5"])
    assert out.exit_code == 0, (out.output, out.exception)
    assert "stalled: pg: SourceUnavailable" in out.output, out.output
    assert "waits for source 'pg'" in out.output, out.output
    assert Ingestion.steps["a"] >= 1 and "pg" not in Ingestion.steps


class Slotted:
    """``build_source`` whose ``pg`` faults ``faults`` times, then builds a source that made
    a replication slot (as a POSTGRES source's build does), recording its drops."""

    def __init__(self, faults: int) -> None:
        self.faults = faults
        self.dropped: list[str] = []

    def __call__(self, spec: SourceSpec) -> Any:
        if spec.name != "pg":
            return type("Source", (), {"name": spec.name})()
        if self.faults:
            self.faults -= 1
            raise unreachable(1)[0]
        dropped = self.dropped

        class Source:
            name, slot_created = "pg", True

            def drop(self) -> None:
                dropped.append(self.name)

        return Source()


class Refusing(Ingestion):
    """An ingestion whose check refuses ``pg`` (its shard another object's, say)."""

    def __init__(self, spark: Any, client: Any, source: Any, **kw: Any) -> None:
        if source.name == "pg":
            raise InvalidUsage("source 'pg' would write shard 'pg', view 'pg' owns it")
        super().__init__(spark, client, source, **kw)


@pytest.mark.parametrize("faults", [0, 1], ids=["at the start", "built late"])
def test_a_refused_source_drops_the_slot_its_build_made(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch, faults: int
) -> None:
    """A declaration refused once its sources are built leaves no slot upstream (it would
    hold the server's WAL for ever): the run's checks before used a build that makes none,
    but a source unreachable then is checked only once built, with its slot."""
    build = Slotted(faults)
    monkeypatch.setattr(controller, "Ingestion", Refusing)
    with (
        pytest.raises(InvalidUsage, match="owns it"),
        pipeline_of(client, monkeypatch, build, 0.0) as pipeline,
    ):
        pipeline.step()
    assert build.dropped == ["pg"]


def test_waiting_on_an_unbuilt_source_lists_the_shards_once_per_build_attempt(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = Unreachable(unreachable(1000))
    listings = []
    list_shards = client.list_shards
    monkeypatch.setattr(client, "list_shards", lambda: listings.append(1) or list_shards())
    with pipeline_of(client, monkeypatch, build, 3600.0) as pipeline:
        listings.clear()  # the build's own
        for _ in range(5):  # no build is due: the view waits on the listing it has
            assert pipeline.step()["v"] == "waits for source 'pg', not built yet"
        assert build.builds == 1
        assert listings == []
