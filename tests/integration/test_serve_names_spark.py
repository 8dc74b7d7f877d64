"""Shards whose ids are no Spark identifiers, read by ``timeshard serve``'s SELECT."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.location import Location
from timeshard.persist import PersistClient, PersistConfig
from timeshard.server.engine import Engine

pytestmark = pytest.mark.spark


def test_a_shard_named_by_a_number_is_read(spark: SparkSession, tmp_path: Path) -> None:
    """SELECT over a source named ``"123"`` failed: Spark refused its temp view name."""
    client = PersistClient(
        Location.embedded(tmp_path / "loc"), PersistConfig(heartbeat_interval_ms=0)
    )
    writer = client.open_writer("123", pa.schema([("id", pa.int64())]))
    writer.append([((1,), 0, 1), ((2,), 0, 1)], 0, 1)
    engine = Engine(spark, client, read_wait_s=5.0)
    result = engine.query('SELECT count(*) AS n, max("123".id) AS m FROM "123"', None)
    assert result.rows == [(2, 2)]
    writer.expire()
