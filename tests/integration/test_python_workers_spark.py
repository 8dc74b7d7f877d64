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
    """The Kafka and Avro packages' jars (spark-submit lists them as Python files) hold no
    Python: they are on the JVM's class path only."""
    packages = spark.sparkContext.getConf().get("spark.submit.pyFiles", "")
    assert ".jar" in packages  # the tier's session loads Maven packages
    assert not [f for f in spark.sparkContext._python_includes if f.endswith(".jar")]
