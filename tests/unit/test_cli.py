"""The ``timeshard shard`` commands against an embedded location."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
from typer.testing import CliRunner

from timeshard.cli.main import app
from timeshard.location import Location
from timeshard.persist import PersistClient

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])
runner = CliRunner()


def make_shard(root: Path) -> None:
    client = PersistClient(Location.embedded(root))
    writer = client.open_writer("orders", SCHEMA)
    writer.append([(("a", 1), 0, 1), (("b", 2), 1, 1)], 0, 2)
    writer.append([(("a", 1), 2, -1)], 2, 3)
    writer.expire()


def test_list_inspect_snapshot_json(tmp_path: Path) -> None:
    make_shard(tmp_path)
    out = runner.invoke(app, ["shard", "list", "--location", str(tmp_path), "--json"])
    assert out.exit_code == 0, out.output
    listed = json.loads(out.output)
    assert [(s["shard"], s["upper"], s["rows"]) for s in listed] == [("orders", 3, 3)]

    out = runner.invoke(app, ["shard", "inspect", "orders", "-l", str(tmp_path), "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["upper"] == 3 and len(doc["batches"]) == 2 and "k: string" in doc["schema"]

    out = runner.invoke(
        app, ["shard", "snapshot", "orders", "--as-of", "1", "-l", str(tmp_path), "--json"]
    )
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)["rows"]
    assert sorted((r["k"], r["_diff"]) for r in rows) == [("a", 1), ("b", 1)]

    out = runner.invoke(app, ["shard", "snapshot", "orders", "-l", str(tmp_path), "--json"])
    assert [r["k"] for r in json.loads(out.output)["rows"]] == ["b"]


def test_tables_render(tmp_path: Path) -> None:
    make_shard(tmp_path)
    for args in (
        ["shard", "list"],
        ["shard", "inspect", "orders"],
        ["shard", "snapshot", "orders", "--as-of", "2"],
        ["shard", "compact", "orders"],
        ["shard", "gc", "orders"],
    ):
        out = runner.invoke(app, [*args, "--location", str(tmp_path)])
        assert out.exit_code == 0, (args, out.output)
    assert "orders" in runner.invoke(app, ["shard", "list", "-l", str(tmp_path)]).output


def test_errors_are_reported(tmp_path: Path) -> None:
    make_shard(tmp_path)
    out = runner.invoke(app, ["shard", "inspect", "../etc", "-l", str(tmp_path)])
    assert out.exit_code != 0
    assert "invalid shard id" in str(out.exception) + out.output
    out = runner.invoke(app, ["shard", "snapshot", "orders", "--as-of", "99", "-l", str(tmp_path)])
    assert out.exit_code != 0
    assert "not before the upper" in str(out.exception) + out.output
    out = runner.invoke(app, ["shard", "list", "--blob", "file:///tmp/x"])
    assert out.exit_code != 0


def test_status_shows_views_and_frontiers(tmp_path: Path) -> None:
    make_shard(tmp_path)
    client = PersistClient(Location.embedded(tmp_path))
    client.open_critical_since("orders", "deploy", "000000000003")
    out = runner.invoke(app, ["status", "-l", str(tmp_path), "--json"])
    assert out.exit_code == 0, out.output
    [row] = json.loads(out.output)
    assert row["kind"] == "view" and row["generation"] == 3 and row["write_frontier"] == 3
    assert runner.invoke(app, ["status", "-l", str(tmp_path)]).exit_code == 0
