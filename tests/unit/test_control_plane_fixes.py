"""The control plane's refusals and reports: a run file's location, status over a damaged
catalog, drop of a followed view, and a fault while a run installs a view.

No Spark: the views are opened as their sinks open them, and the pipeline's view install
is replaced where it would start Spark.
"""

from __future__ import annotations

from pathlib import Path

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
