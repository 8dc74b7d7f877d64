"""Python tasks run in timeshard's worker daemon, whose path holds none of Spark's archives."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def _importers(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import sys
    import zipimport

    for _ in batches:
        pass
    zips = [k for k, v in sys.path_importer_cache.items() if isinstance(v, zipimport.zipimporter)]
    yield pa.RecordBatch.from_pydict({"zips": [zips], "path": [list(sys.path)]})


def test_a_python_task_has_no_zip_archive_to_reread(spark: SparkSession) -> None:
    """PySpark's worker invalidates the import caches at each task start, which re-reads every
    zip archive's directory (300-400 ms per task with Spark's own three on the path)."""
    assert spark.conf.get("spark.python.daemon.module") == "timeshard.pyspark_daemon"
    df = spark.range(4, numPartitions=2)
    rows = df.mapInArrow(_importers, "zips array<string>, path array<string>").collect()
    assert len(rows) == 2
    for row in rows:
        assert row.zips == [], row.zips
        assert not [p for p in row.path if p.endswith((".jar", "pyspark.zip"))], row.path


def test_the_session_s_package_jars_are_not_on_the_python_path(spark: SparkSession) -> None:
    """The Kafka and Avro packages' jars hold no Python: they are on the JVM's class path
    only, whether spark-submit resolved them (and listed them as Python files too) or the
    session loaded them as the jars an earlier resolution left (:mod:`timeshard.spark.jars`)."""
    conf = spark.sparkContext.getConf()
    assert "kafka-clients" in conf.get("spark.jars", "")  # the tier's session loads packages
    assert not [f for f in spark.sparkContext._python_includes if f.endswith(".jar")]
    assert "kafka-clients" not in ",".join(spark.sparkContext._python_includes)
    assert spark.sparkContext._jvm is not None
    jvm = spark.sparkContext._jvm
    loader = jvm.Thread.currentThread().getContextClassLoader()
    jvm.java.lang.Class.forName("org.apache.kafka.clients.consumer.KafkaConsumer", True, loader)
