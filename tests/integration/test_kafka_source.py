"""KAFKA sources against a real broker (KRaft, started by the tests) and a real client.

Each test has a topic of its own on the tier's broker (``kafka_broker``) and
produces with confluent-kafka, transactions included. The shard is compared
with a model of the topic: after every step, the output at every time it
keeps holds exactly the committed records whose offsets the binding of that
time covers, decoded or as err rows.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.sql import SparkSession

from timeshard.errors import SourceUnavailable
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.health import STATUS_SHARD
from timeshard.storage.ingest import Ingestion
from timeshard.storage.kafka_source import KafkaSource

pytestmark = [pytest.mark.spark, pytest.mark.kafka]
VALUE = pa.schema([("id", pa.int64()), ("name", pa.string())])


def _topic(bootstrap: str, partitions: int) -> str:
    from timeshard.dev.kafka import create_topic

    name = f"t-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, name, partitions=partitions)
    return name


def _produce(
    bootstrap: str, topic: str, records: list[tuple[int, bytes | None, bytes | None]]
) -> None:
    """``(partition, key, value)`` records, acknowledged before returning."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, key, value in records:
        producer.produce(topic, value=value, key=key, partition=partition)
    assert producer.flush(30) == 0


def _transaction(
    bootstrap: str, topic: str, records: list[tuple[int, bytes]], commit: bool | None
) -> Any:
    """Records in one transaction: committed, aborted, or (None) left open (returned)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for partition, value in records:
        producer.produce(topic, value=value, partition=partition)
    producer.flush(30)
    if commit is True:
        producer.commit_transaction(30)
    elif commit is False:
        producer.abort_transaction(30)
    return producer


def upsert_ingestion(
    spark: SparkSession, client: PersistClient, source: Any, clock: Iterator[int] | None = None
) -> Ingestion:
    """An UPSERT ingestion of ``source`` keyed on its key columns, at times counting from 1
    (or from ``clock``, which restarts share)."""
    ticks = clock if clock is not None else itertools.count(1)
    return Ingestion(
        spark,
        client,
        source,
        envelope="upsert",
        key_columns=source.key_columns,
        clock=lambda: next(ticks),
    )


def _rows(client: PersistClient, shard: str, t: int) -> list[dict[str, Any]]:
    reader = client.open_leased_reader(shard)
    try:
        return reader.snapshot(t).to_pylist()
    finally:
        reader.expire()


def _decoded(rows: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    return {
        (r["partition"], r["offset"], r["id"], r["name"], r["_err"] is not None, r["_diff"])
        for r in rows
    }


def test_json_records_at_every_time_with_transactions_and_bad_records(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap, 3)
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    clock = itertools.count(1)
    source = KafkaSource(
        "ks", bootstrap, topic, value_schema=VALUE, metadata=["partition", "offset", "timestamp"]
    )
    ing = Ingestion(spark_kafka, client, source, clock=lambda: next(clock))
    # Model: every record Kafka holds, by (partition, offset): (id, name, is_err), committed only.
    model: dict[tuple[int, int], tuple[Any, Any, bool]] = {}
    next_offset = {0: 0, 1: 0, 2: 0}

    def plain(
        partition: int, value: bytes, decoded: tuple[Any, Any, bool]
    ) -> tuple[int, None, bytes]:
        model[(partition, next_offset[partition])] = decoded
        next_offset[partition] += 1
        return (partition, None, value)

    batch = [
        plain(i % 3, json.dumps({"id": i, "name": f"n{i}"}).encode(), (i, f"n{i}", False))
        for i in range(30)
    ]
    batch.append(plain(1, b"{not json", (None, None, True)))
    batch.append(plain(2, b'{"id": "x"}', (None, None, True)))
    batch.append(plain(0, json.dumps({"id": 99}).encode(), (99, None, False)))
    _produce(bootstrap, topic, batch)
    checked = []

    def check() -> None:
        upper = client.state("ks").upper.time
        assert upper is not None
        t = upper - 1
        bound = ing.remap.frontier_at(t)
        want = {
            (p, o, v[0], v[1], v[2], 1) for (p, o), v in model.items() if o < bound.get(str(p), 0)
        }
        assert _decoded(_rows(client, "ks", t)) == want
        checked.append((t, want))

    ing.step()
    check()
    # A committed transaction is read; an aborted one never; an open one once committed.
    _transaction(bootstrap, topic, [(0, json.dumps({"id": 100, "name": "c"}).encode())], True)
    model[(0, next_offset[0])] = (100, "c", False)
    next_offset[0] += 2  # the record and the commit marker
    _transaction(bootstrap, topic, [(1, json.dumps({"id": 101, "name": "a"}).encode())], False)
    next_offset[1] += 2  # an aborted record and its marker: offsets, no record
    pending = _transaction(
        bootstrap, topic, [(2, json.dumps({"id": 102, "name": "o"}).encode())], None
    )
    ing.step()
    check()
    assert source.upper()["2"] <= next_offset[2], "an open transaction is not readable"
    pending.commit_transaction(30)
    model[(2, next_offset[2])] = (102, "o", False)
    next_offset[2] += 2
    _produce(
        bootstrap, topic, [plain(1, json.dumps({"id": 7, "name": "z"}).encode(), (7, "z", False))]
    )
    ing.step()
    check()
    # The earlier times still read as they were (nothing is rewritten).
    for t, want in checked:
        assert _decoded(_rows(client, "ks", t)) == want
    rows = _rows(client, "ks", checked[-1][0])
    errs = sorted(r["_err"] for r in rows if r["_err"] is not None)
    assert len(errs) == 2 and all(e.startswith(f"{topic}/") for e in errs), errs
    assert any("JSONDecodeError" in e for e in errs), errs
    assert all(r["timestamp"] is not None for r in rows)
    # Progress reaches the consumer group after each durable tick (asynchronously: the
    # tick does not wait for the coordinator's answer, so the group is read until it has it).
    wanted = ing.remap.resume_frontier(ing.resume_upper())
    deadline = time.monotonic() + 60
    while (committed := _committed(bootstrap, source.group_id, topic, 3)) != wanted:
        assert time.monotonic() < deadline, (committed, wanted)
        time.sleep(0.2)
    ing.close()


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[str, int]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        offsets = consumer.committed(
            [TopicPartition(topic, p) for p in range(partitions)], timeout=30
        )
    finally:
        consumer.close()
    return {str(tp.partition): tp.offset for tp in offsets if tp.offset >= 0}


def test_upsert_on_the_kafka_key_with_tombstones_restarts_and_new_partitions(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap, 2)
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    clock = itertools.count(1)

    def ingestion() -> Ingestion:
        source = KafkaSource("kv", bootstrap, topic, key_format="text", value_format="text")
        assert source.key_columns == ["key"]
        return upsert_ingestion(spark_kafka, client, source, clock)

    model: dict[str, str] = {}

    def put(records: list[tuple[int, str, str | None]]) -> None:
        _produce(
            bootstrap,
            topic,
            [(p, k.encode(), None if v is None else v.encode()) for p, k, v in records],
        )
        for _, k, v in records:
            if v is None:
                model.pop(k, None)
            else:
                model[k] = v

    def live() -> dict[str, str]:
        upper = client.state("kv").upper.time
        assert upper is not None
        rows = _rows(client, "kv", upper - 1)
        assert all(r["_diff"] == 1 and r["_err"] is None for r in rows), rows
        return {r["key"]: r["value"] for r in rows}

    ing = ingestion()
    put([(hash(f"k{i}") % 2, f"k{i}", f"v{i}") for i in range(20)])
    ing.step()
    assert live() == model
    put(
        [
            (hash("k3") % 2, "k3", None),
            (hash("k4") % 2, "k4", "again"),
            (hash("k5") % 2, "k5", None),
        ]
    )
    ing.close()
    ing = ingestion()  # a restart: resumes from the remap, no duplicate, nothing lost
    ing.step()
    assert live() == model
    # A partition added later is read from its first offset.
    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until the results
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    put([(2, "new", "p2"), (2, "k1", "moved")])
    ing.step()
    ing.step()
    assert live() == model
    ing.close()


def test_a_tombstone_deletes_its_key_when_the_source_adds_metadata_columns(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    """Metadata is about the record, never null: a null value is still a delete."""
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap, 1)
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    source = KafkaSource(
        "kv",
        bootstrap,
        topic,
        key_format="text",
        value_format="text",
        metadata=["offset", "timestamp"],
    )
    ing = upsert_ingestion(spark_kafka, client, source)
    _produce(bootstrap, topic, [(0, b"k1", b"v1"), (0, b"k2", b"v2")])
    ing.step()
    _produce(bootstrap, topic, [(0, b"k1", None)])
    ing.step()
    upper = client.state("kv").upper.time
    assert upper is not None
    rows = _rows(client, "kv", upper - 1)
    assert [(r["key"], r["value"], r["offset"], r["_diff"]) for r in rows] == [("k2", "v2", 1, 1)]
    ing.close()


def test_a_value_that_does_not_decode_is_its_keys_error_until_the_next_value(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    """Materialize's UPSERT: a value that does not decode is its key's error, and the key's
    next good value replaces it. With the key dropped, the error was no key's: the key kept
    its old value beside an err row that nothing ever retracted."""
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap, 1)
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    source = KafkaSource(
        "kv", bootstrap, topic, key_format="text", value_schema=pa.schema([("v", pa.int64())])
    )
    ing = upsert_ingestion(spark_kafka, client, source)

    def now() -> list[tuple[Any, ...]]:
        ing.step()
        upper = client.state("kv").upper.time
        assert upper is not None
        rows = _rows(client, "kv", upper - 1)
        return sorted((r["key"], r["v"], r["_err"] is not None, r["_diff"]) for r in rows)

    _produce(bootstrap, topic, [(0, b"a", b'{"v": 1}'), (0, b"b", b'{"v": 5}')])
    assert now() == [("a", 1, False, 1), ("b", 5, False, 1)]
    _produce(bootstrap, topic, [(0, b"a", b'{"v": oops')])
    assert now() == [("a", None, True, 1), ("b", 5, False, 1)]
    _produce(bootstrap, topic, [(0, b"a", b'{"v": 2}')])
    assert now() == [("a", 2, False, 1), ("b", 5, False, 1)]
    ing.close()


def test_a_missing_topic_stalls_and_lost_offsets_are_a_definite_error(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    name = f"t-{uuid.uuid4().hex[:10]}"
    ing = Ingestion(
        spark_kafka,
        client,
        KafkaSource("gone", bootstrap, name, value_format="bytes", timeout_s=5),
        clock=lambda: 5,
    )
    with pytest.raises(SourceUnavailable, match=f"topic {name!r} does not exist"):
        ing.step()
    assert _status(client, "gone") == "stalled"
    assert client.state("gone").upper.time == 0  # nothing written
    from timeshard.dev.kafka import create_topic

    create_topic(bootstrap, name, partitions=1)
    _produce(bootstrap, name, [(0, None, b"a"), (0, None, b"b")])
    ing.step()
    assert _status(client, "gone") == "running"
    # Retention deletes records the source has not read yet: never skipped.
    _produce(bootstrap, name, [(0, None, b"c"), (0, None, b"d")])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until the results
    futures = admin.delete_records([TopicPartition(name, 0, 3)])
    for f in futures.values():
        f.result(30)
    with pytest.raises(SourceUnavailable, match=r"partition 0 \[2, 3\)") as e:
        ing.step()
    assert e.value.definite
    assert _status(client, "gone") == "stalled"
    ing.close()


def test_a_topic_whose_log_starts_past_offset_0_is_read_from_its_earliest_offset(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    """Retention deleted records before the source existed: they were never the source's.
    (Read from offset 0, every step failed as "data is lost", for ever.)"""
    bootstrap = kafka_broker.bootstrap
    topic = _topic(bootstrap, 1)
    _produce(bootstrap, topic, [(0, None, b"a"), (0, None, b"b"), (0, None, b"c")])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until the results
    for f in admin.delete_records([TopicPartition(topic, 0, 2)]).values():
        f.result(30)
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    clock = itertools.count(1)
    source = KafkaSource("late", bootstrap, topic, value_format="text", metadata=["offset"])
    ing = Ingestion(spark_kafka, client, source, clock=lambda: next(clock))
    ing.step()
    _produce(bootstrap, topic, [(0, None, b"d")])
    ing.step()
    upper = client.state("late").upper.time
    assert upper is not None
    rows = _rows(client, "late", upper - 1)
    assert sorted((r["offset"], r["value"]) for r in rows) == [(2, "c"), (3, "d")]
    ing.close()


def test_an_unreachable_broker_stalls_with_one_line(spark: SparkSession, tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    source = KafkaSource("far", f"127.0.0.1:{port}", "t", value_format="text", timeout_s=2)
    ing = Ingestion(spark, client, source, clock=lambda: 5)
    with pytest.raises(SourceUnavailable) as e:
        ing.step()
    assert "\n" not in str(e.value)
    assert _status(client, "far") == "stalled"
    ing.close()


def _status(client: PersistClient, obj: str) -> str:
    upper = client.state(STATUS_SHARD).upper.time
    assert upper is not None
    rows = _rows(client, STATUS_SHARD, upper - 1)
    return next(r["status"] for r in rows if r["object"] == obj)
