"""The control plane's refusals and reports: a run file's location, status over a damaged
catalog, drop of a followed view, and a fault while a run installs a view.

No Spark: the views are opened as their sinks open them, and the pipeline's view install
is replaced where it would start Spark.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from timeshard.errors import InvalidUsage
from timeshard.spec import load_spec


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ('dir = "loc"\nblob = "file:///b"\nconsensus = "sqlite:///c.db"', ["dir", "blob"]),
        ('dir = "loc"\nblob = "file:///b"', ["dir", "blob"]),
        ('dir = "loc"\nconsensus = "sqlite:///c.db"', ["dir", "consensus"]),
        ('blob = "file:///b"', ["blob", "consensus"]),
        ('consensus = "sqlite:///c.db"', ["consensus", "blob"]),
    ],
)
def test_a_location_named_two_ways_or_half_named_is_refused(
    tmp_path: Path, table: str, named: list[str]
) -> None:
    """``dir`` beside ``blob``/``consensus`` silently used the latter (the directory the
    user named was ignored), and ``blob`` alone was refused later as a CLI flag."""
    f = tmp_path / "run.toml"
    f.write_text(f"[location]\n{table}\n")
    with pytest.raises(InvalidUsage) as e:
        load_spec(f)
    for name in named:
        assert name in str(e.value), str(e.value)
    assert "\n" not in str(e.value)


def test_a_location_named_one_way_loads(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text('[location]\nblob = "file:///b"\nconsensus = "sqlite:///c.db"\n')
    loc = load_spec(f).location
    assert (loc.dir, loc.blob, loc.consensus) == (None, "file:///b", "sqlite:///c.db")
    f.write_text('[location]\ndir = "loc"\n')
    assert load_spec(f).location.dir == "loc"
    f.write_text("")
    assert load_spec(f).location.dir == ".timeshard"


def test_status_shows_a_catalog_row_that_does_not_decode(tmp_path: Path) -> None:
    """Such a row was skipped: the view it records showed no path and nothing said the
    catalog was damaged (only ``verify`` did)."""
    import json

    import pyarrow as pa
    from typer.testing import CliRunner

    from timeshard.catalog import CATALOG_KEYS, CATALOG_SCHEMA, CATALOG_SHARD
    from timeshard.cli.main import app
    from timeshard.location import Location
    from timeshard.persist import PersistClient
    from timeshard.status import status_rows
    from timeshard.storage.upsert import FeedbackUpsert, UpsertCommand

    client = PersistClient(Location.embedded(tmp_path))
    client.open_writer("v", pa.schema([("n", pa.int64())])).expire()
    upsert = FeedbackUpsert(client, CATALOG_SHARD, CATALOG_SCHEMA, list(CATALOG_KEYS))
    upsert.apply([UpsertCommand(("v", "view"), ("{not json",), 3, (0,))], 4)
    upsert.close()
    rows = status_rows(client)
    [bad] = [r for r in rows if r["kind"] == "unreadable"]
    assert "('v', 'view')" in bad["object"] and CATALOG_SHARD in bad["object"], bad
    assert "definition is not JSON" in bad["error"], bad
    assert {r["object"] for r in rows} >= {"v", CATALOG_SHARD}

    out = CliRunner().invoke(app, ["status", "-l", str(tmp_path)], env={"COLUMNS": "200"})
    assert out.exit_code == 1, out.output
    assert "('v', 'view')" in out.output and "definition is not JSON" in out.output
    out = CliRunner().invoke(app, ["status", "-l", str(tmp_path), "--json"])
    assert out.exit_code == 1 and any(
        "('v', 'view')" in r["object"] for r in json.loads(out.output)
    ), out.output


def test_drop_refuses_a_view_a_live_process_follows(tmp_path: Path) -> None:
    """A view that no process writes but one follows (a subscribe, a query) has no
    writer, and `timeshard drop` closed its shard under the follower (a read-only
    deployment reads unleased: it is fenced instead, test_drop_read_only_standby.py).
    A leased reader of the view's shard that renewed its lease lately is a live
    follower: the drop is refused, and goes through once the follower is gone (its
    lease no longer renewed)."""
    import pyarrow as pa

    from timeshard.catalog import record_view
    from timeshard.compute.mv_sink import DEPLOY_READER
    from timeshard.compute.view import ViewDefinition
    from timeshard.controller import drop_object
    from timeshard.location import Location
    from timeshard.persist import PersistClient
    from timeshard.persist.config import PersistConfig
    from timeshard.persist.holds import view_hold_id

    now = [1_000_000]
    config = PersistConfig(heartbeat_interval_ms=0, clock=lambda: now[0])
    client = PersistClient(Location.embedded(tmp_path), config)
    schema = pa.schema([("n", pa.int64())])
    for shard in ("kv", "v"):
        writer = client.open_writer(shard, schema)
        writer.append([((1,), 0, 1)], 0, 10)
        writer.expire()
    client.open_critical_since("v", DEPLOY_READER, "000000000001")
    client.open_critical_since("kv", view_hold_id("v"), "")
    record_view(client, ViewDefinition("v", {"t": "kv"}, "SELECT n FROM t"), 0)

    follower = client.open_leased_reader("v", name="standby.v")
    with pytest.raises(InvalidUsage, match="view 'v' is followed") as e:
        drop_object(client, "v")
    assert "standby.v" in str(e.value), str(e.value)
    assert not client.state("v").upper.is_empty()
    assert view_hold_id("v") in client.state("kv").critical_readers

    now[0] += 10 * 60 * 1000  # the follower stopped renewing its lease ten minutes ago
    assert [d.name for d in drop_object(client, "v")] == ["v"]
    assert client.state("v").upper.is_empty()
    del follower


class _View:
    """A stand-in of MaterializedView: ``install`` raises the next of ``faults`` (None:
    installs), and records each view it installed."""

    faults: ClassVar[list[BaseException | None]] = []
    installed: ClassVar[list[str]] = []
    closed: ClassVar[list[str]] = []

    def __init__(self, name: str) -> None:
        self.name = name
        self.sink = type("Sink", (), {"last_error": None})()

    @classmethod
    def install(cls, spark: object, client: object, definition: object, **kw: object) -> _View:
        fault = cls.faults.pop(0) if cls.faults else None
        if fault is not None:
            raise fault
        name = definition.name  # type: ignore[attr-defined]
        cls.installed.append(name)
        return cls(name)

    def step(self) -> None:
        pass

    def close(self) -> None:
        _View.closed.append(self.name)


class _Ingestion:
    def __init__(self, spark: object, client: object, source: object, **kw: object) -> None:
        self.output = source.name  # type: ignore[attr-defined]
        self.exports: dict[str, object] = {}

    def step(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture
def standins(monkeypatch: pytest.MonkeyPatch) -> type[_View]:
    import timeshard.controller as controller

    monkeypatch.setattr(controller, "Ingestion", _Ingestion)
    monkeypatch.setattr(controller, "MaterializedView", _View)
    _View.faults, _View.installed, _View.closed = [], [], []
    return _View


def test_a_fault_while_a_view_is_installed_is_retried_and_shown_stalled(
    tmp_path: Path, standins: type[_View]
) -> None:
    """It ended the run (raised out of the pipeline's build), unlike a fault of any tick.
    Now the view is stalled with the fault, a view that reads it waits for it, and the
    next step installs each once."""
    import timeshard.controller as controller
    from timeshard.errors import Determinate
    from timeshard.location import Location
    from timeshard.persist import PersistClient
    from timeshard.spec import RunSpec, SourceSpec, ViewSpec
    from timeshard.storage.health import latest_health

    client = PersistClient(Location.embedded(tmp_path))
    spec = RunSpec(
        source=[SourceSpec(name="a", kind="counter")],
        view=[
            ViewSpec(name="v", inputs={"t": "a"}, sql="SELECT * FROM t"),
            ViewSpec(name="w", inputs={"t": "v"}, sql="SELECT * FROM t"),
            ViewSpec(name="x", inputs={"t": "a"}, sql="SELECT * FROM t"),
        ],
    )
    standins.faults = [Determinate("consensus unreachable"), None]
    pipeline = controller.Pipeline(None, client, spec)
    try:
        assert "consensus unreachable" in pipeline.first_failures["v"]
        assert "'v'" in pipeline.first_failures["w"]  # waits for v
        assert standins.installed == ["x"]
        health = latest_health(client)
        assert health["v"]["status"] == "stalled"
        assert "consensus unreachable" in health["v"]["error"]
        assert pipeline.step() == {}
        assert standins.installed == ["x", "v", "w"]
        assert pipeline.step() == {}
        assert standins.installed == ["x", "v", "w"]  # each installed once
        assert sorted(v.name for v in pipeline.views) == ["v", "w", "x"]
    finally:
        pipeline.close()
    assert sorted(standins.closed) == ["v", "w", "x"]


@pytest.mark.parametrize(
    ("refusal", "said"),
    [
        (InvalidUsage("view 'v' exists with schema ..."), "exists with schema"),
        (
            "analysis",
            "view 'v': Spark rejects its query: .*UNRESOLVED_COLUMN",
        ),
    ],
)
def test_a_refused_view_still_ends_the_run(
    tmp_path: Path, standins: type[_View], refusal: object, said: str
) -> None:
    """A refusal is not retried (retrying cannot help); a query Spark's analysis rejects
    is one too, an InvalidUsage naming the view (it was a traceback)."""
    from pyspark.errors import AnalysisException

    import timeshard.controller as controller
    from timeshard.location import Location
    from timeshard.persist import PersistClient
    from timeshard.spec import RunSpec, SourceSpec, ViewSpec

    client = PersistClient(Location.embedded(tmp_path))
    spec = RunSpec(
        source=[SourceSpec(name="a", kind="counter")],
        view=[ViewSpec(name="v", inputs={"t": "a"}, sql="SELECT * FROM t")],
    )
    if refusal == "analysis":
        refusal = AnalysisException("[UNRESOLVED_COLUMN] A column `nope` cannot be resolved.")
    assert isinstance(refusal, Exception)
    standins.faults = [refusal]
    with pytest.raises(InvalidUsage, match=said):
        controller.Pipeline(None, client, spec)


def test_a_fault_reading_the_uppers_a_run_prints_does_not_end_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After each tick run prints every shard's upper, read from consensus: a consensus
    fault there ended the run (with a traceback), though the tick itself had gone on."""
    from typer.testing import CliRunner

    import timeshard.controller
    import timeshard.spark
    from timeshard.cli.main import app
    from timeshard.errors import Determinate
    from timeshard.progress import Frontier

    class Spark:
        def stop(self) -> None:
            pass

    class Pipeline:
        reads = 0

        def __init__(self, *args: object, **kwargs: object) -> None:
            self.undeclared: list[object] = []
            self.first_failures: dict[str, str] = {}

        def step(self) -> dict[str, str]:
            return {}

        def uppers(self) -> dict[str, Frontier]:
            Pipeline.reads += 1
            if Pipeline.reads == 1:
                raise Determinate("consensus unreachable")
            return {"a": Frontier.minimum()}

        def close(self) -> None:
            pass

    monkeypatch.setattr(timeshard.spark, "spark_session", lambda **kw: Spark())
    monkeypatch.setattr(timeshard.controller, "Pipeline", Pipeline)
    f = tmp_path / "run.toml"
    f.write_text(f'[location]\ndir = "{tmp_path / "loc"}"\n')
    out = CliRunner().invoke(app, ["run", str(f), "--seconds", "1.5"])
    assert out.exit_code == 0, (out.output, out.exception)
    assert "consensus unreachable" in out.output and Pipeline.reads >= 2, out.output
