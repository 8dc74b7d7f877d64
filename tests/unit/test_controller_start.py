"""A pipeline's first tick is guarded as every later one is, an ingestion whose build
faults at the start is retried as a later one is, and a build that ends the run closes
what it built (no Spark: the ingestions are stand-ins)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

import timeshard.controller as controller
from timeshard.errors import CorruptState, Determinate, Indeterminate, InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spec import RunSpec, SourceSpec
from timeshard.storage.health import latest_health

SPEC = RunSpec(
    source=[SourceSpec(name=n, kind="counter") for n in ("a", "b", "c")],
)


class StandIn:
    """An ingestion whose first step fails for source ``b``; built for ``c`` it raises
    each of ``fail_build`` in turn, then builds."""

    closed: ClassVar[list[str]] = []
    fail_build: ClassVar[list[Exception]] = []

    def __init__(self, spark: Any, client: Any, source: Any, **kw: Any) -> None:
        if source.name == "c" and StandIn.fail_build:
            raise StandIn.fail_build.pop(0)
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
    StandIn.fail_build = []
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


def test_a_fault_building_an_ingestion_at_the_start_stalls_that_source_alone(
    client: PersistClient,
) -> None:
    """It ended the run, as a refusal does, though a later step could build it: a source
    whose build faults later is stalled and built again, and so is one at the start."""
    StandIn.fail_build = [
        Indeterminate("consensus unreachable (0)"),
        Determinate("consensus unreachable (1)"),
    ]
    pipeline = controller.Pipeline(None, client, SPEC, build_backoff_s=0.0)
    try:
        assert "Indeterminate: consensus unreachable (0)" in pipeline.first_failures["c"]
        health = latest_health(client)
        assert health["c"]["status"] == "stalled", health
        assert "consensus unreachable (0)" in health["c"]["error"]
        assert [i.output for i in pipeline.ingestions] == ["a", "b"]  # they run
        assert "Determinate: consensus unreachable (1)" in pipeline.step()["c"]
        assert pipeline.step() == {}  # built at last, and stepped
        assert [(i.output, i.steps) for i in pipeline.ingestions][2] == ("c", 1)
    finally:
        pipeline.close()
    assert StandIn.closed == ["a", "b", "c"]


@pytest.mark.parametrize(
    "error",
    [
        InvalidUsage("output shard 'c' is closed (its source was dropped)"),
        CorruptState("shard 'c': unknown state version 99"),
    ],
    ids=["refusal", "corrupt state"],
)
def test_a_refusal_or_corrupt_state_building_an_ingestion_ends_the_run(
    client: PersistClient, error: Exception
) -> None:
    """No retry can help: the run ends with the error, and closes what it built."""
    StandIn.fail_build = [error]
    with pytest.raises(type(error), match=str(error).split(" (")[0]):
        controller.Pipeline(None, client, SPEC, build_backoff_s=0.0)
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


def test_corrupt_state_when_a_stalled_source_is_built_again_ends_the_run(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was retried as a fault, every step for ever: no retry decodes the state. And the
    run drops the replication slot the source's first build made (a POSTGRES source makes
    it as it is built): the retry built the source again, which found the slot there
    (``slot_created`` false), so no build dropped it, and it kept the server's WAL."""
    dropped: list[int] = []

    class Slotted:
        built = 0

        def __init__(self, spec: SourceSpec) -> None:
            self.name = spec.name
            Slotted.built += 1
            self.build = Slotted.built
            self.slot_created = spec.name == "c" and self.build == 3  # c's first build

        def drop(self) -> None:
            dropped.append(self.build)

    monkeypatch.setattr(controller, "build_source", Slotted)
    StandIn.fail_build = [
        Indeterminate("consensus unreachable"),
        CorruptState("shard 'c': unknown state version 99"),
    ]
    pipeline = controller.Pipeline(None, client, SPEC, build_backoff_s=0.0)
    try:
        with pytest.raises(CorruptState, match="unknown state version 99"):
            pipeline.step()
    finally:
        pipeline.close()
    assert dropped == [3], dropped


def test_a_run_that_ends_drops_the_slots_of_every_stalled_source_s_first_build(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sources made their slot as they were built and then their ingestions faulted.
    When the retry of one ended the run, only that one's slots were dropped: the other
    stalled source's first build kept its slot, and the server's WAL."""
    dropped: list[str] = []

    class Slotted:
        def __init__(self, spec: SourceSpec) -> None:
            self.name = spec.name
            self.slot_created = spec.name in ("b", "c") and not built[spec.name]
            built[spec.name] = True

        def drop(self) -> None:
            dropped.append(self.name)

    built = {"a": False, "b": False, "c": False}

    class Faulting(StandIn):
        """Its build faults once for ``b`` and ``c``; then ``c``'s state does not decode."""

        def __init__(self, spark: Any, client: Any, source: Any, **kw: Any) -> None:
            faults[source.name] = faults.get(source.name, 0) + 1
            if source.name == "b" or (source.name == "c" and faults["c"] == 1):
                raise Indeterminate(f"consensus unreachable ({source.name})")
            if source.name == "c":
                raise CorruptState("shard 'c': unknown state version 99")
            super().__init__(spark, client, source, **kw)

    faults: dict[str, int] = {}
    monkeypatch.setattr(controller, "build_source", Slotted)
    monkeypatch.setattr(controller, "Ingestion", Faulting)
    pipeline = controller.Pipeline(None, client, SPEC, build_backoff_s=3600.0)
    try:
        pipeline._unbuilt_sources["c"].next_at = 0.0  # c is retried now, b not yet
        with pytest.raises(CorruptState, match="unknown state version 99"):
            pipeline.step()
    finally:
        pipeline.close()
    assert sorted(dropped) == ["b", "c"], dropped
