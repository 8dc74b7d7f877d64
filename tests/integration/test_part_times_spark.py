"""Part times through Spark: tasks record them, and reads of an interval use them.

Parts written by Spark tasks record their distinct times (up to the bound);
``change_times``/``has_updates`` over them fetch no part; ``updates_df`` of an
interval reads only the parts with updates in it -- none, and no Spark job,
for an interval without updates -- with a leased and with an unleased reader.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from tests.integration.spark_checks import SCHEMA, updates_sql

from timeshard.location import Location, VersionedData
from timeshard.location.blob import Blob, BlobMetadata, Temporaries
from timeshard.location.consensus import CaSResult
from timeshard.location.file import check_temporary_key
from timeshard.persist import PersistClient, PersistConfig
from timeshard.persist._internal.parts import MAX_PART_TIMES, PartMeta
from timeshard.spark import updates_df
from timeshard.spark.jobs import JobCounter
from timeshard.spark.parts import part_from_row, part_meta_batch

pytestmark = pytest.mark.spark


class CountingBlob:
    """A blob that records the key of every ``get`` and passes everything through, the
    temporaries of its blob too (GC collects them through it)."""

    def __init__(self, inner: Blob) -> None:
        self.inner = inner
        self.gets: list[str] = []

    @property
    def root_uri(self) -> str | None:
        return self.inner.root_uri

    def get(self, key: str) -> bytes | None:
        self.gets.append(key)
        return self.inner.get(key)

    def set(self, key: str, value: bytes) -> None:
        self.inner.set(key, value)

    def delete(self, key: str) -> int | None:
        return self.inner.delete(key)

    def list_keys(self, prefix: str = "") -> Iterator[BlobMetadata]:
        return self.inner.list_keys(prefix)

    def list_temporaries(self, prefix: str = "") -> Iterator[BlobMetadata]:
        inner = self.inner
        if not isinstance(inner, Temporaries):
            return iter(())
        return inner.list_temporaries(prefix)

    def delete_temporary(self, key: str) -> int | None:
        inner = self.inner
        if not isinstance(inner, Temporaries):
            check_temporary_key(key)
            return None
        return inner.delete_temporary(key)


def make_client(tmp_path: Path) -> tuple[PersistClient, CountingBlob]:
    embedded = Location.embedded(tmp_path)
    blob = CountingBlob(embedded.blob)
    config = PersistConfig(heartbeat_interval_ms=0)
    return PersistClient(Location(blob, embedded.consensus), config), blob


def times_sql(n: int, times: str) -> str:
    """``n`` updates in 4 partitions whose ``_ts`` is the SQL expression ``times`` of ``id``."""
    return updates_sql(0, n, 0).replace(
        "CAST(0 AS BIGINT) AS _ts", f"CAST({times} AS BIGINT) AS _ts"
    )


def parts_of(client: PersistClient) -> list[PartMeta]:
    return [p for b in client.state("s").batches for p in b.parts]


def test_spark_tasks_record_times(spark: SparkSession, tmp_path: Path) -> None:
    client, _ = make_client(tmp_path)
    writer = client.open_writer("s", SCHEMA)
    writer.append(spark.sql(times_sql(100, "10 + id % 3")), 0, 20)
    many = 8 * MAX_PART_TIMES  # each of the 4 partitions gets more distinct times than the bound
    writer.append(spark.sql(times_sql(many, "20 + id")), 20, 20 + many)
    parts = parts_of(client)
    assert len(parts) == 8
    for part in parts:
        ts = pq.read_table(tmp_path / "blob" / part.key, columns=["_ts"]).column("_ts")
        distinct = sorted(set(ts.to_pylist()))
        assert (part.ts_min, part.ts_max) == (distinct[0], distinct[-1])
        expected = tuple(distinct) if len(distinct) <= MAX_PART_TIMES else None
        assert part.times == expected
    assert [p.times for p in parts[:4]] == [(10, 11, 12)] * 4
    assert [p.times for p in parts[4:]] == [None] * 4
    # What a task yields is what the driver gets back.
    batch = part_meta_batch(parts)
    assert [part_from_row(r) for r in batch.to_pylist()] == parts


def test_change_times_of_spark_parts_fetch_nothing(spark: SparkSession, tmp_path: Path) -> None:
    client, blob = make_client(tmp_path)
    writer = client.open_writer("s", SCHEMA)
    writer.append(spark.sql(times_sql(40, "1 + id % 2 * 4")), 0, 6)  # times 1 and 5
    writer.append(spark.sql(times_sql(0, "6")), 6, 8)  # an idle tick
    blob.gets.clear()
    for reader in (client.open_unleased_reader("s"), client.open_leased_reader("s")):
        assert reader.change_times(0, 8) == [1, 5]
        assert reader.has_updates(2, 5) is False
        assert reader.has_updates(6, 8) is False
        assert reader.has_updates(5, 6) is True
    assert blob.gets == []


def strip_times(client: PersistClient) -> None:
    """Rewrite the head state as a writer from before recorded times would have."""
    consensus = client.location.consensus
    head = consensus.head("s")
    assert head is not None
    doc = json.loads(head.data)
    for batch in doc["batches"]:
        for part in batch["parts"]:
            part.pop("times", None)
    doc["seqno"] = head.seqno + 1
    new = VersionedData(head.seqno + 1, json.dumps(doc).encode())
    assert consensus.compare_and_set("s", head.seqno, new) == CaSResult.COMMITTED


def test_updates_df_reads_only_the_parts_of_its_interval(
    spark: SparkSession, tmp_path: Path
) -> None:
    client, _ = make_client(tmp_path)
    writer = client.open_writer("s", SCHEMA)
    for tick in range(3):
        writer.append(spark.sql(times_sql(8, str(tick))), tick, tick + 1)
    writer.append(spark.sql(times_sql(8, "3 + id % 2 * 3")), 3, 7)  # times 3 and 6
    writer.append(spark.sql(times_sql(0, "7")), 7, 9)  # idle ticks
    keys = {t: [p.key for p in client.state("s").batches[t].parts] for t in range(4)}
    for reader in (client.open_leased_reader("s"), client.open_unleased_reader("s")):
        for lower, upper in [(7, 9), (4, 6), (8, 9)]:  # no update in the interval
            with JobCounter(spark) as jobs:
                df = updates_df(spark, reader, lower, upper)
                assert df.inputFiles() == []
                assert df.collect() == []
            assert jobs.count == 0, (lower, upper)
        df = updates_df(spark, reader, 1, 2)
        assert sorted(f.split("/blob/")[1] for f in df.inputFiles()) == sorted(keys[1])
        assert {(r["_ts"], r["_diff"]) for r in df.collect()} == {(1, 1)}
        df = updates_df(spark, reader, 5, 9)
        assert sorted(f.split("/blob/")[1] for f in df.inputFiles()) == sorted(keys[3])
        assert sorted(r["k"] for r in df.collect()) == [1, 3, 5, 7]
    # Parts of an older state (no recorded times) are read where their bounds cannot tell.
    strip_times(client)
    reader = client.open_unleased_reader("s")
    df = updates_df(spark, reader, 4, 6)
    assert sorted(f.split("/blob/")[1] for f in df.inputFiles()) == sorted(keys[3])
    assert df.collect() == []
    assert updates_df(spark, reader, 0, 3).count() == 24


def test_gc_collects_temporaries_through_the_counting_blob(tmp_path: Path) -> None:
    client, blob = make_client(tmp_path)
    writer = client.open_writer("s", SCHEMA)
    writer.append([((1, "a", 1.5), 0, 1)], 0, 1)
    [appended] = client.state("s").referenced_keys()
    tmp = f"{appended.rpartition('/')[0]}/.tmp-0123456789abcdef"  # its write returned
    left = tmp_path / "blob" / tmp
    left.write_bytes(b"PAR1 half a part")
    assert isinstance(blob, Temporaries)
    assert [m.key for m in blob.list_temporaries("s/")] == [tmp]

    report = client.gc("s")

    assert not left.exists()
    assert report.deleted_temporaries == 1
