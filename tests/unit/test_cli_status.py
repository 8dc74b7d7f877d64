"""``timeshard status`` shows each view's path from the catalog, without Spark; the catalog
records the path with the view; ``explain`` names an unknown view before Spark starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from timeshard.catalog import Catalog, CatalogEntry, read_catalog, record_view, view_entry
from timeshard.cli.main import app, main
from timeshard.compute.incremental import Classification
from timeshard.compute.view import ViewDefinition
from timeshard.location import Location
from timeshard.persist import PersistClient

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])
runner = CliRunner()
FULL_REASON = "ORDER BY needs the full path"
VIEWS = {
    "v_linear": ("SELECT k, v FROM o WHERE v > 0", Classification("linear", "select/filter")),
    "v_grouped": (
        "SELECT k, count(*) AS n FROM o GROUP BY k",
        Classification("grouped", "GROUP BY 1 key(s): recompute the touched groups"),
    ),
    "v_full": ("SELECT k, v FROM o ORDER BY v LIMIT 3", Classification("full", FULL_REASON)),
    "v_old": ("SELECT k FROM o", None),  # recorded before paths were
}


def make_location(root: Path) -> PersistClient:
    """An input shard ``orders`` and the views of VIEWS, each deployed and cataloged."""
    client = PersistClient(Location.embedded(root))
    client.open_writer("orders", SCHEMA).append([(("a", 1), 0, 1)], 0, 1)
    for name, (sql, classification) in VIEWS.items():
        client.open_writer(name, SCHEMA).expire()
        client.open_critical_since(name, "deploy", "000000000001")
        record_view(client, ViewDefinition(name, {"o": "orders"}, sql), 0, classification)
    return client


def test_status_shows_each_views_path(tmp_path: Path) -> None:
    make_location(tmp_path)
    out = runner.invoke(app, ["status", "-l", str(tmp_path), "--json"])
    assert out.exit_code == 0, out.output
    rows = {r["object"]: r for r in json.loads(out.output)}
    assert {name: rows[name]["path"] for name in VIEWS} == {
        "v_linear": "linear",
        "v_grouped": "grouped",
        "v_full": "full",
        "v_old": None,
    }
    assert rows["v_full"]["path_reason"] == FULL_REASON
    assert rows["v_old"]["path_reason"] is None
    assert rows["orders"]["kind"] == "shard" and rows["orders"]["path"] is None

    out = runner.invoke(app, ["status", "-l", str(tmp_path)], env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    header = next(x for x in lines if "object" in x)
    assert [c.strip() for c in header.split("┃")[1:4]] == ["object", "kind", "path"], header

    def path_of(obj: str) -> str:
        [line] = [x for x in lines if f"│ {obj} " in x]
        return line.split("│")[3].strip()

    assert [path_of(v) for v in VIEWS] == ["linear", "grouped", "full", "-"]
    assert path_of("orders") == ""
    [why] = [x for x in lines if "full path" in x]
    assert why.startswith("v_full ") and why.endswith(FULL_REASON), why


def test_a_long_reason_is_printed_whole_below_the_table(tmp_path: Path) -> None:
    client = make_location(tmp_path)
    reason = "the rewritten query did not analyse (" + "x" * 300 + ")"
    definition = ViewDefinition("v_full", {"o": "orders"}, VIEWS["v_full"][0])
    assert record_view(client, definition, 0, Classification("full", reason)) == 1
    out = runner.invoke(app, ["status", "-l", str(tmp_path)], env={"COLUMNS": "120"})
    assert out.exit_code == 0 and reason in out.output.replace("\n", ""), out.output


def test_status_starts_no_spark(tmp_path: Path) -> None:
    make_location(tmp_path)
    script = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from timeshard.cli.main import app\n"
        f"out = CliRunner().invoke(app, ['status', '-l', {str(tmp_path)!r}, '--json'])\n"
        "assert out.exit_code == 0, out.output\n"
        "print(sorted(m for m in sys.modules if m.startswith('pyspark')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]", done


def test_a_path_that_is_not_a_name_shows_as_unknown(tmp_path: Path) -> None:
    client = make_location(tmp_path)
    Catalog(client).record([CatalogEntry("v_linear", "view", {"path": 7})])
    rows = {
        r["object"]: r
        for r in json.loads(runner.invoke(app, ["status", "-l", str(tmp_path), "--json"]).output)
    }
    assert rows["v_linear"]["path"] is None and rows["v_grouped"]["path"] == "grouped"


def test_the_catalog_records_the_path_and_keeps_as_of(tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    definition = ViewDefinition("v", {"o": "orders"}, "SELECT k FROM o")
    assert record_view(client, definition, 5) == 1  # no classification: no path
    [entry] = read_catalog(client)
    assert "path" not in entry.definition and "path_reason" not in entry.definition

    linear = Classification("linear", "select/project/filter")
    assert record_view(client, definition, 9, linear) == 1  # the path alone changed
    [entry] = read_catalog(client)
    assert entry.definition["path"] == "linear"
    assert entry.definition["path_reason"] == "select/project/filter"
    assert entry.definition["as_of"] == 5  # correct since 5 all along
    assert record_view(client, definition, 12, linear) == 0  # reinstalled unchanged

    changed = ViewDefinition("v", {"o": "orders"}, "SELECT k, v FROM o")
    assert record_view(client, changed, 12, linear) == 1
    [entry] = read_catalog(client)
    assert entry.definition["as_of"] == 12 and entry.definition["sql"] == changed.sql
    assert view_entry(changed, 12, linear).definition == entry.definition


def test_explain_names_an_unknown_view_before_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    make_location(tmp_path)
    monkeypatch.setattr(
        "timeshard.spark.spark_session", lambda **_: pytest.fail("explain started Spark")
    )
    for name, said in [
        ("nope", "no view 'nope' in the catalog"),
        ("orders", "no view 'orders' (a shard, not a view)"),
    ]:
        monkeypatch.setattr(sys, "argv", ["timeshard", "explain", name, "-l", str(tmp_path)])
        with pytest.raises(SystemExit) as e:
            main()
        out = capsys.readouterr()
        assert e.value.code == 2 and out.out == "", out
        assert out.err.startswith("error: ") and out.err.count("\n") == 1, out.err
        assert said in out.err and "'v_grouped'" in out.err, out.err


def test_explain_refuses_a_missing_location(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "nowhere"
    monkeypatch.setattr(sys, "argv", ["timeshard", "explain", "v", "-l", str(missing)])
    with pytest.raises(SystemExit) as e:
        main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and str(missing) in err and not missing.exists()


def test_a_damaged_status_shard_is_its_own_rows_error_and_the_others_still_show(
    tmp_path: Path,
) -> None:
    """Each object's health comes from the latest row of the status shard; once a part of
    that shard is gone, its row holds the error and every other shard still has a row."""
    from timeshard.status import status_rows
    from timeshard.storage.health import STATUS_SHARD, Health, latest_health

    client = make_location(tmp_path)
    assert latest_health(client) == {}  # nothing recorded yet
    health = Health(client)
    health.report("orders", "stalled", "disk full")
    health.close()
    assert latest_health(client)["orders"]["error"] == "disk full"
    rows = {r["object"]: r for r in status_rows(client)}
    assert (rows["orders"]["status"], rows["orders"]["error"]) == ("stalled", "disk full")

    parts = sorted((tmp_path / "blob" / STATUS_SHARD).rglob("*.parquet"))
    assert parts
    for part in parts:
        part.unlink()
    rows = {r["object"]: r for r in status_rows(client)}
    assert rows[STATUS_SHARD]["kind"] == "unreadable", rows[STATUS_SHARD]
    assert rows[STATUS_SHARD]["error"], rows[STATUS_SHARD]
    assert rows["orders"]["kind"] != "unreadable" and rows["orders"]["status"] is None
    assert set(rows) >= {"orders", *VIEWS}


def test_status_shows_the_health_of_objects_without_a_shard(tmp_path: Path) -> None:
    """An export reports under its export id, and a source with subsources under its name:
    neither is a shard, and status showed rows per shard only (their health was recorded
    and never shown)."""
    from timeshard.status import status_rows
    from timeshard.storage.health import Health
    from timeshard.storage.ingest import Ingestion
    from timeshard.storage.sources import AuctionGenerator

    client = make_location(tmp_path)
    health = Health(client)
    health.report("orders_to_pg", "stalled", "ExportError: connection refused")
    health.close()
    auction = Ingestion(None, client, AuctionGenerator(name="auction"))
    auction.resume()  # running, as its ticks report
    rows = {r["object"]: r for r in status_rows(client)}
    export = rows["orders_to_pg"]
    assert (export["kind"], export["status"], export["error"]) == (
        "export",
        "stalled",
        "ExportError: connection refused",
    )
    assert export["write_frontier"] is None and export["since"] is None
    assert (rows["auction"]["kind"], rows["auction"]["status"]) == ("source", "running")
    auction.close()  # its remap shard has no writer left: the process is gone
    assert {r["object"]: r for r in status_rows(client)}["auction"]["status"] == "stopped"

    out = runner.invoke(app, ["status", "-l", str(tmp_path)], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    [line] = [ln for ln in out.output.splitlines() if "orders_to_pg" in ln]
    assert "export" in line and "connection refused" in line
    assert "closed" not in line and "empty" not in line, line
