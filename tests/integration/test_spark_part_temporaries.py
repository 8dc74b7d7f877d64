"""A part write cleans its own prefix of the temporaries its killed task attempts left."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from tests.integration.spark_checks import SCHEMA, updates_sql

from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark import parts as spark_parts

pytestmark = pytest.mark.spark


def test_a_temporary_left_by_a_killed_attempt_is_deleted_when_the_write_succeeds(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A task attempt killed while it filled its part leaves the hidden temporary under the
    batch's prefix; the successful write deletes it with the other attempts' parts (it
    stayed: no listing of keys names it, so neither the write nor GC ever saw it)."""
    location = Location.embedded(tmp_path)
    writer = PersistClient(location).open_writer("s", SCHEMA)
    prefix = f"s/{writer.writer_id}/{uuid.uuid4().hex}"
    root = tmp_path / "blob" / prefix
    left = root / f".tmp-{uuid.uuid4().hex}"

    def leave_a_temporary(k):  # type: ignore[no-untyped-def]
        if k == 0:  # what an earlier, killed attempt of this partition left behind
            root.mkdir(parents=True, exist_ok=True)
            left.write_bytes(b"PAR1 half a part")
        return k

    df = spark.sql(updates_sql(0, 20, 0)).withColumn("k", F.udf(leave_a_temporary, "long")("k"))
    parts = spark_parts.write_parts(df, location.blob, prefix, SCHEMA)
    assert sum(p.num_rows for p in parts) == 20
    assert sorted(p.name for p in root.iterdir()) == sorted(p.key.rpartition("/")[2] for p in parts)
