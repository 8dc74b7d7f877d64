"""A delta's rows counted at each evaluation time, in Spark, against a dict model.

``_at_times`` gives, per distinct row and evaluation time, the sum of the
multiplicities of that row's updates at or before the time (only nonzero
sums). The grouped plan counts the touched keys' rows with it, and a scalar
subquery's input; it must hold for rows without columns (a subquery that reads
none, ``count(*)``), nulls, updates after the last time, several updates of a
row at one time, and one time or many.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from timeshard.compute.delta import _at_times
from timeshard.compute.incremental import AT

pytestmark = pytest.mark.spark

Row = tuple[int | None, str | None, int, int]  # a, b, _ts, _diff


def model(rows: list[Row], names: list[str], evaluated: list[int]) -> set[tuple[Any, ...]]:
    counts: defaultdict[tuple[Any, ...], int] = defaultdict(int)
    for a, b, ts, diff in rows:
        values = {"a": a, "b": b}
        for t in evaluated:
            if ts <= t:
                counts[(*[values[n] for n in names], t)] += diff
    return {(*k, d) for k, d in counts.items() if d != 0}


rows_strategy = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(0, 3)),
        st.one_of(st.none(), st.sampled_from(["x", "y"])),
        st.integers(0, 12),
        st.integers(-2, 2),
    ),
    max_size=25,
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    rows=rows_strategy,
    names=st.sampled_from([["a", "b"], ["b"], []]),
    times=st.sets(st.integers(0, 12), min_size=1, max_size=6),
)
def test_rows_at_each_time_are_the_models(
    spark: Any, rows: list[Row], names: list[str], times: set[int]
) -> None:
    evaluated = sorted(times)
    df = spark.createDataFrame(rows, "a INT, b STRING, _ts BIGINT, _diff BIGINT")
    df.createOrReplaceTempView("at_times_rows")
    sql = _at_times("SELECT * FROM at_times_rows", [f"`{n}`" for n in names], evaluated)
    got = [(*r[:-2], r[AT], r["_diff"]) for r in spark.sql(sql).collect()]
    assert len(got) == len(set(got)), got  # one row per distinct row and time
    assert set(got) == model(rows, names, evaluated)
