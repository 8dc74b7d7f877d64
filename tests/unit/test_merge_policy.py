"""Which layers of an arrangement are due to merge into one (no Spark: sizes only).

The default (views' rows): the two newest, once the newer holds half the
bytes of the older. The upsert's and the per-group state: nothing until the
layers over the base hold a quarter of its bytes and 4 MiB (then all of them
into the base), or until there are 8 of them (then into one, or into the
base if they hold that quarter).
"""

from __future__ import annotations

import pytest
from pyspark.sql.types import LongType

from timeshard.compute.arranged_rows import ArrangedRows
from timeshard.storage.upsert_state import MIN_MERGE_BYTES, ArrangedState, Arrangement, Layer

MIB = 1 << 20


def with_sizes(arrangement: Arrangement, *sizes: int, pending: bool = False) -> Arrangement:
    arrangement.layers = [Layer(None, size) for size in sizes]
    arrangement.layers[-1].pending = pending
    return arrangement


def state(*sizes: int, pending: bool = False) -> Arrangement:
    types = {"k": LongType(), "v": LongType()}
    arranged = ArrangedState(None, ["k"], ["v"], types, partitions=2)
    return with_sizes(arranged, *sizes, pending=pending)


def rows(*sizes: int) -> Arrangement:
    return with_sizes(ArrangedRows(None, ["k"], ["k", "v"], partitions=2), *sizes)


@pytest.mark.parametrize(
    ("sizes", "due"),
    [
        ((100 * MIB,), None),
        ((100 * MIB, 10 * MIB), None),  # a tenth of the base
        ((100 * MIB, 10 * MIB, 10 * MIB), None),  # a fifth
        ((100 * MIB, 10 * MIB, 10 * MIB, 5 * MIB), (0, 4)),  # a quarter: all into the base
        ((100 * MIB, *[MIB] * 7), None),  # 7 small deltas
        ((100 * MIB, *[MIB] * 8), (1, 9)),  # 8: into one over the base
        ((20 * MIB, *[MIB] * 8), (0, 9)),  # 8 holding a quarter of the base: into it
        ((MIB, MIB), None),  # a large share, but too few bytes to be worth a job
        ((MIB, MIN_MERGE_BYTES), (0, 2)),
        ((0, MIN_MERGE_BYTES), (0, 2)),  # an empty base
    ],
)
def test_the_upsert_state_merges_when_its_deltas_are_a_share_of_the_base_or_many(
    sizes: tuple[int, ...], due: tuple[int, int] | None
) -> None:
    assert state(*sizes)._next_merge() == due


def test_a_pending_layer_merges_with_nothing() -> None:
    assert state(100 * MIB, 30 * MIB, pending=True)._next_merge() is None
    assert state(100 * MIB, *[MIB] * 8, pending=True)._next_merge() is None


@pytest.mark.parametrize(
    ("sizes", "due"),
    [((10, 4), None), ((10, 5), (0, 2)), ((100, 10, 5), (1, 3)), ((100, 10, 4), None)],
)
def test_rows_merge_the_two_newest_when_the_newer_holds_half_the_older(
    sizes: tuple[int, ...], due: tuple[int, int] | None
) -> None:
    assert rows(*sizes)._next_merge() == due
