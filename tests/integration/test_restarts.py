"""Faults under Spark and leases that ran out (issue 12, items 3 and 6).

Three runs in a row of a declaration with every source kind (item 2) are
``tests/integration/test_cli_restarts.py``, through ``timeshard run``.

* An input part that vanishes under a view's Spark read is a fault: it is
  retried and shown as health, never written into the view.
* An ingestion whose writer lease ran out (a paused process, then GC) opens
  new handles and goes on from persist.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.compute import MaterializedView, ViewDefinition
from timeshard.errors import LeaseExpired
from timeshard.location import Location
from timeshard.persist import PersistClient, PersistConfig
from timeshard.storage.health import STATUS_SHARD, latest_health
from timeshard.storage.ingest import Ingestion
from timeshard.storage.sources import CounterGenerator


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


@pytest.mark.parametrize(
    "collected",
    [("c", "c.remap"), ("c", "c.remap", STATUS_SHARD)],
    ids=["outputs", "and-the-health-shard"],
)
def test_an_ingestion_whose_lease_ran_out_reopens_and_goes_on(
    spark: SparkSession, tmp_path: Path, collected: tuple[str, ...]
) -> None:
    """The leases of its handles ran out and were collected: one failed step (health),
    then new handles. With the status shard's lease collected too, reporting that step
    raised in its stead, before the handles were reopened: stalled for good."""
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
    for shard in collected:
        client.gc(shard)
    raised = None
    try:
        ingestion.step()
    except LeaseExpired as e:
        raised = e
    assert raised is not None  # reported once (health stalled) ...
    clock.now += 10
    ingestion.step()  # ... then it goes on with new handles
    assert before < client.state("c").upper
    assert latest_health(client)["c"]["status"] == "running"
    ingestion.close()


def test_an_instance_behind_another_keeps_the_bindings_it_reads_back(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Two instances of one source. While A is in a step (after its mint), B mints newer
    bindings and writes the outputs past them; A's hold on the remap shard followed the
    outputs' upper, past A's own remap upper, and A's next sync could not read back from
    there (SinceError at every step after)."""
    clock = Clock()
    client = PersistClient(Location.embedded(tmp_path), PersistConfig(clock=clock))
    a = Ingestion(spark, client, CounterGenerator(name="c"), clock=clock)
    b = Ingestion(spark, client, CounterGenerator(name="c"), clock=clock)
    a.step()
    real = a._read

    def b_goes_first(start: Any, end: Any) -> Any:
        for _ in range(2):
            clock.now += 10
            b.step()
        return real(start, end)

    clock.now += 10
    a._read = b_goes_first  # type: ignore[method-assign]
    a.step()
    a._read = real  # type: ignore[method-assign]
    a.holds.flush()  # the holds move now (they lag a few steps otherwise)
    before = client.state("c").upper
    clock.now += 10
    a.step()
    assert before < client.state("c").upper
    a.close()
    b.close()


def test_a_view_whose_cached_state_is_lost_rebuilds_it(spark: SparkSession, tmp_path: Path) -> None:
    """A GROUP BY's per-group state is kept in local checkpoints, which go with the
    executor that computed them. Here their blocks are removed (the RDDs the view cached,
    unpersisted): one tick fails on them, and the sink, which then writes the next batch from
    snapshots, rebuilds the state from the inputs (as the upsert now does too)."""
    client = PersistClient(Location.embedded(tmp_path))
    schema = pa.schema([("k", pa.string()), ("v", pa.int64())])
    writer = client.open_writer("inp", schema)
    writer.append([(("a", 1), 0, 1), (("b", 2), 0, 1)], 0, 1)
    sql = "SELECT k, sum(v) AS s, count(*) AS n FROM inp GROUP BY k"
    definition = ViewDefinition("v", {"inp": "inp"}, sql=sql)
    jsc = spark.sparkContext._jsc  # type: ignore[union-attr]
    others = set(jsc.getPersistentRDDs().keys())
    view = MaterializedView.install(
        spark, client, definition, background_io=False, check_every_s=None
    )
    assert view.desired.plan.aggregate is not None, view.desired.plan.classification
    view.catch_up()
    writer.append([(("a", 3), 1, 1)], 1, 2)
    view.catch_up()  # a delta: the state is cached now
    lost = [rdd for i, rdd in jsc.getPersistentRDDs().items() if i not in others]
    assert lost
    for rdd in lost:
        rdd.unpersist(True)
    writer.append([(("b", 5), 2, 1)], 2, 3)
    view.step()
    assert view.sink.stats.failures == 1, view.sink.stats
    for t in range(3, 5):
        writer.append([(("a", 10 * t), t, 1)], t, t + 1)
        view.catch_up()
    assert view.sink.stats.failures == 1, view.sink.stats
    reader = client.open_leased_reader("v")
    rows = reader.snapshot(4).to_pylist()
    assert sorted((r["k"], r["s"], r["n"], r["_diff"]) for r in rows) == [
        ("a", 74, 4, 1),
        ("b", 7, 2, 1),
    ]
    reader.expire()
    view.close()


def test_a_view_whose_leases_ran_out_reopens_them_and_goes_on(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The view's writer and the leases it reads its inputs through all ran out (a paused
    process, then GC): the failure is health, then the sink opens new ones and goes on.
    It reopened only its writer before, and read through the dead input leases forever."""
    clock = Clock()
    config = PersistConfig(
        clock=clock, reader_lease_ms=1000, writer_lease_ms=1000, heartbeat_interval_ms=0
    )
    client = PersistClient(Location.embedded(tmp_path), config)
    schema = pa.schema([("k", pa.string()), ("v", pa.int64())])
    writer = client.open_writer("inp", schema)
    writer.append([(("a", 1), 0, 1)], 0, 1)
    definition = ViewDefinition("v", {"inp": "inp"}, sql="SELECT k, v * 10 AS w FROM inp")
    view = MaterializedView.install(spark, client, definition, background_io=False)
    view.catch_up()
    clock.now += 60_000  # paused far longer than a lease, then someone collects
    client.gc("inp")
    client.gc("v")
    assert not client.state("inp").leased_readers, "the view's input leases ran out"
    writer = client.open_writer("inp", schema)
    writer.append([(("b", 2), 1, 1)], 1, 2)
    for _ in range(4):  # a failed step is retried at the next one
        clock.now += 10
        view.step()
        if (client.state("v").upper.time or 0) >= 2:
            break
    assert client.state("v").upper.time == 2, view.sink.last_error
    out = client.open_unleased_reader("v")
    at1 = sorted((r["k"], r["w"], r["_err"]) for r in out.snapshot(1).to_pylist())
    assert at1 == [("a", 10, None), ("b", 20, None)]
    view.close()
    writer.expire()
