"""KAFKA exports: a shard's changes to a Kafka topic, exactly once.

The export's progress lives **in the target**: a progress topic (default
``_timeshard-progress``, created with one partition, compacted; only
partition 0 is used) holds records keyed by the export's id whose value is
``{"frontier": F, "version": V, "target": T, "declared": D}``: every change
of the shard at a time below ``F`` is in the topic ``T``, once, in the form
``D`` (the envelope, format and key columns). An export declared with
another topic, or another form, under the same id is refused with
InvalidUsage naming both: it would go on from a progress the old
declaration wrote, and the topic would hold records of two forms. (A record
without ``T`` or ``D``, from before they were recorded, is accepted.) A
progress topic that exists with a ``cleanup.policy`` other than ``compact``
is refused too: retention would delete an idle export's progress. (A
progress deleted anyway, by a tombstone of the export's key or with the
topic, is refused while the export's hold records a commit: see
:class:`~timeshard.storage.export.ShardExport`.) A tick appends the changes at ``[F,
upper)`` and the record ``{"frontier": upper}`` **in one
Kafka transaction**, so the two are visible together or not at all.

One tick is one Spark job, whose single task:

1. starts a transactional producer with the id ``timeshard-export-<id>``;
   ``init_transactions`` aborts whatever an earlier producer with that id
   left open and fences it, so an old instance can no longer commit;
2. reads the export's progress record (``read_committed``) and goes on only
   if it is still the frontier the driver planned from (else another
   instance went first: the tick ends, the next one plans again) and its
   version is not newer than this export's (else this export is fenced: a
   newer deployment owns the target);
3. produces the changes in time order, then the progress record, and
   commits. Any failure aborts the transaction: nothing of the tick is
   visible, and the next tick redoes it.

A Spark task retried after a commit it could not report finds the new
frontier in step 2 and produces nothing. The driver reads the progress before
the job; if a transaction is open in the progress topic then, it first aborts
the export's own (one of its tasks died after its progress record, before its
commit) as step 1 would, and waits for the others (:func:`read_progress`).
Every record carries the header ``timeshard-time`` (the time of its change, in
decimal). A keyed record goes to the partition Java's producer gives its key
(``murmur2``, librdkafka's ``murmur2_random``; librdkafka's own default,
CRC32, places most keys elsewhere), so a key's records share a partition with
those Java producers write to the topic; a record without a key goes to a
random partition.

A record the topic cannot take is the data's, not a fault: before its first
job, and again after a tick that failed (one blocked at a record past the
limit, or whose records the broker refused: the limit was lowered), the driver
reads the topic's ``max.message.bytes`` (a topic that does not exist is a
fault, retried at the next tick), and the task checks each
record's size as a batch of its own (the record, its key, value and headers,
and the batch's framing) before producing it. At the first record past the
limit it aborts, commits the changes at the times before that record's
(with that time as the progress, status ``blocked``, as at an err row) and
stops there: the tick raises :class:`ExportError` naming the record's key,
time and size and the limit. Every later tick stops there too until the
topic's limit is raised; the record is never skipped. The producer's own
limits follow the topic's, so a record the topic takes is never refused by
the client, and no batch of small records grows past the topic's limit.

Envelopes (in ``format="json"`` the key and the value are JSON objects,
columns by name; a map, at any depth, is a JSON object of its entries, a key
that is not a string as its JSON text, as
:func:`~timeshard.storage.export.json_value` writes it):

* ``upsert``: keyed by ``key_columns`` (the key is a JSON object of them);
  per key and time, the value is the row the key has after that time, or a
  tombstone (null value) if it has none. Two rows of one key at one time
  (or one row twice) are an error: an UPSERT target has one row per key.
  Each time is encoded from its own changes: a key's second row at a later
  time than its first (with no retraction of it) is written as the key's
  value, and a later retraction of either as a tombstone, though the shard
  keeps the other. A shard whose keys are unique at every time never has that.
* ``debezium``: the value is ``{"before": row|null, "after": row|null}``.
  With ``key_columns``, a key's retraction and insertion at one time are one
  record (an update); without, every change is a record of its own, once
  per unit of its multiplicity.

With ``format="avro"`` the key and the value are Avro binary datums
instead, written by fastavro in the task with the schemas of
:meth:`KafkaExport.avro_schemas` (the key's columns as a record; the row as a
record, or for ``debezium`` an envelope record of ``before`` and
``after``, each a union of ``null`` and the row), every field nullable
(:func:`~timeshard.storage.avro.avro_record_schema`); a list column is an Avro
array, a struct a record named after its path, a map with string keys a map,
nested to any depth. With
``key_schema_id`` / ``value_schema_id`` (ids a registry gave those schemas)
the datums go in the Confluent wire format: a zero byte and the id (4 bytes,
big-endian) before the datum. A tombstone stays a null value.

A broker that does not answer the driver (its progress read, the topics'
configuration, the progress topic's creation) or the task (the transaction
coordinator, at ``init_transactions``) raises :class:`BrokerSilent`, a fault
(a refusal, such as a failed authorization, is an answer, never a silence):
the tick writes nothing and is not asked again on every tick, which would hold
the pipeline's other objects up for the whole ``timeout_s`` each time. As a KAFKA source does
(:class:`~timeshard.storage.kafka_source.BrokerSilence`), the export raises
the same fault again without asking until a pause has passed (none at first,
then 1 s, doubling up to 30 s), then probes the progress topic's metadata for
at most 1 s (at the cap, one probe in ten waits ``timeout_s``); a broker that
answers is read in full again, from the progress it records. The KAFKA sources
and exports of one cluster share the last silence any of them met (the KAFKA
source's module doc): an outage's first tick waits the whole timeout once per
cluster. A task whose transaction (its produce, commit or abort) or progress
read gets no answer ends with status ``silent``, raised as BrokerSilent too;
whether its commit landed or not, the next tick plans from the progress the
target records. Its transaction may be left open on the broker, holding back
``read_committed`` readers: the next tick's driver ends it with
``init_transactions`` of the export's id right after its progress read, before
anything else that could fail the tick (:meth:`KafkaExport.progress`). A clean
close does the same, since no tick follows it, within ``timeout_s`` in all (a
probe of at most 1 s, a scan for a newer version's progress, then
``init_transactions``, each waiting what is left); it waits for no other
export's transaction. A transaction it cannot end is logged, and its
transaction timeout ends it.

What every export does on the driver (the since hold, err rows, resuming)
is :class:`~timeshard.storage.export.ShardExport`. It needs no connector
jar: the task produces with confluent-kafka.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage, TimeshardError
from timeshard.persist import PersistClient
from timeshard.persist._internal.parts import DIFF, TS
from timeshard.storage.export import (
    DataError,
    ErrorNet,
    ExportError,
    ExportStep,
    Progress,
    ShardExport,
    blocked_at,
    has_map,
    hashable,
    json_value,
    result,
    to_json,
)
from timeshard.storage.kafka_client import (
    _no_answer,
    _quiet_logger,
    check_kafka_names,
    check_timeout,
)
from timeshard.storage.kafka_silence import BrokerSilence, SharedSilence

PROGRESS_TOPIC = "_timeshard-progress"
ENVELOPES = ("upsert", "debezium")
FORMATS = ("json", "avro")
TIME_HEADER = "timeshard-time"
DEFAULT_TIMEOUT_S = 30.0
#: The ``transaction.timeout.ms`` of the export's transactional producers: how long the
#: coordinator keeps a transaction no producer ends open before it aborts it.
TRANSACTION_TIMEOUT_MS = 120_000
log = logging.getLogger(__name__)


class BrokerSilent(TimeshardError):
    """The broker did not answer the driver in time (a fault; :class:`KafkaExport` does
    not ask it again before a probe finds it answering)."""


class KafkaExport(ShardExport):
    """One shard to one Kafka topic (module doc)."""

    envelopes = ENVELOPES

    def __init__(
        self,
        spark: Any,
        client: PersistClient,
        shard: str,
        bootstrap_servers: str,
        topic: str,
        *,
        envelope: str = "upsert",
        key_columns: Sequence[str] = (),
        export_id: str | None = None,
        version: int = 1,
        progress_topic: str = PROGRESS_TOPIC,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        format: str = "json",
        key_schema_id: int | None = None,
        value_schema_id: int | None = None,
    ) -> None:
        self.check_options(
            bootstrap_servers=bootstrap_servers,
            topic=topic,
            progress_topic=progress_topic,
            timeout_s=timeout_s,
            format=format,
            key_schema_id=key_schema_id,
            value_schema_id=value_schema_id,
        )
        super().__init__(
            spark,
            client,
            shard,
            envelope=envelope,
            key_columns=key_columns,
            export_id=export_id or f"{shard}-to-{topic}",
            version=version,
        )
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.progress_topic = progress_topic
        self.timeout_s = float(timeout_s)
        self.format = format
        self.key_schema_id, self.value_schema_id = key_schema_id, value_schema_id
        self._progress_topic_checked = False
        #: Whether the broker answered the step under way (:meth:`progress`).
        self._answered = False
        #: The topic's max.message.bytes, read again after a tick that failed (module doc).
        self._max_bytes: int | None = None
        #: Whether the last task got no answer (status ``silent``), so that its transaction
        #: may be open on the broker: the next step ends it first (:meth:`step`).
        self._left_open = False
        with self._declaring():
            self._avro = self.avro_schemas() if format == "avro" else {}

    @classmethod
    def check_options(
        cls,
        *,
        bootstrap_servers: Any = None,
        topic: Any = None,
        progress_topic: Any = PROGRESS_TOPIC,
        timeout_s: Any = DEFAULT_TIMEOUT_S,
        format: Any = "json",
        key_schema_id: Any = None,
        value_schema_id: Any = None,
    ) -> None:
        check_kafka_names(bootstrap_servers, topic=topic, progress_topic=progress_topic)
        if format not in FORMATS:
            raise InvalidUsage(f"format must be one of {FORMATS}, got {format!r}")
        for what, schema_id in (
            ("key_schema_id", key_schema_id),
            ("value_schema_id", value_schema_id),
        ):
            if schema_id is None:
                continue
            if format != "avro" or isinstance(schema_id, bool) or not isinstance(schema_id, int):
                raise InvalidUsage(
                    f"{what} goes with format 'avro' and is an int, got {schema_id!r}"
                )
            if not 0 <= schema_id < 2**31:
                raise InvalidUsage(f"{what} must be in [0, 2**31), got {schema_id}")
        check_timeout(timeout_s)

    def avro_schemas(self) -> dict[str, dict[str, Any]]:
        """The Avro schemas of the records' ``key`` (with ``key_columns``) and ``value``."""
        from timeshard.storage.avro import avro_record_schema

        base = re.sub(r"[^A-Za-z0-9_]", "_", self.topic)
        base = base if re.match(r"[A-Za-z_]", base) else f"t_{base}"
        schema = self.reader.schema
        row = avro_record_schema(f"{base}_value", schema)
        out: dict[str, dict[str, Any]] = {"value": row}
        if self.envelope == "debezium":
            row = {**row, "name": f"{base}_row"}
            either = {"type": ["null", row], "default": None}
            after = {"type": ["null", f"{base}_row"], "default": None}
            out["value"] = {
                "type": "record",
                "name": f"{base}_envelope",
                "fields": [{"name": "before", **either}, {"name": "after", **after}],
            }
        if self.key_columns:
            keys = pa.schema([schema.field(k) for k in self.key_columns])
            out["key"] = avro_record_schema(f"{base}_key", keys)
        return out

    @property
    def target(self) -> str:
        return f"topic {self.topic!r} (progress in {self.progress_topic!r})"

    @property
    def identity(self) -> str:
        return _identity(self.topic)

    @property
    def fresh_target(self) -> str:
        return (
            f"delete its progress with a tombstone (a null value) of key {self.export_id!r} "
            f"in partition 0 of topic {self.progress_topic!r} (topic {self.topic!r} keeps the "
            "records written, and gets the shard's changes from its since after them)"
        )

    @property
    def declaration(self) -> str:
        """The form of the records, which the progress records (module doc); the key
        columns in their order, which is the order of a record key's fields."""
        return (
            f"envelope {self.envelope!r}, format {self.format!r}, "
            f"key columns {list(self.key_columns)}"
        )

    def progress(self) -> Progress | None:
        """The export's progress as the target records it (None: nothing exported yet).

        It is a step's first request of the broker: once it returns, or raises
        anything but BrokerSilent, the broker answered the step (:meth:`step`).

        After a task that got no answer (status ``silent``: its transaction may be
        open on the broker, holding back ``read_committed`` readers of the topics
        it wrote to), it then ends that transaction (:meth:`_end_own_transaction`:
        ``init_transactions`` of the export's id aborts it and fences the task's
        producer), before the step asks anything else that could fail it (the
        target topic's configuration, asked of the controller): the transaction
        ends as soon as the coordinator answers, not at the first tick whose task
        runs. Not if a newer version owns the target: its transaction may be in
        flight, and its own ``init_transactions`` ends this one. A transaction
        that committed stays committed: the step plans from the progress read.
        Until ``init_transactions`` is answered, this raises BrokerSilent, and the
        next step asks it again.
        """
        try:
            progress = self._read_progress()
        except BrokerSilent:
            raise
        except Exception:
            self._answered = True
            raise
        self._answered = True
        if progress is not None and progress.version > self.version:
            self._left_open = False  # the newer version's init_transactions ends it
        if self._left_open:
            self._end_own_transaction()
        return progress

    def _read_progress(self) -> Progress | None:
        if not self._progress_topic_checked:  # once: a client of its own, tens of ms
            ensure_topic(self.bootstrap_servers, self.progress_topic, self.timeout_s)
            config = topic_config(self.bootstrap_servers, self.progress_topic, self.timeout_s)
            policy = config.get("cleanup.policy")
            if policy != "compact":
                raise InvalidUsage(
                    f"export {self.export_id!r}: progress topic {self.progress_topic!r} has "
                    f"cleanup.policy {policy!r}: retention would delete a progress record "
                    "once old enough, and the export would start again from nothing. Give it "
                    "cleanup.policy 'compact', or name another progress topic"
                )
            self._progress_topic_checked = True
        progress = read_progress(
            _consumer_conf(self.bootstrap_servers, self.timeout_s),
            self.progress_topic,
            self.export_id,
            self.timeout_s,
            end_own=self._end_own_transaction,
            version=self.version,
        )
        return progress

    def _end_own_transaction(self, timeout_s: float | None = None) -> None:
        """Abort a transaction this export left open (its task died between its progress
        record and its commit, or its abort got no answer), as its next task's
        ``init_transactions`` would: else
        nothing ends it before its ``transaction.timeout.ms``, and every progress read
        waits for it (:func:`read_progress`). It fences that task's producer too. Waits
        ``timeout_s`` at most (default: the export's)."""
        from confluent_kafka import KafkaException, Producer

        timeout = self.timeout_s if timeout_s is None else timeout_s
        producer = Producer(_ending_producer_conf(self.bootstrap_servers, self.export_id, timeout))
        try:
            producer.init_transactions(timeout)
        except KafkaException as e:
            if _no_answer(e.args[0]):
                raise BrokerSilent(
                    _no_coordinator(self.bootstrap_servers, self.export_id, timeout)
                ) from None
            raise
        finally:
            producer.close()
        self._left_open = False

    def step(self) -> ExportStep:
        """One tick (:meth:`ShardExport.step`); with the broker silent, nothing at all.

        The driver reads the progress (and the topics' configuration) from the
        broker, each ask waiting up to ``timeout_s``; the pipeline ticks its
        objects one after another, so a down broker asked on every tick would
        hold every other object up that long. After an ask that got no answer
        (BrokerSilent), a tick raises that fault again without asking until a
        short probe of the progress topic's metadata finds the broker answering
        (:class:`~timeshard.storage.kafka_source.BrokerSilence`). Nothing is
        written meanwhile: the tick ends before its progress is read, and the
        next full tick plans from the progress the target records, as always.

        A task that got no answer (its transaction's produce, commit or abort)
        may leave its transaction open on the broker, which holds back every
        ``read_committed`` reader of the topics it wrote to until the next
        ``init_transactions`` of the export's id (or the transaction's timeout,
        2 min). The next step's driver asks that right after its progress read
        (:meth:`progress`), before anything else can fail the tick.
        """
        fault = self._silence.probe(self._ask_metadata, self.timeout_s)
        if fault is not None:
            raise BrokerSilent(fault)
        self._answered = False
        try:
            step = super().step()
            if step.status == SILENT:  # its ask got no answer: the hold stays where it was
                self._left_open = True
                raise BrokerSilent(
                    f"Kafka at {self.bootstrap_servers}: export {self.export_id!r}'s task "
                    f"got no answer within {self.timeout_s} s: {step.detail}"
                )
        except BrokerSilent as e:
            self._max_bytes = None
            raise BrokerSilent(self._silence.silent(str(e))) from None
        except BaseException as e:
            # The topic's limit is read again at the next tick: a tick blocked at a record
            # past it waits for it to be raised, and one whose records the broker refused
            # had it lowered since it was read.
            self._max_bytes = None
            if self._answered and isinstance(e, Exception):
                # The broker answered (a refusal, the data's error, a fault after it): the
                # next silence starts from no pause, not from the last outage's.
                self._silence.answered()
            raise
        # A whole tick answered (the progress alone is not enough: the topics' configuration,
        # asked of the cluster's controller, may be the silent one): a silence starts anew.
        self._silence.answered()
        return step

    #: What the export knows of its broker's silence, and its cluster's (:meth:`step`).
    _silence = SharedSilence()

    def close(self) -> None:
        """End a transaction a task may have left open (:meth:`_end_left_open`), then
        :meth:`ShardExport.close`; the cluster's shared record of a silence is forgotten
        once no open object holds it."""
        try:
            self._end_left_open()
        finally:
            del self._silence
            super().close()

    def _end_left_open(self) -> None:
        """After a task that got no answer (status ``silent``), end the transaction it may
        have left open, as the next step would (:meth:`progress`); log, never raise.

        No step comes after a close, so nothing else would end it before its
        ``transaction.timeout.ms``, and until then it holds back every
        ``read_committed`` reader of the topics it wrote to. The whole wait is
        ``timeout_s`` about, each ask waiting only what is left of it: a probe of
        at most :attr:`BrokerSilence.PROBE_TIMEOUT_S` first (a broker that does
        not answer it is not asked more), then a scan of the progress committed
        (:meth:`_newer_owns_target`) so that a transaction of a newer version,
        which owns the target, is not aborted, then ``init_transactions``
        (:meth:`_end_own_transaction`). Not :meth:`progress`: its asks wait
        ``timeout_s`` each, and it waits for the transactions of other exports
        sharing the progress topic, which a close need not. A scan still reading at
        the deadline ends the close there: the transaction is then left to its
        timeout (2 minutes), holding back those readers, as after a broker that did
        not answer; a close bounded by its timeout is worth that.
        """
        if not self._left_open:
            return
        deadline = time.monotonic() + self.timeout_s
        try:
            self._ask_metadata(min(_left(deadline), BrokerSilence.PROBE_TIMEOUT_S))
            if self._newer_owns_target(deadline):
                return
            self._end_own_transaction(_left(deadline))
        except Exception as e:  # a fault at close: the transaction's timeout ends it
            error = e.args[0] if e.args else e
            log.warning(
                "export %r: a transaction its task may have left open is left open at "
                "close, until its transaction timeout: %s: %s",
                self.export_id,
                type(e).__name__,
                error,
            )

    def _newer_owns_target(self, deadline: float) -> bool:
        """Whether the newest committed progress of the export is a newer version's
        (:meth:`_end_left_open`), asked of the broker until ``deadline`` (monotonic): each
        ask waits what is left, and a scan that keeps moving stops there too."""
        from confluent_kafka import Consumer

        consumer = Consumer(_consumer_conf(self.bootstrap_servers, _left(deadline)))
        try:
            low, stable = _watermarks(consumer, self.progress_topic, _left(deadline))
            found = _scan(
                consumer,
                self.progress_topic,
                self.export_id,
                low,
                stable,
                _left(deadline),
                until=deadline,
            )
        finally:
            consumer.close()
        newer = found is not None and _version_of(found[1]) > self.version
        if newer:
            self._left_open = False  # the newer version's init_transactions ends it
        return newer

    def _ask_metadata(self, timeout: float) -> None:
        """Ask the broker for the progress topic's metadata, waiting at most ``timeout``
        (KafkaException: no answer). Without ``allow.auto.create.topics`` off, an admin
        client's request for a named topic lets the broker create it
        (``auto.create.topics.enable``), with the broker's default cleanup policy, before
        ``ensure_topic`` makes it compacted: the export would refuse it for good. (Not the
        whole cluster's metadata: on a large cluster that can take longer than a probe.)"""
        from confluent_kafka.admin import AdminClient

        conf = {
            "bootstrap.servers": self.bootstrap_servers,
            "logger": _quiet_logger(),
            "allow.auto.create.topics": False,
        }
        AdminClient(conf).list_topics(self.progress_topic, timeout=timeout)

    def _task(self, lower: int, upper: int) -> Callable[[Iterable[pa.RecordBatch]], Any]:
        if self._max_bytes is None:
            self._max_bytes = topic_max_bytes(self.bootstrap_servers, self.topic, self.timeout_s)
        max_bytes = self._max_bytes
        return _ProduceTask(
            bootstrap=self.bootstrap_servers,
            topic=self.topic,
            progress_topic=self.progress_topic,
            export_id=self.export_id,
            version=self.version,
            envelope=self.envelope,
            key_columns=tuple(self.key_columns),
            data_columns=tuple(self.reader.schema.names),
            lower=lower,
            upper=upper,
            timeout_s=self.timeout_s,
            max_bytes=max_bytes,
            declared=self.declaration,
            maps=tuple(f.type if has_map(f.type) else None for f in self.reader.schema),
            avro=_AvroEncoding.of(self._avro, self.key_schema_id, self.value_schema_id)
            if self.format == "avro"
            else None,
        )


#: A task's status when its ask got no answer: ``init_transactions``, its progress read,
#: its transaction (a produce or the commit, which may have landed) or its abort.
SILENT = "silent"


def _left(deadline: float) -> float:
    """What is left (s) until ``deadline`` (monotonic), 10 ms at least: librdkafka takes
    no shorter timeout (``socket.timeout.ms``)."""
    return max(deadline - time.monotonic(), 0.01)


def _no_coordinator(bootstrap: str, export_id: str, timeout_s: float) -> str:
    """The fault of a transaction coordinator that did not answer ``init_transactions``."""
    return (
        f"Kafka at {bootstrap}: the transaction coordinator of {_transactional_id(export_id)!r} "
        f"did not answer init_transactions within {timeout_s} s"
    )


def _transactional_id(export_id: str) -> str:
    """The transactional id of every producer of the export (module doc)."""
    return f"timeshard-export-{export_id}"


def _ending_producer_conf(bootstrap: str, export_id: str, timeout_s: float) -> dict[str, Any]:
    """The configuration of the driver's producer that ends a transaction left open
    (:meth:`KafkaExport._end_own_transaction`). As the driver's other clients: its retries
    kept out of stderr, and no request waits past the export's timeout, nor past
    librdkafka's bound for a transactional producer (``transaction.timeout.ms`` + 100:
    it refuses a larger ``socket.timeout.ms`` when the producer is made, which a timeout
    past 60 s, its default transaction timeout, was)."""
    socket_ms = min(max(int(timeout_s * 1000), 10), TRANSACTION_TIMEOUT_MS + 100)
    return {
        "bootstrap.servers": bootstrap,
        "transactional.id": _transactional_id(export_id),
        "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
        "socket.timeout.ms": socket_ms,
        "logger": _quiet_logger(),
    }


def _identity(topic: str) -> str:
    """What a progress record says of the topic it was written to."""
    return f"topic {topic!r}"


def _consumer_conf(bootstrap: str, timeout_s: float) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": "timeshard-progress-reader",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "socket.timeout.ms": int(timeout_s * 1000),
        "logger": _quiet_logger(),
    }


def ensure_topic(bootstrap: str, topic: str, timeout_s: float) -> None:
    """Create the progress topic (one partition, compacted) unless it exists.

    Raises BrokerSilent if the broker does not answer within ``timeout_s``: its
    metadata, or the creation (the cluster's controller). A refusal (authorization,
    a bad configuration) is the broker's answer: raised as it is.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _quiet_logger()})

    def metadata(named: str | None) -> Any:
        try:
            return admin.list_topics(named, timeout=timeout_s)
        except KafkaException as e:
            if _no_answer(e.args[0]):
                raise BrokerSilent(f"Kafka at {bootstrap} is unreachable: {e.args[0]}") from None
            raise

    meta = metadata(None)
    if topic in meta.topics and meta.topics[topic].error is None:
        return
    new = NewTopic(topic, num_partitions=1, config={"cleanup.policy": "compact"})
    try:
        admin.create_topics([new])[topic].result(timeout_s)
    except KafkaException as e:
        if _no_answer(e.args[0]):
            raise BrokerSilent(
                f"Kafka at {bootstrap}: creating topic {topic!r} got no answer: {e.args[0]}"
            ) from None
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise  # a refusal (authorization, configuration): the broker's answer
    except TimeoutError:  # the future's (concurrent.futures.TimeoutError is this one)
        raise BrokerSilent(
            f"Kafka at {bootstrap}: creating topic {topic!r} got no answer within {timeout_s} s"
        ) from None
    # Created is not yet known to every client: wait until the metadata has its partition.
    deadline = time.monotonic() + timeout_s
    while True:
        found = metadata(topic).topics.get(topic)
        if found is not None and found.error is None and found.partitions:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"topic {topic!r} was created but has no partition after {timeout_s} s"
            )
        time.sleep(0.1)


def topic_max_bytes(bootstrap: str, topic: str, timeout_s: float) -> int:
    """The largest record batch ``topic`` takes: its ``max.message.bytes`` (driver).

    Raises TimeshardError (a fault: the next tick asks again) if the topic does
    not exist or the broker does not answer.
    """
    value = topic_config(bootstrap, topic, timeout_s).get("max.message.bytes")
    if value is None:
        raise TimeshardError(f"Kafka topic {topic!r} reports no max.message.bytes")
    return int(value)


def topic_config(bootstrap: str, topic: str, timeout_s: float) -> dict[str, str]:
    """The configuration of ``topic``, defaults included (driver).

    Raises TimeshardError (a fault) if the topic does not exist, BrokerSilent
    if the broker does not answer within ``timeout_s``.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _quiet_logger()})
    resource = ConfigResource("topic", topic)
    try:
        futures = admin.describe_configs([resource], request_timeout=timeout_s)
        entries = futures[resource].result(timeout_s)
    except KafkaException as e:
        error = e.args[0] if e.args else e
        if getattr(error, "code", lambda: None)() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise TimeshardError(
                f"Kafka topic {topic!r} does not exist on {bootstrap}: create it (the export "
                "writes to it, and tries again at the next tick)"
            ) from None
        fault = f"Kafka at {bootstrap}: the configuration of topic {topic!r} cannot be read"
        fault = f"{fault}: {error}"
        raise (BrokerSilent if _no_answer(error) else TimeshardError)(fault) from None
    except Exception as e:  # a timeout of the future (no answer), or another failure
        raise (BrokerSilent if isinstance(e, TimeoutError) else TimeshardError)(
            f"Kafka at {bootstrap}: the configuration of topic {topic!r} cannot be read: "
            f"{type(e).__name__}: {e}"
        ) from None
    return {name: entry.value for name, entry in entries.items() if entry.value is not None}


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


def read_progress(
    conf: dict[str, Any],
    progress_topic: str,
    export_id: str,
    timeout_s: float,
    *,
    end_own: Callable[[], None] | None = None,
    version: int | None = None,
) -> Progress | None:
    """The newest committed progress record of ``export_id`` (scanning back from the end).

    A ``read_committed`` reader sees nothing past the first offset of a
    transaction still open (the *last stable offset*), and the topic is shared:
    another export's transaction left open (its process died between its
    progress record and its commit) would hide this export's progress committed
    after it, and the export would go on from an older one and write its
    changes again. So a read that finds the last stable offset below the high
    watermark (which the scan's fetches report) waits until every transaction
    open then has ended (the last stable offset reaches that high watermark),
    and raises TimeoutError (a fault, retried) after ``timeout_s``. ``end_own``
    is called before that wait: it ends a transaction the export itself left
    open (the driver's, before its task's ``init_transactions`` would), which
    nothing else ends before its ``transaction.timeout.ms`` -- unless the
    progress read so far is of a version newer than ``version`` (the caller's):
    the open transaction may be that newer version's, in flight, which a stale
    instance must not abort; it waits, and then learns it is fenced.

    Offsets or records the broker does not answer within ``timeout_s`` raise
    BrokerSilent (the export's silence; a transaction that stays open is no silence).
    """
    from confluent_kafka import Consumer

    consumer = Consumer(conf)
    try:
        low, stable = _watermarks(consumer, progress_topic, timeout_s)
        found = _scan(consumer, progress_topic, export_id, low, stable, timeout_s)
        high = _high_watermark(consumer, conf, progress_topic, timeout_s)
        if stable < high:
            newer = found is not None and _version_of(found[1]) > (version or 0)
            if end_own is not None and not newer:
                end_own()
            low, stable = _settled(consumer, progress_topic, high, timeout_s)
            found = _scan(consumer, progress_topic, export_id, low, stable, timeout_s)
        return None if found is None else _progress_of(progress_topic, export_id, *found)
    finally:
        consumer.close()


def _scan(
    consumer: Any,
    topic: str,
    export_id: str,
    low: int,
    end: int,
    timeout_s: float,
    *,
    until: float | None = None,
) -> tuple[int, bytes | None] | None:
    """The offset and value of ``export_id``'s last record in partition 0 below ``end``
    (None: it has none), read back from ``end`` in growing windows.

    Raises BrokerSilent if the position does not move for ``timeout_s``: the partition's
    leader answers none of the fetches. A slow read that moves on is no silence, however
    long its windows take; with ``until`` (monotonic), one still reading then raises
    TimeoutError (a close's scan, which its own bound ends).
    """
    from confluent_kafka import TopicPartition

    key = export_id.encode()
    window = 64
    while end > low:
        start = max(low, end - window)
        found: tuple[int, bytes | None] | None = None
        consumer.assign([TopicPartition(topic, 0, start)])
        position = start
        deadline = time.monotonic() + timeout_s
        while position < end:
            if until is not None and time.monotonic() > until:
                raise TimeoutError(
                    f"progress topic {topic!r}: the scan back for the last record of "
                    f"{export_id!r} was at offset {position} when its time was up"
                )
            # A short poll: the window ends with a transaction's commit marker, which is
            # never returned (a long poll waited its whole timeout there, every read).
            msg = consumer.poll(0.01)
            unanswered = msg is not None and msg.error() is not None and _no_answer(msg.error())
            if msg is None or unanswered:  # no record: the position and the deadline decide
                # Transaction markers hold offsets but are never returned: the
                # position moves past them.
                [tp] = consumer.position([TopicPartition(topic, 0)])
                if tp.offset > position:
                    position, deadline = tp.offset, time.monotonic() + timeout_s
                if position < end and time.monotonic() > deadline:
                    raise BrokerSilent(
                        f"progress topic {topic!r}: offset {position} not read, no fetch "
                        f"answered within {timeout_s} s"
                    )
                continue
            if msg.error() is not None:
                raise RuntimeError(f"progress topic {topic!r}: {msg.error()}")
            offset = msg.offset() or 0
            position, deadline = offset + 1, time.monotonic() + timeout_s
            if msg.key() == key and offset < end:
                found = (offset, msg.value())
        if found is not None:
            return found
        end, window = start, window * 4
    return None


def _version_of(value: bytes | None) -> int:
    """The version a progress record names (0 for a tombstone or a record it cannot read:
    :func:`_progress_of` reports that one)."""
    try:
        version = json.loads(value or b"{}").get("version", 0)
    except (ValueError, AttributeError):
        return 0
    return version if isinstance(version, int) else 0


def _progress_of(topic: str, export_id: str, offset: int, value: bytes | None) -> Progress | None:
    """The progress a record holds; None for a tombstone (the progress was deleted).

    Raises TimeshardError naming the record if it is no progress record.
    """
    if value is None:
        return None
    try:
        fields = json.loads(value)
        frontier, version = fields["frontier"], fields["version"]
        target, declared = fields.get("target"), fields.get("declared")
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in (frontier, version)):
            raise ValueError(f"frontier {frontier!r} and version {version!r} are no integers")
        if not isinstance(target, str | None) or not isinstance(declared, str | None):
            raise ValueError(f"target {target!r} or declared {declared!r} has the wrong type")
    except (ValueError, TypeError, KeyError) as e:  # JSONDecodeError is a ValueError
        raise TimeshardError(
            f"progress topic {topic!r}: the record of export {export_id!r} at offset {offset} "
            f"is not a progress record ({type(e).__name__}: {e}): {value[:200]!r}. To start "
            "over from the shard's since: stop the export, drop it (`timeshard drop "
            f"{export_id}`, or DROP SINK in timeshard serve: it releases the hold), delete that "
            "record with a tombstone (a null value) of its key in partition 0, and declare it "
            "again"
        ) from None
    return Progress(frontier, version, target, declared)


def _high_watermark(consumer: Any, conf: dict[str, Any], topic: str, timeout_s: float) -> int:
    """Partition 0's high watermark, open transactions included: as the last fetch of
    ``consumer`` (a scan's, after its last stable offset was read) reported it, else (it
    fetched nothing) as a ``read_uncommitted`` reader reads it."""
    from confluent_kafka import Consumer, TopicPartition

    _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), cached=True)
    if high >= 0:
        return int(high)
    uncommitted = Consumer({**conf, "isolation.level": "read_uncommitted"})
    try:
        return _watermarks(uncommitted, topic, timeout_s)[1]
    finally:
        uncommitted.close()


def _settled(consumer: Any, topic: str, high: int, timeout_s: float) -> tuple[int, int]:
    """Partition 0's low offset and last stable offset, once the latter is at least
    ``high`` (module doc of :func:`read_progress`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        low, stable = _watermarks(consumer, topic, timeout_s)
        if stable >= high:
            return low, stable
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"progress topic {topic!r}: a transaction open from offset {stable} (another "
                f"export's, whose process may have died before its commit) hides the progress "
                f"committed after it, up to offset {high}; it did not end within {timeout_s} s "
                "(it ends when its producer starts again, or after its transaction.timeout.ms)"
            )
        time.sleep(0.1)


def _watermarks(consumer: Any, topic: str, timeout_s: float) -> tuple[int, int]:
    """Partition 0's offsets; a topic just created may be unknown to the client briefly.

    Raises BrokerSilent if the broker does not answer within ``timeout_s``.
    """
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            marks = consumer.get_watermark_offsets(
                TopicPartition(topic, 0), timeout=timeout_s, cached=False
            )
        except KafkaException as e:
            if _no_answer(e.args[0]):
                raise BrokerSilent(
                    f"Kafka topic {topic!r} partition 0: offsets unavailable: {e.args[0]}"
                ) from None
            if e.args[0].code() != KafkaError._UNKNOWN_PARTITION or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
            continue
        if marks is None:
            raise BrokerSilent(f"Kafka topic {topic!r} partition 0: no answer within {timeout_s} s")
        return int(marks[0]), int(marks[1])


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


__all__ = [
    "ENVELOPES",
    "BrokerSilent",
    "FORMATS",
    "PROGRESS_TOPIC",
    "TIME_HEADER",
    "ExportError",
    "ExportStep",
    "KafkaExport",
    "Progress",
    "ensure_topic",
    "read_progress",
    "record_bytes",
    "topic_config",
    "topic_max_bytes",
]
