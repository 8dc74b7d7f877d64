"""Views that arrange an input alike share one arrangement, each reading it at its own times.

Two different views over the same inputs, arranged by the same keys (joins by
join key, grouped plans by group key), step in a random order and restart at
random while the inputs change; each must equal its query at every time. A
view that lags holds the merges back from folding the times it still reads;
a view that cannot read the shared layers at its time (it restarted ahead of
them) rebuilds its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from tests.integration.test_incremental_views import (
    INPUTS,
    SLOW,
    Inputs,
    assert_the_query,
    examples,
    input_ticks,
    merges_paused,
    run_ticks,
)

from timeshard.compute import MaterializedView, ViewDefinition
from timeshard.compute.arranged_rows import SharedArrangements
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark.jobs import JobCounter

pytestmark = pytest.mark.spark

#: Pairs of views that arrange an input by the same key (``{n}``: a drawn small integer).
PAIRS = [
    (  # a by k and b by k, whichever side the join names first
        "SELECT a.k, a.v, b.w FROM a JOIN b ON a.k = b.k WHERE a.v >= {n}",
        "SELECT b.w + a.v AS s FROM b JOIN a ON b.k = a.k",
    ),
    (  # a three-way join (a by k, a by v, b by k, b by w) and a two-way one
        "SELECT x.k, y.w, z.w AS w2 FROM a AS x JOIN b AS y ON x.k = y.k JOIN b AS z ON z.w = x.v",
        "SELECT a.k, b.w FROM a JOIN b ON a.k = b.k WHERE b.w <> {n}",
    ),
    (  # grouped plans: a by k
        "SELECT k, min(v) AS lo, max(v) AS hi FROM a GROUP BY k",
        "SELECT k, count(DISTINCT v) AS d FROM a WHERE v <> {n} GROUP BY k",
    ),
    (  # an outer join (a by k, b by k) and a grouped plan (a by k)
        "SELECT a.k, a.v, b.w FROM a LEFT JOIN b ON a.k = b.k",
        "SELECT k, max(v) AS hi FROM a GROUP BY k",
    ),
]


def install(spark: SparkSession, client: PersistClient, name: str, sql: str) -> MaterializedView:
    return MaterializedView.install(
        spark, client, ViewDefinition(name, INPUTS, sql), background_io=False
    )


def shared_ids(views: list[MaterializedView]) -> set[int]:
    """The arrangements every one of ``views`` reads."""
    ids = [{id(a) for a in v.desired.arrangements()} for v in views]
    return set.intersection(*ids)


@st.composite
def histories(draw: Any) -> dict[str, Any]:
    first, second = draw(st.sampled_from(PAIRS))
    n = draw(st.integers(0, 2))
    steps = st.sampled_from(["v0", "v1", "v1", "restart0", "restart1"])
    return {"sqls": [first.format(n=n), second.format(n=n)], "ticks": draw(input_ticks(steps))}


@settings(SLOW, max_examples=examples(5))
@given(history=histories())
def test_views_sharing_arrangements_each_equal_their_query_at_every_time(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, history: dict[str, Any]
) -> None:
    tmp: Path = tmp_path_factory.mktemp("shared")
    client = PersistClient(Location.embedded(tmp))
    inputs = Inputs(client)
    names = ["v", "w"]
    sqls = history["sqls"]
    holds = [client.open_leased_reader(s) for s in INPUTS.values()]
    views = [install(spark, client, name, sql) for name, sql in zip(names, sqls, strict=True)]
    holds += [client.open_leased_reader(name) for name in names]
    as_of = [v.sink.as_of for v in views]
    try:
        failures = run_ticks(
            inputs, history["ticks"], views, lambda i: install(spark, client, names[i], sqls[i])
        )
        assert failures + sum(v.stats.failures for v in views) == 0
        for name, sql, first in zip(names, sqls, as_of, strict=True):
            assert_the_query(
                spark, client, name, sql, range(max(first, 0), inputs.upper), inputs.changed
            )
    finally:
        for view in views:
            view.close()
        for hold in holds:
            hold.expire()


def test_two_views_read_one_arrangement_and_each_tick_is_one_job(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Two join views over a and b by k keep two arrangements between them, not four. The
    second view's tick reads the layer the first one's pushed (its own delta from the parts)
    and runs one job, as does the first's, also when one is a tick behind the other; the
    last view to close frees them."""
    client = PersistClient(Location.embedded(tmp_path))
    inputs = Inputs(client)
    holds = [client.open_leased_reader(s) for s in INPUTS.values()]
    inputs.append(1, [(t, "insert", k % 500, k, 0) for k in range(1000) for t in ("a", "b")])
    sqls = [
        "SELECT a.k, a.v, b.w FROM a JOIN b ON a.k = b.k",
        "SELECT b.w + a.v AS s FROM b JOIN a ON b.k = a.k WHERE a.v > 3",
    ]
    views = [
        MaterializedView.install(  # no full check: its jobs would count
            spark,
            client,
            ViewDefinition(name, INPUTS, sql),
            background_io=False,
            check_every_s=None,
        )
        for name, sql in zip(["v", "w"], sqls, strict=True)
    ]
    holds += [client.open_leased_reader(name) for name in ["v", "w"]]
    as_of = [v.sink.as_of for v in views]
    for view in views:
        view.catch_up()
        view.catch_up()  # the first batch checks desired against the shard
    assert len(shared_ids(views)) == 2, [v.desired.arrangements() for v in views]
    ticks = [
        [("a", "insert", 1, 9, 0)],
        [("a", "insert", 2, 9, 0), ("b", "insert", 2, 5, 0)],
        [("b", "retract", 0, 0, 0), ("a", "insert", 7, 1, 0)],
    ]
    for ops in ticks:
        inputs.append(1, ops)
        for view in views:
            with merges_paused(view), JobCounter(spark) as jobs:
                view.catch_up()
            assert jobs.count == 1, (view.definition.name, ops, jobs.count)
            assert jobs.shuffled_records() < 100, jobs.shuffled_records()
    assert len(shared_ids(views)) == 2
    # w behind v: v ticks to u1, then w from where it was to u2 > u1: w pushes the updates
    # of [u1, u2) and reads v's layer as of its own times; then v catches up over both.
    inputs.append(1, [("a", "insert", 4, 4, 0), ("b", "insert", 4, 1, 0)])
    views[0].catch_up()
    inputs.append(1, [("a", "insert", 4, 5, 0), ("b", "retract", 0, 0, 0)])
    for view in [views[1], views[0]]:
        with merges_paused(view), JobCounter(spark) as jobs:
            view.catch_up()
        assert jobs.count == 1, (view.definition.name, jobs.count)
    assert len(shared_ids(views)) == 2
    pool = SharedArrangements.of(spark)
    arranged = views[0].desired.arrangements()
    views[0].close()
    inputs.append(1, [("a", "insert", 3, 3, 0), ("b", "insert", 3, 4, 0)])
    views[1].catch_up()  # the other view goes on alone, over the same layers
    assert {id(a) for a in views[1].desired.arrangements()} == {id(a) for a in arranged}
    assert all(a.layers for a in arranged)
    views[1].close()
    assert all(not a.layers and a.time is None for a in arranged)  # the last one freed them
    assert not pool._entries, pool._entries
    for name, sql, first in zip(["v", "w"], sqls, as_of, strict=True):
        last = inputs.upper - 1 if name == "v" else inputs.upper  # v closed before the last
        assert_the_query(spark, client, name, sql, range(max(first, 0), last), inputs.changed)
    for hold in holds:
        hold.expire()
