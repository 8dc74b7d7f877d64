"""Faults injected into Spark tasks' part writes and reads (the nemesis's task faults).

:func:`timeshard.spark.parts.inject_task_faults` makes the tasks of later
``write_parts``/``read_parts`` calls fail with a seeded probability. These
tests check the injector end to end on a local session -- a failed write
leaves no part, a failed read fails the action and never drops rows, each
injection is journalled by the task -- and that the product takes a failed
task as a fault: a view tick whose read fails writes nothing, and the view
is correct at every time once the faults stop.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from tests.integration.test_views import INPUT, SQL, check_every_time, write_history

from timeshard.compute import MaterializedView, ViewDefinition
from timeshard.location import FileBlob, Location
from timeshard.location.unreliable import FaultJournal, KeyedFaults
from timeshard.persist import PersistClient
from timeshard.spark.parts import inject_task_faults, read_parts, write_parts

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("k", pa.int64())])


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[FaultJournal]:
    yield FaultJournal(str(tmp_path / "injected.jsonl"))
    inject_task_faults(None)


def _updates(spark: SparkSession, n: int = 40, partitions: int = 4) -> DataFrame:
    rows = [(i, 10, 1) for i in range(n)]
    return spark.createDataFrame(rows, "k long, _ts long, _diff long").repartition(partitions)


def test_a_write_job_under_task_faults_writes_every_part_or_none(
    spark: SparkSession, tmp_path: Path, journal: FaultJournal
) -> None:
    blob = FileBlob(tmp_path / "blob")
    seeds = iter(range(10**6))
    inject_task_faults(lambda: KeyedFaults(next(seeds), 0.3, journal=journal))
    failed = 0
    for job in range(12):
        prefix = f"s/w/b{job}"
        try:
            parts = write_parts(_updates(spark), blob, prefix, SCHEMA)
        except Exception as e:
            assert "injected task_write" in str(e), str(e)[:2000]
            failed += 1
            assert [m.key for m in blob.list_keys(prefix + "/")] == []
            continue
        assert sorted(m.key for m in blob.list_keys(prefix + "/")) == [p.key for p in parts]
        assert sum(p.num_rows for p in parts) == 40
    assert 0 < failed < 12
    counts = FaultJournal.counts(journal.path, by="how")
    assert set(counts) <= {"task_write.determinate", "task_write.indeterminate"}
    assert sum(counts.values()) >= failed


def test_a_read_under_task_faults_fails_the_action_and_drops_no_row(
    spark: SparkSession, tmp_path: Path, journal: FaultJournal
) -> None:
    blob = FileBlob(tmp_path / "blob")
    parts = write_parts(_updates(spark), blob, "s/w/b", SCHEMA)
    inject_task_faults(lambda: KeyedFaults(1, 1.0, journal=journal))
    failing = read_parts(spark, blob, parts, SCHEMA)
    with pytest.raises(Exception, match="injected task_read"):
        failing.collect()
    assert FaultJournal.counts(journal.path)["unreliable"] >= 1  # each task that ran
    inject_task_faults(lambda: KeyedFaults(1, 1.0, until_ms=1, journal=journal))  # window over
    assert sorted(r["k"] for r in read_parts(spark, blob, parts, SCHEMA).collect()) == list(
        range(40)
    )
    inject_task_faults(None)
    plain = read_parts(spark, blob, parts, SCHEMA)
    assert "PartReadFaults" not in plain._jdf.queryExecution().executedPlan().toString()
    assert sorted(r["k"] for r in plain.collect()) == list(range(40))


def test_a_view_tick_whose_part_reads_fail_writes_no_error_as_data(
    spark: SparkSession, tmp_path: Path, journal: FaultJournal
) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    hold = client.open_leased_reader("inp", INPUT)
    upper = write_history(client)
    view = MaterializedView.install(
        spark, client, ViewDefinition("v1", {"inp": "inp"}, SQL), as_of=0
    )
    hold_view = client.open_leased_reader("v1")
    seeds = iter(range(10**6))
    inject_task_faults(lambda: KeyedFaults(next(seeds), 1.0, journal=journal))
    upper = write_history(client, start=4, ticks=3)
    for _ in range(3):
        try:
            view.step()
        except Exception as e:  # a fault may be raised; the next tick retries it
            print(f"the view's tick failed: {type(e).__name__}: {str(e)[:200]}")
    assert FaultJournal.counts(journal.path)["unreliable"] > 0
    inject_task_faults(None)
    view.catch_up()
    check_every_time(client, "v1", 0, upper)
    view.close()
    hold.expire()
    hold_view.expire()
