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

This module holds :class:`KafkaExport`, the driver's side of a tick, its
silences and its close; the rest is a module per concept, re-exported here:
:mod:`~timeshard.storage.kafka_transaction` (the tick's task, one transaction;
executors), :mod:`~timeshard.storage.kafka_progress` (the progress read back
from the progress topic; driver and task) and
:mod:`~timeshard.storage.kafka_topics` (the topics' creation and
configuration; driver).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage
from timeshard.persist import PersistClient
from timeshard.storage.export import (
    ExportError,
    ExportStep,
    Progress,
    ShardExport,
    has_map,
)
from timeshard.storage.kafka_client import (
    _no_answer,
    _quiet_logger,
    check_kafka_names,
    check_timeout,
)
from timeshard.storage.kafka_progress import (
    _consumer_conf,
    _scan,
    _version_of,
    _watermarks,
    read_progress,
)
from timeshard.storage.kafka_silence import BrokerSilence, BrokerSilent, SharedSilence
from timeshard.storage.kafka_topics import ensure_topic, topic_config, topic_max_bytes
from timeshard.storage.kafka_transaction import (
    SILENT,
    TIME_HEADER,
    TRANSACTION_TIMEOUT_MS,
    _AvroEncoding,
    _identity,
    _ProduceTask,
    _transactional_id,
    record_bytes,
)

PROGRESS_TOPIC = "_timeshard-progress"
ENVELOPES = ("upsert", "debezium")
FORMATS = ("json", "avro")
DEFAULT_TIMEOUT_S = 30.0
log = logging.getLogger(__name__)


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
    # Imported from here by the tests.
    "_ProduceTask",
]
