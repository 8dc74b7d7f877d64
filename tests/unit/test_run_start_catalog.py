"""A run whose first read of the catalog faults retries it, as it retries a build (no
Spark: the ingestions are stand-ins).

The catalog is read once at the start of a run, before any object is built: there is
no object to report the fault as the health of, so each failure is logged, and the
read is tried again after a pause that doubles from ``build_backoff_s``. A refusal or a
catalog that does not decode ends the run, as elsewhere.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from tests.unit.test_controller_start import SPEC, StandIn

import timeshard.controller as controller
from timeshard.catalog import read_catalog
from timeshard.errors import CorruptState, Determinate, Indeterminate, InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient

SCHEMA = pa.schema([("k", pa.string())])


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PersistClient:
    monkeypatch.setattr(controller, "Ingestion", StandIn)
    StandIn.closed = []
    StandIn.fail_build = []
    return PersistClient(Location.embedded(tmp_path / "loc"))


class FailingCatalog:
    """``read_catalog`` that raises each of ``failures`` in turn, then reads; a read long
    after the last failure is a retry loop that is stuck, not slow."""

    def __init__(self, failures: list[Exception]) -> None:
        self.failures = failures
        self.reads = 0

    def __call__(self, client: PersistClient) -> Any:
        self.reads += 1
        assert self.reads <= 100, "the run reads the catalog again and again"
        if self.failures:
            raise self.failures.pop(0)
        return read_catalog(client)


def test_a_fault_reading_the_catalog_at_the_start_is_retried(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """It ended the run with the fault, where every later fault is retried."""
    faults: list[Exception] = [
        Indeterminate("consensus unreachable (0)"),
        Determinate("consensus unreachable (1)"),
        OSError("consensus unreachable (2)"),
    ]
    catalog = FailingCatalog(faults)
    monkeypatch.setattr(controller, "read_catalog", catalog)
    retries: list[str] = []  # told to the caller too (a nemesis replica's heartbeat)
    with caplog.at_level(logging.WARNING, logger="timeshard.controller"):
        pipeline = controller.Pipeline(
            None, client, SPEC, build_backoff_s=0.0, on_retry=retries.append
        )
    try:
        assert catalog.reads == 4  # three faults, then read
        assert len(retries) == 3 and "consensus unreachable (2)" in retries[-1], retries
        assert sorted(i.output for i in pipeline.ingestions) == ["a", "b", "c"]
        for i in range(3):
            assert f"consensus unreachable ({i})" in caplog.text
        assert "no object to report health for yet" in caplog.text
        pipeline.step()
    finally:
        pipeline.close()


@pytest.mark.parametrize(
    "error",
    [InvalidUsage("catalog entry 'x' is malformed"), CorruptState("catalog state: bad JSON")],
    ids=["refusal", "corrupt"],
)
def test_a_refusal_or_corrupt_catalog_at_the_start_ends_the_run(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    catalog = FailingCatalog([error])
    monkeypatch.setattr(controller, "read_catalog", catalog)
    with pytest.raises(type(error)):
        controller.Pipeline(None, client, SPEC, build_backoff_s=0.0)
    assert catalog.reads == 1


class SparkStarted(Exception):
    """The run got past its checks of the location: it starts Spark."""


def test_timeshard_run_retries_its_first_reads_of_the_location(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``timeshard run`` lists the location's shards and reads its catalog to check the
    declaration before Spark starts: a fault there ended the run with a traceback."""
    from typer.testing import CliRunner

    import timeshard.catalog
    import timeshard.spark
    from timeshard.cli.main import app

    PersistClient(Location.embedded(tmp_path / "loc")).open_writer("s", SCHEMA).expire()
    catalog = FailingCatalog([Indeterminate("consensus unreachable (0)"), OSError("(1)")])
    monkeypatch.setattr(timeshard.catalog, "read_catalog", catalog)
    pauses: list[float] = []
    monkeypatch.setattr(
        controller, "time", SimpleNamespace(monotonic=time.monotonic, sleep=pauses.append)
    )

    def spark_session(**kw: object) -> None:
        raise SparkStarted

    monkeypatch.setattr(timeshard.spark, "spark_session", spark_session)
    f = tmp_path / "run.toml"
    f.write_text(f'[location]\ndir = "{tmp_path / "loc"}"\n')
    out = CliRunner().invoke(app, ["run", str(f), "--seconds", "5"])
    assert isinstance(out.exception, SparkStarted), out.exception
    assert catalog.reads == 3 and pauses == [1.0, 2.0]  # the builds' backoff


def test_a_fault_listing_the_undeclared_holders_does_not_end_the_run(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The undeclared objects that hold shards are advice printed at the start; a fault
    reading the shards for them ended the run, where every other fault is retried."""

    def unreachable(*args: Any) -> Any:
        raise Indeterminate("consensus unreachable (holders)")

    monkeypatch.setattr(controller, "_holders", unreachable)
    with caplog.at_level(logging.WARNING, logger="timeshard.controller"):
        pipeline = controller.Pipeline(None, client, SPEC, build_backoff_s=0.0)
    try:
        assert pipeline.undeclared == []
        assert "consensus unreachable (holders)" in caplog.text
        assert sorted(i.output for i in pipeline.ingestions) == ["a", "b", "c"]
        pipeline.step()
    finally:
        pipeline.close()
