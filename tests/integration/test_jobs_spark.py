"""JobCounter: the jobs of a span, in all and by the fair-scheduler pool they ran in."""

from __future__ import annotations

import threading

import pytest
from pyspark.sql import SparkSession

from timeshard.spark.jobs import JobCounter
from timeshard.storage.upsert_state import MERGE_POOL

pytestmark = pytest.mark.spark


def test_jobs_are_counted_by_the_pool_they_ran_in(spark: SparkSession) -> None:
    def background() -> None:
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", "elsewhere")
        try:
            spark.range(10).count()
            spark.range(10).count()
        finally:
            spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]

    with JobCounter(spark) as jobs:
        spark.range(10).count()
        thread = threading.Thread(target=background)
        thread.start()
        thread.join()
    assert jobs.count == 3
    assert jobs.by_pool() == {"default": 1, "elsewhere": 2}
    with JobCounter(spark) as none:
        pass
    assert none.count == 0 and none.by_pool() == {}


def test_shuffled_records_are_the_rows_the_jobs_moved(spark: SparkSession) -> None:
    with JobCounter(spark) as jobs:
        rows = spark.range(0, 100, 1, 2).repartition(3, "id").collect()
    assert len(rows) == 100
    assert jobs.shuffled_records() == 100  # every row once through the repartition
    with JobCounter(spark) as local:
        spark.range(0, 100, 1, 2).where("id > 10").collect()
    assert local.shuffled_records() == 0


def test_spans_are_each_jobs_submission_and_completion(spark: SparkSession) -> None:
    import time

    with JobCounter(spark) as none:
        pass
    assert none.spans() == []
    start = time.time()
    with JobCounter(spark) as jobs:
        spark.range(10).count()
        spark.range(10).count()
    end = time.time()
    spans = jobs.spans()
    assert len(spans) == 2
    (s1, c1), (s2, c2) = spans
    # Spark stamps in whole milliseconds: allow that much either side.
    assert start - 0.001 <= s1 <= c1 <= s2 <= c2 <= end + 0.001
    assert jobs.spans("default") == spans and jobs.spans("elsewhere") == []


def test_a_ticks_tasks_take_the_cores_before_background_pools(spark: SparkSession) -> None:
    """Once a job of the default pool (a tick) has tasks waiting, every core that frees up
    goes to them, not to the tasks of a background pool (fair-pools.xml).

    The order of task starts is the scheduler's decision, not a race of
    timings: the assertion holds however slow the machine is.
    """
    import time

    def timed(i: int) -> tuple[int, float]:
        start = time.time()
        time.sleep(0.4)
        return i, start

    n = spark.sparkContext.defaultParallelism  # more tasks than cores, on local[2]
    background_starts: list[float] = []

    def background() -> None:
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", MERGE_POOL)
        try:
            rdd = spark.sparkContext.parallelize(range(4 * n), 4 * n)
            background_starts.extend(start for _i, start in rdd.map(timed).collect())
        finally:
            spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]

    thread = threading.Thread(target=background)
    thread.start()
    deadline = time.monotonic() + 120
    while not spark.sparkContext.statusTracker().getActiveStageIds():
        assert time.monotonic() < deadline, "the background job never started"
        time.sleep(0.05)
    tick = spark.sparkContext.parallelize(range(2 * n), 2 * n).map(timed).collect()
    thread.join()
    first, last = min(s for _i, s in tick), max(s for _i, s in tick)
    # Between the tick's first task start and its last, no background task started.
    assert not [s for s in background_starts if first < s < last]
    assert len(background_starts) == 4 * n
