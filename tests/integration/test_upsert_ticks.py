"""What an UPSERT tick costs: Spark jobs and compare-and-sets, asserted (they are deterministic).

A data tick of an UPSERT export is one Spark job once its arrangement is
built (and writes one part while the state is small), an idle tick none; a
tick does at most three compare-and-sets (the remap's mint, the output's
append, one since downgrade).
"""

from __future__ import annotations

import itertools
import threading
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from tests.integration.paced_source import Rounds

from timeshard.location import Location
from timeshard.location.consensus import CaSResult, Consensus, VersionedData
from timeshard.persist import PersistClient, PersistConfig
from timeshard.spark.jobs import JobCounter
from timeshard.storage.ingest import Ingestion
from timeshard.storage.sources import KeyValueGenerator
from timeshard.storage.upsert_spark import SparkFeedbackUpsert
from timeshard.storage.upsert_state import (
    HASH,
    KEY,
    MAX_DELTAS,
    MERGE_POOL,
    ArrangedState,
    same_key,
)

pytestmark = pytest.mark.spark


class CountingConsensus:
    """A consensus that counts the compare-and-sets that the thread that created it committed.

    Background threads (compaction, lease heartbeats) are not the tick's; a
    compare-and-set of the tick that one of them raced (a seqno mismatch, then
    retried) is not counted twice.
    """

    def __init__(self, inner: Consensus) -> None:
        self.inner = inner
        self.thread = threading.get_ident()
        self.cas = 0

    def compare_and_set(self, key: str, expected: int | None, new: VersionedData) -> CaSResult:
        result = self.inner.compare_and_set(key, expected, new)
        if threading.get_ident() == self.thread and result is CaSResult.COMMITTED:
            self.cas += 1
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def ingestion(
    spark: SparkSession, tmp_path: Path, rate: int, config: PersistConfig | None = None
) -> tuple[Ingestion, Rounds, Any]:
    embedded = Location.embedded(tmp_path)
    counting = CountingConsensus(embedded.consensus)
    client = PersistClient(Location(embedded.blob, counting), config)  # type: ignore[arg-type]
    clock = itertools.count(1)
    source = Rounds(KeyValueGenerator(keys=100_000, value_size=8, partitions=2, rate=rate))
    ing = Ingestion(
        spark, client, source, envelope="upsert", key_columns=["key"], clock=lambda: next(clock)
    )
    return ing, source, counting


def test_a_data_tick_is_one_spark_job_and_an_idle_tick_none(
    spark: SparkSession, tmp_path: Path
) -> None:
    # 20k commands a round; no compaction, which would merge the batches looked at.
    no_compaction = PersistConfig(compaction_enabled=False)
    ing, source, _ = ingestion(spark, tmp_path, rate=10_000, config=no_compaction)
    upsert = ing.exports[""].upsert
    assert upsert is not None
    source.rounds = 2
    ing.step(), ing.step()  # builds the arrangement (a rehydration of the empty shard)
    for _ in range(3):
        source.rounds = 1
        upsert.state.wait_for_merges()
        with upsert.state.merges_paused(), JobCounter(spark) as jobs:
            report = ing.step()
        assert report.appended == 1
        assert jobs.count == 1, jobs.count
        batch = ing.client.state("kv").batches[-1]
        # A small state: the tick runs in one task and writes one part.
        assert len(batch.parts) == 1 and batch.parts[0].num_rows > 0, batch.parts
    upper = ing.client.state("kv").upper.time
    with upsert.state.merges_paused(), JobCounter(spark) as jobs:
        report = ing.step()  # idle: no records in range
    assert jobs.count == 0 and report.appended == 1
    state = ing.client.state("kv")
    assert state.upper.time is not None and upper is not None and state.upper.time > upper
    assert upsert.state.time == state.upper.time
    ing.close()


def test_a_tick_does_at_most_three_compare_and_sets(spark: SparkSession, tmp_path: Path) -> None:
    ing, source, counting = ingestion(spark, tmp_path, rate=50)
    source.rounds = 2
    ing.step(), ing.step()
    counts = []
    for i in range(20):
        source.rounds = i % 3  # data ticks and idle ones
        before = counting.cas
        ing.step()
        counts.append(counting.cas - before)
    # The mint and the append every tick; a since downgrade now and then.
    assert min(counts) == 2 and max(counts) == 3, counts
    assert sum(c == 3 for c in counts) <= len(counts) // 4, counts
    ing.close()


def test_struct_keys_with_null_fields_are_equal_in_joins(spark: SparkSession) -> None:
    """``=`` on ``_key`` is the null-safe comparison the upsert relies on (invariant 2)."""
    rows = [(None, 1), ("x", None), (None, None), ("x", 2)]
    left = spark.createDataFrame(rows, "a string, b long").select(F.struct("a", "b").alias("l"))
    right = spark.createDataFrame(rows, "a string, b long").select(F.struct("a", "b").alias("r"))
    hashed = left.hint("shuffle_hash").join(right, left["l"] == right["r"])
    merged = left.hint("merge").join(right, left["l"] == right["r"])
    for joined in (hashed, merged):
        got = sorted(repr((tuple(r["l"]), tuple(r["r"]))) for r in joined.collect())
        assert got == sorted(repr((r, r)) for r in rows), got


def test_the_layers_hash_join_matches_keys_null_safely_and_floats_by_value(
    spark: SparkSession,
) -> None:
    """``same_key`` on ``_h`` and ``_key`` finds exactly the equal keys: null fields equal,
    ``-0.0`` = ``0.0``, and hash-equal keys told apart by the key comparison."""
    from pyspark.sql.types import DoubleType, StringType

    state = ArrangedState(spark, ["a", "b"], [], {"a": StringType(), "b": DoubleType()})
    rows = [(None, 1.0), ("x", None), (None, None), ("x", 2.0), ("z", 0.0), ("z", -0.0)]
    df = spark.createDataFrame(rows, "a string, b double")
    left = state.partitioned(state.hashed(df.select(state.key_of(df))))
    probe = left.select(F.col(HASH).alias("_rh"), F.col(KEY).alias("_rk"))
    joined = left.join(probe, same_key("_rh", "_rk"))
    got = sorted(repr((tuple(r[KEY]), tuple(r["_rk"]))) for r in joined.collect())
    zeros = [("z", x) for x in (0.0, -0.0)]
    want = [(r, r) for r in rows[:4]] + [(a, b) for a in zeros for b in zeros]
    assert got == sorted(repr(p) for p in want), got
    # Equal hashes alone do not match: a key against another key given the same _h.
    forged = left.where(F.col(f"{KEY}._k0") == "x").select(F.lit(7).cast("long").alias(HASH), KEY)
    key = F.struct(F.lit("y").alias("_k0"), F.lit(None).cast("double").alias("_k1"))
    other = forged.select(F.col(HASH).alias("_rh"), key.cast(state.key_type).alias("_rk"))
    assert forged.join(other, same_key("_rh", "_rk")).count() == 0


def test_layers_are_not_shuffled_by_a_tick(spark: SparkSession, tmp_path: Path) -> None:
    """The tick's plan exchanges the commands only (the layers are partitioned like them), and
    joins them once with every layer (one hash map of the commands, however many layers)."""
    schema = KeyValueGenerator().payload_schema()
    client = PersistClient(Location.embedded(tmp_path))
    upsert = SparkFeedbackUpsert(spark, client, "out", schema, ["key"])
    with upsert.state.merges_paused():
        for t in range(3):
            upsert.apply(commands(spark, t, 1000), t + 1)
        with upsert.state.pinned() as layers:
            assert len(layers) == 3
            winners = upsert._winners(upsert._keyed(commands(spark, 3, 10), 3, 4), layers)
            plan = winners._jdf.queryExecution().executedPlan().toString()
    exchanges = [line for line in plan.splitlines() if "Exchange" in line]
    assert len(exchanges) == 1 and "REPARTITION_BY_NUM" in exchanges[0], plan
    assert plan.count("ShuffledHashJoin") == 1 and "BuildLeft" in plan, plan
    assert plan.count("Scan ExistingRDD") == len(layers), plan
    assert f"hashpartitioning({HASH}" in exchanges[0], plan
    upsert.close()


def test_a_background_merge_started_under_a_job_tag_runs_without_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The merger thread inherits the Spark local properties of the thread that pushed the
    layer. A server's CREATE pushes layers under its connection's job tag: the merges it
    started carried the tag, and a later cancel of a statement of that connection canceled
    them (a merge failed, its layers stayed unmerged)."""
    tag = "timeshard-test-statement"
    schema = KeyValueGenerator().payload_schema()
    upsert = SparkFeedbackUpsert(
        spark, PersistClient(Location.embedded(tmp_path)), "out", schema, ["key"]
    )
    context = spark.sparkContext
    context.addJobTag(tag)
    try:
        with JobCounter(spark) as jobs:
            for t in range(MAX_DELTAS + 2):  # one merge of the layers over the base is due
                upsert.apply(commands(spark, t, 1000), t + 1)
                upsert.state.settle()  # its layer is filled: the merges due start
                upsert.state.wait_for_merges()
    finally:
        context.removeJobTag(tag)
    upsert.close()
    assert jobs.by_pool().get(MERGE_POOL, 0) > 0, jobs.by_pool()  # merges ran
    store = context._jsc.sc().statusStore()  # type: ignore[union-attr]
    tracker = context._jsc.sc().statusTracker()  # type: ignore[union-attr]
    tagged = sorted(tracker.getJobIdsForTag(tag))
    pools = {
        job: store.lastStageAttempt(store.job(job).stageIds().apply(0)).schedulingPool()
        for job in tagged
    }
    assert tagged and MERGE_POOL not in pools.values(), pools


def commands(spark: SparkSession, t: int, n: int) -> Any:
    return spark.range(n).select(
        (F.xxhash64(F.lit(t), "id") % 500).alias("key"),
        F.concat(F.lit(f"v{t}-"), F.col("id").cast("string")).alias("value"),
        F.lit(t).cast("long").alias("_ts"),
        F.col("id").alias("_order"),
        F.lit(False).alias("_delete"),
        F.lit(None).cast("string").alias("_err"),
    )


LONG_MAX = 2**63 - 1


def estimated_size(df: Any) -> int:
    """Spark's size estimate of ``df`` in bytes; one of over 4,300 digits counts as 10**4300."""
    try:
        return int(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())
    except ValueError:  # py4j refuses to convert an integer of that many digits
        return 10**4300


def test_a_checkpoint_keeps_no_size_estimate_of_the_plan_it_came_from(
    spark: SparkSession,
) -> None:
    from timeshard.spark.checkpoint import local_checkpoint

    # A join's estimate is the product of its inputs': a layer joined with itself
    # and checkpointed, six times over, had an estimate of over 500 digits.
    layer = local_checkpoint(spark.range(0, 100).repartition(4, "id"), eager=True)
    for _ in range(6):
        joined = layer.join(layer.withColumnRenamed("id", "other"), F.col("id") == F.col("other"))
        layer = local_checkpoint(joined.select("id").repartition(4, "id"), eager=True)
        assert estimated_size(layer) <= LONG_MAX
    assert layer.count() == 100
    # The partitioning stays: a join of two such layers on their key moves no rows.
    plan = layer.join(layer.withColumnRenamed("id", "other"), F.col("id") == F.col("other"))
    physical = plan._jdf.queryExecution().executedPlan().toString()
    assert physical.count("Exchange") == 0, physical


def test_layers_size_estimates_stay_bounded_over_many_ticks(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Each layer is computed from a join with the layers before it, and merges
    # join two layers: estimates kept from those plans grew without bound, and a
    # long-running source spent ever longer planning its ticks (BigInteger.multiply).
    ing, source, _ = ingestion(spark, tmp_path, rate=200)
    upsert = ing.exports[""].upsert
    assert upsert is not None
    for _ in range(12):
        source.rounds = 1
        ing.step()
    upsert.state.wait_for_merges()
    with upsert.state.pinned() as layers:
        assert layers
        sizes = [estimated_size(layer.df) for layer in layers]
    assert max(sizes) <= LONG_MAX, [len(str(s)) for s in sizes]
    ing.close()
