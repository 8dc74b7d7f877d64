"""KAFKA exports place a key in the partition Java's producer places it in (murmur2).

The export's records share their topic with Java producers (Kafka Connect,
Kafka Streams, the Java client's default partitioner): one key's records must
land in one partition whoever produces them, or a consumer keyed by partition
sees the key's history split. Java's partition of a non-null key is
``toPositive(murmur2(key)) % partitions``; :func:`java_murmur2` is
``org.apache.kafka.common.utils.Utils.murmur2`` written again from its public
definition, checked against the values of Kafka's own ``UtilsTest``.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import SparkSession

from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.kafka_export import KafkaExport

pytestmark = [pytest.mark.spark, pytest.mark.kafka]
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])
PARTITIONS = 5


def _int32(n: int) -> int:
    n &= 0xFFFFFFFF
    return n - (1 << 32) if n & 0x80000000 else n


def java_murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (a signed 32-bit int), with its seed ``0x9747b28c``."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(length // 4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r  # Java's >>> on the 32-bit value
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = data[length & ~3 :]
    if len(tail) >= 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return _int32(h)


def java_partition(key: bytes, partitions: int) -> int:
    """The partition Java's default partitioner gives a record with the non-null ``key``."""
    return (java_murmur2(key) & 0x7FFFFFFF) % partitions


def test_java_murmur2_has_the_values_of_kafkas_utils_test() -> None:
    assert java_murmur2(b"21") == -973932308
    assert java_murmur2(b"foobar") == -790332482
    assert java_murmur2(b"a-little-bit-long-string") == -985981536
    assert java_murmur2(b"a-little-bit-longer-string") == -1486304829
    assert java_murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert java_murmur2(b"abc") == 479470107


def _records_by_partition(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    """``(partition, key)`` of every committed record of every partition of ``topic``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    out: list[tuple[int, bytes]] = []
    try:
        for p in range(PARTITIONS):
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            consumer.assign([TopicPartition(topic, p, 0)])
            deadline = time.monotonic() + 60
            while high > 0 and consumer.position([TopicPartition(topic, p)])[0].offset < high:
                assert time.monotonic() < deadline, f"{topic}[{p}] not read to offset {high}"
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                assert msg.error() is None, msg.error()
                out.append((msg.partition(), msg.key()))
        return out
    finally:
        consumer.close()


def test_a_key_lands_in_the_partition_javas_murmur2_gives_it(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    """librdkafka's default partitioner (CRC32) put most keys elsewhere than Java's."""
    from timeshard.dev.kafka import create_topic

    bootstrap = kafka_broker.bootstrap
    topic = f"x-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("s", SCHEMA)
    keys = [f"key-{i}" for i in range(40)]
    writer.append([((k, i), 0, 1) for i, k in enumerate(keys)], 0, 1)
    writer.append([((k, i), 1, -1) for i, k in enumerate(keys)], 1, 2)  # tombstones too
    export = KafkaExport(spark_kafka, client, "s", bootstrap, topic, key_columns=["k"])
    try:
        assert export.step().records == 2 * len(keys)
    finally:
        export.drop()
    records = _records_by_partition(bootstrap, topic)
    assert len(records) == 2 * len(keys)
    misplaced = [
        (key, partition, java_partition(key, PARTITIONS))
        for partition, key in records
        if partition != java_partition(key, PARTITIONS)
    ]
    assert misplaced == [], "(key, partition, Java's partition) of records placed otherwise"
