"""empty_frame: a DataFrame of no rows of a schema, built in the JVM, on which no job runs.

Views analyse their SQL over such frames, and a read of no parts (an idle
input, an idle source) is one; PySpark's createDataFrame of an empty list or
Arrow table moved the nothing through Arrow at 20-50 ms a frame.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.persist._internal.parts import updates_schema
from timeshard.spark.jobs import JobCounter
from timeshard.spark.parts import read_parts
from timeshard.spark.session import arrow_to_spark_schema
from timeshard.spark.sqltext import empty_frame

pytestmark = pytest.mark.spark

SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        ("s", pa.string()),
        ("d", pa.decimal128(12, 3)),
        ("l", pa.list_(pa.int32())),
        ("st", pa.struct([("x", pa.int64()), pa.field("y", pa.string(), nullable=False)])),
        ("m", pa.map_(pa.string(), pa.float64())),
        ("t", pa.timestamp("us", tz="UTC")),
        ("b", pa.binary()),
        ("`odd.name", pa.date32()),
    ]
)


def test_an_empty_frame_has_the_schema_exactly_and_runs_no_job(spark: SparkSession) -> None:
    schema = arrow_to_spark_schema(updates_schema(SCHEMA))
    with JobCounter(spark) as jobs:
        df = empty_frame(spark, schema)
        assert df.schema == schema
        assert df.collect() == [] and df.isEmpty()
        assert df.where("k > 0").select("s").collect() == []
    assert jobs.count == 0
    assert df.count() == 0  # a count of a local relation runs a job, as Spark's own does


def test_an_empty_list_of_pyspark_runs_jobs_where_an_empty_frame_runs_none(
    spark: SparkSession,
) -> None:
    schema = arrow_to_spark_schema(SCHEMA)
    with JobCounter(spark) as jobs:
        spark.createDataFrame([], schema).isEmpty()
    assert jobs.count == 1  # what the idle ticks of FILE and KAFKA sources made
    with JobCounter(spark) as jobs:
        empty_frame(spark, schema).isEmpty()
    assert jobs.count == 0


def test_a_read_of_no_parts_is_an_empty_frame_of_the_part_schema(
    spark: SparkSession, tmp_path: object
) -> None:
    client = PersistClient(Location.embedded(f"{tmp_path}/loc"))
    writer, reader = client.open("s", SCHEMA)
    with JobCounter(spark) as jobs:
        df = read_parts(spark, reader.blob, [], SCHEMA)
        assert df.schema == arrow_to_spark_schema(updates_schema(SCHEMA))
        assert df.collect() == []
    assert jobs.count == 0
    writer.expire()
    reader.expire()
