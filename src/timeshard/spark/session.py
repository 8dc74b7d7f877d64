"""The SparkSession timeshard runs on, and Spark <-> Arrow schema conversions.

Everything here runs on the driver. :func:`spark_session` sets what PySpark
needs on a small machine and what timeshard relies on:

* the loopback address (``SPARK_LOCAL_IP``, default ``127.0.0.1``) for the
  driver, and the Python running this process for the Python workers
  (``PYSPARK_PYTHON``/``PYSPARK_DRIVER_PYTHON``), which must be able to
  import ``pyarrow`` and ``timeshard``;
* Arrow transfers between the JVM and Python (``mapInArrow``, ``toArrow``);
* few shuffle partitions (4) and no UI;
* ``ignoreCorruptFiles``/``ignoreMissingFiles`` off: a part that cannot be read
  is an error, never an empty result.

Connectors that need Maven jars (Kafka, hadoop-aws, ...) are loaded only when
``packages`` names them, so a session starts without network access.

Invariants:

1. ``arrow_to_spark_schema(spark_to_arrow_schema(s)) == s`` for every Spark
   schema ``s`` of the types timeshard stores; timestamps without a time zone
   map to ``TimestampNTZType``, UTC ones to ``TimestampType``.
2. An Arrow type Spark cannot represent raises InvalidUsage naming the column.
"""

from __future__ import annotations

import os
import sys

import pyarrow as pa
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_schema
from pyspark.sql.types import StructField, StructType

from timeshard.errors import InvalidUsage

DEFAULT_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
    "spark.sql.files.ignoreCorruptFiles": "false",
    "spark.sql.files.ignoreMissingFiles": "false",
    "spark.sql.session.timeZone": "UTC",
}


def spark_session(
    master: str = "local[2]",
    app_name: str = "timeshard",
    extra_conf: dict[str, str] | None = None,
    packages: list[str] | None = None,
) -> SparkSession:
    """Get or create the process's SparkSession with timeshard's settings.

    ``extra_conf`` overrides :data:`DEFAULT_CONF`; ``packages`` (Maven
    coordinates) becomes ``spark.jars.packages``. A process holds one
    SparkContext: if a session is already running, it is returned with its
    master unchanged and only runtime settings applied.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    conf = {
        **DEFAULT_CONF,
        "spark.driver.host": os.environ["SPARK_LOCAL_IP"],
        "spark.driver.bindAddress": os.environ["SPARK_LOCAL_IP"],
        "spark.executorEnv.PYSPARK_PYTHON": os.environ["PYSPARK_PYTHON"],
    }
    if packages:
        conf["spark.jars.packages"] = ",".join(packages)
    conf.update(extra_conf or {})
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def arrow_to_spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of an Arrow schema (nullability kept)."""
    fields = []
    for field in schema:
        try:
            data_type = from_arrow_type(field.type, prefer_timestamp_ntz=True)
        except (PySparkException, TypeError) as e:
            raise InvalidUsage(
                f"column {field.name!r} has Arrow type {field.type}, which Spark cannot hold: {e}"
            ) from None
        fields.append(StructField(field.name, data_type, nullable=field.nullable))
    return StructType(fields)


def spark_to_arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema of a Spark schema (``TimestampType`` as UTC microseconds)."""
    return to_arrow_schema(schema, timezone="UTC")


__all__ = ["DEFAULT_CONF", "arrow_to_spark_schema", "spark_session", "spark_to_arrow_schema"]
