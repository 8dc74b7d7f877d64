"""JobCounter: the jobs of a span, in all and by the fair-scheduler pool they ran in."""

from __future__ import annotations

import threading

import pytest
from pyspark.sql import SparkSession

from timeshard.spark.jobs import JobCounter

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
