"""Stops and restarts, faults under Spark, and leases that ran out (issue 12, items 2, 3, 6).

* Three runs in a row of one declaration with every source kind (KEY VALUE
  and FILE under UPSERT, COUNTER, AUCTION, TPCH) and views: each resumes where
  the last stopped, and verify finds every shard and view right.
* An input part that vanishes under a view's Spark read is a fault: it is
  retried and shown as health, never written into the view.
* An ingestion whose writer lease ran out (a paused process, then GC) opens
  new handles and goes on from persist.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
from pyspark.sql import SparkSession

from timeshard.cli.spec import LocationSpec, RunSpec, SourceSpec, ViewSpec
from timeshard.compute import MaterializedView, ViewDefinition
from timeshard.controller import Pipeline
from timeshard.errors import LeaseExpired
from timeshard.location import Location
from timeshard.persist import PersistClient, PersistConfig
from timeshard.storage.health import STATUS_SHARD
from timeshard.storage.ingest import Ingestion
from timeshard.storage.sources import CounterGenerator
from timeshard.verify import verify_location


def every_kind(directory: Path, events: Path) -> RunSpec:
    return RunSpec(
        location=LocationSpec(dir=str(directory)),
        source=[
            SourceSpec(
                name="kv",
                kind="key_value",
                envelope="upsert",
                key_columns=["key"],
                options={"keys": 50, "value_size": 4, "rate": 20, "partitions": 2},
            ),
            SourceSpec(
                name="events",
                kind="file",
                envelope="upsert",
                key_columns=["id"],
                options={"path": str(events), "format": "json"},
                columns={"id": "int64", "v": "int64"},
            ),
            SourceSpec(name="counter", kind="counter"),
            SourceSpec(name="auction", kind="auction"),
            SourceSpec(name="tpch", kind="tpch", options={"scale_factor": 0.001}),
        ],
        view=[
            ViewSpec(
                name="bids_per_buyer",
                inputs={"bids": "auction.bids"},
                sql="SELECT buyer, count(*) AS n FROM bids GROUP BY buyer",
            ),
            ViewSpec(
                name="events_total",
                inputs={"e": "events"},
                sql="SELECT count(*) AS n, sum(v) AS s FROM e",
            ),
        ],
    )


def test_three_runs_in_a_row_resume_where_they_stopped(spark: SparkSession, tmp_path: Path) -> None:
    events = tmp_path / "events"
    events.mkdir()
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    spec = every_kind(tmp_path / "loc", events)
    uppers: list[dict[str, int | None]] = []
    for run in range(3):
        lines = [json.dumps({"id": i % 7, "v": run * 100 + i}) for i in range(10)]
        (events / f"in-{run}.json").write_text("\n".join(lines) + "\n")
        pipeline = Pipeline(spark, client, spec)
        for _ in range(3):
            assert pipeline.step() == {}
        uppers.append({s: u.time for s, u in pipeline.uppers().items()})
        pipeline.close()
        for shard in pipeline.shards():  # every shard readable at upper - 1 after a stop
            state = client.state(shard)
            assert state.upper.time and state.since.less_equal(state.upper.time - 1), (
                shard,
                state.since,
                state.upper,
            )
    for shard in uppers[0]:
        assert (uppers[0][shard] or 0) < (uppers[1][shard] or 0) < (uppers[2][shard] or 0), shard
    health = client.open_unleased_reader(STATUS_SHARD)
    upper = health.upper().time
    assert upper is not None
    rows = health.snapshot(upper - 1).to_pylist()
    stalled = [r for r in rows if r["status"] == "stalled"]
    assert not stalled, stalled
    report = verify_location(client, spark=lambda packages: spark, samples=3, seed=1)
    assert report.ok, [f.message for f in report.findings]


def test_a_part_that_vanishes_under_a_read_is_retried_not_written(
    spark: SparkSession, tmp_path: Path
) -> None:
    location = Location.embedded(tmp_path)
    client = PersistClient(location)
    schema = pa.schema([("k", pa.string()), ("v", pa.int64())])
    writer = client.open_writer("inp", schema)
    client.open_critical_since("inp", "test", "")
    writer.append([(("a", 1), 0, 1), (("b", 2), 0, 1)], 0, 1)
    definition = ViewDefinition("v", {"inp": "inp"}, sql="SELECT k, v * 10 AS w FROM inp")
    view = MaterializedView.install(spark, client, definition, background_io=False)
    client.open_critical_since("v", "test", "")
    view.catch_up()
    writer.append([(("c", 3), 1, 1)], 1, 2)
    [part] = [p for b in client.state("inp").batches for p in b.parts if p.ts_min == 1]
    path = tmp_path / "blob" / part.key
    aside = tmp_path / "aside.parquet"
    shutil.move(path, aside)
    view.step()
    assert view.sink.last_error is not None
    assert client.state("v").upper.time == 1  # nothing written for time 1
    status = client.open_unleased_reader(STATUS_SHARD)
    rows = status.snapshot((status.upper().time or 1) - 1).to_pylist()
    assert [r["status"] for r in rows if r["object"] == "v"] == ["stalled"]
    shutil.move(aside, path)
    view.catch_up()
    out = client.open_unleased_reader("v")
    at1 = sorted((r["k"], r["w"], r["_err"]) for r in out.snapshot(1).to_pylist())
    assert at1 == [("a", 10, None), ("b", 20, None), ("c", 30, None)]
    view.step()
    rows = status.snapshot((status.upper().time or 1) - 1).to_pylist()
    assert [r["status"] for r in rows if r["object"] == "v"] == ["running"]
    view.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def test_an_ingestion_whose_lease_ran_out_reopens_and_goes_on(
    spark: SparkSession, tmp_path: Path
) -> None:
    clock = Clock()
    config = PersistConfig(
        clock=clock, reader_lease_ms=1000, writer_lease_ms=1000, heartbeat_interval_ms=0
    )
    client = PersistClient(Location.embedded(tmp_path), config)
    ingestion = Ingestion(spark, client, CounterGenerator(name="c"), clock=clock)
    ingestion.step()
    clock.now += 10  # another tick
    ingestion.step()
    before = client.state("c").upper
    clock.now += 60_000  # paused far longer than a lease, then someone collects
    client.gc("c")
    client.gc("c.remap")
    raised = None
    try:
        ingestion.step()
    except LeaseExpired as e:
        raised = e
    assert raised is not None  # reported once (health stalled) ...
    clock.now += 10
    ingestion.step()  # ... then it goes on with new handles
    assert before < client.state("c").upper
    ingestion.close()
