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
* ``avro``: an Avro binary datum, decoded by spark-avro on the JVM
  (:mod:`timeshard.storage.avro`); the columns are the fields of the side's
  declared Avro record schema (``key_avro_schema`` / ``value_avro_schema``,
  the *reader* schema). Without a schema source, each record is a bare
  datum written with that very schema. With ``schema_registry_url`` (or the
  fixed map ``avro_schemas``), each record is in the Confluent wire format
  (:mod:`timeshard.storage.schema_registry`): magic byte 0, the writer
  schema's id, the datum; every record is decoded with its own writer schema,
  resolved into the reader schema by Avro's rules, so records written with
  several compatible versions of a schema land in the same columns;
* the key may also be left out (``key_format=None``).

Avro in the wire format, step by step. The driver first finds the distinct
schema ids of the range (one small extra job, which reads the range's
records and keeps five bytes of each; it runs only with a registry, and only
for a non-empty range), fetches each id it has not seen from the registry
(once per process: an id's schema never changes), then plans one job that
decodes each record with the schema of its id. A record becomes an err row
if its bytes are not in the wire format (fewer than five bytes, or a magic
byte other than 0), if its id (a signed int32) is negative, unknown to the
registry (HTTP 404 with error code 40403) or absent from ``avro_schemas``, or if its datum does not
decode with its writer schema into the reader schema. A registry that cannot
be reached (or answers anything but the schema or "schema not found") is a
fault: ``read`` raises SourceUnavailable and nothing is written; the
ingestion retries.

``metadata`` adds the record's ``partition``, ``offset``, ``timestamp`` and
``headers`` (a list of ``key``/``value`` structs) as columns of those names.

A record whose key or value does not decode becomes an err row, ``_err``
reading ``<topic>/<partition>@<offset>: <error>``; the source goes on with
the next record. Its value columns are null, and so are its key columns if
the key is what did not decode: a value that does not decode keeps its key,
so that the UPSERT envelope makes it that key's error, which the key's next
good value replaces (as Materialize does). A null value (a tombstone) decodes to
null value columns: the UPSERT envelope, keyed on the key's columns, reads
it as a delete. (So does a JSON value whose declared fields are all null or
absent: UPSERT cannot tell it from a tombstone.)

Faults are not data: an unreachable broker, a topic that does not exist (or
was deleted), or offsets that retention deleted before they were read raise
:class:`~timeshard.errors.SourceUnavailable`, so the ingestion's health reads
``stalled`` with that one line and nothing is written. Lost offsets are a
*definite* error: they are never skipped, and the source stays stalled. A
partition's first range (no binding covered it yet) starts at the earliest
offset the topic retains when it is read: what retention deleted before the
source first read the partition was never the source's (``from_earliest``;
``timeshard verify`` reads from offset 0 and says when it cannot).

A broker that does not answer is not asked again on every tick: each ask
would wait the whole ``timeout_s``, and the pipeline ticks its objects one
after another, so one down broker would hold up the freshness of all of
them. After a silence, ``upper`` raises the same fault again without asking
until a pause has passed (none at first, then 1 s, doubling up to 30 s), then
probes the broker for its metadata for at most 1 s; only a broker that
answers the probe is asked in full. A tick so waits on a down broker at most
one short probe per pause, and a broker that comes back is read again within
the pause. A broker that answers with an error (a topic that does not exist)
is asked again at the next tick. The KAFKA sources and exports of one cluster
(its ``bootstrap_servers``, in any order or spelling) share the last silence
any of them met: once one finds the cluster silent, the others probe it
(once per pause, for all of them) before they ask in full, and say why they
were not asked; each keeps its own pauses for its own silence, so another's
answers do not make one whose partition's leader is down ask at every tick
(:class:`BrokerSilence`).

A topic deleted and made again under its name starts its offsets at 0 again.
The source binds offsets of one topic id (Kafka's topic UUID): the catalog
records it when the ingestion is first built, asking the broker then (a
pipeline's build does not ask: its first step that reaches the broker records
it, before binding an offset), and a restart is held to the recorded id
(:meth:`KafkaSource.pin_recorded`); a recorded id is never erased nor replaced. ``upper`` raises
SourceUnavailable (definite) once the topic has another id, also when it was
made again while no process ran: the offsets bound are the old topic's, and
the new topic's records are never read from them, whatever their number. So is
a topic of the same name on another cluster (``bootstrap_servers`` may name
other brokers of the same cluster only): its offsets are its own, and the
message names both causes and says to declare the topic as a source of
another name, which binds its offsets anew. A broker with no topic ids (all
zero) is not checked. If the broker could not
tell the id at the first build (unreachable, or the topic not created yet),
or the source was recorded before ids were, the first ``upper`` takes the id
it finds, in memory, and the next build records it: until then a topic made
again while no process ran is caught only if one of its partitions ends
below the offsets bound (``Ingestion`` refuses that).

After each durable tick, :meth:`KafkaSource.commit` commits the resumption
frontier to the consumer group ``group_id`` (default ``timeshard-<name>``),
so Kafka's lag tools see how far the source is. The group is only a report:
the source resumes from its remap shard, never from the group. The commit is
asynchronous: a tick never waits on the group's coordinator, and the next
ticks' commits read the answer. One commit is in flight at a time; one not
answered within the source's timeout is the coordinator's silence, which
pauses that group's commits until one is answered. While the source knows its
cluster is silent, a commit asks nothing (the health's error line says why);
the next commit after the silence commits the latest offsets. A source's close
commits the offsets not committed yet and waits for the answers, at most the
source's timeout (nothing is asked during a known silence, nor after the commit
in flight got no answer, nor with too little of the timeout left for an answer);
offsets left uncommitted are logged, never raised.
The client's own close then waits for every commit it has not answered: one it
holds for want of a coordinator, at most its ``session.timeout.ms`` after the
commit was asked, which is the source's timeout (the consumer never joins the
group, so the broker's bounds on a member's session do not apply), and one it
is still sending, each send waiting ``socket.timeout.ms`` (the timeout too).
So a close takes about ``timeout_s``, and twice that with the coordinator
silent; a tick's commit still being sent to a coordinator that hung can hold
the client's close up to about three timeouts more (librdkafka's, not ours to
bound). A closed source asks its broker nothing more: ``upper``, ``read``,
``commit`` and ``find_topic_id`` raise InvalidUsage.

Reading needs Spark's Kafka connector, ``spark-sql-kafka-0-10`` of the
running PySpark's version (:func:`~timeshard.spark.session.spark_kafka_package`),
which a session loads only when asked to, and the ``avro`` format needs
spark-avro too (:func:`~timeshard.spark.session.spark_avro_package`).
Without them, ``read`` raises InvalidUsage naming the package.

What runs where: the driver asks the broker for offsets, looks up schema ids
and plans the read; Spark tasks fetch the records and decode them (JSON and
text in Python, ``mapInArrow``; Avro with ``from_avro`` in the executors'
JVMs, in the same job).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from time import monotonic
from typing import Any, ClassVar, overload

import pyarrow as pa
import pyarrow.compute as pc

from timeshard.errors import InvalidUsage, SourceUnavailable
from timeshard.persist._internal.parts import ERR
from timeshard.storage.avro import avro_payload_schema
from timeshard.storage.file_source import DECODE_ERRORS
from timeshard.storage.reclock import SourceFrontier
from timeshard.storage.schema_registry import (
    HEADER_BYTES,
    MAGIC,
    SchemaFiles,
    SchemaRegistry,
    WriterSchemas,
    redacted,
)

FORMATS = ("json", "text", "bytes", "avro")
METADATA: dict[str, pa.DataType] = {
    "partition": pa.int32(),
    "offset": pa.int64(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "headers": pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
}
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
log = logging.getLogger(__name__)


def check_kafka_names(bootstrap_servers: Any, **topics: Any) -> None:
    """InvalidUsage naming a bad broker list, or a bad topic name (by its option's name)."""
    if not isinstance(bootstrap_servers, str) or not bootstrap_servers.strip():
        raise InvalidUsage(f"bootstrap_servers must be host:port[,...], got {bootstrap_servers!r}")
    for what, value in topics.items():
        if not isinstance(value, str) or not _TOPIC.fullmatch(value) or value in (".", ".."):
            raise InvalidUsage(
                f"{what} must be 1-249 of [A-Za-z0-9._-] and not '.' or '..', got {value!r}"
            )


_RESERVED = ("_partition", "_offset", "_ts", "_diff", ERR)
_BATCH_ROWS = 4096
DEFAULT_TIMEOUT_S = 10.0
#: The bounds of ``timeout_s``: librdkafka takes a ``socket.timeout.ms`` of 10 to 300000.
MIN_TIMEOUT_S, MAX_TIMEOUT_S = 0.01, 300.0


def check_timeout(timeout_s: Any) -> None:
    """InvalidUsage naming ``timeout_s`` unless it is a number of seconds within the
    bounds librdkafka takes (a KAFKA source's or export's option)."""
    if (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, int | float)
        or not MIN_TIMEOUT_S <= timeout_s <= MAX_TIMEOUT_S
    ):
        raise InvalidUsage(
            f"timeout_s must be a number of seconds from {MIN_TIMEOUT_S} to "
            f"{MAX_TIMEOUT_S:.0f} (the client's socket.timeout.ms bounds), got {timeout_s!r}"
        )


#: Guards the clusters' shared records (:class:`BrokerSilence`): serve ticks each of its
#: objects on a thread of its own.
_CLUSTERS_LOCK = threading.Lock()


class _ClusterSilence:
    """What the objects of one Kafka cluster know of its silence together: the fault of
    the last full ask of any of them that got no answer (None once any ask is answered),
    and when an object without a silence of its own may probe the cluster again
    (:class:`BrokerSilence`)."""

    def __init__(self, servers: str) -> None:
        self.servers = servers
        self.fault: str | None = None
        self.probe_at = 0.0  # monotonic
        self.pause_s = 0.0

    def pause(self) -> None:
        self.probe_at = monotonic() + self.pause_s
        self.pause_s = _doubled(self.pause_s)

    def clear(self) -> None:
        self.fault, self.pause_s = None, 0.0


def _not_asked(servers: str, heard: str) -> str:
    """The fault line of an object not asking its cluster because another object's ask of
    it got no answer (``heard``: that ask's fault)."""
    return (
        f"Kafka at {servers} is not asked in full until a probe finds it answering: "
        f"another object's ask of it got no answer ({heard})"
    )


def _doubled(pause_s: float) -> float:
    """The pause after ``pause_s`` (:class:`Silence`)."""
    return min(max(pause_s * 2, Silence.FIRST_PROBE_PAUSE_S), Silence.MAX_PROBE_PAUSE_S)


class Silence:
    """What an object knows of its own silence (driver): the fault of its last ask that
    got no answer, and the pause before it asks again.

    After a silence (:meth:`silent`) the pause is none at first, then
    :attr:`FIRST_PROBE_PAUSE_S`, doubling up to :attr:`MAX_PROBE_PAUSE_S`; it
    starts again from none once an ask is answered (:meth:`answered`). Alone, it
    is the silence of an ask that waits for nothing (a consumer group's
    asynchronous commit, whose own answer ends it: :meth:`paused`); a
    :class:`BrokerSilence` adds the probes and the record its cluster's objects
    share.
    """

    FIRST_PROBE_PAUSE_S = 1.0
    MAX_PROBE_PAUSE_S = 30.0

    def __init__(self, then: str) -> None:
        """``then``: what the fault line says of the asks after a silence."""
        #: What this object's fault line says of the asks after a silence.
        self.then = then
        #: The fault of this object's last ask that got no answer (None: answered last).
        self.fault: str | None = None
        self._probe_at = 0.0  # monotonic
        self._pause_s = 0.0

    def silent(self, fault: str) -> str:
        """Remember ``fault``, of an ask that got no answer in time, and return it with
        :attr:`then` (the line of the whole silence, which a health report keeps, says
        how the object asks meanwhile); the next pause doubles."""
        return f"{self._own_silence(fault)}{self.then}"

    def _own_silence(self, fault: str) -> str:
        """:meth:`silent` for this object alone: ``fault`` without :attr:`then`."""
        asked = fault.removesuffix(self.then)
        self.fault = f"{asked}{self.then}"
        self._probe_at = monotonic() + self._pause_s
        self._pause_s = _doubled(self._pause_s)
        return asked

    def paused(self) -> str | None:
        """The fault of this object's own silence while its pause lasts; None once it may
        ask again (or it met no silence). For an ask that waits for nothing (a group's
        asynchronous commit), whose own answer ends the silence (:meth:`answered`)."""
        if self.fault is not None and monotonic() < self._probe_at:
            return self.fault
        return None

    def answered(self) -> None:
        """An ask of this object was answered (an error or not): no silence, and its next
        starts from no pause."""
        self.fault, self._pause_s = None, 0.0


class BrokerSilence(Silence):
    """What an object knows of its Kafka broker's silence, and what the objects of its
    cluster know together (driver).

    A broker that does not answer makes every ask wait the asker's whole
    timeout, and the pipeline ticks its objects one after another on one
    thread: asked on every tick, one down broker would hold up the freshness of
    all of them. So after a silence (:meth:`silent`) the object raises the
    remembered fault again without asking until a pause has passed (none at
    first, then :attr:`FIRST_PROBE_PAUSE_S`, doubling up to
    :attr:`MAX_PROBE_PAUSE_S`), then probes the broker for at most
    :attr:`PROBE_TIMEOUT_S` (:meth:`probe`); only a broker that answers the
    probe is asked in full. At the cap, every :attr:`FULL_PROBE_EVERY`-th probe
    waits the asker's whole timeout, so a broker that answers, but slower than
    a probe waits, is read again too. The pause starts again from none once the
    broker answers a full ask of this object (:meth:`answered`). An answer that
    is an error (a topic that does not exist) is no silence.

    The objects of one cluster (their ``bootstrap_servers``, in any order,
    case or spacing) share a second, coarser record: the last silence any of
    them met, until any ask of theirs is answered. An object whose own asks
    were answered, but whose cluster another found silent, probes it first
    (at most once per the shared pause, for all of them) instead of asking in
    full: an outage's first tick waits the whole timeout once, not once per
    object. Its fault line then says it was not asked, and why; a probe that
    gets no answer makes the silence its own (its own pauses and full
    probes). Each object's own silence stays its own: in a partial outage (one
    partition's leader down) another object's answers end the shared record
    but not the silence of the object whose leader is down, which keeps its
    own pauses. Serve ticks its objects on threads of their own: the shared
    records are changed under a lock.
    """

    PROBE_TIMEOUT_S = 1.0
    FULL_PROBE_EVERY = 10
    #: What a silence's fault line says of the asks after the one that got no answer.
    THEN = (
        f"; asked again in full once a probe of at most {PROBE_TIMEOUT_S:g} s finds it "
        f"answering (the first at the next tick, then {Silence.FIRST_PROBE_PAUSE_S:g} s "
        f"apart, twice as far each time, up to {Silence.MAX_PROBE_PAUSE_S:g} s)"
    )

    #: The shared record of each cluster an open object asks.
    _clusters: ClassVar[weakref.WeakValueDictionary[str, _ClusterSilence]] = (
        weakref.WeakValueDictionary()
    )

    def __init__(self, bootstrap_servers: str = "") -> None:
        super().__init__(self.THEN)
        servers = ",".join(sorted({s.strip().lower() for s in bootstrap_servers.split(",")} - {""}))
        with _CLUSTERS_LOCK:
            cluster = self._clusters.get(servers)
            if cluster is None:
                cluster = _ClusterSilence(servers)
                self._clusters[servers] = cluster
        #: The cluster's shared record (held: it is forgotten once no object holds it).
        self.cluster = cluster
        self._probes_at_cap = 0
        #: Since when (monotonic) the cluster's record has kept this object from asking.
        self._not_asked_since: float | None = None

    def probe(self, ask: Callable[[float], object], timeout_s: float) -> str | None:
        """None if the broker may be asked in full; else the fault to raise. After this
        object's pause (or the cluster's, if only another object met the silence),
        calls ``ask(timeout)`` (a metadata request, which raises KafkaException if the
        broker does not answer within ``timeout``): an answer ends the silence (and the
        cluster's record), none starts the next, doubled, pause."""
        from confluent_kafka import KafkaException

        if self.fault is None:
            return self._probe_cluster(ask, timeout_s)
        if monotonic() < self._probe_at:
            return self.fault
        timeout = min(timeout_s, self.PROBE_TIMEOUT_S)
        if self._pause_s >= self.MAX_PROBE_PAUSE_S:
            self._probes_at_cap += 1
            if self._probes_at_cap % self.FULL_PROBE_EVERY == 0:
                timeout = timeout_s
        try:
            ask(timeout)
        except KafkaException as e:
            if not _no_answer(e.args[0] if e.args else e):
                raise  # an answer, an error (a bad configuration): not a silence
            # This object's own: the cluster's record is left as it is (an object that
            # just read the cluster, slower than a probe waits, cleared it for the others).
            self._own_silence(self.fault)
            return self.fault
        self.fault = None
        with _CLUSTERS_LOCK:
            self.cluster.clear()
        return None

    def _probe_cluster(self, ask: Callable[[float], object], timeout_s: float) -> str | None:
        """:meth:`probe` of an object whose own asks were answered: a short probe if
        another object of the cluster met a silence since any ask was answered."""
        from confluent_kafka import KafkaException

        with _CLUSTERS_LOCK:
            cluster = self.cluster
            heard, due = cluster.fault, monotonic() >= cluster.probe_at
        if heard is None:
            self._not_asked_since = None
            return None
        line = _not_asked(cluster.servers, heard)
        now = monotonic()
        if self._not_asked_since is None:
            self._not_asked_since = now
        if not due and now - self._not_asked_since < self.MAX_PROBE_PAUSE_S:
            # Another object met the silence within the shared pause. Not for longer than
            # the longest pause: objects whose own asks keep getting no answer (a timeout
            # shorter than the cluster answers in) push the shared pause on for ever.
            return line
        self._not_asked_since = None
        try:
            ask(min(timeout_s, self.PROBE_TIMEOUT_S))
        except KafkaException as e:
            if not _no_answer(e.args[0] if e.args else e):
                raise  # an answer, an error (a bad configuration): not a silence
            # The silence is this object's own from now on: its own pauses, and its own
            # probes that wait the whole timeout at the cap (a cluster slower than a
            # short probe is read again).
            self._own_silence(line)
            with _CLUSTERS_LOCK:
                cluster.pause()  # the next object's probe waits the shared pause
            return self.fault
        with _CLUSTERS_LOCK:
            cluster.clear()
        return None

    def silent(self, fault: str) -> str:
        """Remember ``fault``, of an ask the broker did not answer in time, and return it
        with what follows (:attr:`then`: the line of the whole silence, which a health
        report keeps, says how the broker is asked meanwhile, not only how the first ask
        waited): this object does not ask again before its pause has passed, which
        doubles after each silence, and the cluster's other objects probe before they
        ask."""
        asked = self._own_silence(fault)
        with _CLUSTERS_LOCK:
            self.cluster.fault = asked
            self.cluster.pause()
        return f"{asked}{self.then}"

    def known(self) -> str | None:
        """The fault of a silence this object knows of, its own or its cluster's, without
        asking (None: none known). For an ask that may wait for an answer it can do
        without (a report), made only when no silence is known."""
        if self.fault is not None:
            return self.fault
        with _CLUSTERS_LOCK:
            heard = self.cluster.fault
        return None if heard is None else _not_asked(self.cluster.servers, heard)

    def answered(self) -> None:
        """The broker answered a full ask of this object (an error or not): no silence, its
        next starts from no pause, and the cluster answers (its shared record ends)."""
        super().answered()
        self._probes_at_cap = 0
        with _CLUSTERS_LOCK:
            self.cluster.clear()


class SharedSilence:
    """A KAFKA source's or export's :class:`BrokerSilence` (a descriptor): made for its
    ``bootstrap_servers`` at first use, so that building the object asks nothing of the
    cluster's records; ``del obj._silence`` forgets it when the object closes, and the
    cluster's shared record is forgotten once no open object holds it."""

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> SharedSilence: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> BrokerSilence: ...
    def __get__(self, obj: Any, owner: type | None = None) -> SharedSilence | BrokerSilence:
        if obj is None:  # looked up on the class
            return self
        silence: BrokerSilence | None = obj.__dict__.get("_shared_silence")
        if silence is None:
            silence = obj.__dict__["_shared_silence"] = BrokerSilence(obj.bootstrap_servers)
        return silence

    def __delete__(self, obj: Any) -> None:
        obj.__dict__.pop("_shared_silence", None)


class _CommitAnswers:
    """A KAFKA source's consumer's ``on_commit``: keeps the answer of each group commit
    for the source to read (:meth:`KafkaSource.commit`). Run by ``poll`` on the driver.

    It holds the answers only, not the source: a bound method of the source would make
    a cycle (source -> consumer -> callback -> source), and a source dropped without
    close, with its consumer's threads, would wait for the cycle collector.
    """

    __slots__ = ("_answers",)

    def __init__(self) -> None:
        self._answers: list[tuple[Any, list[Any]]] = []

    def __call__(self, error: Any, partitions: Any) -> None:
        self._answers.append((error, list(partitions or ())))

    def take(self) -> list[tuple[Any, list[Any]]]:
        """The answers kept since the last take, oldest first."""
        answers, self._answers = self._answers, []
        return answers


class KafkaSource:
    """One Kafka topic (module doc)."""

    #: What the fault line of the group coordinator's silence says of the commits after it.
    COMMIT_THEN = (
        f"; the group's next commit is asked after a pause (the first at the next tick, "
        f"then {Silence.FIRST_PROBE_PAUSE_S:g} s apart, twice as far each time, up "
        f"to {Silence.MAX_PROBE_PAUSE_S:g} s), not before the one in flight is "
        f"answered, and waited for by no tick"
    )
    #: How many of the source's timeouts the client may take to answer a commit
    #: (librdkafka): it sends a commit three times at most (a request is retried twice),
    #: each send waiting its ``socket.timeout.ms``; a round of sends that ends for want of
    #: a coordinator (a transport error, ``NOT_COORDINATOR``) holds the commit for its
    #: ``session.timeout.ms`` once, then sends it three times more. Both are the source's
    #: timeout (:meth:`_consumer`): seven at most. Besides, it waits 1 s at most before
    #: each retry and finds a held commit's time up within 1 s: a few seconds.
    COMMIT_ANSWER_TIMEOUTS = 7
    #: How long (s) past :attr:`COMMIT_ANSWER_TIMEOUTS` timeouts a commit may stay
    #: unanswered before it is forgotten (never to be answered): the client's own 3 s ten
    #: times over. A commit forgotten while the client may still answer it lets a second
    #: one be asked beside it, whose answer is then taken for the first's.
    COMMIT_LOST_AFTER_S = 30.0

    #: One upstream every instance sees, whose upper never moves back: an upper below the
    #: offsets already bound means the upstream lost them (``Ingestion`` stalls on it).
    shared_upper = True

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
        value_avro_schema: str | None = None,
        key_avro_schema: str | None = None,
        schema_registry_url: str | None = None,
        avro_schemas: Mapping[int, str] | None = None,
        from_earliest: bool = True,
    ) -> None:
        check_kafka_names(bootstrap_servers, topic=topic)
        key = _side("key", key_format, key_schema, key_avro_schema, optional=True)
        value = _side("value", value_format, value_schema, value_avro_schema, optional=False)
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
        check_timeout(timeout_s)
        if not isinstance(from_earliest, bool):
            raise InvalidUsage(f"from_earliest must be true or false, got {from_earliest!r}")
        writers = _writer_schemas(
            "avro" in (key_format, value_format), schema_registry_url, avro_schemas, timeout_s
        )
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
        self.key_avro_schema = key_avro_schema
        self.value_avro_schema = value_avro_schema
        self.schema_registry_url = schema_registry_url
        self.avro_schemas = dict(avro_schemas) if avro_schemas is not None else None
        self.writer_schemas: WriterSchemas | None = writers
        self.from_earliest = from_earliest
        self._client: Any = None
        self._admin: Any = None
        #: The id of the topic whose offsets the source binds (:attr:`topic_id`).
        self._topic_id: str | None = None
        #: The id the topic was last found with when it was not :attr:`topic_id` (None:
        #: the same topic, or not known): the offsets to commit are not that topic's.
        self._other_topic_id: str | None = None
        #: The offsets to commit to the group that are not committed yet (:meth:`commit`).
        self._uncommitted: dict[str, int] = {}
        #: The silence of the consumer group's coordinator (:meth:`commit`): this source's
        #: own, shared with no other object (the cluster's may all be answering).
        self._commit_silence = Silence(self.COMMIT_THEN)
        #: The commits asked, and those the client answered (:meth:`commit`).
        self._commits_asked = self._commits_answered = 0
        #: Whether the commit in flight is still to be judged (answered, or silent past the
        #: timeout), and when (monotonic) it was asked.
        self._commit_awaited = False
        self._commit_asked_at = 0.0
        #: The answers the consumer's ``on_commit`` kept, not read yet.
        self._commit_answers = _CommitAnswers()
        #: Whether :meth:`close` ran: a second close does nothing, and no ask follows it.
        self._closed = False

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
        """Each partition's last stable offset (read_committed), from the broker.

        Raises SourceUnavailable (definite) if the topic is not the one whose
        offsets this source binds (:meth:`_check_same_topic`). After the broker
        did not answer, raises its fault again without asking it until a short
        probe finds it answering (:meth:`_probe`). An ask the broker answered
        with an error (a topic that does not exist, a refusal) starts the pause
        anew, as a whole answer does: a later silence's first probe comes at once.
        InvalidUsage after :meth:`close`.
        """
        self._refuse_if_closed("upper")
        self._probe()
        try:
            partitions = self._partitions()
            self._check_same_topic()
            upper = {str(p): hi for p, (_, hi) in self._watermarks(partitions).items()}
        except SourceUnavailable:
            # Every ask that got no answer made it this source's silence (_silent); any other
            # fault here is an error the broker answered with.
            if self._silence.fault is None:
                self._silence.answered()
            raise
        # It answered in full (metadata alone is not enough: a partition's leader may be
        # the silent one): a silence starts anew.
        self._silence.answered()
        return upper

    def read(self, spark: Any, start: SourceFrontier, end: SourceFrontier) -> Any:
        """The records of ``[start, end)``: a plan whose tasks fetch and decode them.

        A partition no binding covered yet starts at the earliest offset the
        topic retains (with ``from_earliest``; else at 0). Raises
        SourceUnavailable (definite) if retention already deleted offsets of
        the range, and InvalidUsage if ``spark`` lacks the Kafka connector, or after
        :meth:`close`.
        """
        from timeshard.spark.session import arrow_to_spark_schema

        self._refuse_if_closed("read")
        ranges = {int(p): (start.get(p, 0), hi) for p, hi in end.items() if hi > start.get(p, 0)}
        first = sorted(p for p in ranges if str(p) not in start)
        if self.from_earliest and first:  # what retention deleted before was never the source's
            earliest = {p: low for p, (low, _) in self._watermarks(first).items()}
            ranges = {p: (max(lo, earliest.get(p, lo)), hi) for p, (lo, hi) in ranges.items()}
            ranges = {p: (lo, hi) for p, (lo, hi) in ranges.items() if hi > lo}
        out_schema = self._row_schema()
        spark_schema = arrow_to_spark_schema(out_schema)
        from timeshard.spark.sqltext import empty_frame

        if not ranges:
            return empty_frame(spark, spark_schema)
        self._check_retained(ranges)
        records = self._kafka_df(spark, ranges)
        if self._avro_sides():
            return self._decode_avro(records)
        return self._decode_in_python(records, self.key_schema, self.value_schema)

    def _decode_in_python(self, records: Any, key: pa.Schema, value: pa.Schema) -> Any:
        """``records`` decoded by the tasks, in Python, into ``key`` and ``value`` columns.

        An ``avro`` side is not decoded here: its column is the raw bytes
        (:func:`_raw_column`), for :meth:`_decode_avro`.
        """
        from timeshard.spark.session import arrow_to_spark_schema

        out = pa.schema(
            [
                pa.field("_partition", pa.string()),
                pa.field("_offset", pa.int64()),
                *key,
                *value,
                *(pa.field(m, METADATA[m]) for m in self.metadata),
                pa.field(ERR, pa.string()),
            ]
        )
        columns = ["partition", "offset", "key", "value", "timestamp"]
        if "headers" in self.metadata:
            columns.append("headers")
        return records.select(*columns).mapInArrow(
            _decoder(
                self.topic,
                self.key_format,
                self.value_format,
                key.serialize().to_pybytes(),
                value.serialize().to_pybytes(),
                self.metadata,
                out.serialize().to_pybytes(),
            ),
            arrow_to_spark_schema(out),
        )

    def _avro_sides(self) -> list[tuple[str, pa.Schema, str]]:
        """``(side, columns, reader schema)`` of each side in format ``avro``."""
        sides = [
            ("key", self.key_format, self.key_schema, self.key_avro_schema),
            ("value", self.value_format, self.value_schema, self.value_avro_schema),
        ]
        return [(side, cols, text) for side, fmt, cols, text in sides if fmt == "avro" and text]

    def _decode_avro(self, records: Any) -> Any:
        """``records`` with their avro sides decoded by ``from_avro`` (a plan; module doc).

        Other sides are decoded in Python first (or, if none needs it, the
        raw columns are selected as they are). The first error of a record
        wins; an err row has its value columns null, and its key columns if
        the key did not decode (module doc).
        """
        from pyspark.sql import functions as F

        from timeshard.spark.session import requires_spark_avro

        avro = self._avro_sides()
        raw = {side: pa.schema([pa.field(_raw_column(side), pa.binary())]) for side, _, _ in avro}
        if {self.key_format, self.value_format} <= {"avro", None}:
            staged = records.select(
                F.col("partition").cast("string").alias("_partition"),
                F.col("offset").alias("_offset"),
                *(F.col(side).alias(_raw_column(side)) for side in raw),
                *(F.col(m) for m in self.metadata),
                F.lit(None).cast("string").alias(ERR),
            )
        else:
            staged = self._decode_in_python(
                records, raw.get("key", self.key_schema), raw.get("value", self.value_schema)
            )
        writers = self._writers(records)
        where = F.concat(
            F.lit(f"{self.topic}/"),
            F.col("_partition"),
            F.lit("@"),
            F.col("_offset").cast("string"),
        )
        unknown_to = "" if self.writer_schemas is None else self.writer_schemas.describe()
        errors, data = [F.col(ERR)], {}
        with requires_spark_avro():  # the plan is analysed here, on the driver
            for side, columns, reader in avro:
                decoded = _AvroSide(side, F.col(_raw_column(side)), reader, writers, unknown_to)
                staged = staged.withColumn(_decoded_column(side), decoded.struct)
                errors.append(decoded.error(F.col(_decoded_column(side)), where))
                data[side] = (F.col(_decoded_column(side)), decoded.ok, columns)
            err = F.coalesce(*errors)
            return self._select_decoded(staged, err, data)

    def _select_decoded(self, staged: Any, err: Any, data: dict[str, Any]) -> Any:
        from pyspark.sql import functions as F

        from timeshard.storage.avro import record_columns

        columns = []
        for side, schema in (("key", self.key_schema), ("value", self.value_schema)):
            # A key that decoded is kept whatever else failed: the Python stage nulled the
            # key it could not decode, and an avro key is kept only if it decoded.
            kept = F.lit(True) if side == "key" else err.isNull()
            if side in data:
                struct, ok, cols = data[side]
                columns += record_columns(struct, ok & kept, cols)
            else:
                columns += [F.when(kept, F.col(c)).alias(c) for c in schema.names]
        return staged.select(
            "_partition",
            "_offset",
            *columns,
            *(F.col(m) for m in self.metadata),
            err.alias(ERR),
        )

    def _writers(self, records: Any) -> dict[int, str | None] | None:
        """The writer schema of every schema id of ``records`` (None: not the wire format).

        A fixed map is the answer as it is; with a registry, one small job
        finds the range's distinct ids, and each is looked up (driver).
        Raises SourceUnavailable if the registry cannot be reached.
        """
        from pyspark.sql import functions as F

        if self.writer_schemas is None:
            return None
        known = self.writer_schemas.known()
        if known is not None:
            return dict(known)
        ids = [
            _schema_id(F.col(side))
            for side, fmt in (("key", self.key_format), ("value", self.value_format))
            if fmt == "avro"
        ]
        found = records.select(F.explode(F.array(*ids)).alias("id")).where("id IS NOT NULL")
        distinct = sorted(row["id"] for row in found.distinct().collect())
        return {i: self.writer_schemas.schema(i) for i in distinct}

    @property
    def topic_id(self) -> str | None:
        """The id of the topic whose offsets this source binds (module doc): the one the
        catalog recorded (:meth:`pin_recorded`), else the first one found; None while none
        is known, and with a broker that has no topic ids."""
        return self._topic_id

    def find_topic_id(self) -> str | None:
        """:attr:`topic_id`, asking the broker first if none is known yet (driver).

        For the catalog, which records it when the ingestion is built, before the
        source binds any offset. None if the broker cannot tell now (unreachable,
        the topic not created yet: then ``upper`` stalls) or has no topic ids.
        InvalidUsage after :meth:`close`.
        """
        self._refuse_if_closed("find_topic_id")
        if self._topic_id is None:
            with contextlib.suppress(SourceUnavailable):
                self._topic_id = self._current_topic_id()
        return self._topic_id

    def pin_recorded(self, options: Mapping[str, Any]) -> None:
        """Hold the source to the topic id the catalog recorded (``options["topic_id"]``),
        not the one its topic has now.

        Built again after the topic was deleted and made again under its name
        while no process ran, the source would otherwise take the new topic's id
        for its own and read it on from the old topic's offsets. Pinned, its
        ``upper`` raises SourceUnavailable (definite), as it does when the id
        changes while it runs. A record without an id (made before ids were
        recorded, or when the broker could not tell) pins nothing: the source
        takes the id it finds, which the catalog records then.
        """
        recorded = options.get("topic_id")
        if options.get("topic") != self.topic:  # redeclared on another topic before it bound
            return  # any offset (see check_redeclared): the recorded id is the old topic's
        if isinstance(recorded, str) and recorded:
            self._topic_id = recorded

    def commit(self, frontier: SourceFrontier) -> None:
        """Commit ``frontier`` (the resumption frontier) to the consumer group, without
        waiting for the coordinator: the commit is asynchronous, and the next commit
        (the next tick's) reads its answer.

        The offsets stay to commit until a commit of them is answered: the next
        commit commits them with its own (the furthest of each partition). Each
        commit first serves the client's answers (``poll(0)``, which runs the
        consumer's ``on_commit``, :class:`_CommitAnswers`). One commit is in
        flight at a time: while it has no answer, a commit asks nothing, and it is
        judged silent only once unanswered past ``timeout_s`` (a slow coordinator
        is not a silent one, and ticks may come faster than its answers). The latest commit's
        answer decides: a success ends the group's silence; an error the
        coordinator answered with starts the pause anew and is raised, after the
        commit is asked again; a commit answered with the client's own timeout,
        or with no answer after ``timeout_s``, is the silence of the group's
        coordinator. That silence is a :class:`Silence` of its own (the
        coordinator may be the only silent broker: the source's reads answered).
        The commits after it raise its fault without asking until its pause has
        passed, then ask again: the commit itself is the probe, and waits for
        nothing; the fault stays raised while it is in flight, and only an answer
        ends the silence (a late success, of a commit already judged unanswered,
        too). No commit is asked while an earlier one is unanswered, even one
        judged silent (the client answers each within :attr:`COMMIT_ANSWER_TIMEOUTS`
        timeouts; one unanswered for :attr:`COMMIT_LOST_AFTER_S` more is
        forgotten), so every answer is that of the one in flight. An answer of
        ``_WAIT_COORD`` (the client held the commit for want of a coordinator) is
        no answer.

        While the source knows its cluster is silent (its own silence, or one
        another object of the cluster met: :meth:`BrokerSilence.known`), nothing
        is asked: it raises SourceUnavailable with the silence's line, as
        ``upper`` does, and keeps the offsets. InvalidUsage after :meth:`close`.
        """
        from confluent_kafka import KafkaException, TopicPartition

        self._refuse_if_closed("commit")
        wanted = dict(self._uncommitted)
        for p, o in frontier.items():
            wanted[p] = max(o, wanted.get(p, o))
        self._uncommitted = wanted
        if not wanted:
            return
        known = self._silence.known()
        if known is not None:
            raise SourceUnavailable(known)
        consumer, silence = self._consumer(), self._commit_silence
        failed = (
            f"Kafka at {self.bootstrap_servers}: committing offsets of group "
            f"{self.group_id!r} failed"
        )
        offsets = [TopicPartition(self.topic, int(p), o) for p, o in sorted(wanted.items())]
        refused = self._judge_commits(consumer, failed)
        if self._commits_asked > self._commits_answered:  # one in flight, maybe judged
            if silence.fault is not None:  # a silence lasts until a commit is answered
                raise SourceUnavailable(silence.fault)
            return  # these offsets go with the next commit
        paused = silence.paused()
        if paused is not None:
            raise SourceUnavailable(paused)
        try:
            consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException as e:  # the client refused the commit at once
            error = e.args[0] if e.args else e
            if _no_answer(error):
                raise SourceUnavailable(silence.silent(f"{failed}: {error}")) from None
            silence.answered()  # an answer, an error: the pause starts anew
            raise SourceUnavailable(f"{failed}: {error}") from None
        self._commit_asked_at = monotonic()
        self._commits_asked += 1
        self._commit_awaited = True
        if refused is not None:
            raise SourceUnavailable(refused)
        if silence.fault is not None:  # asked after a silence: it lasts until answered
            raise SourceUnavailable(silence.fault)

    def _judge_commits(self, consumer: Any, failed: str) -> str | None:
        """Read the answers of the commits asked so far (:meth:`commit`): the fault of an
        error the coordinator answered the latest commit with (the commit is asked
        again, then it is raised); raises SourceUnavailable if the latest commit got no
        answer within ``timeout_s``, which is the group's silence (one younger stays in
        flight: ``_commit_awaited``). Offsets a success committed are dropped from
        those to commit."""
        silence = self._commit_silence
        if self._commits_asked > self._commits_answered:
            consumer.poll(0)  # runs on_commit for the answers come so far
        answers = self._commit_answers.take()
        refused = unanswered = None
        for error, partitions in answers:
            # The one commit in flight's (the latest's, unless already judged silent).
            latest, self._commit_awaited = self._commit_awaited, False
            error = self._answer(error, partitions)
            if error is None or not latest:
                continue  # committed, or a commit already judged (its silence counted then)
            if _no_answer(error) or _waits_for_coordinator(error):
                unanswered = f"{failed}: {error}"  # the client's own timeout
            else:
                silence.answered()  # an answer, an error: the pause starts anew
                refused = f"{failed}: {error}"
        waited = monotonic() - self._commit_asked_at
        if self._commit_awaited and waited > self.timeout_s:
            self._commit_awaited = False
            unanswered = f"{failed}: the coordinator did not answer within {self.timeout_s} s"
        lost_after = self.COMMIT_ANSWER_TIMEOUTS * self.timeout_s + self.COMMIT_LOST_AFTER_S
        if self._commits_asked > self._commits_answered and waited > lost_after:
            self._commits_answered = self._commits_asked  # never to be answered: forgotten
        if unanswered is not None:
            raise SourceUnavailable(silence.silent(unanswered))
        return refused

    def _committed(self, partitions: Any) -> None:
        """Drop from the offsets to commit those a commit answered without error committed
        (a newer offset of a partition stays to commit)."""
        for tp in partitions:
            p = str(tp.partition)
            if p in self._uncommitted and self._uncommitted[p] <= tp.offset:
                del self._uncommitted[p]

    #: How long (s) each poll for the answer of the commit at close waits at most.
    CLOSE_POLL_S = 0.1
    #: The least time (s) left of close's bound for which its own commit is asked (half
    #: the source's timeout, if that is less: a timeout that short says the broker answers
    #: faster). The coordinator answers a commit once its in-sync replicas hold the
    #: offsets, a round trip of ms to tens of ms on a healthy cluster, and close reads the
    #: answer in polls of :attr:`CLOSE_POLL_S`: with less left, the answer mostly does
    #: not come in time, and the consumer's close then waits for the commit (the client
    #: holds it), up to a whole timeout more, for offsets that are only a report.
    CLOSE_COMMIT_MIN_S = 0.1

    def close(self) -> None:
        """Commit the offsets not committed yet (:meth:`_commit_at_close`), then close the
        clients. Raises nothing the commit meets: the group is only a report.

        A second close does nothing (a drop may be retried): its consumer closed, it
        would make a new one and wait its whole timeout for a commit's answer. Once
        closed, the source asks nothing more (:meth:`_refuse_if_closed`).
        """
        if self._closed:
            return
        try:
            self._commit_at_close()
        finally:
            self._closed = True  # after the close's own commit, which asks the consumer
            self._admin = None  # an AdminClient has no close: dropped, it ends its threads
            del self._silence  # forgotten once no open object holds it
            if self._client is not None:
                self._client.close()
                self._client = None

    def _commit_at_close(self) -> None:
        """Commit to the group the offsets of the last ticks that no answered commit
        committed (the latest of each partition), and wait for the answer, for
        ``timeout_s`` at most; log the offsets left uncommitted, never raise.

        The consumer's close, after it, waits for a commit the client still holds
        for want of a coordinator (the coordinator stopped answering after the
        last tick, and the source does not know yet), at most its
        ``session.timeout.ms`` after the commit was asked: the source's timeout
        (:meth:`_consumer`), not librdkafka's 45 s. So the whole close takes about
        ``timeout_s``, and twice that at most (a close commit asked at the end of
        its wait, then held).

        A commit is asynchronous (:meth:`commit`): at close, the last tick's
        offsets are often not asked yet (one commit was in flight), or asked and
        not answered; a consumer closed then leaves the group behind the source,
        and lag tools report offsets already read. The commit in flight is
        awaited first: one asked beside it may land before it, and leave the group
        at the older offsets. The close's own commit is asked only if time is left
        to wait for its answer (:attr:`CLOSE_COMMIT_MIN_S` at least; one not asked
        for want of it is logged) and the one in flight got an answer (an error or
        not), not the client's no-answer (``_TIMED_OUT``, ``_WAIT_COORD``): with
        the coordinator silent it would be held too. A synchronous commit would
        wait for its answer with no bound (the client holds a commit for want of
        a coordinator past the timeout), so the commit is asynchronous here too,
        and the answers are polled for in polls of :attr:`CLOSE_POLL_S` at most, until ``timeout_s``
        has passed. While the source knows its cluster is silent, nothing is
        asked (the commit would wait the whole bound for nothing); so while the
        group's coordinator is, once the answers come already are read (a late
        success ends its silence). Nor is anything asked once the topic was found
        with another id than the one the offsets were read from (:meth:`upper`
        raised): they would put the group of the topic made again ahead of what
        was read from it. A failure is a report's, never the source's data: it
        is logged.
        """
        if not self._uncommitted:
            return
        known = self._silence.known()
        if known is not None:
            self._log_uncommitted(known)
            return
        if self._other_topic_id is not None:
            self._log_uncommitted(
                f"topic {self.topic!r} has id {self._other_topic_id}, not {self._topic_id}, "
                "the id of the topic the offsets were read from"
            )
            return
        from confluent_kafka import KafkaException, TopicPartition

        deadline = monotonic() + self.timeout_s
        error: Any = None
        try:
            consumer = self._consumer()
            error = self._read_answers(consumer, 0)  # a late success ends the group's silence
            if self._commit_silence.fault is not None:
                self._log_uncommitted(self._commit_silence.fault)
                return
            error = self._await_commits(consumer, deadline) or error
            if (
                self._uncommitted
                and self._commits_answered >= self._commits_asked
                and not (_no_answer(error) or _waits_for_coordinator(error))
            ):
                least = min(self.CLOSE_COMMIT_MIN_S, self.timeout_s / 2)
                left = deadline - monotonic()
                if left < least:
                    self._log_uncommitted(
                        f"not asked: {max(left, 0):.3f} s of the close's {self.timeout_s} s "
                        f"were left, less than the {least} s an answer needs"
                    )
                    return
                offsets = [
                    TopicPartition(self.topic, int(p), o)
                    for p, o in sorted(self._uncommitted.items())
                ]
                consumer.commit(offsets=offsets, asynchronous=True)
                self._commits_asked += 1
                error = self._await_commits(consumer, deadline)
        except Exception as e:  # the client's refusal, or a closed consumer: only a report
            error = e.args[0] if isinstance(e, KafkaException) and e.args else e
        if self._uncommitted:
            self._log_uncommitted(str(error or f"no answer within {self.timeout_s} s"))

    def _await_commits(self, consumer: Any, deadline: float) -> Any:
        """Poll for the answers of the commits asked while any is unanswered, until
        ``deadline`` (monotonic), reading them (:meth:`_commit_at_close`): the error of
        the last one answered with one (None: none)."""
        error = None
        while self._commits_answered < self._commits_asked:
            left = deadline - monotonic()
            if left <= 0:
                break
            error = self._read_answers(consumer, min(left, self.CLOSE_POLL_S)) or error
        return error

    def _read_answers(self, consumer: Any, timeout: float) -> Any:
        """Poll for the answers of the commits asked, waiting ``timeout`` at most, and read
        the answers come (:meth:`_commit_at_close`): a success drops the offsets it
        committed and ends the group's silence. The error of the last one answered with
        one (None: none)."""
        error = None
        consumer.poll(timeout)
        for answer, partitions in self._commit_answers.take():
            error = self._answer(answer, partitions) or error
        return error

    def _answer(self, error: Any, partitions: Any) -> Any:
        """Count one commit's answer (never past the commits asked: a forgotten commit's
        answer may come after all) and return its error: the request's, else the first
        partition's; None for a success, which drops the offsets it committed and ends
        the group's silence."""
        self._commits_answered = min(self._commits_answered + 1, self._commits_asked)
        if error is None:
            error = next((tp.error for tp in partitions if tp.error is not None), None)
        if error is None:
            self._committed(partitions)
            self._commit_silence.answered()
        return error

    def _refuse_if_closed(self, what: str) -> None:
        """InvalidUsage naming ``what`` if the source is closed: an ask after :meth:`close`
        would make a client again (the closed ones are dropped), which nothing closes."""
        if self._closed:
            raise InvalidUsage(
                f"KAFKA source {self.name!r} is closed: {what} asks its broker, and a closed "
                "source asks nothing (build the source again to read it)"
            )

    def _log_uncommitted(self, why: str) -> None:
        """Log, as a warning, the offsets close left uncommitted to the group and ``why``
        (:meth:`_commit_at_close`): the group is only a report, so close raises nothing."""
        log.warning(
            "KAFKA source %r: offsets %s not committed to group %r at close: %s",
            self.name,
            dict(sorted(self._uncommitted.items())),
            self.group_id,
            why,
        )

    # -- the broker, on the driver ---------------------------------------------------------

    def _consumer(self) -> Any:
        """The source's consumer, made at the first ask (driver).

        It never subscribes to its group (it only asks metadata, offsets and
        commits), so it joins no group and the broker's bounds on a member's
        session do not apply: its ``session.timeout.ms`` only bounds how long the
        client holds a commit for want of a coordinator before it answers
        ``_WAIT_COORD``, which its close waits for. It is the source's timeout, the
        wait after which a commit is judged unanswered (:meth:`commit`), so a
        close takes no longer than the source's timeout allows
        (:meth:`_commit_at_close`); librdkafka's default is 45 s.
        """
        from confluent_kafka import Consumer

        if self._client is None:
            assert not self._closed, f"KAFKA source {self.name!r}: a consumer made after close"
            self._client = Consumer(
                {
                    "bootstrap.servers": self.bootstrap_servers,
                    "group.id": self.group_id,
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "socket.timeout.ms": int(self.timeout_s * 1000),
                    "session.timeout.ms": int(self.timeout_s * 1000),
                    "logger": _quiet_logger(),
                    "on_commit": self._commit_answers,
                }
            )
        return self._client

    #: What the source knows of its broker's silence, and its cluster's (:meth:`_probe`).
    _silence = SharedSilence()

    def _probe(self) -> None:
        """Return at once if the broker answered last; else raise its fault again (the
        same message: the health does not change) until a probe of the topic's metadata
        finds it answering (:meth:`BrokerSilence.probe`), and the caller asks in full.

        A broker that is down would otherwise hold every tick up for the source's
        whole timeout (each ask waits for it), and with it the pipeline's other
        objects, which tick after the source on the same thread.
        """
        fault = self._silence.probe(
            lambda timeout: self._consumer().list_topics(self.topic, timeout=timeout),
            self.timeout_s,
        )
        if fault is not None:
            raise SourceUnavailable(fault)

    def _silent(self, fault: str) -> SourceUnavailable:
        """The fault of a broker that did not answer in time, remembered so that it is not
        asked again before its probe (:meth:`BrokerSilence.silent`)."""
        return SourceUnavailable(self._silence.silent(fault))

    def _partitions(self) -> list[int]:
        from confluent_kafka import KafkaError, KafkaException

        try:
            meta = self._consumer().list_topics(self.topic, timeout=self.timeout_s)
        except KafkaException as e:
            error = e.args[0] if e.args else e
            if not _no_answer(error):  # an answer, or the client's refusal of its settings
                raise SourceUnavailable(
                    f"Kafka at {self.bootstrap_servers}: the metadata of topic {self.topic!r} "
                    f"cannot be read: {error}"
                ) from None
            raise self._silent(
                f"Kafka at {self.bootstrap_servers} is unreachable: {error}"
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

    def _check_same_topic(self) -> None:
        """Raise (definite) if the topic now has another id than :attr:`topic_id` (the
        one recorded, else the one found first).

        A topic deleted and made again under its name starts its offsets at
        0 again: the offsets bound are the old topic's, and reading on from
        them would skip the new topic's first records (or read them as the
        old ones, once it holds as many). So does a topic of the same name on
        another cluster (``bootstrap_servers`` changed to its brokers): its
        offsets are its own. The message names both causes, both ids, and
        what to do: a source of another name binds the topic's offsets anew.
        Its first clause (up to ``;``) is what ``timeshard verify`` notes. A
        broker that has no topic ids (an all-zero id) is not checked.
        """
        found = self._current_topic_id()
        if found is None:
            return
        if self._topic_id is None:
            self._topic_id = found
        self._other_topic_id = found if found != self._topic_id else None
        if self._other_topic_id is not None:
            raise SourceUnavailable(
                f"Kafka topic {self.topic!r} at {self.bootstrap_servers} has id {found}, not "
                f"{self._topic_id}, the id of the topic whose offsets the source bound: "
                "bootstrap_servers name another cluster (a topic of one name has an id on "
                "each cluster), or the topic was deleted and made again, and the offsets "
                "bound mean other records in this one, so nothing is read; to read this "
                "topic, declare it as a source of another name (it binds offsets anew), or "
                "set bootstrap_servers back to brokers of the cluster of the bound topic",
                definite=True,
            )

    def _current_topic_id(self) -> str | None:
        """The topic's id (base64), None if the broker has none for it (driver)."""
        from concurrent.futures import TimeoutError as FutureTimeout

        from confluent_kafka import KafkaError, KafkaException, TopicCollection
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            assert not self._closed, f"KAFKA source {self.name!r}: an admin made after close"
            self._admin = AdminClient(
                {
                    "bootstrap.servers": self.bootstrap_servers,
                    "socket.timeout.ms": int(self.timeout_s * 1000),
                    "logger": _quiet_logger(),
                }
            )
        try:
            futures = self._admin.describe_topics(
                TopicCollection([self.topic]), request_timeout=self.timeout_s
            )
            described = futures[self.topic].result(self.timeout_s)
        except KafkaException as e:
            error = e.args[0]
            if isinstance(error, KafkaError) and error.code() in (
                KafkaError.UNKNOWN_TOPIC_OR_PART,
                KafkaError.UNKNOWN_TOPIC_ID,
            ):
                raise SourceUnavailable(
                    f"Kafka topic {self.topic!r} does not exist on {self.bootstrap_servers} "
                    "(deleted, or not created yet)"
                ) from None
            fault = f"Kafka topic {self.topic!r}: its id is unavailable: {error}"
            if _no_answer(error):
                raise self._silent(fault) from None
            raise SourceUnavailable(fault) from None
        except FutureTimeout:
            raise self._silent(
                f"Kafka topic {self.topic!r}: no answer from {self.bootstrap_servers} "
                f"within {self.timeout_s} s"
            ) from None
        topic_id = described.topic_id
        if topic_id is None or (
            topic_id.get_most_significant_bits() == 0 and topic_id.get_least_significant_bits() == 0
        ):
            return None
        return str(topic_id)

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
                fault = (
                    f"Kafka topic {self.topic!r} partition {p}: offsets unavailable: {e.args[0]}"
                )
                if _no_answer(e.args[0]):
                    raise self._silent(fault) from None
                raise SourceUnavailable(fault) from None
            if out[p] is None:
                raise self._silent(
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
    side: str,
    fmt: str | None,
    schema: pa.Schema | None,
    avro_schema: str | None,
    *,
    optional: bool,
) -> list[pa.Field]:
    """The columns the key or the value decodes to, after checking its format and schemas."""
    if fmt is None and optional:
        if schema is not None:
            raise InvalidUsage(f"{side}_schema goes with a {side}_format, got {schema}")
        if avro_schema is not None:
            raise InvalidUsage(
                f"{side}_avro_schema goes with {side}_format 'avro', got {avro_schema!r}"
            )
        return []
    if fmt not in FORMATS:
        raise InvalidUsage(f"{side}_format must be one of {FORMATS}, got {fmt!r}")
    if (fmt == "avro") != (avro_schema is not None):
        raise InvalidUsage(
            f"{side}_avro_schema goes with {side}_format 'avro' and only with it; got "
            f"{side}_format {fmt!r} and {side}_avro_schema {avro_schema!r}"
        )
    if fmt == "avro":
        if schema is not None:
            raise InvalidUsage(
                f"{side}_format 'avro' takes its columns from {side}_avro_schema; got "
                f"{side}_schema {schema} too"
            )
        assert avro_schema is not None
        return [pa.field(f.name, f.type) for f in avro_payload_schema(avro_schema)]
    if fmt == "json":
        if schema is None or len(schema) == 0:
            raise InvalidUsage(f"{side}_format 'json' needs a {side}_schema with columns")
        return [pa.field(f.name, f.type) for f in schema]
    if schema is not None:
        raise InvalidUsage(f"{side}_format {fmt!r} has one column {side!r}; got {side}_schema too")
    return [pa.field(side, pa.string() if fmt == "text" else pa.binary())]


def _writer_schemas(
    avro: bool,
    url: str | None,
    schemas: Mapping[int, str] | None,
    timeout_s: float,
) -> WriterSchemas | None:
    """Where wire-format records' writer schemas come from (None: bare Avro datums)."""
    if url is not None and schemas is not None:
        raise InvalidUsage(
            redacted(
                f"give schema_registry_url or avro_schemas, not both: got {url!r} and ids "
                f"{sorted(schemas)}"
            )
        )
    if (url is not None or schemas is not None) and not avro:
        raise InvalidUsage(
            redacted(
                "schema_registry_url and avro_schemas go with key_format or value_format "
                f"'avro'; got {url!r}, {schemas!r}"
            )
        )
    if url is not None:
        return SchemaRegistry(url, timeout_s)
    if schemas is not None:
        return SchemaFiles(schemas)
    return None


def _raw_column(side: str) -> str:
    return f"_avro_{side}"


def _decoded_column(side: str) -> str:
    return f"_avro_{side}_decoded"


def _schema_id(raw: Any) -> Any:
    """The schema id of wire-format bytes ``raw`` (a big-endian signed int32, as a long),
    null if they are not in the wire format."""
    from pyspark.sql import functions as F

    framed = (F.length(raw) >= HEADER_BYTES) & (raw.substr(1, 1) == F.lit(MAGIC))
    unsigned = F.conv(F.hex(raw.substr(2, 4)), 16, 10).cast("long")
    signed = F.when(unsigned >= 1 << 31, unsigned - (1 << 32)).otherwise(unsigned)
    return F.when(framed, signed)


class _AvroSide:
    """The decoding of one side's raw bytes (driver: Column expressions; module doc)."""

    def __init__(
        self,
        side: str,
        raw: Any,
        reader: str,
        writers: dict[int, str | None] | None,
        unknown_to: str,
    ) -> None:
        from pyspark.sql import functions as F

        from timeshard.storage.avro import decode_datum

        self.side, self.raw, self.writers, self.unknown_to = side, raw, writers, unknown_to
        if writers is None:
            self.struct = decode_datum(raw, reader)
            return
        self.schema_id = _schema_id(raw)
        datum = raw.substr(HEADER_BYTES + 1, (1 << 31) - 1)
        found = {i: text for i, text in sorted(writers.items()) if text is not None}
        struct = F.when(F.lit(False), decode_datum(datum, reader))
        for i, text in found.items():
            struct = struct.when(self.schema_id == F.lit(i), decode_datum(datum, text, reader))
        self.struct = struct
        self.found = found

    @property
    def ok(self) -> Any:
        from pyspark.sql import functions as F

        from timeshard.storage.avro import datum_ok

        return datum_ok(F.col(_decoded_column(self.side)))

    def error(self, decoded: Any, where: Any) -> Any:
        """The err message of a record (null: none), ``<where>: AvroDecodeError: <side>: ...``."""
        from pyspark.sql import functions as F

        from timeshard.storage.avro import datum_ok

        head = F.concat(where, F.lit(f": AvroDecodeError: {self.side}: "))
        bad = self.raw.isNotNull() & ~datum_ok(decoded)
        if self.writers is None:
            return F.when(bad, F.concat(head, F.lit(_BARE_DATUM_ERROR)))
        sid = self.schema_id.cast("string")
        unknown = f" is unknown to {self.unknown_to}"
        known = F.lit(False)
        for i in self.found:
            known = known | (self.schema_id == F.lit(i))
        return (
            F.when(self.raw.isNull(), F.lit(None))
            .when(self.schema_id.isNull(), F.concat(head, F.lit(_NOT_WIRE_ERROR)))
            .when(
                ~known,
                F.concat(head, F.lit("schema id "), sid, F.lit(unknown)),
            )
            .when(
                bad,
                F.concat(
                    head,
                    F.lit("the datum does not decode with writer schema id "),
                    sid,
                    F.lit(f" into the declared columns ({_DECODE_CAUSES})"),
                ),
            )
        )


_DECODE_CAUSES = (
    "corrupt, truncated, too long, a value outside its logical type's range, "
    "or a schema the reader schema cannot resolve"
)
_BARE_DATUM_ERROR = f"the datum does not decode with the declared avro schema ({_DECODE_CAUSES})"
_NOT_WIRE_ERROR = (
    "not in the Confluent wire format (at least 5 bytes: magic byte 0, a 4-byte schema id)"
)


def decode_record(
    raw: bytes | None, fmt: str | None, side: str, schema: pa.Schema
) -> dict[str, Any]:
    """The columns of a key or value (``raw`` None: all null). Raises if it does not decode.

    An ``avro`` side is only passed on, as its raw bytes (decoded later, on the JVM).
    """
    from timeshard.storage.file_source import decode_payload

    if fmt is None or raw is None:
        return dict.fromkeys(schema.names)
    if fmt == "avro":
        return {_raw_column(side): raw}
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
        null = dict.fromkeys(value_schema.names)  # the value of an err row
        for batch in batches:
            fast = arrow_decoded(batch, key_format, value_format, key_schema, value_schema)
            if fast is not None:
                yield from _with_metadata(fast, batch, metadata, out_schema).to_batches()
                continue
            rows = []
            for rec in batch.to_pylist():
                row: dict[str, Any] = {
                    "_partition": str(rec["partition"]),
                    "_offset": rec["offset"],
                    ERR: None,
                }
                try:
                    row.update(decode_record(rec["key"], key_format, "key", key_schema))
                except DECODE_ERRORS as e:  # a fault (MemoryError) fails the task, never a row
                    row.update(dict.fromkeys(key_schema.names), **null)
                    row[ERR] = _error(topic, rec, e)
                else:  # a value that does not decode keeps its key: the key's error
                    try:
                        row.update(decode_record(rec["value"], value_format, "value", value_schema))
                    except DECODE_ERRORS as e:
                        row.update(null)
                        row[ERR] = _error(topic, rec, e)
                for m in metadata:
                    row[m] = rec[m]
                rows.append(row)
                if len(rows) >= _BATCH_ROWS:
                    yield pa.RecordBatch.from_pylist(rows, schema=out_schema)
                    rows = []
            if rows:
                yield pa.RecordBatch.from_pylist(rows, schema=out_schema)

    return run


def _error(topic: str, record: dict[str, Any], error: Exception) -> str:
    """An err row's ``_err``: where the record is, and why it does not decode."""
    where = f"{topic}/{record['partition']}@{record['offset']}"
    return f"{where}: {type(error).__name__}: {str(error)[:300]}"


def arrow_decoded(
    batch: pa.RecordBatch,
    key_format: str | None,
    value_format: str,
    key_schema: pa.Schema,
    value_schema: pa.Schema,
) -> pa.Table | None:
    """A batch of records decoded by Arrow: ``_partition``, ``_offset``, the key's and the
    value's columns, ``_err`` (all null); None where any record needs :func:`decode_record`.

    Arrow decodes a ``json`` side (``pyarrow.json``, the declared columns as
    its explicit schema, other fields ignored) when every column is an
    integer, a double, a boolean or a string, for which Arrow's reader is
    as strict as :func:`~timeshard.storage.file_source.decode_payload`: no
    coercion, integers in range, a duplicate key refused (the records then
    go one by one, and the last key wins there). It refuses anything it
    cannot read exactly: then None, and the batch goes record by record,
    which finds the err rows. A ``text`` side is cast to UTF-8 (None if any is
    not), a ``bytes`` side passed on; ``avro`` is not decoded here (None).
    A null key or value (a tombstone) decodes to null columns.
    """
    columns: list[pa.ChunkedArray | pa.Array] = [
        pc.cast(batch.column("partition"), pa.string()),
        batch.column("offset"),
    ]
    names = ["_partition", "_offset"]
    for side, fmt, schema in (
        ("key", key_format, key_schema),
        ("value", value_format, value_schema),
    ):
        raw = batch.column(side)
        if fmt is None:
            decoded = [pa.nulls(batch.num_rows, f.type) for f in schema]
        elif fmt == "json":
            found = _arrow_json(raw, schema)
            if found is None:
                return None
            decoded = found
        elif fmt == "text":
            try:
                decoded = [pc.cast(raw, pa.string())]
            except pa.ArrowInvalid:
                return None
        elif fmt == "bytes":
            decoded = [raw]
        else:
            return None
        columns += decoded
        names += schema.names
    columns.append(pa.nulls(batch.num_rows, pa.string()))
    return pa.Table.from_arrays(columns, names=[*names, ERR])


def _arrow_json(raw: pa.Array, schema: pa.Schema) -> list[pa.Array] | None:
    """The columns of a binary array of JSON objects (null stays null), or None (see above)."""
    from timeshard.storage.file_source import arrow_json

    present = pc.is_valid(raw)
    values = raw.filter(present).to_pylist()
    if not values:
        return [pa.nulls(len(raw), f.type) for f in schema]
    table = arrow_json(b"\n".join(values), len(values), schema, unknown="ignore")
    if table is None:
        return None
    if len(values) == len(raw):
        return list(table.columns)
    at = pc.subtract(pc.cumulative_sum(present.cast(pa.int64())), 1)
    return [
        pc.if_else(
            present,
            pc.take(table.column(f.name), pc.max_element_wise(at, 0)),
            pa.scalar(None, f.type),
        )
        for f in schema
    ]


def _with_metadata(
    decoded: pa.Table, batch: pa.RecordBatch, metadata: tuple[str, ...], out: pa.Schema
) -> pa.Table:
    """``decoded`` with the metadata columns the source declares, as ``out``."""
    table = decoded
    for m in metadata:
        table = table.append_column(m, batch.column(m).cast(METADATA[m]))
    return table.select(out.names).cast(out)


def _no_answer(error: Any) -> bool:
    """Whether a client's ``error`` (a KafkaError, if it is one) says the broker did not
    answer in time or could not be reached, rather than answering with an error."""
    from confluent_kafka import KafkaError

    silent = (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN)
    return isinstance(error, KafkaError) and error.code() in silent


def _waits_for_coordinator(error: Any) -> bool:
    """Whether a commit's ``error`` says the client held it for want of a coordinator
    (none known, or it moved or went away) until ``session.timeout.ms``: no answer."""
    from confluent_kafka import KafkaError

    return isinstance(error, KafkaError) and error.code() == KafkaError._WAIT_COORD


def _quiet_logger() -> Any:
    """A logger for librdkafka that keeps its connection retries out of stderr (one
    logger, given its one handler once: every client asks for it, on the driver and in
    each task of a reused executor process)."""
    import logging

    logger = logging.getLogger("timeshard.kafka")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger


__all__ = [
    "FORMATS",
    "METADATA",
    "BrokerSilence",
    "KafkaSource",
    "SharedSilence",
    "Silence",
    "decode_record",
]
