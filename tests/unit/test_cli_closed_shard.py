"""``timeshard shard snapshot`` and ``subscribe`` read a closed shard (a dropped view's, say)
at its last time by default, as ``query`` does: it has every update there."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
from typer.testing import CliRunner

from timeshard.cli.main import app
from timeshard.location import Location
from timeshard.persist import PersistClient

runner = CliRunner()


def closed_shard(root: Path) -> None:
    """Shard ``s``: ``a`` at 0, ``b`` at 7, closed at 10, since 8."""
    client = PersistClient(Location.embedded(root))
    writer = client.open_writer("s", pa.schema([("k", pa.string())]))
    writer.append([(("a",), 0, 1)], 0, 5)
    writer.append([(("b",), 7, 1)], 5, 10)
    writer.append([], 10, None)
    writer.expire()
    reader = client.open_leased_reader("s")
    reader.downgrade_since(8)
    reader.expire()


def test_snapshot_of_a_closed_shard_reads_every_update(tmp_path: Path) -> None:
    closed_shard(tmp_path)
    out = runner.invoke(app, ["shard", "snapshot", "s", "-l", str(tmp_path), "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["as_of"] == 9
    assert sorted(r["k"] for r in doc["rows"]) == ["a", "b"]


def test_snapshot_of_a_closed_shard_at_a_time_before_its_since_is_refused(
    tmp_path: Path,
) -> None:
    closed_shard(tmp_path)
    args = ["shard", "snapshot", "s", "-l", str(tmp_path), "--as-of", "3"]
    out = runner.invoke(app, args)
    assert out.exit_code != 0
    assert "readable from 8 on" in str(out.exception)


def test_subscribe_to_a_closed_shard_starts_at_its_last_time(tmp_path: Path) -> None:
    closed_shard(tmp_path)
    out = runner.invoke(app, ["subscribe", "s", "-l", str(tmp_path), "--seconds", "0"])
    assert out.exit_code == 0, (out.output, out.exception)
    rows = [json.loads(line) for line in out.output.splitlines()]
    assert sorted(r["k"] for r in rows if "k" in r) == ["a", "b"]
    assert {r["_ts"] for r in rows if "k" in r} == {9}
