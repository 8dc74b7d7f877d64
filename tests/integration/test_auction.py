"""AUCTION with subsources, views over them, health statuses, pause and resume."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from timeshard.cli.main import app
from timeshard.compute import MaterializedView, ViewDefinition
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark import snapshot_df
from timeshard.storage.health import STATUS_SHARD
from timeshard.storage.ingest import Ingestion
from timeshard.storage.sources import AuctionGenerator

pytestmark = pytest.mark.spark

BIDS_PER_USER = "SELECT buyer, count(*) AS bids, sum(amount) AS total FROM bids GROUP BY buyer"


def test_auction_subsources_views_and_health(spark: SparkSession, tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    clock = itertools.count(1)
    ing = Ingestion(spark, client, AuctionGenerator(rate=10), clock=lambda: next(clock))
    for _ in range(3):
        ing.step()
    shards = set(client.list_shards())
    for sub in ("organizations", "users", "accounts", "auctions", "bids"):
        assert f"auction.{sub}" in shards
    upper = ing.resume_upper().time
    assert upper is not None
    bids = client.open_leased_reader("auction.bids").snapshot(upper - 1).to_pylist()
    assert len(bids) == 90 and len({b["id"] for b in bids}) == 90
    users = client.open_leased_reader("auction.users").snapshot(upper - 1).to_pylist()
    assert len(users) == 50
    view = MaterializedView.install(
        spark, client, ViewDefinition("bids_per_user", {"bids": "auction.bids"}, BIDS_PER_USER)
    )
    view.catch_up()
    out = client.open_leased_reader("bids_per_user")
    snap = snapshot_df(spark, client.open_leased_reader("auction.bids"), upper - 1)
    snap.selectExpr(
        "buyer", "amount", "explode(sequence(1, CAST(_diff AS INT)))"
    ).createOrReplaceTempView("bids")
    want = {(r["buyer"], r["bids"], r["total"]) for r in spark.sql(BIDS_PER_USER).collect()}
    got = {(r["buyer"], r["bids"], r["total"]) for r in out.snapshot(upper - 1).to_pylist()}
    assert got == want
    view.close()

    ing.pause()
    before = ing.resume_upper()
    ing.step()
    assert ing.resume_upper() == before
    status = client.open_leased_reader(STATUS_SHARD)
    s_upper = status.fetch_recent_upper().time
    assert s_upper is not None
    rows = {r["object"]: r["status"] for r in status.snapshot(s_upper - 1).to_pylist()}
    assert rows["auction.bids"] == "paused"
    ing.resume()
    ing.step()
    assert before < ing.resume_upper()
    result = CliRunner().invoke(app, ["status", "-l", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    assert '"status": "running"' in result.output
