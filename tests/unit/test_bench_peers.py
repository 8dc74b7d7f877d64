"""The pure logic of the comparison benchmarks' peers (issue 5), checked against references.

The bytewax peer's ``stateful_map`` logic runs here as a plain fold over
random commands (no bytewax, no venv): its change lines, consolidated, must
equal the from-scratch reference of the peer's own output check.
"""

from __future__ import annotations

import importlib
import random
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH / "compare"))
sys.path.insert(0, str(BENCH))

peer_bytewax: Any = importlib.import_module("peer_bytewax")
w4: Any = importlib.import_module("bench_w4_persist")
w3: Any = importlib.import_module("bench_w3_recovery")


def fold(logic: Any, keyed: list[tuple[str, tuple[Any, ...]]], batch: int = 0) -> list[str]:
    """Run ``stateful_map`` logic over keyed commands; the change lines it emits."""
    states: dict[str, Any] = {}
    lines: list[str] = []
    for key, cmd in keyed:
        state, (b, text) = logic(states.get(key), (batch, *cmd))
        assert b == batch
        if state is None:
            states.pop(key, None)
        else:
            states[key] = state
        lines += text.splitlines()
    return lines


@pytest.mark.parametrize("seed", range(5))
def test_upsert_matches_last_value_per_key(seed: int) -> None:
    rng = random.Random(seed)
    batches: list[dict[str, dict[str, list[Any]]]] = []
    offset = 0
    for _ in range(3):
        n = rng.randrange(1, 60)
        keys = [rng.randrange(12) for _ in range(n)]
        values = [None if rng.random() < 0.2 else f"v{rng.randrange(4)}" for _ in range(n)]
        batches.append(
            {"commands": {"key": keys, "value": values, "offset": list(range(offset, offset + n))}}
        )
        offset += n
    keyed: list[tuple[str, tuple[Any, ...]]] = []
    for t in batches:
        keyed += peer_bytewax.w1_items(t, 0, len(t["commands"]["key"]), [])
    got = peer_bytewax.consolidate(fold(peer_bytewax.upsert, keyed))
    assert all(n == 1 for n in got.values())
    assert set(got) == peer_bytewax.reference("w1", batches, offset)


def test_upsert_ignores_an_older_offset() -> None:
    state, (_, text) = peer_bytewax.upsert(("new", 5), (0, 1, "old", 3))
    assert state == ("new", 5) and text == ""


@pytest.mark.parametrize("seed", range(5))
def test_auction_views_match_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    batches: list[dict[str, dict[str, list[int]]]] = []
    pending: list[tuple[int, int]] = []
    keyed: list[tuple[str, tuple[Any, ...]]] = []
    lo = 0
    for size in (rng.randrange(1, 15) for _ in range(4)):
        hi = lo + size
        auctions: dict[str, list[int]] = {"id": [], "end_offset": [], "offset": []}
        bids: dict[str, list[int]] = {"buyer": [], "auction_id": [], "amount": [], "offset": []}
        for o in range(lo, hi):
            auctions["id"].append(o)
            auctions["end_offset"].append(o + 5)
            auctions["offset"].append(o)
            for _ in range(3):
                bids["buyer"].append(rng.randrange(6))
                bids["auction_id"].append(max(o - rng.randrange(5), 0))
                bids["amount"].append(rng.randrange(1, 20))
                bids["offset"].append(o)
        tables = {"auctions": auctions, "bids": bids}
        batches.append(tables)
        merged = peer_bytewax.w2_merge(tables)
        keyed += peer_bytewax.w2_items(merged, 0, len(merged["events"]), pending)
        keyed += peer_bytewax.w2_close_below(hi - 1, pending)
        lo = hi
    got = peer_bytewax.consolidate(fold(peer_bytewax.auction_views, keyed))
    assert all(n == 1 for n in got.values())
    assert set(got) == peer_bytewax.reference("w2", batches, lo - 1)
    checks = peer_bytewax.view_checks(got)["checks"]
    assert checks["bids_per_user_bids"] == sum(len(t["bids"]["buyer"]) for t in batches)


def test_consolidate_cancels_and_takes_the_default_view() -> None:
    lines = [
        '{"key": 1, "value": "a", "diff": 1}',
        '{"key": 1, "value": "a", "diff": -1}',
        '{"key": 1, "value": "b", "diff": 1}',
        '{"view": "v", "key": 2, "value": 3, "diff": 1}',
    ]
    assert peer_bytewax.consolidate(lines, "d") == {("d", 1, "b"): 1, ("v", 2, 3): 1}


def test_progress_needs_every_item_and_every_earlier_batch() -> None:
    seen: list[int] = []
    p = peer_bytewax.Progress(3, seen.append)
    p.started(0)
    p.emitted(0, 2)
    p.started(1)
    p.emitted(1, 1)
    p.ended(1)
    p.written({1: 1}, 10.0)
    assert seen == [] and p.visible[1] is None  # batch 0 has not ended
    p.ended(0)
    p.written({0: 1}, 11.0)
    assert seen == []
    p.written({0: 1}, 12.0)
    assert seen == [0, 1] and p.visible[:2] == [12.0, 12.0] and p.visible[2] is None


def test_child_options() -> None:
    opts = {"interval": 2, "batches": 4, "budget_s": None, "driver_memory": "6g"}
    assert peer_bytewax.child_options(opts) == [
        "--interval",
        "2.0",
        "--budget-s",
        "600.0",
        "--batches",
        "4",
    ]


def test_percentile_is_nearest_rank() -> None:
    assert w4.percentile([3.0], 0.99) == 3.0
    assert w4.percentile([float(x) for x in range(1, 11)], 0.5) == 5.0
    assert w4.percentile([float(x) for x in range(1, 11)], 0.99) == 10.0
    with pytest.raises(ValueError):
        w4.percentile([], 0.5)


def test_w4_medians_and_ratios() -> None:
    runs = [
        {"p50_ms": 1.0, "p99_ms": 4.0, "mean_ms": 2.0},
        {"p50_ms": 3.0, "p99_ms": 2.0, "mean_ms": 2.0},
    ]
    assert w4.median_runs(runs) == {"p50_ms": 2.0, "p99_ms": 3.0, "mean_ms": 2.0}
    med = {"p50_ms": 2.0, "p99_ms": 4.0, "mean_ms": 1.0}
    results = {name: {"median": med} for pair in w4.RATIOS for name in pair}
    results["timeshard postgres"] = {"median": {"p50_ms": 4.0, "p99_ms": 4.0, "mean_ms": 3.0}}
    rel = w4.ratios(results)
    assert rel["timeshard postgres / timeshard sqlite"] == {
        "p50_ms": 2.0,
        "p99_ms": 1.0,
        "mean_ms": 3.0,
    }


def test_w3_summary_skips_missing_phases() -> None:
    reps = [
        {"load_s": 1.0, "new_data_s": None, "ok": True},
        {"load_s": 3.0, "new_data_s": 5.0, "ok": False},
    ]
    assert w3.median_of(reps, "load_s") == 2.0
    assert w3.median_of(reps, "new_data_s") == 5.0
    assert w3.median_of(reps, "ready_s") is None
    assert w3.summarize(reps)["ok"] is False


def test_option_flags_pass_only_the_options_set() -> None:
    import report

    opts = {"interval": 1.0, "batches": None, "budget_s": 150.0, "timeout_s": 9}
    assert report.option_flags(opts) == ["--interval", "1.0", "--budget-s", "150.0"]
    assert report.option_flags(opts, ("batches", "interval")) == ["--interval", "1.0"]


@pytest.mark.parametrize("seed", range(3))
def test_deltars_merge_keeps_the_last_value_per_key(seed: int, tmp_path: Path) -> None:
    """The delta-rs peer's MERGE of per-batch latest commands equals the last value per key."""
    import pyarrow as pa

    peer_deltars: Any = importlib.import_module("peer_deltars")
    rng = random.Random(seed)
    table = tmp_path / "kv"
    peer_deltars.create_table(table)
    expected: dict[int, str] = {}
    offset = 0
    for _ in range(4):
        latest: dict[int, tuple[str | None, int]] = {}
        for _ in range(rng.randrange(1, 40)):
            key = rng.randrange(15)
            value = None if rng.random() < 0.25 else f"v{rng.randrange(5)}"
            latest[key] = (value, offset)  # the batch dedupe: the highest offset wins
            if value is None:
                expected.pop(key, None)
            else:
                expected[key] = value
            offset += 1
        keys = sorted(latest)
        batch = pa.table(
            {
                "key": pa.array(keys, pa.int64()),
                "value": pa.array([latest[k][0] for k in keys], pa.string()),
                "offset": pa.array([latest[k][1] for k in keys], pa.int64()),
            }
        )
        peer_deltars.merge_latest(table, batch)
        # Replaying an older command changes nothing.
        peer_deltars.merge_latest(table, batch.set_column(2, "offset", pa.array([-1] * len(keys))))
    from deltalake import DeltaTable

    got = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    assert {r["key"]: r["value"] for r in got} == expected
    assert peer_deltars.live_keys(table) == len(expected)


def test_steady_freshness_leaves_out_the_first_minute() -> None:
    """``freshness_steady_p50_s`` is the p50 of the batches available 60 s or more after the
    first; the all-batches p50 keeps them; a run shorter than that has none."""
    import report

    def result(freshness: list[float], every_s: float) -> dict[str, Any]:
        batches = [{"index": 0, "rows": 10, "step": 0, "available": 0.0, "start": 0.0}]
        batches[0] |= {"end": 1.0, "visible": 1.0}
        for i, f in enumerate(freshness, start=1):
            t = 100.0 + (i - 1) * every_s
            step = {"index": i, "rows": 10, "step": i, "available": t, "start": t}
            batches.append(step | {"end": t + f, "visible": t + f})
        return {"batches": batches}

    # Available at 100, 130, 160, 190, 220 s: the last three are the steady state.
    m = report.metrics(result([9.0, 8.0, 1.0, 3.0, 2.0], every_s=30.0))
    assert m["freshness_steady_p50_s"] == 2.0
    assert m["freshness_p50_s"] == 3.0
    short = report.metrics(result([9.0, 8.0, 1.0], every_s=10.0))
    assert short["freshness_steady_p50_s"] is None and short["freshness_p50_s"] == 8.0
