"""DROP SOURCE records the source, and each of its outputs, as ``dropped`` in its health.

The engine reported ``dropped`` only through a sink's Health (a source reports
its own), and closing an ingestion reported nothing: ``timeshard status`` kept
showing a dropped source as ``stopped`` (its last ``running``).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.server.engine import Engine, _Object
from timeshard.server.statements import parse
from timeshard.status import status_rows
from timeshard.storage.health import latest_health
from timeshard.storage.ingest import Ingestion
from timeshard.storage.sources import AuctionGenerator, CounterGenerator


def test_drop_source_records_it_dropped(tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    ingestion = Ingestion(None, client, CounterGenerator(name="c"), clock=lambda: 10**12 + 5)
    ingestion.resume()  # reports running, as its ticks do
    engine = Engine(SimpleNamespace(), client, follow_s=3600)  # no follower pass in a test
    sql = "CREATE SOURCE c FROM LOAD GENERATOR COUNTER"
    engine.objects["c"] = _Object("c", "source", sql, 1, ingestion, ["c"])
    try:
        engine.execute(parse("DROP SOURCE c"))
    finally:
        engine.close()
    assert latest_health(client)["c"]["status"] == "dropped"
    [row] = [r for r in status_rows(client) if r["object"] == "c"]
    assert row["status"] == "dropped" and row["write_frontier"] is None


def test_a_dropped_ingestion_records_each_output_dropped(tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    ingestion = Ingestion(None, client, AuctionGenerator(name="a"), clock=lambda: 10**12)
    outputs = sorted(e.shard for e in ingestion.exports.values())
    assert len(outputs) > 1
    ingestion.drop()
    health = latest_health(client)
    assert {o: health[o]["status"] for o in ["a", *outputs]} == dict.fromkeys(
        ["a", *outputs], "dropped"
    )
    assert not client.state(outputs[0]).writers  # closed: its handles are released
