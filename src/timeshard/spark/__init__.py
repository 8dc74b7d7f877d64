"""Spark: the session, the parallel part writer and reader, snapshots, the data source.

Importing this package imports PySpark but starts no SparkSession.
"""

from timeshard.spark.datasource import TimeshardDataSource, register
from timeshard.spark.parts import check_parts, conform_df, read_parts, write_parts
from timeshard.spark.session import arrow_to_spark_schema, spark_session, spark_to_arrow_schema
from timeshard.spark.snapshot import consolidate_df, snapshot_df, updates_df

__all__ = [
    "TimeshardDataSource",
    "arrow_to_spark_schema",
    "check_parts",
    "conform_df",
    "consolidate_df",
    "read_parts",
    "register",
    "snapshot_df",
    "spark_session",
    "spark_to_arrow_schema",
    "updates_df",
    "write_parts",
]
