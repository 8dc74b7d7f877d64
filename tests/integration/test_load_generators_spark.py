"""Load generators at the bounds of their options read on Spark under ANSI mode."""

from __future__ import annotations

from typing import Any

import pytest

from timeshard.storage.sources import (
    MAX_RATE,
    AuctionGenerator,
    CounterGenerator,
    KeyValueGenerator,
)

pytestmark = pytest.mark.spark


def test_key_value_at_its_bounds_reads_every_partition(spark: Any) -> None:
    """The most keys, and as many partitions as keys: every partition owns a key and
    nothing overflows (a partition owning none divided by zero; keys near 2**63 overflowed)."""
    few = KeyValueGenerator(keys=3, partitions=3, rate=4, seed=1, deletes=0.5)
    rows = few.read(spark, {}, dict.fromkeys(few.partition_names, 4)).collect()
    assert sorted((r["_partition"], r["key"]) for r in rows) == [
        (str(p), p) for p in range(3) for _ in range(4)
    ]
    most = KeyValueGenerator(keys=2**63 - 1, partitions=3, rate=MAX_RATE, seed=2)
    start = dict.fromkeys(most.partition_names, 2**62)
    end = dict.fromkeys(most.partition_names, 2**62 + 3)
    keys = [r["key"] for r in most.read(spark, start, end).collect()]
    assert len(keys) == 9 and all(0 <= k < 2**63 - 1 for k in keys)


def test_counter_with_the_largest_max_cardinality_reads(spark: Any) -> None:
    counter = CounterGenerator(rate=MAX_RATE, max_cardinality=2**63 - 2)
    rows = counter.read(spark, {"0": 2**63 - 3}, {"0": 2**63 - 1}).collect()
    # Offset 2**63 - 2 inserts 2**63 - 1 and retracts 1.
    assert sorted((r["counter"], r["_diff"]) for r in rows) == [
        (1, -1),
        (2**63 - 2, 1),
        (2**63 - 1, 1),
    ]


def test_auction_at_its_bounds_reads(spark: Any) -> None:
    auction = AuctionGenerator(rate=MAX_RATE, users=2**63 - 1, organizations=2**63 - 1)
    last = (2**63 - 1) // 3
    frames = auction.read(spark, {"0": last - 2}, {"0": last})
    assert sorted(frames) == ["auctions", "bids"]
    bids = frames["bids"].collect()
    assert max(r["id"] for r in bids) == (last - 1) * 3 + 2
    assert [r["end_offset"] for r in frames["auctions"].collect()] == [last + 3, last + 4]
