"""KAFKA exports against a real broker: every change once, progress in the target, fencing.

A shard is written with the pyarrow API; the export's topic is read back with
a real ``read_committed`` consumer and compared with the shard's changes,
time by time.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import SparkSession

from timeshard.errors import Fenced, InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark.jobs import JobCounter
from timeshard.storage.kafka_export import TIME_HEADER, ExportError, KafkaExport

pytestmark = [pytest.mark.spark, pytest.mark.kafka]
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])


def _topic(bootstrap: str) -> str:
    from timeshard.dev.kafka import create_topic

    name = f"x-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, name, partitions=1)
    return name


def read_records(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """``(time, key, value)`` of every committed record of ``topic``, in order, as bytes."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 60
        while high > 0 and consumer.position([TopicPartition(topic, 0)])[0].offset < high:
            assert time.monotonic() < deadline, f"{topic} not read to offset {high}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            headers = dict(msg.headers() or [])
            out.append((int(headers[TIME_HEADER]), msg.key(), msg.value()))
        return out
    finally:
        consumer.close()


def _read_all(bootstrap: str, topic: str) -> list[tuple[int, Any, Any]]:
    """``(time, key, value)`` of every committed record of ``topic``, JSON decoded."""
    return [
        (t, None if k is None else json.loads(k), None if v is None else json.loads(v))
        for t, k, v in read_records(bootstrap, topic)
    ]


@pytest.fixture
def shard(tmp_path: Path) -> tuple[PersistClient, Any]:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("s", SCHEMA)
    return client, writer


def test_upsert_export_every_change_once_and_progress_in_the_target(
    spark_kafka: SparkSession, kafka_broker: Any, shard: tuple[PersistClient, Any]
) -> None:
    client, writer = shard
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap)
    writer.append([(("a", 1), 0, 1), (("b", 2), 0, 1), (("a", 1), 2, -1), (("a", 5), 2, 1)], 0, 3)
    export = KafkaExport(spark_kafka, client, "s", bootstrap, topic, key_columns=["k"])
    assert export.progress() is None
    with JobCounter(spark_kafka) as jobs:
        step = export.step()
    assert (step.lower, step.upper, step.records, step.status) == (0, 3, 3, "committed")
    assert jobs.count == 1
    assert export.progress() is not None and export.progress().frontier == 3  # type: ignore[union-attr]
    want = [
        (0, {"k": "a"}, {"k": "a", "v": 1}),
        (0, {"k": "b"}, {"k": "b", "v": 2}),
        (2, {"k": "a"}, {"k": "a", "v": 5}),
    ]
    assert _read_all(bootstrap, topic) == want
    # An idle tick: no job, nothing produced.
    with JobCounter(spark_kafka) as jobs:
        assert export.step().status == "idle"
    assert jobs.count == 0
    # A delete is a tombstone; a restart (a new export) resumes from the target's progress.
    writer.append([(("b", 2), 4, -1), (("c", 7), 3, 1)], 3, 5)
    export.close()
    export = KafkaExport(spark_kafka, client, "s", bootstrap, topic, key_columns=["k"])
    step = export.step()
    assert (step.lower, step.upper, step.records) == (3, 5, 2)
    assert _read_all(bootstrap, topic) == [
        *want,
        (3, {"k": "c"}, {"k": "c", "v": 7}),
        (4, {"k": "b"}, None),
    ]
    # The export holds its input's since one below its progress (the changes from it on
    # stay apart from the exported ones).
    assert client.state("s").critical_readers["export.s-to-" + topic].since.time == 4
    export.drop()
    assert "export.s-to-" + topic not in client.state("s").critical_readers


def test_debezium_export_pairs_a_keys_changes(
    spark_kafka: SparkSession, kafka_broker: Any, shard: tuple[PersistClient, Any]
) -> None:
    client, writer = shard
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap)
    writer.append([(("a", 1), 0, 1), (("a", 1), 1, -1), (("a", 2), 1, 1), (("z", 0), 1, 2)], 0, 2)
    keyed = KafkaExport(
        spark_kafka, client, "s", bootstrap, topic, envelope="debezium", key_columns=["k"]
    )
    keyed.step()
    assert _read_all(bootstrap, topic) == [
        (0, {"k": "a"}, {"before": None, "after": {"k": "a", "v": 1}}),
        (1, {"k": "a"}, {"before": {"k": "a", "v": 1}, "after": {"k": "a", "v": 2}}),
        (1, {"k": "z"}, {"before": None, "after": {"k": "z", "v": 0}}),
        (1, {"k": "z"}, {"before": None, "after": {"k": "z", "v": 0}}),
    ]
    keyed.drop()
    other = _topic(bootstrap)
    unkeyed = KafkaExport(spark_kafka, client, "s", bootstrap, other, envelope="debezium")
    unkeyed.step()
    got = _read_all(bootstrap, other)
    assert all(key is None for _, key, _ in got)
    assert sorted((t, json.dumps(v, sort_keys=True)) for t, _, v in got) == sorted(
        (t, json.dumps(v, sort_keys=True))
        for t, v in [
            (0, {"before": None, "after": {"k": "a", "v": 1}}),
            (1, {"before": {"k": "a", "v": 1}, "after": None}),
            (1, {"before": None, "after": {"k": "a", "v": 2}}),
            (1, {"before": None, "after": {"k": "z", "v": 0}}),
            (1, {"before": None, "after": {"k": "z", "v": 0}}),
        ]
    )
    unkeyed.drop()


def test_err_rows_and_duplicate_keys_commit_nothing(
    spark_kafka: SparkSession, kafka_broker: Any, shard: tuple[PersistClient, Any]
) -> None:
    client, writer = shard
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap)
    writer.append([(("a", 1), 0, 1)], 0, 1)
    export = KafkaExport(spark_kafka, client, "s", bootstrap, topic, key_columns=["k"])
    export.step()
    errs = pa.table(
        {
            "k": pa.array([None], pa.string()),
            "v": pa.array([None], pa.int64()),
            "_ts": pa.array([1], pa.int64()),
            "_diff": pa.array([1], pa.int64()),
            "_err": pa.array(["division by zero"], pa.string()),
        }
    )
    writer.append(errs, 1, 2)
    with pytest.raises(ExportError, match=r"error at time 1.*division by zero"):
        export.step()
    assert export.progress().frontier == 1  # type: ignore[union-attr]
    assert _read_all(bootstrap, topic) == [(0, {"k": "a"}, {"k": "a", "v": 1})]
    other = _topic(bootstrap)
    writer2 = client.open_writer("s2", SCHEMA)
    writer2.append([(("b", 1), 0, 1), (("b", 2), 0, 1)], 0, 1)
    dup = KafkaExport(spark_kafka, client, "s2", bootstrap, other, key_columns=["k"])
    with pytest.raises(ExportError, match="has 2 rows at time 0"):
        dup.step()
    assert _read_all(bootstrap, other) == []
    export.drop()
    dup.drop()


def test_a_newer_version_fences_the_older_and_a_compacted_input_cannot_resume(
    spark_kafka: SparkSession, kafka_broker: Any, shard: tuple[PersistClient, Any]
) -> None:
    client, writer = shard
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap)
    writer.append([(("a", 1), 0, 1)], 0, 1)
    old = KafkaExport(spark_kafka, client, "s", bootstrap, topic, key_columns=["k"], version=1)
    old.step()
    new = KafkaExport(spark_kafka, client, "s", bootstrap, topic, key_columns=["k"], version=2)
    writer.append([(("a", 2), 1, 1), (("a", 1), 1, -1)], 1, 2)
    assert new.step().records == 1
    writer.append([(("b", 3), 2, 1)], 2, 3)
    with pytest.raises(Fenced, match="version 2"):
        old.step()
    assert [t for t, _, _ in _read_all(bootstrap, topic)] == [0, 1]
    old.close()
    new.drop()
    # Without the export's hold, the input compacts past its progress: it says so. (A
    # dropped export's progress is refused whether or not the input compacted past it.)
    writer.append([(("c", 4), 3, 1)], 3, 4)
    other = client.open_critical_since("s", "someone", "x")
    other.compare_and_downgrade_since("x", "x", 3)
    assert client.state("s").since.time == 3
    resumed = KafkaExport(spark_kafka, client, "s", bootstrap, topic, key_columns=["k"], version=2)
    with pytest.raises(InvalidUsage, match=r"records the progress 2 .* or that export was dropped"):
        resumed.step()
    resumed.drop()


def test_bad_arguments(spark: SparkSession, shard: tuple[PersistClient, Any]) -> None:
    client, _ = shard
    with pytest.raises(InvalidUsage, match="envelope"):
        KafkaExport(spark, client, "s", "127.0.0.1:9", "t", envelope="cdc", key_columns=["k"])
    with pytest.raises(InvalidUsage, match="needs key_columns"):
        KafkaExport(spark, client, "s", "127.0.0.1:9", "t")
    with pytest.raises(InvalidUsage, match="key_columns must be distinct columns"):
        KafkaExport(spark, client, "s", "127.0.0.1:9", "t", key_columns=["nope"])
    with pytest.raises(InvalidUsage, match="topic must be"):
        KafkaExport(spark, client, "s", "127.0.0.1:9", "a/b", key_columns=["k"])
    with pytest.raises(InvalidUsage, match="version must be"):
        KafkaExport(spark, client, "s", "127.0.0.1:9", "t", key_columns=["k"], version=0)


def test_a_declared_export_runs_in_the_pipeline_with_health(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    from timeshard.controller import Pipeline
    from timeshard.spec import ExportSpec, RunSpec, SourceSpec
    from timeshard.storage.health import STATUS_SHARD

    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap)
    client = PersistClient(Location.embedded(tmp_path / "loc"))
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
                name="kv-out",
                kind="kafka",
                input="kv",
                key_columns=["key"],
                options={"bootstrap_servers": bootstrap, "topic": topic},
            )
        ],
    )
    pipeline = Pipeline(spark_kafka, client, spec)
    for _ in range(3):
        assert pipeline.step() == {}
    [export] = pipeline.exports
    progress = export.progress()
    assert progress is not None
    live: dict[str, Any] = {}
    for _, key, value in _read_all(bootstrap, topic):
        if value is None:
            live.pop(key["key"], None)
        else:
            live[key["key"]] = value["value"]
    want = {r["key"]: r["value"] for r in _rows_at(client, "kv", progress.frontier - 1)}
    assert live == want and want
    pipeline.close()
    status = client.open_unleased_reader(STATUS_SHARD)
    upper = status.upper().time
    assert upper is not None
    rows = status.snapshot(upper - 1).to_pylist()
    assert [r["status"] for r in rows if r["object"] == "kv-out"] == ["running"]


def _rows_at(client: PersistClient, shard: str, t: int) -> list[dict[str, Any]]:
    reader = client.open_leased_reader(shard)
    try:
        return reader.snapshot(t).to_pylist()
    finally:
        reader.expire()


def test_a_record_larger_than_the_topic_takes_stops_the_export_naming_it(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    """A record past the topic's ``max.message.bytes`` is the data's, not a fault: the export
    commits the times before it and stops there with an ExportError naming the key, the
    size and the limit, every tick, until the limit is raised; nothing is skipped. Small
    records are not batched past the limit."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    from timeshard.dev.kafka import create_topic

    bootstrap = kafka_broker.bootstrap
    topic = f"x-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, config={"max.message.bytes": "2000"})
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("s", pa.schema([("k", pa.string()), ("v", pa.string())]))
    small = [((f"a{i:03}", "x" * 40), 0, 1) for i in range(200)]
    writer.append([*small, (("b", "y" * 5000), 1, 1), (("c", "z"), 2, 1)], 0, 3)
    export = KafkaExport(spark_kafka, client, "s", bootstrap, topic, key_columns=["k"])
    for _ in range(2):
        with pytest.raises(ExportError, match=r"key .*'b'.* time 1.* 5\d\d\d bytes.* 2000"):
            export.step()
        assert export.progress().frontier == 1  # type: ignore[union-attr]
        assert [(t, k["k"]) for t, k, _ in _read_all(bootstrap, topic)] == [
            (0, f"a{i:03}") for i in range(200)
        ]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry("max.message.bytes", "10000", incremental_operation=AlterConfigOpType.SET)
    raised = ConfigResource("topic", topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([raised]).values():
        future.result(30)
    assert export.step().status == "committed"
    assert [k["k"] for _, k, _ in _read_all(bootstrap, topic)][-3:] == ["a199", "b", "c"]
    export.drop()


def test_a_record_larger_than_a_megabyte_is_an_export_error(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    """The producer's own limit is the topic's: a record past the broker's default
    (1048588 bytes) is refused naming it, not retried as a fault."""
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap)
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("s", pa.schema([("k", pa.string()), ("v", pa.string())]))
    writer.append([(("big", "y" * 1_100_000), 0, 1)], 0, 1)
    export = KafkaExport(spark_kafka, client, "s", bootstrap, topic, key_columns=["k"])
    with pytest.raises(ExportError, match=r"key .*'big'.* 1100\d\d\d bytes.* 1048588"):
        export.step()
    assert export.progress() is None
    assert _read_all(bootstrap, topic) == []
    export.drop()


def test_an_export_declared_again_with_another_form_is_refused(
    spark_kafka: SparkSession, kafka_broker: Any, shard: tuple[PersistClient, Any]
) -> None:
    """The progress records the envelope, format and key columns it was written with: an
    export of that id declared with others over the topic would go on from the old
    progress, in another form, so it is refused naming both; declared as before, it goes on."""
    client, writer = shard
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap)
    writer.append([(("a", 1), 0, 1)], 0, 1)
    first = KafkaExport(spark_kafka, client, "s", bootstrap, topic, key_columns=["k"])
    assert first.step().status == "committed"
    first.close()
    writer.append([(("b", 2), 1, 1)], 1, 2)
    changes: list[dict[str, Any]] = [
        {"envelope": "debezium", "key_columns": ["k"]},
        {"key_columns": ["k", "v"]},
        {"key_columns": ["k"], "format": "avro"},
    ]
    for change in changes:
        other = KafkaExport(spark_kafka, client, "s", bootstrap, topic, **change)
        with pytest.raises(InvalidUsage, match=r"envelope 'upsert', format 'json'.*\['k'\]"):
            other.step()
        other.close()
    assert export_progress(first) == 1
    again = KafkaExport(spark_kafka, client, "s", bootstrap, topic, key_columns=["k"])
    assert again.step().status == "committed"
    assert [t for t, _, _ in _read_all(bootstrap, topic)] == [0, 1]
    again.drop()


def export_progress(export: KafkaExport) -> int | None:
    progress = export.progress()
    return None if progress is None else progress.frontier


def test_a_transaction_left_open_in_the_progress_topic_makes_no_duplicate(
    spark_kafka: SparkSession, kafka_broker: Any, shard: tuple[PersistClient, Any]
) -> None:
    """Another export's transaction left open in the shared progress topic (its process
    died after producing its progress) hides the progress committed after it from
    read_committed readers: an export must not take its older progress for the current
    one and write its changes again. It waits for that transaction to end (or reports a
    fault), and goes on once it has."""
    from confluent_kafka import Producer

    client, writer = shard
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap)
    progress_topic = f"p-{uuid.uuid4().hex[:10]}"
    export = KafkaExport(
        spark_kafka,
        client,
        "s",
        bootstrap,
        topic,
        key_columns=["k"],
        progress_topic=progress_topic,
        timeout_s=3,
    )
    client.open_critical_since("s", "a-view", "x")  # another reader keeps the since at 0
    writer.append([(("a", 1), 0, 1)], 0, 1)
    assert export.step().status == "committed"
    other = Producer({"bootstrap.servers": bootstrap, "transactional.id": "a-dead-export"})
    other.init_transactions(30)
    other.begin_transaction()
    other.produce(progress_topic, key=b"a-dead-export", value=b'{"frontier": 9, "version": 1}')
    assert other.flush(30) == 0
    faults = []
    for t, key in enumerate("bc", start=1):
        writer.append([((key, t), t, 1)], t, t + 1)
        try:
            export.step()
        except TimeoutError as e:  # a fault while the transaction is open: nothing written
            faults.append(str(e))
    other.abort_transaction(30)
    writer.append([(("d", 4), 3, 1)], 3, 4)
    for _ in range(2):
        export.step()
    assert [k["k"] for _, k, _ in _read_all(bootstrap, topic)] == ["a", "b", "c", "d"]
    assert export_progress(export) == 4
    assert len(faults) == 2 and all("a transaction open from offset" in f for f in faults)
    export.drop()


def test_a_progress_topic_of_several_partitions_is_read_where_it_is_written(
    spark_kafka: SparkSession, kafka_broker: Any, shard: tuple[PersistClient, Any]
) -> None:
    """A progress topic that exists with several partitions: the progress is written to
    partition 0, where it is read (written by key, it went elsewhere, the export found no
    progress and wrote every change again at every tick)."""
    import zlib

    from timeshard.dev.kafka import create_topic

    client, writer = shard
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap)
    progress_topic = f"p-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, progress_topic, partitions=3, config={"cleanup.policy": "compact"})
    export_id = next(f"e{i}" for i in range(100) if zlib.crc32(f"e{i}".encode()) % 3 != 0)
    export = KafkaExport(
        spark_kafka,
        client,
        "s",
        bootstrap,
        topic,
        key_columns=["k"],
        export_id=export_id,
        progress_topic=progress_topic,
    )
    for t, key in enumerate("abc"):
        writer.append([((key, t), t, 1)], t, t + 1)
        export.step()
    assert export_progress(export) == 3
    assert [k["k"] for _, k, _ in _read_all(bootstrap, topic)] == ["a", "b", "c"]
    export.drop()


def test_a_deleted_progress_is_none_and_a_corrupt_one_is_named(
    spark_kafka: SparkSession, kafka_broker: Any, shard: tuple[PersistClient, Any]
) -> None:
    """The progress is deleted from the target (as a refusal of another input's progress
    says to) with a tombstone of the export's key: then there is none. A record that is
    no progress is reported naming the topic and offset, never taken for one."""
    from confluent_kafka import Producer

    from timeshard.errors import TimeshardError

    client, writer = shard
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap)
    progress_topic = f"p-{uuid.uuid4().hex[:10]}"
    export = KafkaExport(
        spark_kafka, client, "s", bootstrap, topic, key_columns=["k"], progress_topic=progress_topic
    )
    writer.append([(("a", 1), 0, 1)], 0, 1)
    export.step()
    assert export_progress(export) == 1
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(progress_topic, key=export.export_id.encode(), value=None, partition=0)
    assert producer.flush(30) == 0
    assert export.progress() is None
    producer.produce(progress_topic, key=export.export_id.encode(), value=b"{oops", partition=0)
    assert producer.flush(30) == 0
    with pytest.raises(TimeshardError, match=rf"{progress_topic}.* offset \d+ is not a progress"):
        export.progress()
    export.drop()


def test_a_topic_that_does_not_exist_is_a_fault_naming_it(
    spark_kafka: SparkSession, kafka_broker: Any, shard: tuple[PersistClient, Any]
) -> None:
    """The export's topic missing is a fault (it may be created): the tick raises naming
    the topic, before any Spark job, and goes on once it exists."""
    from timeshard.dev.kafka import create_topic
    from timeshard.errors import TimeshardError

    client, writer = shard
    bootstrap = kafka_broker.bootstrap
    topic = f"x-{uuid.uuid4().hex[:10]}"
    writer.append([(("a", 1), 0, 1)], 0, 1)
    export = KafkaExport(spark_kafka, client, "s", bootstrap, topic, key_columns=["k"], timeout_s=5)
    with JobCounter(spark_kafka) as jobs, pytest.raises(TimeshardError, match="does not exist"):
        export.step()
    assert jobs.count == 0
    assert export.progress() is None
    create_topic(bootstrap, topic)
    assert export.step().status == "committed"
    assert _read_all(bootstrap, topic) == [(0, {"k": "a"}, {"k": "a", "v": 1})]
    export.drop()


def test_a_progress_topic_that_is_not_compacted_is_refused(
    spark_kafka: SparkSession, kafka_broker: Any, shard: tuple[PersistClient, Any]
) -> None:
    """Retention deletes a progress record once it is old enough (an idle export's), and
    the export would start again from nothing: a progress topic whose cleanup.policy is
    not ``compact`` alone is refused, naming it, before anything is written."""
    from timeshard.dev.kafka import create_topic

    client, writer = shard
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap)
    writer.append([(("a", 1), 0, 1)], 0, 1)
    for policy in ("delete", "compact,delete"):
        progress_topic = f"p-{uuid.uuid4().hex[:10]}"
        create_topic(bootstrap, progress_topic, config={"cleanup.policy": policy})
        export = KafkaExport(
            spark_kafka,
            client,
            "s",
            bootstrap,
            topic,
            key_columns=["k"],
            progress_topic=progress_topic,
        )
        with pytest.raises(InvalidUsage, match=rf"{progress_topic}.*cleanup.policy '{policy}'"):
            export.step()
        export.drop()
    assert _read_all(bootstrap, topic) == []


def test_the_exports_own_transaction_left_open_is_aborted_not_waited_for(
    spark_kafka: SparkSession, kafka_broker: Any, shard: tuple[PersistClient, Any]
) -> None:
    """A task of the export that died after its progress record, before its commit, left
    its transaction open in the progress topic: the next tick aborts it (as the task's
    init_transactions did) and commits, instead of waiting for it until its
    transaction.timeout.ms (every tick a TimeoutError blaming another export)."""
    from confluent_kafka import Producer

    client, writer = shard
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap)
    progress_topic = f"p-{uuid.uuid4().hex[:10]}"
    export = KafkaExport(
        spark_kafka,
        client,
        "s",
        bootstrap,
        topic,
        key_columns=["k"],
        progress_topic=progress_topic,
        timeout_s=3,
    )
    writer.append([(("a", 1), 0, 1)], 0, 1)
    assert export.step().status == "committed"
    dead = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"timeshard-export-{export.export_id}",
            "transaction.timeout.ms": 120_000,
        }
    )
    dead.init_transactions(30)
    dead.begin_transaction()
    dead.produce(topic, key=b'{"k":"never"}', value=b"{}", headers=[(TIME_HEADER, b"1")])
    marker = json.dumps({"frontier": 2, "version": 1}).encode()
    dead.produce(progress_topic, key=export.export_id.encode(), value=marker, partition=0)
    assert dead.flush(30) == 0  # (its process dies: never committed nor aborted)
    writer.append([(("b", 2), 1, 1)], 1, 2)
    assert export.step().status == "committed"
    assert [k["k"] for _, k, _ in _read_all(bootstrap, topic)] == ["a", "b"]
    assert export_progress(export) == 2
    export.drop()


def test_a_tick_creates_one_consumer_and_reads_the_topic_limit_once(
    spark_kafka: SparkSession,
    kafka_broker: Any,
    shard: tuple[PersistClient, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The driver reads the progress with one consumer (the high watermark its scan's
    fetches report, no second reader for it), and the topic's max.message.bytes and the
    progress topic's existence at its first tick only (each cost a client, tens of ms, at
    every tick)."""
    import confluent_kafka
    import confluent_kafka.admin

    client, writer = shard
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap)
    export = KafkaExport(spark_kafka, client, "s", bootstrap, topic, key_columns=["k"])
    writer.append([(("a", 1), 0, 1)], 0, 1)
    assert export.step().status == "committed"
    made: list[str] = []
    consumer, admin_init = confluent_kafka.Consumer, confluent_kafka.admin.AdminClient.__init__

    def counted_consumer(*args: Any, **kwargs: Any) -> Any:
        made.append("Consumer")
        return consumer(*args, **kwargs)

    def counted_admin(self: Any, *args: Any, **kwargs: Any) -> None:
        made.append("AdminClient")
        admin_init(self, *args, **kwargs)

    monkeypatch.setattr(confluent_kafka, "Consumer", counted_consumer)
    monkeypatch.setattr(confluent_kafka.admin.AdminClient, "__init__", counted_admin)
    for t in (1, 2):
        made.clear()
        writer.append([((f"k{t}", t), t, 1)], t, t + 1)
        assert export.step().status == "committed"
        # The progress topic's existence and policy were checked at the first tick.
        assert made == ["Consumer"], made
    monkeypatch.undo()
    export.drop()


def test_a_lowered_topic_limit_is_read_again_after_the_refused_tick(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    """The topic's limit is read once, and again after a tick that failed: a limit lowered
    under a record makes the broker refuse it (an ExportError), and the next tick stops
    before it naming the new limit; raised again, the tick after commits it."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    from timeshard.dev.kafka import create_topic

    def set_limit(limit: int) -> None:
        entry = ConfigEntry(
            "max.message.bytes", str(limit), incremental_operation=AlterConfigOpType.SET
        )
        resource = ConfigResource("topic", topic, incremental_configs=[entry])
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(30)

    bootstrap = kafka_broker.bootstrap
    topic = f"x-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, config={"max.message.bytes": "10000"})
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("s", pa.schema([("k", pa.string()), ("v", pa.string())]))
    export = KafkaExport(spark_kafka, client, "s", bootstrap, topic, key_columns=["k"])
    writer.append([(("a", "x"), 0, 1)], 0, 1)
    assert export.step().status == "committed"
    set_limit(2000)
    writer.append([(("b", "y" * 5000), 1, 1)], 1, 2)
    with pytest.raises(ExportError, match=r"refused"):
        export.step()
    with pytest.raises(ExportError, match=r"key .*'b'.* time 1.* 5\d\d\d bytes.* 2000"):
        export.step()
    assert export_progress(export) == 1
    set_limit(10000)
    assert export.step().status == "committed"
    assert [k["k"] for _, k, _ in _read_all(bootstrap, topic)] == ["a", "b"]
    export.drop()


def test_a_tasks_progress_read_creates_one_consumer(
    kafka_broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task reads the progress with one consumer too (it made a second, read_uncommitted,
    for the high watermark at every tick). The task is called here, without Spark."""
    import confluent_kafka

    from timeshard.persist._internal.parts import DIFF, ERR, TS
    from timeshard.storage.kafka_export import _ProduceTask

    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap)
    progress_topic = f"p-{uuid.uuid4().hex[:10]}"
    _topic_named(bootstrap, progress_topic)
    schema = pa.schema(
        [("k", pa.string()), ("v", pa.int64()), (TS, pa.int64()), (DIFF, pa.int64())]
    )

    def task(lower: int, upper: int) -> list[Any]:
        produce = _ProduceTask(
            bootstrap=bootstrap,
            topic=topic,
            progress_topic=progress_topic,
            export_id="e",
            version=1,
            envelope="upsert",
            key_columns=("k",),
            data_columns=("k", "v"),
            lower=lower,
            upper=upper,
            timeout_s=10.0,
        )
        rows = [{"k": "a", "v": lower, TS: lower, DIFF: 1, ERR: None}]
        batch = pa.RecordBatch.from_pylist(rows, schema=schema.append(pa.field(ERR, pa.string())))
        return [b.to_pylist()[0]["status"] for b in produce([batch])]

    assert task(0, 1) == ["committed"]
    made: list[str] = []
    consumer = confluent_kafka.Consumer

    def counted(*args: Any, **kwargs: Any) -> Any:
        made.append("Consumer")
        return consumer(*args, **kwargs)

    monkeypatch.setattr(confluent_kafka, "Consumer", counted)
    assert task(1, 2) == ["committed"]
    assert made == ["Consumer"]


def _topic_named(bootstrap: str, name: str) -> None:
    from timeshard.dev.kafka import create_topic

    create_topic(bootstrap, name, partitions=1, config={"cleanup.policy": "compact"})
