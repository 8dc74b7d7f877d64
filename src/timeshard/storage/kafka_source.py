"""KAFKA sources: one topic, read by Spark's batch Kafka reader in ranges of offsets.

A partition of the topic is a partition of the source (named by its number,
``"0"``, ``"1"``, ...); its FromTime is a Kafka offset, the next one to read.
A frontier that does not name a partition means offset 0 there, so
partitions added to the topic later are read from their start.

``upper()`` asks the broker (on the driver, with confluent-kafka) for each
partition's *last stable offset*: the client reads with
``isolation.level=read_committed``, so an open transaction's records are not
readable yet, and an aborted transaction's records are never read. ``read``
plans Spark's batch Kafka reader over explicit ``startingOffsets`` and
``endingOffsets`` (JSON, per partition), also ``read_committed``; Spark tasks
fetch the ranges in parallel and decode the records. Offsets that hold no
record (transaction markers, aborted records) leave gaps, which reclocking
does not mind: a binding covers offsets, not records.

Formats, for the key and the value separately:

* ``json``: an object per record, fields by the declared columns (as the
  FILE source decodes a JSON line: :func:`~timeshard.storage.file_source.decode_payload`);
* ``text``: the bytes as UTF-8, one column ``key`` or ``value``;
* ``bytes``: the raw bytes, one column ``key`` or ``value``;
* the key may also be left out (``key_format=None``).

``metadata`` adds the record's ``partition``, ``offset``, ``timestamp`` and
``headers`` (a list of ``key``/``value`` structs) as columns of those names.

A record whose key or value does not decode becomes an err row, data columns
null and ``_err`` reading ``<topic>/<partition>@<offset>: <error>``; the
source goes on with the next record. A null value (a tombstone) decodes to
null value columns: the UPSERT envelope, keyed on the key's columns, reads
it as a delete. (So does a JSON value whose declared fields are all null or
absent: UPSERT cannot tell it from a tombstone.)

Faults are not data: an unreachable broker, a topic that does not exist (or
was deleted), or offsets that retention deleted before they were read raise
:class:`~timeshard.errors.SourceUnavailable`, so the ingestion's health reads
``stalled`` with that one line and nothing is written. Lost offsets are a
*definite* error: they are never skipped, and the source stays stalled.

After each durable tick, :meth:`KafkaSource.commit` commits the resumption
frontier to the consumer group ``group_id`` (default ``timeshard-<name>``),
so Kafka's lag tools see how far the source is. The group is only a report:
the source resumes from its remap shard, never from the group.

Reading needs Spark's Kafka connector, ``spark-sql-kafka-0-10`` of the
running PySpark's version (:func:`~timeshard.spark.session.spark_kafka_package`),
which a session loads only when asked to. Without it, ``read`` raises
InvalidUsage naming that package.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage, SourceUnavailable
from timeshard.persist._internal.parts import ERR
from timeshard.storage.reclock import SourceFrontier

FORMATS = ("json", "text", "bytes")
METADATA: dict[str, pa.DataType] = {
    "partition": pa.int32(),
    "offset": pa.int64(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "headers": pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
}
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_RESERVED = ("_partition", "_offset", "_ts", "_diff", ERR)
_BATCH_ROWS = 4096
DEFAULT_TIMEOUT_S = 10.0


class KafkaSource:
    """One Kafka topic (module doc)."""

    def __init__(
        self,
        name: str,
        bootstrap_servers: str,
        topic: str,
        *,
        value_format: str = "json",
        value_schema: pa.Schema | None = None,
        key_format: str | None = None,
        key_schema: pa.Schema | None = None,
        metadata: Sequence[str] = (),
        group_id: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if not isinstance(bootstrap_servers, str) or not bootstrap_servers.strip():
            raise InvalidUsage(
                f"bootstrap_servers must be host:port[,...], got {bootstrap_servers!r}"
            )
        if not isinstance(topic, str) or not _TOPIC.fullmatch(topic) or topic in (".", ".."):
            raise InvalidUsage(
                f"topic must be 1-249 of [A-Za-z0-9._-] and not '.' or '..', got {topic!r}"
            )
        key = _side("key", key_format, key_schema, optional=True)
        value = _side("value", value_format, value_schema, optional=False)
        unknown = [m for m in metadata if m not in METADATA]
        if unknown or len(set(metadata)) != len(metadata):
            raise InvalidUsage(
                f"metadata must be distinct names of {list(METADATA)}, got {list(metadata)}"
            )
        fields = [*key, *value, *(pa.field(m, METADATA[m]) for m in metadata)]
        names = [f.name for f in fields]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise InvalidUsage(
                f"KAFKA source {name!r}: the key, value and metadata columns repeat {repeated}"
            )
        reserved = [n for n in names if n in _RESERVED]
        if reserved:
            raise InvalidUsage(f"KAFKA source {name!r}: columns {reserved} are reserved")
        if not isinstance(timeout_s, int | float) or timeout_s <= 0:
            raise InvalidUsage(f"timeout_s must be a positive number, got {timeout_s!r}")
        self.name = name
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.key_format = key_format
        self.value_format = value_format
        self.key_schema = pa.schema(key)
        self.value_schema = pa.schema(value)
        self.metadata = tuple(metadata)
        self.group_id = group_id or f"timeshard-{name}"
        self.timeout_s = float(timeout_s)
        self.schema = pa.schema(fields)
        self._client: Any = None

    # -- the Source protocol ---------------------------------------------------------------

    def payload_schema(self) -> pa.Schema:
        return self.schema

    @property
    def key_columns(self) -> list[str]:
        """The columns the key decodes to: an UPSERT envelope's key."""
        return list(self.key_schema.names)

    def tick(self) -> None:
        return None

    def upper(self) -> SourceFrontier:
        """Each partition's last stable offset (read_committed), from the broker."""
        return {str(p): hi for p, (_, hi) in self._watermarks(self._partitions()).items()}

    def read(self, spark: Any, start: SourceFrontier, end: SourceFrontier) -> Any:
        """The records of ``[start, end)``: a plan whose tasks fetch and decode them.

        Raises SourceUnavailable (definite) if retention already deleted
        offsets of the range, and InvalidUsage if ``spark`` lacks the
        Kafka connector.
        """
        from timeshard.spark.session import arrow_to_spark_schema

        ranges = {int(p): (start.get(p, 0), hi) for p, hi in end.items() if hi > start.get(p, 0)}
        out_schema = self._row_schema()
        spark_schema = arrow_to_spark_schema(out_schema)
        if not ranges:
            return spark.createDataFrame([], spark_schema)
        self._check_retained(ranges)
        records = self._kafka_df(spark, ranges)
        columns = ["partition", "offset", "key", "value", "timestamp"]
        if "headers" in self.metadata:
            columns.append("headers")
        return records.select(*columns).mapInArrow(
            _decoder(
                self.topic,
                self.key_format,
                self.value_format,
                self.key_schema.serialize().to_pybytes(),
                self.value_schema.serialize().to_pybytes(),
                self.metadata,
                out_schema.serialize().to_pybytes(),
            ),
            spark_schema,
        )

    def commit(self, frontier: SourceFrontier) -> None:
        """Commit ``frontier`` (the resumption frontier) to the consumer group, synchronously."""
        from confluent_kafka import KafkaException, TopicPartition

        offsets = [TopicPartition(self.topic, int(p), o) for p, o in sorted(frontier.items())]
        if not offsets:
            return
        try:
            self._consumer().commit(offsets=offsets, asynchronous=False)
        except KafkaException as e:
            raise SourceUnavailable(
                f"Kafka at {self.bootstrap_servers}: committing offsets of group "
                f"{self.group_id!r} failed: {e}"
            ) from None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- the broker, on the driver ---------------------------------------------------------

    def _consumer(self) -> Any:
        from confluent_kafka import Consumer

        if self._client is None:
            self._client = Consumer(
                {
                    "bootstrap.servers": self.bootstrap_servers,
                    "group.id": self.group_id,
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "socket.timeout.ms": int(self.timeout_s * 1000),
                    "logger": _quiet_logger(),
                }
            )
        return self._client

    def _partitions(self) -> list[int]:
        from confluent_kafka import KafkaError, KafkaException

        try:
            meta = self._consumer().list_topics(self.topic, timeout=self.timeout_s)
        except KafkaException as e:
            raise SourceUnavailable(
                f"Kafka at {self.bootstrap_servers} is unreachable: {e.args[0]}"
            ) from None
        topic = meta.topics.get(self.topic)
        if topic is None or topic.error is not None:
            code = topic.error.code() if topic is not None and topic.error is not None else None
            if code == KafkaError.UNKNOWN_TOPIC_OR_PART or topic is None:
                raise SourceUnavailable(
                    f"Kafka topic {self.topic!r} does not exist on {self.bootstrap_servers} "
                    "(deleted, or not created yet)"
                )
            raise SourceUnavailable(f"Kafka topic {self.topic!r}: {topic.error}")
        return sorted(topic.partitions)

    def _watermarks(self, partitions: Sequence[int]) -> dict[int, tuple[int, int]]:
        """``(low, last stable offset)`` of each partition."""
        from confluent_kafka import KafkaException, TopicPartition

        out = {}
        for p in partitions:
            try:
                out[p] = self._consumer().get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=self.timeout_s, cached=False
                )
            except KafkaException as e:
                raise SourceUnavailable(
                    f"Kafka topic {self.topic!r} partition {p}: offsets unavailable: {e.args[0]}"
                ) from None
            if out[p] is None:
                raise SourceUnavailable(
                    f"Kafka topic {self.topic!r} partition {p}: no answer from "
                    f"{self.bootstrap_servers} within {self.timeout_s} s"
                )
        return out

    def _check_retained(self, ranges: dict[int, tuple[int, int]]) -> None:
        """Raise (definite) if the log no longer holds the start of a range."""
        marks = self._watermarks(sorted(ranges))
        lost = {p: (lo, marks[p][0]) for p, (lo, _) in ranges.items() if marks[p][0] > lo}
        if lost:
            detail = ", ".join(
                f"partition {p} [{lo}, {low})" for p, (lo, low) in sorted(lost.items())
            )
            raise SourceUnavailable(
                f"Kafka topic {self.topic!r}: retention deleted offsets before they were read "
                f"({detail}); data is lost, the source cannot go on without it",
                definite=True,
            )

    def _kafka_df(self, spark: Any, ranges: dict[int, tuple[int, int]]) -> Any:
        from pyspark.errors import AnalysisException

        from timeshard.spark.session import spark_kafka_package

        starting = {self.topic: {str(p): lo for p, (lo, _) in sorted(ranges.items())}}
        ending = {self.topic: {str(p): hi for p, (_, hi) in sorted(ranges.items())}}
        reader = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", self.bootstrap_servers)
            .option("assign", json.dumps({self.topic: sorted(ranges)}))
            .option("startingOffsets", json.dumps(starting))
            .option("endingOffsets", json.dumps(ending))
            .option("kafka.isolation.level", "read_committed")
            .option("includeHeaders", "true" if "headers" in self.metadata else "false")
        )
        try:
            return reader.load()
        except AnalysisException as e:
            if "kafka" not in str(e).lower() or "data source" not in str(e).lower():
                raise
            package = spark_kafka_package()
            raise InvalidUsage(
                f"KAFKA source {self.name!r} needs Spark's Kafka connector, which this "
                f"SparkSession lacks: start it with the package {package!r}, e.g. "
                f"spark_session(packages=[{package!r}])"
            ) from None

    def _row_schema(self) -> pa.Schema:
        return pa.schema(
            [
                pa.field("_partition", pa.string()),
                pa.field("_offset", pa.int64()),
                *self.schema,
                pa.field(ERR, pa.string()),
            ]
        )


def _side(
    side: str, fmt: str | None, schema: pa.Schema | None, *, optional: bool
) -> list[pa.Field]:
    """The columns the key or the value decodes to, after checking its format and schema."""
    if fmt is None and optional:
        if schema is not None:
            raise InvalidUsage(f"{side}_schema goes with a {side}_format, got {schema}")
        return []
    if fmt not in FORMATS:
        raise InvalidUsage(f"{side}_format must be one of {FORMATS}, got {fmt!r}")
    if fmt == "json":
        if schema is None or len(schema) == 0:
            raise InvalidUsage(f"{side}_format 'json' needs a {side}_schema with columns")
        return [pa.field(f.name, f.type) for f in schema]
    if schema is not None:
        raise InvalidUsage(f"{side}_format {fmt!r} has one column {side!r}; got {side}_schema too")
    return [pa.field(side, pa.string() if fmt == "text" else pa.binary())]


def decode_record(
    raw: bytes | None, fmt: str | None, side: str, schema: pa.Schema
) -> dict[str, Any]:
    """The columns of a key or value (``raw`` None: all null). Raises if it does not decode."""
    from timeshard.storage.file_source import decode_payload

    if fmt is None or raw is None:
        return dict.fromkeys(schema.names)
    if fmt == "json":
        return decode_payload(raw, "json", schema)
    if fmt == "text":
        return {side: raw.decode("utf-8")}
    return {side: raw}


def _decoder(
    topic: str,
    key_format: str | None,
    value_format: str,
    key_ipc: bytes,
    value_ipc: bytes,
    metadata: tuple[str, ...],
    out_ipc: bytes,
) -> Any:
    """The task function (executors): Kafka records -> rows or err rows."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        key_schema = pa.ipc.read_schema(pa.py_buffer(key_ipc))
        value_schema = pa.ipc.read_schema(pa.py_buffer(value_ipc))
        out_schema = pa.ipc.read_schema(pa.py_buffer(out_ipc))
        data = [*key_schema.names, *value_schema.names]
        for batch in batches:
            rows = []
            for rec in batch.to_pylist():
                row: dict[str, Any] = {
                    "_partition": str(rec["partition"]),
                    "_offset": rec["offset"],
                    ERR: None,
                }
                try:
                    row.update(decode_record(rec["key"], key_format, "key", key_schema))
                    row.update(decode_record(rec["value"], value_format, "value", value_schema))
                except Exception as e:  # every decode failure becomes an err row
                    row.update(dict.fromkeys(data))
                    where = f"{topic}/{rec['partition']}@{rec['offset']}"
                    row[ERR] = f"{where}: {type(e).__name__}: {str(e)[:300]}"
                for m in metadata:
                    row[m] = rec[m]
                rows.append(row)
                if len(rows) >= _BATCH_ROWS:
                    yield pa.RecordBatch.from_pylist(rows, schema=out_schema)
                    rows = []
            if rows:
                yield pa.RecordBatch.from_pylist(rows, schema=out_schema)

    return run


def _quiet_logger() -> Any:
    """A logger for librdkafka that keeps its connection retries out of stderr."""
    import logging

    logger = logging.getLogger("timeshard.kafka")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger


__all__ = ["FORMATS", "METADATA", "KafkaSource", "decode_record"]
