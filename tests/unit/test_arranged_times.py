"""Which times an arrangement's layers can be read at, and which merges may replace them.

A layer holds the updates of ``[lower, upper)`` and keeps each row's own time
from ``exact_from`` on: it tells the rows before a time ``t`` from the rest if
``t`` is outside its interval or at or after ``exact_from``. A merge result
that some reader's frontier would split where it folded is not swapped in.
No Spark: the layers' DataFrames are not read here.
"""

from __future__ import annotations

import pytest

from timeshard.compute.arranged_rows import (
    ArrangedRows,
    SharedArrangements,
    _merged_exact_from,
    _splits,
)
from timeshard.storage.upsert_state import Layer


def layer(lower: int, upper: int, exact_from: int) -> Layer:
    return Layer(None, 0, lower=lower, upper=upper, exact_from=exact_from)


def arranged(*layers: Layer, time: int) -> ArrangedRows:
    rows = ArrangedRows(None, ["k"], ["k", "v"], partitions=2)
    rows.layers, rows.time = list(layers), time
    return rows


@pytest.mark.parametrize(
    ("at", "splits"),
    [(2, True), (3, True), (4, False), (5, False), (6, True), (7, True), (8, True), (9, True)],
)
def test_a_layer_splits_outside_its_times_and_where_it_keeps_them(at: int, splits: bool) -> None:
    # times [3, 8), exact from 6: rows at 3..5 may have any time below 6
    assert _splits(layer(3, 8, 6), at) is splits


def test_readable_needs_every_layer_to_split_and_the_arrangement_to_be_there() -> None:
    rows = arranged(layer(0, 5, 5), layer(5, 7, 5), layer(7, 9, 7), time=9)
    # 0: nothing is before it; 1-4: the base folded them; 10, 11: not there yet
    assert [t for t in range(12) if rows.readable(rows.layers, t)] == [0, 5, 6, 7, 8, 9]
    merged = arranged(layer(0, 5, 5), layer(5, 9, 7), time=9)  # a merge folded [5, 7)
    assert [t for t in range(12) if merged.readable(merged.layers, t)] == [0, 5, 7, 8, 9]


def test_a_merge_is_kept_only_if_no_reader_frontier_falls_where_it_folded() -> None:
    rows = arranged(layer(0, 5, 5), time=9)
    rows.hold("v", 9)
    assert rows._keeps(layer(5, 9, 9))
    rows.hold("w", 6)  # came while the merge ran: it reads at 6, which the merge folded
    assert not rows._keeps(layer(5, 9, 9))
    assert rows._keeps(layer(5, 9, 6))
    rows.let_go("w")
    assert rows._keeps(layer(5, 9, 9))


def test_a_merge_keeps_times_apart_from_its_fold_unless_a_layer_had_folded_later() -> None:
    # [10, 20) and [20, 40), each exact from its lower, merged while a view reads at 10:
    # exact from 10, so that view's delta over [10, 15) can still read it at 15. It was
    # exact from 20 (the second layer's lower), and that view's tick failed.
    assert _merged_exact_from([layer(10, 20, 10), layer(20, 40, 20)], 10) == 10
    rows = arranged(layer(0, 10, 10), layer(10, 40, 10), time=40)
    assert rows.readable(rows.layers, 15)
    # a layer that had folded its times below 15 keeps the merge from telling them apart
    assert _merged_exact_from([layer(10, 20, 15), layer(20, 40, 20)], 10) == 15
    assert _merged_exact_from([layer(10, 20, 10), layer(20, 40, 20)], 30) == 30


def test_the_pool_gives_one_arrangement_per_key_and_frees_it_with_its_last_user() -> None:
    pool = SharedArrangements()
    made = []

    def make() -> ArrangedRows:
        made.append(arranged(time=3))  # no layer: freeing one needs Spark
        return made[-1]

    first = pool.acquire(("rows", "/loc", "in_a", ("k",)), "v", make)
    second = pool.acquire(("rows", "/loc", "in_a", ("k",)), "w", make)
    other = pool.acquire(("rows", "/loc", "in_a", ("v",)), "w", make)
    assert first is second and other is not first and len(made) == 2
    assert pool.users(("rows", "/loc", "in_a", ("k",))) == 2
    first.hold("v", 3)
    pool.release(("rows", "/loc", "in_a", ("k",)), "v")
    assert first.time == 3 and first.readers() == 0  # w still reads it
    pool.release(("rows", "/loc", "in_a", ("k",)), "w")
    assert first.time is None  # freed
    assert pool.users(("rows", "/loc", "in_a", ("k",))) == 0
