"""Err row counts of parts written by Spark tasks, and the point SELECT that reads them.

A part's recorded ``err_rows`` is compared with its file. A SELECT of
``timeshard serve`` over shards whose parts recorded no err row is one Spark
job (the query's); a shard that may hold one is checked first (one job more),
and an err row in the snapshot is the query's error, as before.
"""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from tests.integration.spark_checks import SCHEMA, random_updates, updates_df, updates_sql

from timeshard.location import Location
from timeshard.persist import PersistClient, PersistConfig
from timeshard.persist._internal.parts import PartMeta
from timeshard.persist.read import ReadHandle
from timeshard.server.engine import Engine
from timeshard.server.sql_tokens import SqlError
from timeshard.spark.jobs import JobCounter

pytestmark = pytest.mark.spark


def make_client(tmp_path: Path) -> PersistClient:
    config = PersistConfig(heartbeat_interval_ms=0)
    return PersistClient(Location.embedded(tmp_path / "loc"), config)


def test_spark_tasks_record_their_err_rows(spark: SparkSession, tmp_path: Path) -> None:
    client = make_client(tmp_path)
    writer = client.open_writer("s", SCHEMA)
    updates = random_updates(random.Random(7), 0, 5, 400)  # about one in ten an err row
    writer.append(updates_df(spark, updates, 4), 0, 5)
    parts = [p for b in client.state("s").batches for p in b.parts]
    assert len(parts) == 4
    assert sum(p.err_rows or 0 for p in parts) == sum(u[0][3] is not None for u in updates) > 0
    for part in parts:
        file = tmp_path / "loc" / "blob" / part.key
        errs = pq.read_table(file, columns=["_err"]).column("_err")
        assert part.err_rows == len(errs) - errs.null_count


def test_a_select_reads_err_counts_from_part_metadata(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = make_client(tmp_path)
    writer = client.open_writer("s", SCHEMA)
    writer.append(spark.sql(updates_sql(0, 50, 0)), 0, 1)
    engine = Engine(spark, client, read_wait_s=5.0)
    query = "SELECT count(*) FROM s"
    fetched: list[int] = []
    snapshot_parts = ReadHandle.snapshot_parts

    def counted(self: ReadHandle, as_of: int, **kwargs: bool) -> list[PartMeta]:
        fetched.append(as_of)
        return snapshot_parts(self, as_of, **kwargs)

    monkeypatch.setattr(ReadHandle, "snapshot_parts", counted)
    with JobCounter(spark) as jobs:
        result = engine.query(query, None)
    assert result.rows == [(50,)]
    assert jobs.count == 1  # no err-check job: every part recorded 0 err rows
    assert fetched == [0]  # the parts' metadata is read once, for the check and the read

    bad = [((None, None, None, "cannot decode record 3"), 1, 1)]
    writer.append(updates_df(spark, bad, 1), 1, 2)
    with pytest.raises(SqlError, match="cannot decode record 3") as failed:
        engine.query(query, 1)
    assert failed.value.sqlstate == "XX000"

    retract = [((None, None, None, "cannot decode record 3"), 2, -1)]
    writer.append(updates_df(spark, retract, 1), 2, 3)
    with JobCounter(spark) as jobs:
        result = engine.query(query, 2)
    assert result.rows == [(50,)]
    assert jobs.count == 2  # its parts may hold an err row: checked, and none is left


def test_a_select_reads_a_column_whose_name_holds_a_backtick(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Column names come from upstream tables: quoted as Spark quotes them, not pasted."""
    client = make_client(tmp_path)
    writer = client.open_writer("q", pa.schema([("a`b", pa.int64()), ("c", pa.string())]))
    writer.append([((1, "x"), 0, 1)], 0, 1)
    engine = Engine(spark, client, read_wait_s=5.0)
    result = engine.query("SELECT * FROM q", None)
    assert [name for name, _ in result.columns] == ["a`b", "c"]
    assert result.rows == [(1, "x")]
    writer.expire()
