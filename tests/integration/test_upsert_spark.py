"""The Spark feedback upsert against the last-value-per-key model, on random histories.

``_order`` is an offset, or a FILE source's position ``(_partition, _offset)``
with offsets that repeat across files (a struct, compared field by field).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient, ReadHandle
from timeshard.storage.upsert_spark import SparkFeedbackUpsert
from timeshard.storage.upsert_state import ArrangedState, Layer

pytestmark = pytest.mark.spark
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])


def random_commands(rng: random.Random, n: int, files: bool = False) -> list[dict[str, Any]]:
    out, t, offsets = [], 0, {"a.jsonl": 0, "a/b.jsonl": 0, "a-b.jsonl": 0}
    for offset in range(n):
        t += rng.choice([0, 0, 1, 2])
        name = rng.choice(sorted(offsets)) if files else "a.jsonl"
        place = (name, offsets[name])
        offsets[name] += 10
        kind = rng.choice(["value", "value", "value", "delete", "error"])
        out.append(
            {
                "k": rng.choice("abcd"),
                "v": rng.randint(0, 9) if kind == "value" else None,
                "_ts": t,
                "_order": place if files else offset,
                "_delete": kind == "delete",
                "_err": f"bad value @{offset}" if kind == "error" else None,
            }
        )
    return out


def model(cmds: list[dict[str, Any]], at: int) -> dict[str, tuple[Any, Any]]:
    want: dict[str, tuple[Any, Any]] = {}
    for c in sorted((c for c in cmds if c["_ts"] <= at), key=lambda c: (c["_ts"], c["_order"])):
        if c["_err"] is not None:
            want[c["k"]] = (None, c["_err"])
        elif c["_delete"]:
            want.pop(c["k"], None)
        else:
            want[c["k"]] = (c["v"], None)
    return want


def history(
    spark: SparkSession, tmp_path: Path, rng: random.Random, files: bool = False
) -> tuple[list[dict[str, Any]], int, PersistClient, ReadHandle, DataFrame]:
    """40 random commands, their final upper, a client, a reader holding "out", the DataFrame."""
    cmds = random_commands(rng, 40, files)
    client = PersistClient(Location.embedded(tmp_path))
    hold = client.open_leased_reader("out", SCHEMA)
    order = "struct<_partition: string, _offset: long>" if files else "long"
    df = spark.createDataFrame(
        cmds, f"k string, v long, _ts long, _order {order}, _delete boolean, _err string"
    )
    return cmds, cmds[-1]["_ts"] + 1, client, hold, df


def as_if_large(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every tick as over a large state: a task per partition, the new layer left where
    the pass computed it, its partitioning stated (not shuffled again)."""
    monkeypatch.setattr("timeshard.storage.upsert_spark.SMALL_STATE_BYTES", 0)


def assert_hash_partitioned(instance: SparkFeedbackUpsert) -> None:
    """Every row of every layer is in the partition Spark's ``repartition(n, _h)`` puts it in,
    whatever the plan states."""
    n = instance.state.partitions
    with instance.state.pinned() as layers:
        for layer in layers:
            misplaced = layer.df.where(f"spark_partition_id() != pmod(hash(_h), {n})")
            assert misplaced.count() == 0
            assert layer.df.rdd.getNumPartitions() == n


@pytest.mark.parametrize(
    "seed,files,large",
    [(0, False, False), (1, False, False), (2, True, False), (3, True, False), (4, False, True)],
)
def test_spark_upsert_matches_model(
    spark: SparkSession,
    tmp_path: Path,
    seed: int,
    files: bool,
    large: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if large:
        as_if_large(monkeypatch)
    rng = random.Random(seed)
    cmds, final_upper, client, hold, df = history(spark, tmp_path, rng, files)
    instances = [SparkFeedbackUpsert(spark, client, "out", SCHEMA, ["k"]) for _ in range(2)]
    upper = 0
    while upper < final_upper:
        upper = min(final_upper, upper + rng.randint(1, 4))
        who = rng.randrange(2)
        if rng.random() < 0.3:
            instances[who] = SparkFeedbackUpsert(spark, client, "out", SCHEMA, ["k"])
        instances[who].apply(df, upper)
        instances[1 - who].apply(df, upper)
    for at in range(final_upper):
        rows = hold.snapshot(at).to_pylist()
        assert all(r["_diff"] == 1 for r in rows), rows
        assert {r["k"]: (r["v"], r["_err"]) for r in rows} == model(cmds, at), at


def arranged(instance: SparkFeedbackUpsert) -> dict[str, tuple[Any, Any]]:
    instance.state.wait_for_merges()  # a merge must not free the layers read here
    content = instance.state.content()
    rows = [] if content is None else content.collect()
    keys = [r["k"] for r in rows]
    assert len(keys) == len(set(keys)), keys
    return {r["k"]: (r["v"], r["_err"]) for r in rows}


def merging(monkeypatch: pytest.MonkeyPatch, policy: str) -> None:
    """Merges of these few-key layers, which by default wait for MAX_DELTAS of them:
    ``into_base`` every two deltas; ``deltas`` every two deltas into one over the base."""
    if policy == "default":
        return
    monkeypatch.setattr("timeshard.storage.upsert_state.MAX_DELTAS", 2)
    if policy == "deltas":  # the deltas never hold a share of the base (unless it is empty)
        monkeypatch.setattr("timeshard.storage.upsert_state.BASE_SHARE", 0)


@pytest.mark.parametrize(
    "large,policy",
    [(False, "default"), (True, "default"), (False, "into_base"), (True, "deltas")],
)
def test_arranged_state_follows_the_shard(
    spark: SparkSession,
    tmp_path: Path,
    large: bool,
    policy: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After every apply (own append, another writer's, a lost lease) and the merges it starts,
    the layers equal the shard, and every layer is partitioned as stated."""
    if large:
        as_if_large(monkeypatch)
    merging(monkeypatch, policy)
    merges: list[tuple[int, bool]] = []  # (layers merged into one, into the base)
    merge = ArrangedState._merge

    def counted(self: ArrangedState, layers: list[Layer], *, into_base: bool) -> Layer:
        merges.append((len(layers), into_base))
        return merge(self, layers, into_base=into_base)

    monkeypatch.setattr(ArrangedState, "_merge", counted)
    rng = random.Random(7)
    cmds, final_upper, client, hold, df = history(spark, tmp_path, rng)
    mine, other = (SparkFeedbackUpsert(spark, client, "out", SCHEMA, ["k"]) for _ in range(2))
    upper, layer_counts = 0, set()
    while upper < final_upper:
        upper = min(final_upper, upper + rng.randint(1, 3))
        if rng.random() < 0.3:
            other.apply(df, upper)  # mine must catch up with what other wrote
        if rng.random() < 0.15:
            mine._reader.expire()  # its since no longer holds: it must rehydrate
        mine.apply(df, upper)  # a no-op (and no sync) if other already reached upper
        if mine.state.time is not None:
            assert arranged(mine) == model(cmds, mine.state.time - 1), mine.state.time
            assert_hash_partitioned(mine)
        rows = hold.snapshot(upper - 1).to_pylist()
        assert {r["k"]: (r["v"], r["_err"]) for r in rows} == model(cmds, upper - 1)
        layer_counts.add(len(mine.state.layers))
    assert max(layer_counts) >= 2, layer_counts  # deltas were kept apart from the base
    if policy == "into_base":  # the base and two deltas, at once
        assert (3, True) in merges, merges
    if policy == "deltas":
        assert (2, False) in merges, merges


def test_an_arrangement_whose_cached_blocks_are_lost_is_rebuilt(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A layer is a local checkpoint, which an executor lost takes with it: every later tick
    failed on the missing blocks until a restart. Here its blocks are removed (the RDDs the
    upsert cached, unpersisted): the next apply fails, the one after rebuilds the state from
    the shard and goes on."""
    rng = random.Random(5)
    cmds, final_upper, client, hold, df = history(spark, tmp_path, rng)
    jsc = spark.sparkContext._jsc  # type: ignore[union-attr]
    others = set(jsc.getPersistentRDDs().keys())
    mine = SparkFeedbackUpsert(spark, client, "out", SCHEMA, ["k"])
    middle = final_upper // 2
    mine.apply(df, middle)
    mine.state.wait_for_merges()
    lost = [rdd for i, rdd in jsc.getPersistentRDDs().items() if i not in others]
    assert lost
    for rdd in lost:
        rdd.unpersist(True)
    with pytest.raises(Exception, match="CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND"):
        mine.apply(df, middle + 1)
    mine.apply(df, final_upper)
    rows = hold.snapshot(final_upper - 1).to_pylist()
    assert {r["k"]: (r["v"], r["_err"]) for r in rows} == model(cmds, final_upper - 1)
    assert arranged(mine) == model(cmds, final_upper - 1)
    mine.close()
    hold.expire()


@pytest.mark.parametrize("large", [False, True])
def test_two_different_commands_at_one_position_are_refused(
    spark: SparkSession, tmp_path: Path, large: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in the Python upsert: InvalidUsage and nothing written, whatever the order of the
    commands (the one that came first won) and whether they win. The same command twice is
    one command, also where its key's row is in several layers."""
    if large:
        as_if_large(monkeypatch)
    ddl = "k string, v long, _ts long, _order long, _delete boolean, _err string"
    client = PersistClient(Location.embedded(tmp_path))
    hold = client.open_leased_reader("out", SCHEMA)
    upsert = SparkFeedbackUpsert(spark, client, "out", SCHEMA, ["k"])
    for t in range(2):  # key a in two layers
        upsert.apply(spark.createDataFrame([("a", t, t, t, False, None)], ddl), t + 1)
    assert len(upsert.state.layers) == 2
    a, b = ("a", 10, 2, 7, False, None), ("a", 20, 2, 7, False, None)
    error, later = ("a", None, 2, 7, False, "bad value"), ("a", 30, 2, 8, False, None)
    for cmds in ([a, b], [b, a], [error, b], [later, b, a, a]):
        with pytest.raises(InvalidUsage, match=r"two different upsert commands at one position"):
            upsert.apply(spark.createDataFrame(cmds, ddl).coalesce(1), 3)
        assert client.state("out").upper.time == 2, cmds
    upsert.apply(spark.createDataFrame([a, a, b, b], ddl).where("v = 10"), 3)
    assert [(r["v"], r["_diff"]) for r in hold.snapshot(2).to_pylist()] == [(10, 1)]
    upsert.close()
    hold.expire()
