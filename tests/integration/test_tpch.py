"""TPCH: eight TPC-H tables, orders replaced oldest first, exactly once across restarts.

Every check compares with a from-scratch model: the live orders after offset
``o`` are the keys ``o + 1 .. N + o``, and the collection at a time is the sum
of the generator's rows below the offset bound at that time.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage import REMAP_SCHEMA, Remap
from timeshard.storage.ingest import Ingestion
from timeshard.storage.tpch import SCHEMAS, TpchGenerator

pytestmark = pytest.mark.spark

TICK = 5
STEPS = 4  # offsets [0, 1 + 3 TICK): the snapshot, then three ticks of replacements
Row = tuple[Any, ...]


def tpch() -> TpchGenerator:
    return TpchGenerator(scale_factor=0.001, tick_orders=TICK, seed=7)


N = tpch().cardinality("orders")
END = 1 + (STEPS - 1) * TICK


def payload(table: str, row: dict[str, Any]) -> Row:
    return tuple(row[c] for c in SCHEMAS[table].names)


def by_offset(frames: dict[str, Any]) -> dict[str, list[tuple[int, int, Row]]]:
    """``(offset, diff, payload)`` of every row of every frame, in offset order."""
    out = {}
    for table, frame in frames.items():
        rows = [r.asDict() for r in frame.collect()]
        out[table] = sorted(
            ((r["_offset"], r.get("_diff", 1), payload(table, r)) for r in rows),
            key=lambda x: (x[0], x[1], repr(x[2])),
        )
    return out


def collection(updates: list[tuple[int, int, Row]], below: int) -> dict[Row, int]:
    """The sum of the updates at offsets ``< below``, zero multiplicities left out."""
    counts: dict[Row, int] = defaultdict(int)
    for offset, diff, row in updates:
        if offset < below:
            counts[row] += diff
    return {row: m for row, m in counts.items() if m != 0}


def check_orders(orders: dict[Row, int], lines: dict[Row, int], after: int) -> None:
    """Orders and lineitems after offset ``after`` (``-1``: before the snapshot)."""
    assert all(m == 1 for m in [*orders.values(), *lines.values()]), after
    keys = {o[0] for o in orders}
    assert len(keys) == len(orders)
    want = set(range(after + 1, after + N + 1)) if after >= 0 else set()
    assert keys == want, after  # FIFO: the oldest live order goes, the count stays N
    per_order: dict[int, list[Row]] = defaultdict(list)
    for line in lines:
        per_order[line[0]].append(line)
    assert set(per_order) == keys, after  # referential integrity, both ways
    for o in orders:
        mine = per_order[o[0]]
        assert sorted(li[3] for li in mine) == list(range(1, len(mine) + 1)) and len(mine) <= 7
        charges = sum(li[5] * (100 + li[7]) * (100 - li[6]) // 10000 for li in mine)
        assert o[3] == charges, o
        status = {li[9] for li in mine}
        assert o[2] == (status.pop() if len(status) == 1 else "P"), (o, status)


def test_read_is_deterministic_with_static_tables_only_at_offset_zero(
    spark: SparkSession,
) -> None:
    gen = tpch()
    first = by_offset(gen.read(spark, {}, {"0": END}))
    assert first == by_offset(gen.read(spark, {"0": 0}, {"0": END}))
    assert set(first) == set(SCHEMAS)
    later = gen.read(spark, {"0": 1}, {"0": END})
    assert set(later) == {"orders", "lineitem"}  # no Spark job for the static tables
    assert by_offset(later) == {
        t: [u for u in first[t] if u[0] >= 1] for t in ("orders", "lineitem")
    }
    assert set(gen.read(spark, {"0": END}, {"0": END})) == {"orders", "lineitem"}
    for table, updates in first.items():
        if table not in ("orders", "lineitem"):
            assert {u[:2] for u in updates} == {(0, 1)}, table
            assert len(updates) == len({u[2] for u in updates}) == gen.cardinality(table)
    assert sum(u[0] == 0 for u in first["orders"]) == N == 1500
    columns = gen.read(spark, {}, {"0": 1})
    for table, frame in columns.items():
        diff = ["_diff"] if table in ("orders", "lineitem") else []
        assert set(frame.columns) == {"_partition", "_offset", *SCHEMAS[table].names, *diff}


def test_every_offset_keeps_orders_whole_and_keys_valid(spark: SparkSession) -> None:
    updates = by_offset(tpch().read(spark, {}, {"0": END}))
    static = {t: [u[2] for u in updates[t]] for t in updates if t not in ("orders", "lineitem")}
    regions = {r[0] for r in static["region"]}
    nations = {n[0] for n in static["nation"]}
    assert {n[2] for n in static["nation"]} == regions
    assert {s[3] for s in static["supplier"]} | {c[3] for c in static["customer"]} <= nations
    partsupp = {(ps[0], ps[1]) for ps in static["partsupp"]}
    assert len(partsupp) == len(static["partsupp"])
    assert {ps[1] for ps in partsupp} <= {s[0] for s in static["supplier"]}
    customers = {c[0] for c in static["customer"]}
    check_orders({}, {}, -1)
    for o in range(END):  # the collection after every single offset
        orders = collection(updates["orders"], o + 1)
        lines = collection(updates["lineitem"], o + 1)
        check_orders(orders, lines, o)
        assert {row[1] for row in orders} <= customers
        assert {(li[1], li[2]) for li in lines} <= partsupp
        retracted = [u[2] for u in updates["orders"] if u[0] == o and u[1] < 0]
        assert [r[0] for r in retracted] == ([] if o == 0 else [o])


def snapshots(client: PersistClient, table: str, t: int) -> dict[Row, int]:
    rows = client.open_leased_reader(f"tpch.{table}").snapshot(t).to_pylist()
    return {payload(table, r): r["_diff"] for r in rows}


def check_shards(spark: SparkSession, client: PersistClient) -> dict[str, dict[Row, int]]:
    """Every time of every output shard against the model; the last snapshots.

    The model needs every binding, so the callers hold the remap shard's since
    (ingestion would let it compact the bindings the outputs no longer need).
    """
    remap = Remap(client, "tpch.remap")
    upper = client.state("tpch.orders").upper.time
    assert upper is not None and upper == remap.upper.time
    assert remap.frontier_at(upper - 1) == {"0": END}  # resumed, neither lost nor repeated
    updates = by_offset(tpch().read(spark, {}, {"0": END}))
    last: dict[str, dict[Row, int]] = {}
    for t in range(upper):
        bound = remap.frontier_at(t).get("0", 0)
        for table in SCHEMAS:
            last[table] = snapshots(client, table, t)
            assert last[table] == collection(updates[table], bound), (table, t)
        check_orders(last["orders"], last["lineitem"], bound - 1)
    return last


@pytest.fixture(scope="module")
def uninterrupted(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[Row, int]]:
    """The last snapshots of an ingestion of ``STEPS`` steps without a restart."""
    client = PersistClient(Location.embedded(tmp_path_factory.mktemp("tpch")))
    _hold_remap = client.open_leased_reader("tpch.remap", REMAP_SCHEMA)  # see check_shards
    clock = itertools.count(1)
    ing = Ingestion(spark, client, tpch(), clock=lambda: next(clock))
    for _ in range(STEPS):
        ing.step()
    return check_shards(spark, client)


def test_ingestion_keeps_every_time_consistent(
    uninterrupted: dict[str, dict[Row, int]],
) -> None:
    assert len(uninterrupted["orders"]) == N
    assert min(o[0] for o in uninterrupted["orders"]) == END  # 3 TICK orders replaced
    for table in SCHEMAS:
        assert uninterrupted[table] and all(m == 1 for m in uninterrupted[table].values())


def test_restart_continues_without_loss_or_duplicates(
    spark: SparkSession, tmp_path: Path, uninterrupted: dict[str, dict[Row, int]]
) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    _hold_remap = client.open_leased_reader("tpch.remap", REMAP_SCHEMA)  # see check_shards
    clock = itertools.count(1)
    for steps in (2, STEPS - 2):  # a fresh generator and pipeline: a restart
        ing = Ingestion(spark, client, tpch(), clock=lambda: next(clock))
        for _ in range(steps):
            ing.step()
    assert check_shards(spark, client) == uninterrupted


def test_upper_tick_and_resume() -> None:
    gen = tpch()
    uppers = []
    for _ in range(4):
        uppers.append(gen.upper()["0"])
        gen.tick()
    assert uppers == [0, 1, 1 + TICK, 1 + 2 * TICK]
    for ticks, upper in enumerate(uppers):
        fresh = tpch()
        fresh.resume({"0": upper})
        assert (fresh.ticks, fresh.upper()["0"]) == (ticks, upper)
    fresh = tpch()
    fresh.resume({"0": 2})  # a bound inside a tick: that tick is done
    assert fresh.upper()["0"] == 1 + TICK


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("scale_factor", 0),
        ("scale_factor", -0.5),
        ("scale_factor", math.nan),
        ("scale_factor", math.inf),
        ("scale_factor", 1e6),
        ("scale_factor", "1"),
        ("scale_factor", True),
        ("tick_orders", 0),
        ("tick_orders", -3),
        ("tick_orders", 2.5),
        ("tick_orders", False),
        ("seed", 1.5),
        ("seed", "7; DROP TABLE orders"),
        ("seed", 2**63),
        ("seed", True),
        ("name", ""),
        ("ticks", -1),
    ],
)
def test_bad_arguments_raise_invalid_usage(option: str, value: Any) -> None:
    with pytest.raises(InvalidUsage, match=option) as e:
        TpchGenerator(**{option: value})
    assert repr(value) in str(e.value)


def test_cardinality_of_lineitem_is_unknown() -> None:
    with pytest.raises(InvalidUsage, match="lineitem"):
        tpch().cardinality("lineitem")


def test_an_upsert_envelope_over_its_changes_is_refused(
    spark: SparkSession, tmp_path: Path
) -> None:
    """TPCH's records carry ``_diff`` (a replaced order is retracted): an UPSERT output
    over them dropped it and upserted the retracted row, so no order was ever deleted."""

    client = PersistClient(Location.embedded(tmp_path / "loc"))
    ingestion = Ingestion(spark, client, tpch(), envelopes={"orders": ("upsert", ["o_orderkey"])})
    try:
        with pytest.raises(InvalidUsage, match=r"UPSERT output 'tpch.orders': its source"):
            ingestion.step()
    finally:
        ingestion.close()
