"""Runs the Spark checks against a standalone master (in its own process).

Usage: standalone_main.py MASTER_URL SCRATCH_DIR

A process holds one SparkContext, so the standalone run cannot share the
local session of the integration tier; the test starts this script instead.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.integration.spark_checks import check_err_rows, check_write_and_snapshot

from timeshard.spark import register, spark_session


def main() -> None:
    master, scratch = sys.argv[1], Path(sys.argv[2])
    spark = spark_session(
        master=master,
        app_name="timeshard-standalone",
        extra_conf={"spark.executor.memory": "1g", "spark.cores.max": "2"},
    )
    register(spark)
    assert spark.sparkContext.master == master
    check_write_and_snapshot(spark, scratch)
    check_err_rows(spark, scratch)
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()  # type: ignore[union-attr]
    spark.stop()
    print(f"standalone checks passed on {master} with {executors} block managers")


if __name__ == "__main__":
    main()
