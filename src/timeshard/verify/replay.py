"""Check 6 of ``timeshard verify``: a source's outputs against its records, read again.

The source is one whose records can be read again from upstream
(:func:`replayable_source`): a FILE source (its retained input files), the
KEY VALUE generator (a pure function of its options), a KAFKA source (its
topic, from offset 0 while retention keeps it), a POSTGRES source (its
tables now, rewound to its slot's position by the slot's changes, then
those changes: :func:`replay_floor`) or a MYSQL source (its tables now,
rewound by the binlog to the remap's first binding). An UPSERT output must
hold the last value per key, a NONE output every record.

The expected content is derived here from the definitions, independently of
the ingestion's code: the reading, the reclocking and the order are this
module's own.

* **Records.** The input files are read with plain Python over ``[0, binding
  at t)``: this module splits the lines and computes their offsets itself
  (:func:`read_input_files`). Each line is decoded by the format's
  definition, :func:`timeshard.storage.file_source.decode_line` (and the
  source's avro stage): what a line's bytes mean is the format's contract,
  which this check does not re-derive. The KEY VALUE generator's records
  are its definition (``read``); a KAFKA, POSTGRES or MYSQL source's are
  read by the source's own ``read`` (Spark's Kafka reader and the format's
  decoding; a snapshot of the tables and the slot's or binlog's stream),
  which takes nothing from the location: only the upstream and the
  definition. (A POSTGRES read may write one ``pg_logical_emit_message`` to
  move an idle server's WAL on; nothing else is written upstream.)
* **Bound times.** Each record is bound at the first time of the remap
  shard's bindings (:func:`remap_bindings`) whose frontier is beyond it
  (:func:`bound_time`, a bisection per file). That first time is well
  defined only if the bindings are monotone in time, which
  :func:`check_remap_bindings` checks of every remap shard (check 4, on the
  driver, without Spark).
* **Order.** Per key, the documented order of a FILE source
  (:mod:`timeshard.storage.file_source`, "Order") decides: the latest bound
  time, then the file whose name is greatest as UTF-8 bytes, then the
  greatest offset (:func:`command_order`, :func:`last_values`). A record
  whose value columns are all null deletes the key; one that failed to
  decode makes the key's row an err row; an unkeyed err record (``_err``
  set, every key null) is an err row of its own from its time on.

The export's snapshot at each sampled time must equal that last value per
key (UPSERT), or every record bound by then at its ``_diff`` (NONE). Its
upper must not be beyond the remap shard's (:func:`check_export_frontier`,
without Spark): beyond it no binding says which records it holds.
Bindings that compaction merged into the remap shard's since have lost their
times, hence the order between files there: a key whose files' last records
there differ is ambiguous, left out and counted in a note.

Driver vs executors: the bindings are decoded on the driver with pyarrow, and
the input files' sizes checked there. Reading the files (plain Python in the
tasks of a ``mapInArrow``), the reclocking (likewise) and the last value per
key (Python per key, after a shuffle by key) run on the executors, and so
does the difference with the export's snapshots. The task functions close
over plain values: paths, Arrow schemas as IPC bytes, the bindings as lists.
"""

from __future__ import annotations

import bisect
import enum
import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Literal

import pyarrow as pa
import pyarrow.compute as pc

from timeshard.catalog import CatalogEntry
from timeshard.errors import InvalidUsage, PartError, SinceError, SourceUnavailable
from timeshard.persist import PersistClient, UnleasedReader
from timeshard.persist._internal.blobio import read_part
from timeshard.persist._internal.parts import DIFF, ERR, TS, advance_since
from timeshard.persist.fetch import parts_at
from timeshard.progress import MAX_TIMESTAMP, Timestamp
from timeshard.storage.reclock import SourceFrontier
from timeshard.storage.sources import metadata_columns
from timeshard.verify.report import Finding, VerifyReport
from timeshard.verify.shards import _rng, checked_upper, readable_range, sample_times
from timeshard.verify.views import AT, _report_differences, _union, differences

REPLAYABLE = ("file", "key_value", "kafka", "postgres", "mysql")
"""The source kinds whose records :func:`replayable_source` can read again."""
BOUND = "_bt"
"""The column of a record's bound time."""
_AMBIGUOUS_COLUMN = "_ambiguous"
_CHUNK = 1 << 20
_BATCH_ROWS = 4096


class _Marker(enum.Enum):
    AMBIGUOUS = "ambiguous"


AMBIGUOUS = _Marker.AMBIGUOUS
"""The state of a key whose last value is lost with the order of a collapsed time."""

KeyState = tuple[Any, ...] | None | Literal[_Marker.AMBIGUOUS]
"""A key's expected state: its value columns then ``_err``, None (absent), or AMBIGUOUS."""

Spans = dict[str, tuple[list[int], list[Timestamp]]]
"""Per partition, the increasing frontier offsets of the bindings and the times they were bound."""


def file_source(options: Mapping[str, Any]) -> Any:
    """The FileSource the catalog options of a FILE source declare (InvalidUsage if they can't)."""
    from timeshard.storage.file_source import FileSource

    try:
        columns = [(str(n), pa.type_for_alias(str(t))) for n, t in options["columns"]]
        fmt = str(options["format"])
        schema = pa.schema(columns) if fmt in ("json", "csv") else None
        limit = (
            {"max_line_bytes": int(options["max_line_bytes"])}
            if "max_line_bytes" in options
            else {}
        )
        return FileSource(
            str(options["name"]),
            str(options["path"]),
            fmt,
            schema,
            options.get("avro_schema"),
            **limit,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise InvalidUsage(f"cannot rebuild the FILE source from {dict(options)!r}: {e}") from e


def kafka_source(options: Mapping[str, Any]) -> Any:
    """The KafkaSource a KAFKA source's catalog options declare (InvalidUsage if they can't)."""
    from timeshard.storage.kafka_source import KafkaSource

    def schema(side: str) -> pa.Schema | None:
        if options.get(f"{side}_format") != "json":  # text and bytes name their one column
            return None
        columns = options[f"{side}_columns"]
        return pa.schema([(str(n), pa.type_for_alias(str(t))) for n, t in columns])

    try:
        source = KafkaSource(
            str(options["name"]),
            str(options["bootstrap_servers"]),
            str(options["topic"]),
            value_format=str(options["value_format"]),
            value_schema=schema("value"),
            key_format=options.get("key_format"),
            key_schema=schema("key"),
            metadata=tuple(options.get("metadata", ())),
            group_id=f"{options['group_id']}-verify",  # verify commits nothing anyway
            from_earliest=False,  # the records the shard holds from offset 0, or a note
            value_avro_schema=options.get("value_avro_schema"),
            key_avro_schema=options.get("key_avro_schema"),
            schema_registry_url=options.get("schema_registry_url"),
            avro_schemas=(
                None
                if options.get("avro_schemas") is None
                else {int(i): str(schema) for i, schema in options["avro_schemas"].items()}
            ),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise InvalidUsage(f"cannot rebuild the KAFKA source from {dict(options)!r}: {e}") from e
    source.pin_recorded(options)  # its offsets are those of the topic the catalog recorded
    return source


def postgres_source(options: Mapping[str, Any]) -> Any:
    """The PostgresSource a POSTGRES source's catalog options declare, on its own slot.

    The slot is not created if it is gone. The catalog keeps no password:
    libpq takes it from ``PGPASSWORD`` or ``~/.pgpass``.
    """
    from timeshard.storage.postgres_source import PostgresSource

    try:
        source = PostgresSource(
            str(options["name"]),
            str(options["dsn"]),
            str(options["publication"]),
            slot=str(options["slot"]),
            tables=[str(t) for t in options["tables"]],
            create_slot=False,
        )
        source.pin_recorded(options)
        return source
    except (KeyError, TypeError, ValueError) as e:
        raise InvalidUsage(f"cannot rebuild the POSTGRES source from {dict(options)!r}: {e}") from e


def mysql_source(options: Mapping[str, Any]) -> Any:
    """The MySqlSource a MYSQL source's catalog options declare.

    The catalog keeps no password: the source takes it from ``MYSQL_PWD`` (as
    MySQL's own clients do) when set.
    """
    from timeshard.storage.mysql_source import MySqlSource

    try:
        url = str(options["url"])
        source = MySqlSource(str(options["name"]), url, tables=[str(t) for t in options["tables"]])
        source.pin_recorded(options)
        return source
    except (KeyError, TypeError, ValueError) as e:
        raise InvalidUsage(f"cannot rebuild the MYSQL source from {dict(options)!r}: {e}") from e


def replayable_source(definition: Mapping[str, Any]) -> Any:
    """The source a catalog definition declares, if its records can be read again.

    A FILE source (its retained files), the KEY VALUE generator (a pure
    function of its options), a KAFKA source (its topic, while retention
    keeps its records), a POSTGRES source (its tables now, rewound to its
    slot's position, then the slot's changes: see :func:`replay_floor`) and
    a MYSQL source (its tables now, rewound by the binlog to the remap's first
    binding, while the binlog holds it) can; InvalidUsage says why another
    cannot.
    """
    kind = definition.get("source_kind")
    options = definition.get("options") or {}
    if kind == "file":
        return file_source(options)
    if kind == "kafka":
        return kafka_source(options)
    if kind == "postgres":
        return postgres_source(options)
    if kind == "mysql":
        return mysql_source(options)
    if kind == "key_value":
        from timeshard.storage.sources import KeyValueGenerator

        try:
            return KeyValueGenerator(**options)
        except TypeError as e:
            raise InvalidUsage(f"cannot rebuild the KEY VALUE source from {options!r}: {e}") from e
    raise InvalidUsage(f"a {kind!r} source cannot be read again")


def remap_bindings(
    client: PersistClient, reader: UnleasedReader, upto: Timestamp
) -> list[tuple[Timestamp, SourceFrontier]]:
    """The bindings of a remap shard at times ``<= upto`` (times below since read as since)."""
    state = reader.state()
    tables = [
        read_part(client.location.blob, part, reader.schema, client.config)
        for part in parts_at(state, upto)
    ]
    if not tables:
        return []
    table = pa.concat_tables(tables)
    table = table.filter(pc.less_equal(table.column(TS), upto))
    if state.since.time is not None:
        table = advance_since(table, state.since.time)
    by_time: dict[int, list[dict[str, Any]]] = {}
    for r in table.to_pylist():
        by_time.setdefault(int(r[TS]), []).append(r)
    counts: Counter[tuple[str, int]] = Counter()
    out: list[tuple[Timestamp, SourceFrontier]] = []
    for t in sorted(by_time):
        for r in by_time[t]:
            counts[(str(r["partition"]), int(r["offset"]))] += int(r[DIFF])
        frontier: SourceFrontier = {}
        for (p, o), c in counts.items():
            if c > 0:
                frontier[p] = max(frontier.get(p, 0), o)
        out.append((t, dict(sorted(frontier.items()))))
    return out


def check_export_frontier(
    client: PersistClient, source: CatalogEntry, export: CatalogEntry, report: VerifyReport
) -> None:
    """The export's upper is not beyond its remap shard's upper (without Spark).

    Ingestion mints the bindings of a time before it writes the outputs up to
    it: at times at or beyond the remap's upper no binding says which records
    the export holds. The export's state is read first (the remap only
    advances).
    """
    upper = checked_upper(client, export.name, "export", report)
    remap = str(source.definition.get("remap"))
    if remap not in set(client.list_shards()):
        if upper.time != 0:
            message = f"its remap shard {remap!r} does not exist, yet its upper is {upper}"
            report.add(Finding(export.name, "frontiers", message))
        return
    bound = client.state(remap).upper
    if bound < upper:
        assert bound.time is not None
        report.add(
            Finding(
                export.name,
                "frontiers",
                f"the export's upper {upper} is beyond the upper {bound} of its remap shard "
                f"{remap!r}: its content from {bound.time} on is bound to no source record",
                time=bound.time,
            )
        )


def check_remap_bindings(client: PersistClient, shard_id: str, report: VerifyReport) -> None:
    """The bindings of remap shard ``shard_id`` are monotone in time: no partition's
    offset goes down from one binding to the next (bindings merged into the since
    are read as one, at the since). A part that cannot be read is noted: check 3
    reports it."""
    obj = report.object(shard_id, "remap")
    obj.checks.append("bindings")
    reader = client.open_unleased_reader(shard_id)
    for _ in range(3):
        state = reader.state()
        span = readable_range(state)
        if span is None:
            return
        try:
            bindings = remap_bindings(client, reader, span[1] - 1)
            break
        except PartError as e:  # collected meanwhile: the new state's parts, again
            if client.state(shard_id).seqno == state.seqno:
                obj.notes.append(f"bindings not checked: {e}")
                return
    else:
        obj.notes.append("bindings not checked: the state kept moving")
        return
    bound_at: dict[str, Timestamp] = {}
    previous: SourceFrontier = {}
    for t, frontier in bindings:
        back = [
            f"partition {p!r} from offset {o} (bound at {bound_at[p]}) to {frontier.get(p, 0)}"
            for p, o in sorted(previous.items())
            if frontier.get(p, 0) < o
        ]
        if back:
            report.add(
                Finding(
                    shard_id,
                    "bindings",
                    f"the bound frontier moves back at {t} (bindings are monotone in time): "
                    + ", ".join(back),
                    time=t,
                )
            )
        for p, o in frontier.items():
            if o != previous.get(p):
                bound_at[p] = t
        previous = frontier
        obj.checked("bindings", t)


def frontier_at(
    bindings: Sequence[tuple[Timestamp, SourceFrontier]], t: Timestamp
) -> SourceFrontier:
    """The source frontier bound at ``t`` (empty before the first binding)."""
    found: SourceFrontier = {}
    for bt, f in bindings:
        if bt > t:
            break
        found = f
    return dict(found)


def _retained(source: Any, end: SourceFrontier) -> str | None:
    """Why the upstream no longer holds ``[0, end)``, or None if it does (or it has none).

    Input files must still hold the bytes; a Kafka topic must still exist, be the topic
    the catalog recorded (not one made again under its name), and hold every offset
    from 0 (retention deletes the oldest).
    """
    from timeshard.storage.kafka_source import KafkaSource

    if isinstance(source, KafkaSource):
        ranges = {int(p): (0, hi) for p, hi in end.items() if hi > 0}
        try:
            # A topic made again holds other records at the offsets bound, however many.
            source._check_same_topic()
            source._check_retained(ranges)  # the source's own definition of "lost"
        except SourceUnavailable as e:
            return str(e).split(";")[0]
        return None
    if not hasattr(source, "path"):
        return None
    from timeshard.storage.file_source import file_offsets, fingerprints

    base = Path(source.path) if Path(source.path).is_dir() else Path(source.path).parent
    bound = fingerprints(end)
    for partition, offset in sorted(file_offsets(end).items()):
        path = base / partition
        if not path.is_file():
            return f"input file {str(path)!r} is gone"
        if path.stat().st_size < offset:
            return (
                f"input file {str(path)!r} holds {path.stat().st_size} bytes, fewer than {offset}"
            )
        fingerprint = bound.get(partition)
        if fingerprint is not None:
            with open(path, "rb") as f:
                if not fingerprint.holds(f):
                    return (
                        f"input file {str(path)!r} no longer holds the bytes bound from it "
                        f"before byte {fingerprint.offset} (it was rewritten)"
                    )
    return None


def replay_floor(source: Any) -> SourceFrontier:
    """The frontier from which ``source`` can tell the upstream's state: ``{}`` (all of it) but
    for a POSTGRES source, its slot's position ``C``.

    A POSTGRES source read from ``{}`` returns the tables' rows *now*, rewound
    to ``C`` by the slot's changes the read sees (at offset ``C - 1``), then
    the changes from ``C`` on: the upstream at every frontier at or beyond
    ``C``, and at none before it (the server released that WAL).
    """
    from timeshard.storage.postgres_source import PARTITION, PostgresSource

    if isinstance(source, PostgresSource):
        confirmed = source.confirmed_flush()
        if confirmed is None:
            raise InvalidUsage(f"the replication slot {source.slot!r} is gone")
        return {PARTITION: confirmed}
    return {}


def _covers(frontier: SourceFrontier, floor: SourceFrontier) -> bool:
    return all(frontier.get(p, 0) >= offset for p, offset in floor.items())


def read_input_files(spark: Any, source: Any, end: SourceFrontier) -> Any:
    """The records of ``[0, end)`` of each input file of FILE ``source``, read by this module.

    Columns ``_partition`` (the file's name), ``_offset``, the payload and
    ``_err``. The tasks read each file with plain Python, split its lines and
    compute their offsets themselves (:func:`framed_lines`); each line is
    decoded by :func:`~timeshard.storage.file_source.decode_line`, then by the
    source's avro stage if it has one (a plan; driver).
    """
    from timeshard.spark.session import arrow_to_spark_schema
    from timeshard.storage.file_source import file_offsets

    base = source.path if Path(source.path).is_dir() else Path(source.path).parent
    seeds = [(p, hi) for p, hi in sorted(file_offsets(end).items()) if hi > 0]
    fields = [
        pa.field("_partition", pa.string()),
        pa.field("_offset", pa.int64()),
        *source.line_schema,
        pa.field(ERR, pa.string()),
    ]
    spark_schema = arrow_to_spark_schema(pa.schema(fields))
    from timeshard.spark.sqltext import empty_frame

    if not seeds:
        return source.decode_lines(empty_frame(spark, spark_schema))
    task = _file_reader(
        str(base),
        source.format,
        source.line_schema.serialize().to_pybytes(),
        source.max_line_bytes,
    )
    files = spark.createDataFrame(seeds, "p string, hi long").repartition(len(seeds))
    return source.decode_lines(files.mapInArrow(task, spark_schema))


def _file_reader(base: str, fmt: str, line_schema_ipc: bytes, max_line_bytes: int) -> Any:
    """The task function of :func:`read_input_files` (executors)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from timeshard.storage.file_source import decode_line

        line_schema = pa.ipc.read_schema(pa.py_buffer(line_schema_ipc))
        out = pa.schema(
            [
                pa.field("_partition", pa.string()),
                pa.field("_offset", pa.int64()),
                *line_schema,
                pa.field(ERR, pa.string()),
            ]
        )
        for batch in batches:
            for seed in batch.to_pylist():
                name, hi = seed["p"], seed["hi"]
                rows: list[dict[str, Any]] = []
                with open(os.path.join(base, name), "rb") as f:
                    for offset, line, length in framed_lines(f, hi, max_line_bytes):
                        row = decode_line(
                            name, offset, line, length, fmt, line_schema, max_line_bytes
                        )
                        rows.append(row)
                        if len(rows) >= _BATCH_ROWS:
                            yield pa.RecordBatch.from_pylist(rows, schema=out)
                            rows = []
                if rows:
                    yield pa.RecordBatch.from_pylist(rows, schema=out)

    return run


def framed_lines(
    f: BinaryIO, end: int, max_line_bytes: int
) -> Iterator[tuple[int, bytes | None, int]]:
    """``(offset, line, length)`` of each line of ``f`` that starts before ``end``.

    ``line`` excludes the newline; it is None for a line longer than
    ``max_line_bytes``, which is measured without being kept. A last line
    without a newline (the file was rewritten) is reported as it is.
    """
    offset = 0
    while offset < end:
        head = f.readline(max_line_bytes + 1)
        if not head:
            return
        tail, length = head, len(head)
        while not tail.endswith(b"\n"):
            tail = f.readline(_CHUNK)
            if not tail:
                break
            length += len(tail)
        newline = int(tail.endswith(b"\n"))
        length -= newline
        yield offset, head[:length] if length <= max_line_bytes else None, length
        offset += length + newline


def binding_intervals(bindings: Sequence[tuple[Timestamp, SourceFrontier]]) -> Spans:
    """Per partition, where each binding (in time order) moved its frontier to, and when."""
    spans: Spans = {}
    for t, frontier in bindings:
        for p, hi in frontier.items():
            his, times = spans.setdefault(p, ([], []))
            if not his or hi > his[-1]:
                his.append(hi)
                times.append(t)
    return spans


def bound_time(spans: Spans, partition: str, offset: int) -> Timestamp | None:
    """The first bound time whose frontier is beyond ``(partition, offset)``; None if none is."""
    his, times = spans.get(partition, ([], []))
    i = bisect.bisect_right(his, offset)
    return times[i] if i < len(his) else None


def reclock_records(records: Any, bindings: Sequence[tuple[Timestamp, SourceFrontier]]) -> Any:
    """``records`` (``_partition``, ``_offset``, ...) with ``_bt``, their bound time.

    Records no binding covers are dropped. A ``mapInArrow`` whose tasks
    bisect the bindings (:func:`bound_time`); driver: builds the plan.
    """
    from pyspark.sql.types import LongType, StructField, StructType

    spans = binding_intervals(bindings)
    schema = StructType([*records.schema.fields, StructField(BOUND, LongType())])

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            places = zip(
                batch.column("_partition").to_pylist(),
                batch.column("_offset").to_pylist(),
                strict=True,
            )
            bound = pa.array([bound_time(spans, p, o) for p, o in places], pa.int64())
            yield batch.append_column(BOUND, bound).filter(pc.is_valid(bound))

    return records.mapInArrow(run, schema)


def command_order(record: Mapping[str, Any]) -> tuple[Timestamp, bytes, int]:
    """Where ``record`` stands among its key's commands: later wins.

    The documented order of a FILE source (:mod:`timeshard.storage.file_source`,
    "Order"): bound time, then the file's name as UTF-8 bytes, then offset.
    """
    return record[BOUND], record["_partition"].encode("utf-8"), record["_offset"]


def _state(
    record: Mapping[str, Any], values: Sequence[str], metadata: Sequence[str] = ()
) -> tuple[Any, ...] | None:
    """The key's row after ``record``: values then ``_err``; None if it deletes the key
    (every value but the ``metadata`` columns is null)."""
    if record[ERR] is not None:
        return (*(None for _ in values), record[ERR])
    if all(record[v] is None for v in values if v not in metadata):
        return None
    return (*(record[v] for v in values), None)


def last_values(
    records: Sequence[Mapping[str, Any]],
    values: Sequence[str],
    times: Sequence[Timestamp],
    collapsed: Timestamp | None,
    metadata: Sequence[str] = (),
) -> list[tuple[Timestamp, KeyState]]:
    """The state of one key at each of ``times``, after its ``records`` bound by then.

    ``records`` are the key's commands (``_partition``, ``_offset``, ``_bt``,
    the value columns, ``_err``; ``metadata`` among the values never makes a
    command a delete), in any order; the last by
    :func:`command_order` decides. Records bound at ``collapsed`` (the remap
    shard's since, into which compaction merged earlier bindings) were bound
    at times no longer known: there the last record of each file competes,
    and if they leave different states the key is AMBIGUOUS.
    """
    ordered = sorted(records, key=command_order)
    bound = [r[BOUND] for r in ordered]
    last_per_file = {r["_partition"]: r for r in ordered if r[BOUND] == collapsed}
    candidates: list[tuple[Any, ...] | None] = []
    for r in last_per_file.values():
        if _state(r, values, metadata) not in candidates:
            candidates.append(_state(r, values, metadata))
    out: list[tuple[Timestamp, KeyState]] = []
    for at in times:
        n = bisect.bisect_right(bound, at)
        if n and ordered[n - 1][BOUND] == collapsed and len(candidates) > 1:
            out.append((at, AMBIGUOUS))
        else:
            out.append((at, _state(ordered[n - 1], values, metadata) if n else None))
    return out


def upsert_model(
    spark: Any,
    records: Any,
    schema: pa.Schema,
    keys: Sequence[str],
    times: Sequence[Timestamp],
    collapsed: Timestamp | None,
    metadata: Sequence[str] = (),
) -> tuple[Any, Any]:
    """The upsert over bound ``records`` at each of ``times`` (rows tagged ``_at``).

    ``records`` have ``_partition``, ``_offset``, ``_bt``, the columns of
    ``schema`` and ``_err``. Per key, :func:`last_values` decides (Python, one
    key at a time after a shuffle by key); an unkeyed err record is an err
    row of its own from its time on. Returns ``(expected, ambiguous)``: the
    expected snapshots (data columns, ``_err``, ``_diff``) and the ``(_at,
    key)`` pairs that are AMBIGUOUS (left out of ``expected``).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

    from timeshard.spark.parts import column
    from timeshard.spark.session import spark_to_arrow_schema

    out_schema = StructType(
        [
            StructField(AT, LongType()),
            *[records.schema[c] for c in schema.names],
            StructField(ERR, StringType()),
            StructField(DIFF, LongType()),
            StructField(_AMBIGUOUS_COLUMN, BooleanType()),
        ]
    )
    task = _model_task(
        list(keys),
        [n for n in schema.names if n not in keys],
        sorted(times),
        collapsed,
        spark_to_arrow_schema(out_schema).serialize().to_pybytes(),
        tuple(metadata),
    )
    by_key = [column(k) for k in keys]
    rows = records.repartition(*by_key).sortWithinPartitions(*by_key).mapInArrow(task, out_schema)
    ambiguous = F.col(_AMBIGUOUS_COLUMN)
    expected = rows.where(~ambiguous).drop(_AMBIGUOUS_COLUMN)
    return expected, rows.where(ambiguous).select(F.col(AT), *by_key)


def _model_task(
    keys: list[str],
    values: list[str],
    times: list[Timestamp],
    collapsed: Timestamp | None,
    out_ipc: bytes,
    metadata: tuple[str, ...],
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The task function of :func:`upsert_model` (executors): rows sorted by key, in runs."""

    def expected_rows(run: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        commands = []
        for r in run:
            if r[ERR] is not None and all(r[k] is None for k in keys):  # unkeyed
                for at in times:
                    if at >= r[BOUND]:
                        yield {AT: at, ERR: r[ERR], DIFF: 1, _AMBIGUOUS_COLUMN: False}
            else:
                commands.append(r)
        key = {k: run[0][k] for k in keys}
        for at, state in last_values(commands, values, times, collapsed, metadata):
            if state is AMBIGUOUS:
                yield {AT: at, **key, DIFF: 0, _AMBIGUOUS_COLUMN: True}
            elif state is not None:
                row = dict(zip([*values, ERR], state, strict=True))
                yield {AT: at, **key, **row, DIFF: 1, _AMBIGUOUS_COLUMN: False}

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        out = pa.ipc.read_schema(pa.py_buffer(out_ipc))
        rows: list[dict[str, Any]] = []
        run: list[dict[str, Any]] = []
        for batch in batches:
            for r in batch.to_pylist():
                if run and any(r[k] != run[0][k] for k in keys):
                    rows.extend(expected_rows(run))
                    run = []
                    if len(rows) >= _BATCH_ROWS:
                        yield pa.RecordBatch.from_pylist(rows, schema=out)
                        rows = []
                run.append(r)
        if run:
            rows.extend(expected_rows(run))
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=out)

    return task


def _without_keys(df: Any, keys_df: Any, keys: Sequence[str]) -> Any:
    """``df`` without the rows whose key is in ``keys_df`` (keys compared null-safely)."""
    from pyspark.sql import functions as F

    from timeshard.spark.parts import column

    renamed = keys_df.select(*[column(k).alias(f"_vk{i}") for i, k in enumerate(keys)])
    cond = None
    for i, k in enumerate(keys):
        eq = df[k].eqNullSafe(F.col(f"_vk{i}"))
        cond = eq if cond is None else cond & eq
    return df.join(renamed, cond, "left_anti")


def check_replayed_export(
    spark: Any,
    client: PersistClient,
    source: CatalogEntry,
    export: CatalogEntry,
    report: VerifyReport,
) -> None:
    """Check 6: an export against its source's records, read again from upstream.

    UPSERT: the last value per key of the records bound by each sampled time.
    NONE: every record bound by then, at its ``_diff`` (1 if it has none).
    """
    from pyspark.sql import functions as F

    from timeshard.spark.snapshot import snapshot_df
    from timeshard.storage.file_source import FileSource

    upsert = export.definition.get("envelope") == "upsert"
    check = "upsert" if upsert else "records"
    obj = report.object(export.name, "upsert export" if upsert else "export")
    obj.checks.append(check)
    try:
        upstream = replayable_source(source.definition)
        floor = replay_floor(upstream)
    except (InvalidUsage, SourceUnavailable) as e:
        obj.notes.append(f"{check} not checked: {e}")
        return
    keys = [str(k) for k in export.definition.get("key_columns", ())]
    out = client.open_unleased_reader(export.name)
    remap = client.open_unleased_reader(str(source.definition["remap"]))
    out_state, remap_state = out.state(), remap.state()
    out_span, remap_span = readable_range(out_state), readable_range(remap_state)
    if out_span is None or remap_span is None:
        obj.notes.append(f"{check} not checked: the export or its remap shard has no readable time")
        return
    # An export beyond its remap's upper is check_export_frontier's finding.
    first, end = max(out_span[0], remap_span[0]), min(out_span[1], remap_span[1])
    if end <= first:
        obj.notes.append(f"{check} not checked: no time readable in both the export and its remap")
        return
    candidates = set(out.change_times(first, end)) | set(remap.change_times(first, end))
    last = end - 1 if end < MAX_TIMESTAMP else max([first, *candidates])
    rng = _rng(report.seed, export.name, check)
    times = sample_times(rng, candidates, first, last, report.samples)
    bindings = remap_bindings(client, remap, times[-1])
    bound = frontier_at(bindings, times[-1])
    why = _retained(upstream, bound)
    if why is not None:
        obj.notes.append(f"{check} not checked: {why}")
        return
    early = [t for t in times if not _covers(frontier_at(bindings, t), floor)]
    if early:
        obj.notes.append(
            f"{len(early)} of {len(times)} times not checked: bound before {floor}, "
            "which the upstream no longer holds"
        )
        times = [t for t in times if t not in early]
        if not times:
            return
    try:
        if isinstance(upstream, FileSource):
            read = read_input_files(spark, upstream, bound)
        elif getattr(upstream, "reads_from_origin", False):  # it snapshots at its first binding
            origin = next((f for _, f in bindings if f), {})
            read = upstream.read(spark, {}, bound, origin=origin)
        else:
            read = upstream.read(spark, {}, bound)
    except SourceUnavailable as e:  # e.g. a binlog purged since: the upstream cannot tell
        obj.notes.append(f"{check} not checked: {e}")
        return
    if isinstance(read, dict):  # a source with subsources
        read = read[str(export.definition.get("subsource", ""))]
    if ERR not in read.columns:  # a generator decodes nothing, so it has no errors
        read = read.withColumn(ERR, F.lit(None).cast("string"))
    records = reclock_records(read, bindings)
    got, gone = [], []
    for t in times:
        try:
            got.append(snapshot_df(spark, out, t).drop(TS).withColumn(AT, F.lit(t)))
        except SinceError:
            obj.notes.append(f"time {t} was compacted away during the check")
            gone.append(t)
    times = [t for t in times if t not in gone]  # expected at none of them
    if not got:
        return
    data = list(out.schema.names)
    if upsert:
        found = _upsert_differences(
            spark,
            records,
            out.schema,
            keys,
            times,
            remap_state,
            got,
            obj,
            metadata_columns(upstream),
        )
        what = "the export differs from the last value per key of its source's records"
    else:
        found = differences(_every_record(records, data, times), _union(got), data)
        what = "the export differs from its source's records"
    _report_differences(report, export.name, check, found, what)
    for t in times:
        obj.checked(check, t)


def _every_record(records: Any, data: Sequence[str], times: Sequence[Timestamp]) -> Any:
    """The NONE envelope's output at each of ``times`` (``_at``): every record bound by then."""
    from pyspark.sql import functions as F

    from timeshard.spark.parts import column

    diff = column(DIFF) if DIFF in records.columns else F.lit(1).cast("long")
    rows = records.select(*[column(c) for c in data], column(ERR), diff.alias(DIFF), column(BOUND))
    at = F.explode(F.array(*[F.lit(t).cast("long") for t in times])).alias(AT)
    return (
        rows.select("*", at)
        .where(column(BOUND) <= F.col(AT))
        .select(F.col(AT), *[column(c) for c in data], column(ERR), column(DIFF))
    )


def _upsert_differences(
    spark: Any,
    records: Any,
    schema: pa.Schema,
    keys: Sequence[str],
    times: Sequence[Timestamp],
    remap_state: Any,
    got: Sequence[Any],
    obj: Any,
    metadata: Sequence[str],
) -> Any:
    """The differences of an UPSERT export's snapshots ``got`` from :func:`upsert_model`."""
    collapsed = remap_state.since.time or None  # at since 0 no binding was merged
    expected, ambiguous = upsert_model(spark, records, schema, keys, times, collapsed, metadata)
    ambiguous = ambiguous.persist()
    try:
        for r in ambiguous.groupBy(AT).count().collect():
            obj.notes.append(
                f"{r['count']} keys whose last value is ambiguous between files at {r[AT]} "
                "were not compared"
            )
        return differences(
            expected, _without_keys(_union(got), ambiguous, [AT, *keys]), list(schema.names)
        )
    finally:
        ambiguous.unpersist()
