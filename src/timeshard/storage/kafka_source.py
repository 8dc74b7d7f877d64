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

This module holds :class:`KafkaSource`, its options and its read plan; the
rest is a module per concept (the client's side by inheritance, ``KafkaSource``
of :class:`~timeshard.storage.kafka_commit.GroupCommits` of
:class:`~timeshard.storage.kafka_offsets.TopicOffsets`; the names other
modules import re-exported here):
:mod:`~timeshard.storage.kafka_offsets` (the topic's offsets and id, asked of
the broker; driver), :mod:`~timeshard.storage.kafka_commit` (the consumer
group's commits and the close; driver), :mod:`~timeshard.storage.kafka_silence`
(a silent broker's pauses and probes; driver),
:mod:`~timeshard.storage.kafka_decode` (the records decoded in Python; tasks),
:mod:`~timeshard.storage.kafka_avro` (the avro sides: planned on the driver,
decoded in the executors' JVMs) and :mod:`~timeshard.storage.kafka_client`
(what KAFKA sources and exports share of their clients).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage, SourceUnavailable
from timeshard.persist._internal.parts import ERR
from timeshard.storage.avro import avro_payload_schema
from timeshard.storage.kafka_avro import _AvroSide, _decoded_column, _schema_id
from timeshard.storage.kafka_client import _quiet_logger, check_kafka_names, check_timeout
from timeshard.storage.kafka_commit import GroupCommits, _CommitAnswers
from timeshard.storage.kafka_decode import (
    FORMATS,
    METADATA,
    _decoder,
    _raw_column,
    arrow_decoded,
    decode_record,
)
from timeshard.storage.kafka_silence import BrokerSilence, SharedSilence, Silence
from timeshard.storage.reclock import SourceFrontier
from timeshard.storage.schema_registry import (
    SchemaFiles,
    SchemaRegistry,
    WriterSchemas,
    redacted,
)

_RESERVED = ("_partition", "_offset", "_ts", "_diff", ERR)
DEFAULT_TIMEOUT_S = 10.0


class KafkaSource(GroupCommits):
    """One Kafka topic (module doc)."""

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


__all__ = [
    "FORMATS",
    "METADATA",
    "BrokerSilence",
    "KafkaSource",
    "SharedSilence",
    "Silence",
    "decode_record",
    # Imported from here by the tests.
    "SourceUnavailable",
    "_decoder",
    "_quiet_logger",
    "_schema_id",
    "arrow_decoded",
]
