"""Views and exports removed from a declaration are named by ``timeshard run`` and released
by ``timeshard drop``.

A view holds each input with ``view.<name>`` and an export its input with
``export.<name>``: taken out of the run file, they held their inputs for good (nothing
compacted past them), silently, and only ``timeshard serve``'s DROP released such holds.
No Spark: the holds are opened as the sink and the export open them, the view recorded
as its install records it, and the pipeline has no source.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from timeshard.catalog import Catalog, read_catalog, record_view
from timeshard.cli.main import app
from timeshard.compute.mv_sink import DEPLOY_READER
from timeshard.compute.view import ViewDefinition
from timeshard.controller import Holder, Pipeline, undeclared_holders
from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.persist.holds import view_hold_id
from timeshard.spec import RunSpec, ViewSpec
from timeshard.status import status_rows
from timeshard.storage.health import latest_health

SCHEMA = pa.schema([("n", pa.int64())])
runner = CliRunner()


def written(client: PersistClient, shard: str, upper: int = 10) -> None:
    writer = client.open_writer(shard, SCHEMA)
    writer.append([((1,), 0, 1)], 0, upper)
    writer.expire()


def view(client: PersistClient, name: str, input_: str) -> None:
    """A view ``name`` over ``input_``, as an installed and stopped one leaves it."""
    written(client, name)
    client.open_critical_since(name, DEPLOY_READER, "1")
    client.open_critical_since(input_, view_hold_id(name), "")
    record_view(client, ViewDefinition(name, {"t": input_}, "SELECT n FROM t"), 0)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    client = PersistClient(Location.embedded(tmp_path))
    written(client, "kv")
    view(client, "v", "kv")
    client.open_critical_since("kv", "export.e1", "1")
    return tmp_path


def undeclared(client: PersistClient, spec: RunSpec | None = None) -> list[Holder]:
    return undeclared_holders(client, spec or RunSpec(), read_catalog(client))


def since_can_advance(client: PersistClient, shard: str, to: int) -> bool:
    reader = client.open_leased_reader(shard)
    reader.downgrade_since(to)
    since = client.state(shard).since.time
    reader.expire()
    return since == to


def test_run_names_the_undeclared_objects_and_status_shows_them(root: Path) -> None:
    client = PersistClient(Location.embedded(root))
    pipeline = Pipeline(None, client, RunSpec())
    pipeline.close()
    assert [(h.kind, h.name, sorted(h.holds)) for h in pipeline.undeclared] == [
        ("export", "e1", ["kv"]),
        ("view", "v", ["kv"]),
    ]
    health = latest_health(client)
    for name in ("v", "e1"):
        assert health[name]["status"] == "stalled"
        assert f"timeshard drop {name}" in health[name]["error"]
    rows = {r["object"]: r for r in status_rows(client)}
    assert rows["v"]["status"] == "stalled" and "holds 'kv'" in rows["v"]["error"]
    declared = RunSpec(view=[ViewSpec(name="v", inputs={"t": "kv"}, sql="SELECT n FROM t")])
    assert [h.name for h in undeclared(client, declared)] == ["e1"]


def test_drop_releases_a_view_and_an_export_and_the_input_compacts(root: Path) -> None:
    client = PersistClient(Location.embedded(root))
    assert not since_can_advance(client, "kv", 9)
    out = runner.invoke(app, ["drop", "v", "--location", str(root)])
    assert out.exit_code == 0, out.output
    assert "dropped view 'v' (released 'kv')" in out.output
    state = client.state("v")
    assert state.upper.is_empty() and DEPLOY_READER not in state.critical_readers
    assert not since_can_advance(client, "kv", 9)  # the export still holds it
    out = runner.invoke(app, ["drop", "e1", "--location", str(root)])
    assert out.exit_code == 0, out.output
    assert since_can_advance(client, "kv", 9)
    assert {latest_health(client)[n]["status"] for n in ("v", "e1")} == {"dropped"}
    assert undeclared(client) == []


def test_a_held_view_is_dropped_only_with_cascade(root: Path) -> None:
    client = PersistClient(Location.embedded(root))
    view(client, "w", "v")
    out = runner.invoke(app, ["drop", "v", "--location", str(root)])
    assert isinstance(out.exception, InvalidUsage) and "'w' hold its shard" in str(out.exception)
    assert not client.state("v").upper.is_empty()  # nothing was dropped
    out = runner.invoke(app, ["drop", "v", "--cascade", "--location", str(root), "--json"])
    assert out.exit_code == 0, out.output
    assert '"name": "w"' in out.output and client.state("w").upper.is_empty()
    assert since_can_advance(client, "v", 9) or client.state("v").upper.is_empty()
    assert view_hold_id("v") not in client.state("kv").critical_readers


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("nope", "'nope' is no view or export"),
        ("served", "created by timeshard serve"),
        ("running", "view 'running' is running"),
    ],
)
def test_what_drop_refuses_is_named(root: Path, name: str, said: str) -> None:
    client = PersistClient(Location.embedded(root))
    view(client, "served", "kv")
    Catalog(client).record_statement("served", {"sql": "CREATE ...", "seq": 1, "object": "view"})
    view(client, "running", "kv")
    writer = client.open_writer("running", SCHEMA)  # a process runs it
    try:
        out = runner.invoke(app, ["drop", name, "--location", str(root)])
        assert isinstance(out.exception, InvalidUsage) and said in str(out.exception)
        assert view_hold_id("served") in client.state("kv").critical_readers
        assert not client.state("running").upper.is_empty()
        assert [h.name for h in undeclared(client)] == ["e1", "v"]  # not served, running
    finally:
        writer.expire()


def test_an_export_a_process_runs_is_not_undeclared_and_not_dropped(tmp_path: Path) -> None:
    """An export only another declaration (a process) runs was named undeclared, and
    `timeshard drop` dropped its hold under it: the running export was fenced for good.
    Its leased reader's heartbeats say it runs: left out, and its drop is refused."""
    import pyarrow as pa

    from timeshard.catalog import read_catalog
    from timeshard.controller import drop_object, undeclared_holders
    from timeshard.errors import InvalidUsage
    from timeshard.location import Location
    from timeshard.persist import PersistClient
    from timeshard.spec import RunSpec
    from timeshard.storage.delta_export import DeltaExport

    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("s", pa.schema([("k", pa.string()), ("v", pa.int64())]))
    writer.append([(("a", 1), 0, 1)], 0, 5)
    writer.expire()
    running = DeltaExport(
        None, client, "s", str(tmp_path / "delta"), key_columns=["k"], export_id="e1"
    )
    running._hold_at(3)
    assert undeclared_holders(client, RunSpec(), read_catalog(client)) == []
    with pytest.raises(InvalidUsage, match="export 'e1' is running"):
        drop_object(client, "e1")
    assert "export.e1" in client.state("s").critical_readers
    running.close()  # stopped: now it is undeclared, and dropped
    assert [h.name for h in undeclared_holders(client, RunSpec(), read_catalog(client))] == ["e1"]
    assert [d.name for d in drop_object(client, "e1")] == ["e1"]
    assert "export.e1" not in client.state("s").critical_readers
