"""A pipeline's first tick is guarded as every later one is, and a failed build closes
what it built (no Spark: the ingestions are stand-ins)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

import timeshard.controller as controller
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spec import RunSpec, SourceSpec

SPEC = RunSpec(
    source=[SourceSpec(name=n, kind="counter") for n in ("a", "b", "c")],
)


class StandIn:
    """An ingestion whose first step fails for source ``b``; built for ``c`` it fails if
    ``fail_build`` is set."""

    closed: ClassVar[list[str]] = []
    fail_build = False

    def __init__(self, spark: Any, client: Any, source: Any, **kw: Any) -> None:
        if source.name == "c" and StandIn.fail_build:
            raise OSError("consensus unreachable")
        self.output = source.name
        self.steps = 0

    def step(self) -> None:
        self.steps += 1
        if self.output == "b" and self.steps == 1:
            raise OSError("broker 127.0.0.1:9092 unreachable")

    def close(self) -> None:
        StandIn.closed.append(self.output)


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PersistClient:
    monkeypatch.setattr(controller, "Ingestion", StandIn)
    StandIn.closed = []
    StandIn.fail_build = False
    return PersistClient(Location.embedded(tmp_path / "loc"))


def test_a_fault_in_a_first_tick_is_a_failure_of_that_source_not_of_the_run(
    client: PersistClient,
) -> None:
    """It was raised out of the constructor: the run ended with a traceback."""
    pipeline = controller.Pipeline(None, client, SPEC)
    assert list(pipeline.first_failures) == ["b"]
    assert "broker 127.0.0.1:9092 unreachable" in pipeline.first_failures["b"]
    assert pipeline.step() == {}  # retried, and it goes on
    pipeline.close()
    assert StandIn.closed == ["a", "b", "c"]


def test_a_pipeline_that_fails_to_build_closes_what_it_built(client: PersistClient) -> None:
    StandIn.fail_build = True
    with pytest.raises(OSError, match="consensus unreachable"):
        controller.Pipeline(None, client, SPEC)
    assert StandIn.closed == ["a", "b"]


def test_a_close_that_fails_still_closes_the_others(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first failure ended the close: the later ingestions' leases lingered."""
    pipeline = controller.Pipeline(None, client, SPEC)
    closed = StandIn.close

    def failing(self: StandIn) -> None:
        closed(self)
        if self.output == "a":
            raise OSError("consensus unreachable")

    monkeypatch.setattr(StandIn, "close", failing)
    with pytest.raises(OSError, match="consensus unreachable"):
        pipeline.close()
    assert StandIn.closed == ["a", "b", "c"]


def test_a_refusal_keeps_its_end_and_a_jvm_trace_is_cut(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure was cut to 300 characters: a refusal that ends with how to go on (an
    export whose progress is lost: drop it, then ...) lost that end in its stalled line."""
    from timeshard.errors import InvalidUsage

    refusal = "export 'e' lost its progress. " + "x" * 400 + " and declare it again"
    trace = "java.lang.IllegalStateException: " + "at org.apache.spark.X\n" * 100
    failing = {"a": InvalidUsage(refusal), "c": RuntimeError(trace)}
    step = StandIn.step

    def fail(self: StandIn) -> None:
        step(self)
        if self.output in failing:
            raise failing[self.output]

    monkeypatch.setattr(StandIn, "step", fail)
    failures = controller.Pipeline(None, client, SPEC).first_failures
    assert failures["a"].endswith("and declare it again")
    assert len(failures["c"]) < 350
