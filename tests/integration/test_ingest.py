"""Ingestion on Spark: load generators reclocked into shards, exactly once across restarts."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from tests.integration.paced_source import Rounds

from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark.jobs import JobCounter
from timeshard.storage import REMAP_SCHEMA, Remap
from timeshard.storage.file_source import FileSource
from timeshard.storage.ingest import Ingestion
from timeshard.storage.reclock import reclock_df
from timeshard.storage.sources import CounterGenerator, KeyValueGenerator

pytestmark = pytest.mark.spark


def kv() -> KeyValueGenerator:
    return KeyValueGenerator(keys=20, value_size=8, partitions=2, rate=7, seed=3)


def test_key_value_upsert_survives_restarts(spark: SparkSession, tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    clock = itertools.count(1)
    ing = Ingestion(
        spark, client, kv(), envelope="upsert", key_columns=["key"], clock=lambda: next(clock)
    )
    hold = client.open_leased_reader("kv")
    # The model below reclocks every record, so it holds every binding: without a
    # reader holding it, the remap shard compacts bindings the outputs no longer need.
    _hold_remap = client.open_leased_reader("kv.remap", REMAP_SCHEMA)
    for _ in range(3):
        ing.step()
    # Another instance binds more input and dies before writing any output.
    Remap(client, "kv.remap").mint(next(clock) + 5, {"0": 28, "1": 28})
    for _ in range(2):  # a restart: a fresh generator and pipeline
        ing = Ingestion(
            spark, client, kv(), envelope="upsert", key_columns=["key"], clock=lambda: next(clock)
        )
        for _ in range(2):
            ing.step()
    remap = Remap(client, "kv.remap")
    upper = client.state("kv").upper.time
    assert upper == remap.upper.time
    end = remap.frontier_at(upper - 1)
    assert end == {"0": 56, "1": 56}  # 8 rounds of 7: the restarts resumed, not restarted
    records = kv().read(spark, {}, end).collect()
    assert len(records) == 112
    for t in range(upper):
        want: dict[int, str] = {}
        timed = [(remap.reclock(r["_partition"], r["_offset"]), r["_offset"], r) for r in records]
        for _rt, _, r in sorted(
            (x for x in timed if x[0] is not None and x[0] <= t), key=lambda x: (x[0], x[1])
        ):
            want[r["key"]] = r["value"]
        rows = hold.snapshot(t).to_pylist()
        assert all(r["_diff"] == 1 for r in rows)
        assert {r["key"]: r["value"] for r in rows} == want, t
    # The snapshot of the first rounds covers every key once.
    assert len(hold.snapshot(upper - 1).to_pylist()) == 20


def test_counter_none_envelope_with_retractions(spark: SparkSession, tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    clock = itertools.count(1)
    hold = client.open_leased_reader("counter", CounterGenerator().payload_schema())
    _hold_remap = client.open_leased_reader("counter.remap", REMAP_SCHEMA)  # see above
    for _ in range(2):
        ing = Ingestion(
            spark, client, CounterGenerator(rate=4, max_cardinality=6), clock=lambda: next(clock)
        )
        for _ in range(3):
            ing.step()
    remap = Remap(client, "counter.remap")
    upper = client.state("counter").upper.time
    assert upper is not None and remap.frontier_at(upper - 1)["0"] == 24
    for t in range(upper):
        n = remap.frontier_at(t).get("0", 0)
        want: Counter[Any] = Counter(range(max(1, n - 6 + 1), n + 1))
        got: Counter[Any] = Counter()
        for r in hold.snapshot(t).to_pylist():
            got[r["counter"]] += r["_diff"]
        assert +got == want and all(v > 0 for v in got.values()), t


def test_idle_ticks_run_no_spark_job_and_keep_the_arrangement(
    spark: SparkSession, tmp_path: Path
) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    clock = itertools.count(1)
    source = Rounds(kv())
    ing = Ingestion(
        spark, client, source, envelope="upsert", key_columns=["key"], clock=lambda: next(clock)
    )
    upsert = ing.exports[""].upsert
    assert upsert is not None
    source.rounds = 2
    ing.step(), ing.step()
    group = f"idle-{tmp_path.name}"
    spark.sparkContext.setJobGroup(group, "idle ticks")
    try:
        for _ in range(3):
            report = ing.step()
            assert report.appended == 1  # the output's upper moved
    finally:
        spark.sparkContext.setJobGroup("", "")
    assert spark.sparkContext.statusTracker().getJobIdsForGroup(group) == []
    upper = client.state("kv").upper.time
    assert upper == ing.remap.upper.time and upsert.state.time == upper
    source.rounds = 2
    ing.step(), ing.step()
    end = ing.remap.frontier_at(client.state("kv").upper.time - 1)
    assert end == {"0": 28, "1": 28}
    want: dict[int, str] = {}
    for r in sorted(kv().read(spark, {}, end).collect(), key=lambda r: r["_offset"]):
        want[r["key"]] = r["value"]
    reader = client.open_leased_reader("kv")
    rows = reader.snapshot(client.state("kv").upper.time - 1).to_pylist()
    assert all(r["_diff"] == 1 for r in rows)
    assert {r["key"]: r["value"] for r in rows} == want
    # Closing releases every handle the ingestion held: only the test's reader is left.
    ing.close()
    for shard in ("kv", "kv.remap"):
        state = client.state(shard)
        assert state.writers == {}, shard
        assert set(state.leased_readers) == ({reader.reader_id} if shard == "kv" else set())


def test_reclocking_is_an_expression_no_job_of_its_own(spark: SparkSession) -> None:
    """Every record gets the first binding beyond it, and the bindings cost no Spark job."""
    rng = random.Random(5)
    bindings: list[tuple[int, dict[str, int]]] = []
    frontier: dict[str, int] = {}
    for t in range(1, 40):
        for p in rng.sample(["a", "b", "b/c", "é"], rng.randint(0, 3)):
            frontier[p] = frontier.get(p, 0) + rng.randint(0, 5)
        bindings.append((t * 10, dict(frontier)))
    records = spark.sql(
        "SELECT element_at(array('a', 'b', 'b/c', 'é', 'z'), CAST(id % 5 + 1 AS INT)) "
        "AS _partition, id DIV 5 AS _offset FROM range(0, 1000)"
    )
    with JobCounter(spark) as planned:
        timed = reclock_df(spark, records, bindings)
    with JobCounter(spark) as run:
        got = {(r["_partition"], r["_offset"]): r["_ts"] for r in timed.collect()}
    assert planned.count == 0 and run.count == 1, (planned.count, run.count)
    want = {}
    for p in ["a", "b", "b/c", "é", "z"]:
        for o in range(200):
            t = next((t for t, f in bindings if f.get(p, 0) > o), None)
            if t is not None:
                want[(p, o)] = t
    assert got == want
    # Read from a start frontier, records below it do not exist: the tree leaves the
    # intervals below it out, and the records above it keep their times.
    start = bindings[25][1]
    in_range = F.lit(False)
    for p in ["a", "b", "b/c", "é", "z"]:
        in_range = in_range | ((F.col("_partition") == p) & (F.col("_offset") >= start.get(p, 0)))
    above = records.where(in_range)
    clipped = reclock_df(spark, above, bindings, start=start)
    got = {(r["_partition"], r["_offset"]): r["_ts"] for r in clipped.collect()}
    assert got == {(p, o): t for (p, o), t in want.items() if o >= start.get(p, 0)}


def test_reclocking_by_bindings_of_an_earlier_shape_compiles_nothing(spark: SparkSession) -> None:
    """A tick's offsets and times reach Spark's generated code as constants it refers to, not
    as literals it spells out: bindings shaped like an earlier tick's (as many intervals)
    compile no new class, and still time every record right (an INT offset too)."""
    metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics  # type: ignore[union-attr]

    records = spark.sql(  # one plan for every tick: only the bindings change
        "SELECT IF(id % 2 = 0, 'a', 'b') AS _partition, CAST(id DIV 2 AS INT) AS _offset "
        "FROM range(0, 800)"
    )

    def timed(tick: int) -> dict[tuple[str, int], int]:
        lo = 100 * tick
        bindings = [(10 * tick, {"a": lo + 40, "b": lo + 10}), (10 * tick + 5, {"a": lo + 90})]
        rows = reclock_df(spark, records, bindings, start={"a": lo, "b": lo}).collect()
        return {(r["_partition"], r["_offset"]): r["_ts"] for r in rows}

    def want(tick: int) -> dict[tuple[str, int], int]:
        lo = 100 * tick
        a = {("a", o): 10 * tick if o < lo + 40 else 10 * tick + 5 for o in range(lo + 90)}
        return a | {("b", o): 10 * tick for o in range(lo + 10)}

    assert timed(1) == want(1)  # compiles the stage of this shape
    before = metrics.METRIC_COMPILATION_TIME().getCount()
    for tick in (2, 3):
        assert timed(tick) == want(tick)
    assert metrics.METRIC_COMPILATION_TIME().getCount() == before


@pytest.mark.parametrize("envelope", ["upsert", "none"])
def test_a_column_name_with_a_dot_is_ingested(
    spark: SparkSession, tmp_path: Path, envelope: str
) -> None:
    """``v.x`` is a column, not field ``x`` of a struct ``v``: every data step failed with
    UNRESOLVED_COLUMN and the source stalled."""
    data = tmp_path / "in.jsonl"
    data.write_text('{"k": "a", "v.x": 1}\n{"k": "a", "v.x": 2}\n')
    schema = pa.schema([("k", pa.string()), ("v.x", pa.int64())])
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    clock = itertools.count(1)
    ing = Ingestion(
        spark,
        client,
        FileSource("src", data, "json", schema),
        envelope=envelope,
        key_columns=["k"] if envelope == "upsert" else [],
        clock=lambda: next(clock),
    )
    ing.step(), ing.step()
    reader = client.open_leased_reader("src")
    rows = reader.snapshot(client.state("src").upper.time - 1).to_pylist()
    got = sorted((r["k"], r["v.x"], r["_diff"]) for r in rows)
    assert got == ([("a", 2, 1)] if envelope == "upsert" else [("a", 1, 1), ("a", 2, 1)])
    ing.close()
    reader.expire()
