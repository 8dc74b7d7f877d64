"""SparkSession for timeshard, and conversions between Spark and Arrow schemas.

Runs on the driver. ``spark_session`` sets what PySpark needs on this kind of
machine: the loopback address, the Python that has timeshard installed for
the workers, Arrow transfers, few shuffle partitions, no UI. Connectors that
need Maven jars are loaded only when ``packages`` names them.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType


def spark_session(
    master: str = "local[2]",
    app_name: str = "timeshard",
    extra_conf: dict[str, str] | None = None,
    packages: list[str] | None = None,
) -> SparkSession:
    """Get or create the SparkSession timeshard runs on."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    conf: dict[str, Any] = {
        "spark.sql.shuffle.partitions": "4",
        "spark.default.parallelism": "4",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
        "spark.sql.files.ignoreCorruptFiles": "false",
        "spark.sql.files.ignoreMissingFiles": "false",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.sql.session.timeZone": "UTC",
        "spark.executorEnv.PYSPARK_PYTHON": os.environ["PYSPARK_PYTHON"],
    }
    if packages:
        conf["spark.jars.packages"] = ",".join(packages)
    conf.update(extra_conf or {})
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def arrow_to_spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of an Arrow schema."""
    return from_arrow_schema(schema, prefer_timestamp_ntz=True)


def spark_to_arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema of a Spark schema."""
    return to_arrow_schema(schema, timezone="UTC")


__all__ = ["arrow_to_spark_schema", "spark_session", "spark_to_arrow_schema"]
