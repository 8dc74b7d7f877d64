"""Spark: the session, the parallel part writer and reader, snapshots, the data source.

* :func:`spark_session` -- the SparkSession timeshard runs on;
* :func:`write_parts` / :func:`read_parts` -- parts written and read by Spark
  tasks (``WriteHandle.batch`` calls ``write_parts`` for a DataFrame);
* :func:`snapshot_df` / :func:`updates_df` -- a shard at a time as a DataFrame;
* :class:`TimeshardDataSource` / :func:`register` -- ``spark.read.format("timeshard")``;
* :func:`typed_errors` -- Spark failures caused by parts re-raised as PartError;
* :class:`JobCounter` -- the Spark jobs a piece of work ran (tests assert them).

Importing this package imports PySpark but starts no SparkSession and no JVM.
"""

from timeshard.spark.datasource import TimeshardDataSource, register
from timeshard.spark.jobs import JobCounter, jobs_submitted
from timeshard.spark.parts import (
    check_parts,
    conform_df,
    read_parts,
    typed_error,
    typed_errors,
    write_parts,
)
from timeshard.spark.session import arrow_to_spark_schema, spark_session, spark_to_arrow_schema
from timeshard.spark.snapshot import PartsReader, consolidate_df, snapshot_df, updates_df

__all__ = [
    "JobCounter",
    "PartsReader",
    "TimeshardDataSource",
    "arrow_to_spark_schema",
    "check_parts",
    "conform_df",
    "consolidate_df",
    "jobs_submitted",
    "read_parts",
    "register",
    "snapshot_df",
    "spark_session",
    "spark_to_arrow_schema",
    "typed_error",
    "typed_errors",
    "updates_df",
    "write_parts",
]
