"""Runs the shared Spark checks against a standalone master, in its own process.

Usage: standalone_main.py MASTER_URL SCRATCH_DIR

A process holds one SparkContext and the pytest process already holds the
local session of the integration tier, so ``test_standalone.py`` starts this
script instead (see ``conftest.py``). It prints one line on success.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.integration.spark_checks import (
    check_err_rows,
    check_missing_and_corrupt_parts,
    check_write_and_snapshot,
)

from timeshard.spark import register, spark_session


def main() -> None:
    master, scratch = sys.argv[1], Path(sys.argv[2])
    spark = spark_session(
        master=master,
        app_name="timeshard-standalone",
        extra_conf={"spark.executor.memory": "768m", "spark.cores.max": "1"},
    )
    register(spark)
    assert spark.sparkContext.master == master, spark.sparkContext.master
    check_write_and_snapshot(spark, scratch, every_time=False)  # the local tier reads every time
    check_err_rows(spark, scratch)
    check_missing_and_corrupt_parts(spark, scratch)
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()  # type: ignore[union-attr]
    executors = status.size() - 1  # one block manager is the driver's
    spark.stop()
    assert executors >= 1, executors
    print(f"standalone checks passed on {master} with {executors} executor(s)")


if __name__ == "__main__":
    main()
