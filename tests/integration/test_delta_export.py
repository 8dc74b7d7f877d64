"""Delta Lake exports through delta-rs: progress in the table's log, every change once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from timeshard import Frontier
from timeshard.errors import Fenced, InvalidUsage, LeaseExpired, TimeshardError
from timeshard.location import Location
from timeshard.persist import PersistClient, PersistConfig
from timeshard.spark.jobs import JobCounter
from timeshard.storage.delta_export import DeltaExport
from timeshard.storage.export import ExportError

pytestmark = pytest.mark.spark
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])


def _snapshot(client: PersistClient, t: int) -> dict[Any, Any]:
    reader = client.open_leased_reader("s")
    try:
        return {r["k"]: r["v"] for r in reader.snapshot(t).to_pylist()}
    finally:
        reader.expire()


def _table(uri: Path) -> dict[Any, Any]:
    return {r["k"]: r["v"] for r in DeltaTable(str(uri)).to_pyarrow_table().to_pylist()}


def test_merge_keeps_the_snapshot_at_the_progress(spark: SparkSession, tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("s", SCHEMA)
    uri = tmp_path / "delta"
    writer.append([(("a", 1), 0, 1), (("b", 2), 0, 1), ((None, 7), 0, 1)], 0, 1)
    export = DeltaExport(spark, client, "s", str(uri), key_columns=["k"])
    assert export.progress() is None
    with JobCounter(spark) as jobs:
        assert export.step().records == 3
    assert jobs.count == 1
    assert _table(uri) == _snapshot(client, 0)
    writer.append(
        [(("a", 1), 1, -1), (("a", 3), 1, 1), (("b", 2), 2, -1), ((None, 7), 2, -1)], 1, 3
    )
    writer.append([(("c", 4), 3, 1), (("c", 4), 4, -1)], 3, 5)
    export.close()
    export = DeltaExport(spark, client, "s", str(uri), key_columns=["k"])  # a restart
    with JobCounter(spark) as jobs:
        assert export.step().upper == 5
        assert export.step().status == "idle"
    assert jobs.count == 1
    assert _table(uri) == _snapshot(client, 4) == {"a": 3}
    assert export.progress() is not None and export.progress().frontier == 5  # type: ignore[union-attr]
    # The task of a tick that already committed writes nothing (a retried task).
    task = export._task(3, 5)
    [status] = [b.to_pylist()[0]["status"] for b in task([])]
    assert status == "stale"
    assert _table(uri) == {"a": 3}
    # A newer version fences this one.
    writer.append([(("d", 1), 5, 1)], 5, 6)
    newer = DeltaExport(spark, client, "s", str(uri), key_columns=["k"], version=2)
    newer.step()
    writer.append([(("e", 1), 6, 1)], 6, 7)
    with pytest.raises(Fenced, match="version 2"):
        export.step()


def test_append_keeps_every_change_once(spark: SparkSession, tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("s", SCHEMA)
    uri = tmp_path / "delta"
    export = DeltaExport(spark, client, "s", str(uri), envelope="append")
    changes = [(("a", 1), 0, 1), (("a", 1), 1, -1), (("a", 2), 1, 1), (("b", 5), 1, 3)]
    writer.append(changes, 0, 2)
    export.step()
    writer.append([(("b", 5), 2, -1)], 2, 3)
    export.step()
    rows = DeltaTable(str(uri)).to_pyarrow_table().to_pylist()
    got = sorted((r["k"], r["v"], r["_ts"], r["_diff"]) for r in rows)
    want = sorted([(k, v, t, d) for (k, v), t, d in changes] + [("b", 5, 2, -1)])
    assert got == want


def test_compaction_between_ticks_exports_no_change_twice(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The export holds its input one below its progress: compaction at a since of the
    progress itself would move the changes it already exported up to that time, where the
    next tick reads them again. Here a view's hold at its upper - 1 lets the since reach
    the export's hold once the shard's upper has moved past it."""
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("s", SCHEMA)
    view = client.open_leased_reader("s")  # another reader of the input
    uri = tmp_path / "delta"
    export = DeltaExport(spark, client, "s", str(uri), envelope="append")
    changes = [(("a", 1), 0, 1), (("b", 2), 1, 1)]
    writer.append(changes[:1], 0, 1)
    export.step()
    writer.append(changes[1:], 1, 2)
    view.downgrade_since(Frontier(1))  # the view's hold: its upper - 1
    assert client.compact("s") > 0  # the two batches merge at the shard's since
    export.step()
    rows = DeltaTable(str(uri)).to_pyarrow_table().to_pylist()
    got = sorted((r["k"], r["v"], r["_ts"], r["_diff"]) for r in rows)
    assert got == sorted((k, v, t, d) for (k, v), t, d in changes)
    export.close()
    view.expire()


def test_an_export_held_at_its_progress_resumes_unless_compaction_merged_across_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Exports held their input at their progress before (since == progress). Such an export
    resumes if no batch was merged across its progress, and says it cannot otherwise (the
    changes it exported would be read again)."""
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("s", SCHEMA)
    view = client.open_leased_reader("s")  # another reader, at its upper - 1
    uri = tmp_path / "delta"
    export = DeltaExport(spark, client, "s", str(uri), envelope="append")
    writer.append([(("a", 1), 0, 1)], 0, 1)
    export.step()
    writer.append([(("b", 2), 1, 1)], 1, 2)
    version = export.hold.current_opaque()  # "1+": the export committed
    export.hold.compare_and_downgrade_since(version, version, Frontier(1))  # as it held
    export.reader.downgrade_since(Frontier(1))
    view.downgrade_since(Frontier(1))
    assert client.state("s").since.time == 1
    assert export.step().status == "committed"  # nothing merged across 1: it reads on
    writer.append([(("c", 3), 2, 1)], 2, 3)
    export.hold.compare_and_downgrade_since(version, version, Frontier(2))
    export.reader.downgrade_since(Frontier(2))
    view.downgrade_since(Frontier(2))
    assert client.compact("s") > 0  # a batch from before 2 merged at since 2
    with pytest.raises(TimeshardError, match=r"cannot resume.*merged its changes.*start over"):
        export.step()
    rows = DeltaTable(str(uri)).to_pyarrow_table().to_pylist()
    assert sorted((r["k"], r["_ts"], r["_diff"]) for r in rows) == [("a", 0, 1), ("b", 1, 1)]
    export.close()
    view.expire()


def test_an_export_whose_lease_ran_out_reopens_it_and_goes_on(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The process was paused past the reader's lease and GC removed it: one step fails
    (LeaseExpired), the next reads on through a new reader, the critical hold having
    kept the changes. It failed at every step before, until a restart."""
    now = [1_000_000]
    config = PersistConfig(
        clock=lambda: now[0], reader_lease_ms=1000, writer_lease_ms=1000, heartbeat_interval_ms=0
    )
    client = PersistClient(Location.embedded(tmp_path / "loc"), config)
    writer = client.open_writer("s", SCHEMA)
    uri = tmp_path / "delta"
    export = DeltaExport(spark, client, "s", str(uri), key_columns=["k"])
    writer.append([(("a", 1), 0, 1)], 0, 1)
    export.step()
    now[0] += 60_000
    writer = client.open_writer("s")  # the writer's lease ran out too
    client.gc("s")
    assert export.reader.reader_id not in client.state("s").leased_readers
    writer.append([(("b", 2), 1, 1)], 1, 2)
    with pytest.raises(LeaseExpired):
        export.step()
    step = export.step()
    assert (step.lower, step.upper, step.status) == (1, 2, "committed")
    assert _table(uri) == _snapshot(client, 1) == {"a": 1, "b": 2}
    export.close()


def test_errors_commit_nothing(spark: SparkSession, tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("s", SCHEMA)
    uri = tmp_path / "delta"
    writer.append([(("a", 1), 0, 1), (("a", 2), 0, 1)], 0, 1)
    export = DeltaExport(spark, client, "s", str(uri), key_columns=["k"])
    with pytest.raises(ExportError, match="has 2 rows"):
        export.step()
    assert export.progress() is None and _table(uri) == {}
    with pytest.raises(InvalidUsage, match="envelope must be one of"):
        DeltaExport(spark, client, "s", str(uri), envelope="debezium", key_columns=["k"])
    odd = client.open_writer("odd", pa.schema([("a b", pa.int64())]))
    odd.append([], 0, 1)
    with pytest.raises(InvalidUsage, match="not plain identifiers"):
        DeltaExport(spark, client, "odd", str(tmp_path / "d2"), envelope="append")


def test_a_declared_delta_export_runs_in_the_pipeline(spark: SparkSession, tmp_path: Path) -> None:
    from timeshard.controller import Pipeline
    from timeshard.spec import ExportSpec, RunSpec, SourceSpec, check_spec

    client = PersistClient(Location.embedded(tmp_path / "loc"))
    uri = tmp_path / "delta"
    spec = RunSpec(
        source=[
            SourceSpec(
                name="kv",
                kind="key_value",
                envelope="upsert",
                key_columns=["key"],
                options={"keys": 20, "rate": 10, "partitions": 1, "deletes": 0.2},
            )
        ],
        export=[
            ExportSpec(
                name="kv-delta",
                kind="delta",
                input="kv",
                key_columns=["key"],
                options={"table_uri": str(uri)},
            )
        ],
    )
    check_spec(spec, existing=[])
    pipeline = Pipeline(spark, client, spec)
    for _ in range(3):
        assert pipeline.step() == {}
    [export] = pipeline.exports
    progress = export.progress()
    assert progress is not None
    reader = client.open_leased_reader("kv")
    want = {r["key"]: r["value"] for r in reader.snapshot(progress.frontier - 1).to_pylist()}
    reader.expire()
    got = {r["key"]: r["value"] for r in DeltaTable(str(uri)).to_pyarrow_table().to_pylist()}
    assert got == want and want
    pipeline.close()


def _error(diff: int, time: int) -> pa.Table:
    return pa.table(
        {
            "k": pa.array([None], pa.string()),
            "v": pa.array([None], pa.int64()),
            "_ts": pa.array([time], pa.int64()),
            "_diff": pa.array([diff], pa.int64()),
            "_err": pa.array(["bad cast"]),
        }
    )


@pytest.mark.parametrize("envelope", ["upsert", "append"])
def test_an_error_stalls_the_export_until_it_is_retracted(
    spark: SparkSession, tmp_path: Path, envelope: str
) -> None:
    """Each tick raised on the error's insertion at 1 though a later time retracted it: the
    +1 and the -1 were two rows of the tick's changes (consolidated per time), and the
    export never went past 1."""
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("s", SCHEMA)
    uri = tmp_path / "delta"
    keys = ["k"] if envelope == "upsert" else []
    export = DeltaExport(spark, client, "s", str(uri), envelope=envelope, key_columns=keys)
    writer.append([(("a", 1), 0, 1)], 0, 1)
    writer.append(_error(1, 1), 1, 2)
    writer.append([(("c", 3), 2, 1)], 2, 3)
    with pytest.raises(ExportError, match="error at time 1, which an export cannot write: bad"):
        export.step()
    # A target written per time has the changes before the error; a snapshot, none.
    progress = export.progress()
    assert (progress and progress.frontier) == (1 if envelope == "append" else None)
    assert _table(uri) == ({"a": 1} if envelope == "append" else {})
    writer.append(_error(-1, 3), 3, 4)
    writer.append([(("b", 2), 4, 1)], 4, 5)
    step = export.step()
    assert (step.status, step.upper) == ("committed", 5)
    assert _table(uri) == _snapshot(client, 4) == {"a": 1, "b": 2, "c": 3}
    export.drop()


def test_a_drop_whose_reader_cannot_expire_still_releases_the_hold(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """drop() expired the reader first: when that raised (its lease was lost already, the
    location out of reach), the critical hold stayed and the shard never compacted."""
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("s", SCHEMA)
    writer.append([(("a", 1), 0, 1)], 0, 1)
    export = DeltaExport(spark, client, "s", str(tmp_path / "delta"), envelope="append")
    assert export.step().status == "committed"
    assert any(r.startswith("export.") for r in client.state("s").critical_readers)

    def expire() -> None:
        raise LeaseExpired("the reader's lease is gone")

    monkeypatch.setattr(export.reader, "expire", expire)
    with pytest.raises(LeaseExpired):
        export.drop()
    assert not any(r.startswith("export.") for r in client.state("s").critical_readers)
