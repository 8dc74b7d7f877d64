"""A KAFKA export's tick task: one Kafka transaction of the changes and the progress.

:class:`_ProduceTask` is the tick's single Spark task (steps 1 to 3 of the KAFKA
export's module doc, :mod:`timeshard.storage.kafka_export`, which "module doc"
means below): ``init_transactions`` of the export's transactional id, which
aborts and fences an earlier producer of the id; the progress read again (only
the frontier the driver planned from goes on); then the changes in time order,
in the declared envelope and format, the progress record, and the commit. Its
one result row says how the tick ended (:func:`~timeshard.storage.export.result`).

Invariants:

1. The changes of ``[lower, upper)`` and the progress record ``upper`` are
   committed in one transaction: visible together or not at all.
2. A record the topic cannot take is neither produced nor skipped: the task
   commits the changes at the times before it and ends ``blocked`` there.
3. An ask that gets no answer ends the task ``silent`` (its transaction may be
   left open, which the next ``init_transactions`` of the id ends), never with
   a fault that reads as the broker's answer.

What runs where: the transaction runs in the task, on an executor, with
confluent-kafka and fastavro. The driver builds the picklable
:class:`_ProduceTask` (``KafkaExport._task``) with what it needs from here
(the transactional id, the progress identity, :meth:`_AvroEncoding.of`, the
schemas registered) and reads its result row.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from timeshard.persist._internal.parts import DIFF, TS
from timeshard.storage.export import (
    DataError,
    ErrorNet,
    blocked_at,
    hashable,
    json_value,
    result,
    to_json,
)
from timeshard.storage.kafka_client import _no_answer, _quiet_logger
from timeshard.storage.kafka_progress import _consumer_conf, read_progress
from timeshard.storage.kafka_silence import BrokerSilent

TIME_HEADER = "timeshard-time"
#: The ``transaction.timeout.ms`` of the export's transactional producers: how long the
#: coordinator keeps a transaction no producer ends open before it aborts it.
TRANSACTION_TIMEOUT_MS = 120_000

#: A task's status when its ask got no answer: ``init_transactions``, its progress read,
#: its transaction (a produce or the commit, which may have landed) or its abort.
SILENT = "silent"


def _transactional_id(export_id: str) -> str:
    """The transactional id of every producer of the export (module doc)."""
    return f"timeshard-export-{export_id}"


def _identity(topic: str) -> str:
    """What a progress record says of the topic it was written to."""
    return f"topic {topic!r}"


def record_bytes(key: bytes | None, value: bytes | None, headers: Sequence[Any]) -> int:
    """The size of a record batch of one record (format v2, uncompressed): what the broker
    compares with ``max.message.bytes``."""
    body = 3  # attributes, timestamp delta 0, offset delta 0
    for data in (key, value):
        body += _varint_bytes(-1) if data is None else _varint_bytes(len(data)) + len(data)
    body += _varint_bytes(len(headers))
    for name, data in headers:
        raw = name.encode() if isinstance(name, str) else name
        body += _varint_bytes(len(raw)) + len(raw)
        body += _varint_bytes(-1) if data is None else _varint_bytes(len(data)) + len(data)
    return _BATCH_HEADER_BYTES + _varint_bytes(body) + body


_BATCH_HEADER_BYTES = 61


def _varint_bytes(n: int) -> int:
    """The length of ``n`` as a zigzag varint."""
    zigzag = (n << 1) ^ (n >> 63)
    return max(1, (zigzag.bit_length() + 6) // 7)


@dataclass(frozen=True)
class _ProduceTask:
    """The tick's single Spark task: one Kafka transaction (module doc)."""

    bootstrap: str
    topic: str
    progress_topic: str
    export_id: str
    version: int
    envelope: str
    key_columns: tuple[str, ...]
    data_columns: tuple[str, ...]
    lower: int
    upper: int
    timeout_s: float
    max_bytes: int = 1_048_588
    #: The export's declaration (:attr:`KafkaExport.declaration`), as the progress records it.
    declared: str = ""
    avro: _AvroEncoding | None = None
    #: Per data column, its Arrow type if it holds a map (else None): written as JSON
    #: objects, not as the lists of pairs Arrow gives.
    maps: tuple[pa.DataType | None, ...] = ()

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from confluent_kafka import KafkaException, Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": _transactional_id(self.export_id),
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                # Java's partitioner (murmur2) for keyed records, so a key shares its
                # partition with Java producers of the topic (module doc).
                "partitioner": "murmur2_random",
                # The client refuses no record the topic takes (its own bound adds slack
                # for framing), and batches no small records past the topic's limit.
                "message.max.bytes": min(max(self.max_bytes + 512, 1000), 100_000_000),
                "batch.size": max(1, min(self.max_bytes, 1_000_000)),
                # Made here, on the executor: the task pickles no logger.
                "logger": _quiet_logger(),
            }
        )
        try:
            producer.init_transactions(self.timeout_s)
        except KafkaException as e:
            if _fenced(e):
                yield result("fenced", 0, str(e))
                return
            if _no_answer(e.args[0]):  # the coordinator's silence: the driver's BrokerSilent
                yield result(SILENT, 0, f"init_transactions: {e.args[0]}")
                return
            raise  # another fault, not the data's: the next tick retries
        conf = _consumer_conf(self.bootstrap, self.timeout_s)
        try:
            progress = read_progress(conf, self.progress_topic, self.export_id, self.timeout_s)
        except BrokerSilent as e:  # its offsets got no answer: nothing begun yet
            yield result(SILENT, 0, f"the progress read: {e}")
            return
        if progress is not None and progress.version > self.version:
            yield result("fenced", 0, f"version {progress.version} owns the target")
            return
        if (progress.frontier if progress is not None else 0) != self.lower:
            yield result("stale", 0, f"the target's progress is {progress}, not {self.lower}")
            return
        form = None if progress is None else progress.declared
        if form is not None and form != self.declared:
            # Another declaration went first: the next tick's driver refuses this one.
            yield result("stale", 0, f"the target's progress was written with {form}")
            return
        held = list(batches)  # read twice: for the errors, then the records
        stop = blocked_at(held)  # the time the tick stops at, and why (None: its upper)
        while True:
            upper = self.upper if stop is None else stop[0]
            if stop is not None and upper == self.lower:
                yield result("error", 0, stop[1])
                return
            try:
                count = self._transaction(producer, held, upper)
            except _TooLarge as e:
                silence = self._abort(producer)
                if silence is not None:
                    yield result(SILENT, 0, silence)
                    return
                stop = (e.time, e.message)
                continue
            except DataError as e:
                silence = self._abort(producer)
                yield result("error", 0, str(e)) if silence is None else result(SILENT, 0, silence)
                return
            except KafkaException as e:
                if _fenced(e):
                    yield result("fenced", 0, str(e))
                    return
                if _no_answer(e.args[0]):
                    # A produce or the commit got no answer. Whether it committed or not,
                    # the next tick plans from the progress the target records; a
                    # transaction left open ends at the next init_transactions of the id.
                    with contextlib.suppress(KafkaException):
                        producer.abort_transaction(min(self.timeout_s, 1.0))
                    yield result(SILENT, 0, f"its transaction: {e.args[0]}")
                    return
                silence = self._abort(producer)
                if silence is not None:
                    yield result(SILENT, 0, silence)
                    return
                if _too_large(e):  # the broker's: a batch it refused (the client's check passed)
                    yield result("error", 0, f"topic {self.topic!r} refused records: {e}")
                    return
                raise
            break
        if stop is not None:
            yield result("blocked", count, stop[1], upper)
            return
        yield result("committed", count, None, upper)

    def _abort(self, producer: Any) -> str | None:
        """Abort the transaction under way: None once aborted, or, if the coordinator did
        not answer, what to say of it (the task's status is then ``silent``: the next tick
        plans from the progress the target records, and the next ``init_transactions``
        of the id ends the transaction). Another fault is raised."""
        from confluent_kafka import KafkaException

        try:
            producer.abort_transaction(self.timeout_s)
        except KafkaException as e:
            if _no_answer(e.args[0] if e.args else e):
                return f"its transaction's abort: {e.args[0]}"
            raise
        return None

    def _transaction(self, producer: Any, held: list[pa.RecordBatch], upper: int) -> int:
        """Produce the records below ``upper`` and the progress ``upper``, and commit: the
        number of records. Raises _TooLarge (before producing it) at a record the topic
        cannot take."""
        producer.begin_transaction()
        count = 0
        for t, keyed, key, value in self._records(held, upper):
            headers = [(TIME_HEADER, str(t).encode())]
            size = record_bytes(key, value, headers)
            if size > self.max_bytes:
                raise _TooLarge(t, self._too_large(t, keyed, size))
            self._produce(producer, key, value, headers)
            count += 1
        recorded = {
            "frontier": upper,
            "version": self.version,
            "target": _identity(self.topic),
            "declared": self.declared,
        }
        marker = json.dumps(recorded).encode()
        # Partition 0, where it is read, whatever partitions the topic has.
        producer.produce(
            self.progress_topic, key=self.export_id.encode(), value=marker, partition=0
        )
        producer.commit_transaction(self.timeout_s)
        return count

    def _too_large(self, t: int, keyed: dict[str, Any] | None, size: int) -> str:
        which = "a record" if keyed is None else f"the record of key {keyed!r}"
        return (
            f"{which} at time {t} is {size} bytes, past the {self.max_bytes} bytes topic "
            f"{self.topic!r} takes (its max.message.bytes): the export stops before it "
            "until that limit is raised"
        )

    def _produce(self, producer: Any, key: bytes | None, value: bytes | None, headers: Any) -> None:
        while True:
            try:
                producer.produce(self.topic, key=key, value=value, headers=headers)
                producer.poll(0)
                return
            except BufferError:
                producer.poll(0.1)  # the local queue is full: let deliveries drain

    def _records(
        self, batches: Iterable[pa.RecordBatch], upper: int
    ) -> Iterator[tuple[int, dict[str, Any] | None, bytes | None, bytes | None]]:
        """``(time, key columns, key, value)`` of each record at a time below ``upper``, in
        time order, from the sorted changes (err rows are not records: :func:`blocked_at`
        decided)."""
        group: list[dict[str, Any]] = []
        for row in ErrorNet().ok_rows(batches, before=upper):
            if not self.key_columns:  # every change is a record of its own
                yield from self._encode([row])
                continue
            if group and self._group_of(group[0]) != self._group_of(row):
                yield from self._encode(group)
                group = []
            group.append(row)
        if group:
            yield from self._encode(group)

    def _group_of(self, row: dict[str, Any]) -> tuple[Any, ...]:
        return (row[TS], *(hashable(row[k]) for k in self.key_columns))

    def _encode(
        self, rows: list[dict[str, Any]]
    ) -> Iterator[tuple[int, dict[str, Any] | None, bytes | None, bytes | None]]:
        t = rows[0][TS]
        keyed = {k: rows[0][k] for k in self.key_columns} if self.key_columns else None
        key = self._key(rows[0])
        data = [(self._row(r), r[DIFF]) for r in rows]
        before = [row for row, diff in data for _ in range(max(-diff, 0))]
        after = [row for row, diff in data for _ in range(max(diff, 0))]
        if self.envelope == "upsert":
            if len(after) > 1:
                raise DataError(
                    f"key {key!r} has {len(after)} rows at time {t}; an UPSERT export "
                    f"needs one row per key of {list(self.key_columns)}"
                )
            yield t, keyed, key, self._value(after[0]) if after else None
            return
        if self.key_columns and len(before) <= 1 and len(after) <= 1:
            change = {"before": before[0] if before else None, "after": after[0] if after else None}
            yield t, keyed, key, self._value(change)
            return
        for row in before:
            yield t, keyed, key, self._value({"before": row, "after": None})
        for row in after:
            yield t, keyed, key, self._value({"before": None, "after": row})

    def _key(self, row: dict[str, Any]) -> bytes | None:
        if not self.key_columns:
            return None
        key = {k: row[k] for k in self.key_columns}
        return to_json(key) if self.avro is None else self.avro.encode("key", key)

    def _value(self, value: dict[str, Any]) -> bytes:
        return to_json(value) if self.avro is None else self.avro.encode("value", value)

    def _row(self, row: dict[str, Any]) -> dict[str, Any]:
        if not any(self.maps):
            return {c: row[c] for c in self.data_columns}
        return {
            c: row[c] if arrow is None else json_value(row[c], arrow)
            for c, arrow in zip(self.data_columns, self.maps, strict=True)
        }


@dataclass(frozen=True)
class _AvroEncoding:
    """How a task writes Avro datums: the schemas as JSON text, the wire-format ids."""

    schemas: tuple[tuple[str, str], ...]
    ids: tuple[tuple[str, int], ...]

    @classmethod
    def of(
        cls, schemas: dict[str, dict[str, Any]], key_id: int | None, value_id: int | None
    ) -> _AvroEncoding:
        ids = [(side, i) for side, i in (("key", key_id), ("value", value_id)) if i is not None]
        return cls(tuple((s, json.dumps(v)) for s, v in sorted(schemas.items())), tuple(ids))

    def encode(self, side: str, datum: dict[str, Any]) -> bytes:
        import io
        import struct

        import fastavro

        parsed = _PARSED.get(self)
        if parsed is None:
            parsed = {s: fastavro.parse_schema(json.loads(text)) for s, text in self.schemas}
            _PARSED[self] = parsed
        out = io.BytesIO()
        schema_id = dict(self.ids).get(side)
        if schema_id is not None:
            out.write(b"\x00" + struct.pack(">i", schema_id))
        fastavro.schemaless_writer(out, parsed[side], datum)
        return out.getvalue()


#: Parsed schemas, per encoding, in the task's process.
_PARSED: dict[_AvroEncoding, dict[str, Any]] = {}


class _TooLarge(Exception):
    """A record the topic cannot take, at ``time`` (a task's; not produced)."""

    def __init__(self, time: int, message: str) -> None:
        super().__init__(message)
        self.time, self.message = time, message


def _too_large(error: Any) -> bool:
    from confluent_kafka import KafkaError

    code = error.args[0].code() if error.args and hasattr(error.args[0], "code") else None
    return code in (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE)


def _fenced(error: Any) -> bool:
    from confluent_kafka import KafkaError

    code = error.args[0].code() if error.args and hasattr(error.args[0], "code") else None
    return code in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    )


__all__ = ["SILENT", "TIME_HEADER", "TRANSACTION_TIMEOUT_MS", "record_bytes"]
