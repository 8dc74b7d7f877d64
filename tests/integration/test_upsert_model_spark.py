"""The Spark feedback upsert against a dict model: composite nullable keys, keyed and
unkeyed err rows, deletes of absent keys, a key deleted and inserted again within one
tick and across ticks; with two instances, restarts and failed compare-and-appends.

At every time ``t`` the output is the last command per key among those at times
``<= t`` (the highest ``_order`` within one time): a value is the key's row, a delete
leaves it absent, an error its err row. An unkeyed error (every key column null) is an
err row of its own, never retracted.
"""

from __future__ import annotations

import contextlib
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.errors import Determinate, Indeterminate
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.upsert_spark import SparkFeedbackUpsert

pytestmark = pytest.mark.spark
SCHEMA = pa.schema([("k1", pa.string()), ("v", pa.int64()), ("k2", pa.int64()), ("w", pa.string())])
KEYS = ["k1", "k2"]
DDL = "k1 string, v long, k2 long, w string, _ts long, _order long, _delete boolean, _err string"


def random_commands(rng: random.Random, n: int) -> list[dict[str, Any]]:
    out, t = [], 0
    for offset in range(n):
        t += rng.choice([0, 0, 0, 1, 2])
        kind = rng.choice(["value", "value", "value", "delete", "error", "unkeyed"])
        k1, k2 = rng.choice(["a", "b", None]), rng.choice([1, 2, None])
        if kind == "unkeyed":
            k1 = k2 = None
        value = kind == "value"
        out.append(
            {
                "k1": k1,
                "v": rng.choice([0, 1, None]) if value else None,
                "k2": k2,
                "w": rng.choice(["x", "y"]) if value else None,
                "_ts": t,
                "_order": offset,
                "_delete": kind == "delete",
                "_err": f"bad @{offset}" if kind in ("error", "unkeyed") else None,
            }
        )
    rng.shuffle(out)  # the winner never depends on the order of the commands
    return out


def model(cmds: list[dict[str, Any]], at: int) -> Counter[tuple[Any, ...]]:
    keyed: dict[tuple[Any, Any], tuple[Any, ...]] = {}
    unkeyed: Counter[tuple[Any, ...]] = Counter()
    for c in sorted((c for c in cmds if c["_ts"] <= at), key=lambda c: (c["_ts"], c["_order"])):
        key = (c["k1"], c["k2"])
        if c["_err"] is not None and key == (None, None):
            unkeyed[(None, None, None, None, c["_err"])] += 1
        elif c["_err"] is not None:
            keyed[key] = (*key, None, None, c["_err"])
        elif c["_delete"]:
            keyed.pop(key, None)
        else:
            keyed[key] = (*key, c["v"], c["w"], None)
    return unkeyed + Counter(keyed.values())


def output(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    out: Counter[tuple[Any, ...]] = Counter()
    for r in rows:
        out[(r["k1"], r["k2"], r["v"], r["w"], r["_err"])] += r["_diff"]
    return out


def failing_append(instance: SparkFeedbackUpsert, how: str) -> None:
    """The instance's next compare-and-append fails: ``before`` (nothing appended,
    Determinate) or ``after`` (appended, then Indeterminate)."""
    writer = instance._writer
    real = writer.compare_and_append_batch

    def once(*args: Any, **kwargs: Any) -> Any:
        del writer.compare_and_append_batch  # the real method again
        if how == "before":
            raise Determinate("injected: the append did not happen")
        real(*args, **kwargs)
        raise Indeterminate("injected: the append happened, its answer was lost")

    writer.compare_and_append_batch = once  # type: ignore[method-assign]


@pytest.mark.parametrize("seed", [0, 1])
def test_spark_upsert_with_composite_null_keys_and_errors_matches_model(
    spark: SparkSession, tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("timeshard.storage.upsert_state.MAX_DELTAS", 2)
    rng = random.Random(seed)
    cmds = random_commands(rng, 60)
    final_upper = max(c["_ts"] for c in cmds) + 1
    df = spark.createDataFrame(cmds, DDL)
    client = PersistClient(Location.embedded(tmp_path))
    hold = client.open_leased_reader("out", SCHEMA)

    def new() -> SparkFeedbackUpsert:
        return SparkFeedbackUpsert(spark, client, "out", SCHEMA, KEYS)

    instances = [new(), new()]
    upper = 0
    while client.state("out").upper.time != final_upper:
        upper = min(final_upper, upper + rng.randint(1, 3))
        who = rng.randrange(2)
        chance = rng.random()
        if chance < 0.2:
            instances[who].close()
            instances[who] = new()
        elif chance < 0.4:
            failing_append(instances[who], rng.choice(["before", "after"]))
        for i in (who, 1 - who):
            with contextlib.suppress(Determinate, Indeterminate):
                instances[i].apply(df, upper)
    for at in range(final_upper):
        assert output(hold.snapshot(at).to_pylist()) == model(cmds, at), at
    for instance in instances:
        instance.close()
    hold.expire()


def test_two_replicas_of_an_upsert_source_with_restarts_match_model(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Two instances of one KEY VALUE source with deletes step in random turns, each
    restarted at random: at every time the output is the last command per key among the
    records reclocked to that time or before (the greatest position within one time)."""
    from timeshard.storage.ingest import Ingestion
    from timeshard.storage.reclock import Remap, reclock_df
    from timeshard.storage.sources import KeyValueGenerator

    def source() -> KeyValueGenerator:
        return KeyValueGenerator(keys=12, value_size=4, partitions=2, rate=6, seed=3, deletes=0.4)

    rng = random.Random(11)
    client = PersistClient(Location.embedded(tmp_path))
    now = [1000]

    def new() -> Ingestion:
        return Ingestion(
            spark, client, source(), envelope="upsert", key_columns=["key"], clock=lambda: now[0]
        )

    instances = [new(), new()]
    hold = client.open_leased_reader("kv")  # no compaction: every time stays readable
    remap_hold = client.open_leased_reader("kv.remap")
    for _ in range(12):
        now[0] += rng.choice([1, 3])
        who = rng.randrange(2)
        if rng.random() < 0.25:
            instances[who].close()
            instances[who] = new()
        instances[who].step()
    for instance in instances:
        instance.close()
    remap = Remap(client, "kv.remap")  # every binding (the instances forgot old ones)
    upper = client.state("kv").upper.time
    assert upper is not None
    end = remap.frontier_at(upper - 1)
    gen = source()
    records = reclock_df(spark, gen.read(spark, {}, end), remap.bindings()).collect()
    assert any(r["value"] is None for r in records)
    for at in range(upper):
        latest: dict[int, str | None] = {}
        for r in sorted(records, key=lambda r: (r["_ts"], r["_partition"], r["_offset"])):
            if r["_ts"] <= at:
                latest[r["key"]] = r["value"]
        want = Counter((k, v) for k, v in latest.items() if v is not None)
        got: Counter[tuple[Any, Any]] = Counter()
        for r in hold.snapshot(at).to_pylist():
            got[(r["key"], r["value"])] += r["_diff"]
        assert got == want, at
    remap.close()
    hold.expire()
    remap_hold.expire()
