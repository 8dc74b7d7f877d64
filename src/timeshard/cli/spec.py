"""Declaration files for ``timeshard run FILE``: sources and views in TOML.

    [location]
    dir = ".timeshard/mine"          # or blob = "...", consensus = "..."
                                     # e.g. blob = "s3a://bucket/prefix" (AWS_* environment),
                                     # consensus = "postgresql://user@host/db"

    [spark]                          # optional: where the run's Spark runs
    master = "spark://10.0.0.5:7077" # default local[2]
    conf = { "spark.executor.memory" = "2g" }

    [[source]]
    name = "kv"
    kind = "key_value"     # key_value | counter | auction | tpch | file | kafka | postgres | mysql
    envelope = "upsert"              # none | upsert (upsert needs key_columns)
    key_columns = ["key"]
    options = { keys = 1000, rate = 200 }
    retain_history = "1h"            # optional: 500ms | 30s | 15m | 1h | 1d

    [[source]]
    name = "events"
    kind = "file"
    options = { path = "/data/in", format = "json" }
    columns = { id = "int64", name = "string" }

    [[source]]
    name = "readings"
    kind = "file"                    # one base64 Avro binary datum per line
    options = { path = "/data/avro", format = "avro", avro_schema = '''
      {"type": "record", "name": "Reading", "fields": [
        {"name": "id", "type": "long"}, {"name": "v", "type": ["null", "double"]}]}''' }

    [[source]]
    name = "orders"
    kind = "kafka"                   # one topic; needs Spark's Kafka connector
    envelope = "upsert"              # keyed on the Kafka key; a null value deletes
    key_columns = ["id"]
    options = { bootstrap_servers = "127.0.0.1:9092", topic = "orders",
                key_format = "json", key_schema = { id = "int64" },
                value_format = "json", metadata = ["timestamp"] }
    columns = { status = "string", total = "float64" }   # the JSON value's columns

    [[source]]
    name = "payments"
    kind = "kafka"                   # Avro key and value; needs spark-avro too
    options = { bootstrap_servers = "127.0.0.1:9092", topic = "payments",
                key_format = "avro", key_schema_file = "schemas/payment_key.avsc",
                value_format = "avro", value_schema_file = "schemas/payment.avsc",
                schema_registry_url = "http://127.0.0.1:8081" }
                                     # optional: records in the Confluent wire format,
                                     # writer schemas by id from the registry; or
                                     # schemas = { 1 = "v1.avsc", 2 = "v2.avsc" }

    [[source]]
    name = "shop"
    kind = "postgres"                # logical replication of a publication's tables
    options = { dsn = "postgresql://repl@db/shop", publication = "shop_pub",
                tables = ["orders", "sales.items"] }   # optional; slot = "..." too
                                     # writes shop.orders, shop.sales.items (with _diff)

    [[source]]
    name = "legacy"
    kind = "mysql"                   # a MariaDB database's tables, by its GTID binlog
    options = { url = "mysql://repl:secret@db:3306/legacy", tables = ["users"] }
                                     # tables optional; writes legacy.users (with _diff)

    [[view]]
    name = "keys_per_prefix"
    inputs = { kv = "kv" }
    sql = "SELECT substr(value, 1, 1) AS p, count(*) AS n FROM kv GROUP BY p"
    refresh_every_ms = 5000          # optional
    retain_history = "15m"           # optional

    [[export]]
    name = "prefixes-out"            # the export's id (its progress record's key)
    kind = "kafka"                   # exactly once: progress in the target, one transaction
    input = "keys_per_prefix"        # any source output, view or shard
    envelope = "upsert"              # upsert | debezium
    key_columns = ["p"]
    version = 1                      # a higher version fences the older exports
    options = { bootstrap_servers = "127.0.0.1:9092", topic = "prefixes" }
                                     # format = "avro" (default "json"), and optionally
                                     # key_schema_id / value_schema_id: the wire format

    [[export]]
    name = "kv-table"
    kind = "postgres"                # the table is the shard's snapshot; progress row alongside
    input = "kv"
    key_columns = ["key"]
    options = { dsn = "postgresql://app@db/app", table = "kv", schema = "public" }

The file is validated with pydantic: an unknown field, kind, envelope,
column type or duration is an InvalidUsage that names it, on one line.
:func:`check_spec` checks, without Spark, that every view reads a shard the
location holds or the declaration writes (a source ``s`` writes ``s`` or
``s.<subsource>``; a view writes its name), declared before the view.

An ``[[export]]`` sends a source output, a view or any shard of the
location to Kafka, a PostgreSQL table or a Delta table, exactly once
(:class:`~timeshard.storage.kafka_export.KafkaExport`,
:class:`~timeshard.storage.postgres_export.PostgresExport`,
:class:`~timeshard.storage.delta_export.DeltaExport`, whose ``envelope`` is
``upsert`` or ``append`` and whose option is ``table_uri``); its ``name`` is
its id, under which its progress is recorded in the target.

``retain_history`` keeps that much history of a source's outputs or a view
readable: ``AS OF`` and ``subscribe --from`` reach back that far. Durations
are a whole number and a unit, ``ms``, ``s``, ``m``, ``h`` or ``d``.

An ``avro`` FILE source takes its columns from ``avro_schema`` (declare no
``columns``) and needs the spark-avro jar, a ``kafka`` source Spark's Kafka
connector: :func:`spark_packages` names the Maven packages the run's
SparkSession must load, each only when some source uses it. A ``kafka``
source's ``columns`` are its JSON value's; ``options.key_schema`` declares a
JSON key's columns (:class:`~timeshard.storage.kafka_source.KafkaSource`).
A ``kafka`` source's ``avro`` key or value takes its columns from the Avro
record schema in ``key_schema_file`` / ``value_schema_file`` (the reader
schema; declare no ``columns``), read when the source is built; paths are
relative to the working directory. Records are bare Avro datums written
with that schema, unless ``schema_registry_url`` or ``schemas`` (schema id
to schema file, for producers whose registry is out of reach) says they are
in the Confluent wire format; then each is decoded with its own writer
schema into the reader schema.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Collection
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from timeshard.errors import InvalidUsage

TYPES = {
    "int64": pa.int64(),
    "int32": pa.int32(),
    "float64": pa.float64(),
    "string": pa.string(),
    "bool": pa.bool_(),
    "binary": pa.binary(),
}


#: The location every command uses unless told otherwise (``--location``, ``[location]``).
DEFAULT_DIR = ".timeshard"
UNITS_MS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1_000, "ms": 1}
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d)")


def parse_duration(text: str) -> int:
    """Milliseconds of a duration like ``500ms``, ``30s``, ``15m``, ``1h`` or ``1d``."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise InvalidUsage(
            f"invalid duration {text!r}: use a whole number and a unit, one of {list(UNITS_MS)}"
        )
    return int(match[1]) * UNITS_MS[match[2]]


def format_duration(ms: int) -> str:
    """``ms`` in the largest unit that divides it exactly (``parse_duration``'s inverse)."""
    if ms == 0:
        return "0s"
    unit = next(u for u, size in UNITS_MS.items() if ms % size == 0)
    return f"{ms // UNITS_MS[unit]}{unit}"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Retains(_Strict):
    retain_history: str | None = None

    @field_validator("retain_history")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None:
            parse_duration(value)
        return value

    @property
    def retain_history_ms(self) -> int | None:
        """``retain_history`` in milliseconds, or None if it is not declared."""
        return None if self.retain_history is None else parse_duration(self.retain_history)


class LocationSpec(_Strict):
    dir: str | None = None
    blob: str | None = None
    consensus: str | None = None


class SparkSpec(_Strict):
    master: str = "local[2]"
    conf: dict[str, str] = Field(default_factory=dict)


class SourceSpec(_Retains):
    name: str
    kind: Literal["key_value", "counter", "auction", "tpch", "file", "kafka", "postgres", "mysql"]
    envelope: Literal["none", "upsert"] = "none"
    key_columns: list[str] = Field(default_factory=list)
    options: dict[str, Any] = Field(default_factory=dict)
    columns: dict[str, str] = Field(default_factory=dict)


class ViewSpec(_Retains):
    name: str
    inputs: dict[str, str]
    sql: str
    refresh_every_ms: int | None = None


class ExportSpec(_Strict):
    name: str
    kind: Literal["kafka", "postgres", "delta"]
    input: str
    envelope: Literal["upsert", "debezium", "append"] = "upsert"
    key_columns: list[str] = Field(default_factory=list)
    version: int = 1
    options: dict[str, Any] = Field(default_factory=dict)


#: An export's options by kind: (needed, optional).
EXPORT_OPTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "kafka": (
        ("bootstrap_servers", "topic"),
        ("progress_topic", "format", "key_schema_id", "value_schema_id"),
    ),
    "postgres": (("dsn", "table"), ("schema",)),
    "delta": (("table_uri",), ()),
}


class RunSpec(_Strict):
    location: LocationSpec = LocationSpec(dir=DEFAULT_DIR)
    spark: SparkSpec = SparkSpec()
    source: list[SourceSpec] = Field(default_factory=list)
    view: list[ViewSpec] = Field(default_factory=list)
    export: list[ExportSpec] = Field(default_factory=list)


def load_spec(path: Path) -> RunSpec:
    """Parse and validate a declaration file; InvalidUsage names what is wrong."""
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise InvalidUsage(f"cannot read {str(path)!r}: {e}") from e
    try:
        return RunSpec.model_validate(raw)
    except ValidationError as e:
        raise InvalidUsage(f"invalid declaration file {str(path)!r}: {_one_line(e)}") from e


def _one_line(error: ValidationError) -> str:
    """Each problem as ``where: what (got value)``, joined on one line."""
    problems = []
    for p in error.errors():
        where = ".".join(str(part) for part in p["loc"])
        what = p["msg"].removeprefix("Value error, ")
        got = f" (got {p['input']!r})" if p["type"] not in ("missing", "value_error") else ""
        problems.append(f"{where}: {what}{got}")
    return "; ".join(problems)


def check_spec(spec: RunSpec, existing: Collection[str]) -> None:
    """Check, without Spark, what :func:`load_spec` cannot see alone.

    Every source's options are checked (by building it), and every view input
    must be a shard in ``existing`` (the location's) or one the declaration
    writes before the view: a source's outputs, or an earlier view.
    InvalidUsage names the view, the input and the shards it could read.
    """
    from timeshard.controller import spec_shards

    views = [v.name for v in spec.view]
    sources = spec_shards(spec)[: -len(views) or None]
    readable = set(existing) | set(sources)
    for i, view in enumerate(spec.view):
        for shard in view.inputs.values():
            if shard in readable:
                continue
            if shard in views[i:]:
                raise InvalidUsage(
                    f"view {view.name!r} reads {shard!r}, which is declared after it; "
                    f"declare {shard!r} first"
                )
            raise InvalidUsage(
                f"view {view.name!r} reads {shard!r}, which neither the location nor the "
                f"declaration has; it can read {sorted(readable)}"
            )
        readable.add(view.name)
    names = [e.name for e in spec.export]
    for export in spec.export:
        if names.count(export.name) > 1:
            raise InvalidUsage(f"export name {export.name!r} is declared twice")
        if export.input not in readable:
            raise InvalidUsage(
                f"export {export.name!r} reads {export.input!r}, which neither the location "
                f"nor the declaration has; it can read {sorted(readable)}"
            )
        needed, optional = EXPORT_OPTIONS[export.kind]
        missing = [k for k in needed if k not in export.options]
        unknown = sorted(set(export.options) - set(needed) - set(optional))
        if missing or unknown:
            raise InvalidUsage(
                f"export {export.name!r}: a {export.kind} export's options need {list(needed)} "
                f"and may have {list(optional)}; missing {missing}, unknown {unknown}"
            )


def spark_packages(spec: RunSpec) -> list[str]:
    """The Maven packages the SparkSession of ``spec`` needs (none for the defaults)."""
    from timeshard.spark.session import spark_avro_package, spark_kafka_package

    packages = []
    if any(_uses_avro(s) for s in spec.source):
        packages.append(spark_avro_package())
    if any(s.kind == "kafka" for s in spec.source):
        packages.append(spark_kafka_package())
    return packages


def _uses_avro(source: SourceSpec) -> bool:
    if source.kind == "file":
        return bool(source.options.get("format") == "avro")
    formats = (source.options.get("key_format"), source.options.get("value_format"))
    return source.kind == "kafka" and "avro" in formats


def build_source(spec: SourceSpec) -> Any:
    """The source object a spec declares."""
    from timeshard.storage.file_source import FileSource
    from timeshard.storage.sources import AuctionGenerator, CounterGenerator, KeyValueGenerator
    from timeshard.storage.tpch import TpchGenerator

    opts = dict(spec.options)
    try:
        if spec.kind == "key_value":
            return KeyValueGenerator(name=spec.name, **opts)
        if spec.kind == "counter":
            return CounterGenerator(name=spec.name, **opts)
        if spec.kind == "auction":
            return AuctionGenerator(name=spec.name, **opts)
        if spec.kind == "tpch":  # options: scale_factor, tick_orders, seed
            return TpchGenerator(name=spec.name, **opts)
        if spec.kind in ("postgres", "mysql") and (spec.columns or spec.envelope != "none"):
            raise InvalidUsage(
                f"source {spec.name!r}: a {spec.kind} source takes its tables' columns and "
                "the changes' own diffs: declare no columns and no envelope"
            )
        if spec.kind == "postgres":  # options: dsn, publication, slot, tables
            from timeshard.storage.postgres_source import PostgresSource

            return PostgresSource(spec.name, opts.pop("dsn"), opts.pop("publication"), **opts)
        if spec.kind == "mysql":  # options: url, tables, connect_timeout_s
            from timeshard.storage.mysql_source import MySqlSource

            return MySqlSource(spec.name, opts.pop("url"), **opts)
        unknown = [t for t in spec.columns.values() if t not in TYPES]
        if unknown:
            raise InvalidUsage(
                f"source {spec.name!r}: unknown column types {unknown}; use {sorted(TYPES)}"
            )
        schema = pa.schema([(c, TYPES[t]) for c, t in spec.columns.items()]) or None
        if spec.kind == "kafka":
            return _kafka_source(spec, opts, schema)
        return FileSource(spec.name, opts.pop("path"), opts.pop("format"), schema, **opts)
    except (TypeError, KeyError) as e:
        raise InvalidUsage(f"source {spec.name!r}: bad options {spec.options}: {e}") from e


def _kafka_source(spec: SourceSpec, opts: dict[str, Any], schema: pa.Schema | None) -> Any:
    from timeshard.storage.kafka_source import KafkaSource

    key_types = opts.pop("key_schema", None)
    key_schema = None
    if key_types is not None:
        if not isinstance(key_types, dict) or any(t not in TYPES for t in key_types.values()):
            raise InvalidUsage(
                f"source {spec.name!r}: key_schema must map columns to {sorted(TYPES)}, "
                f"got {key_types!r}"
            )
        key_schema = pa.schema([(c, TYPES[t]) for c, t in key_types.items()])
    for side in ("key", "value"):
        path = opts.pop(f"{side}_schema_file", None)
        if path is not None:
            opts[f"{side}_avro_schema"] = _schema_file(spec.name, f"{side}_schema_file", path)
    files = opts.pop("schemas", None)
    if files is not None:
        if not isinstance(files, dict) or not files:
            raise InvalidUsage(
                f"source {spec.name!r}: schemas must map schema ids to Avro schema files, "
                f"got {files!r}"
            )
        ids = {}
        for k, path in files.items():
            if not str(k).isdigit():
                raise InvalidUsage(
                    f"source {spec.name!r}: schemas keys must be schema ids (0, 1, ...), got {k!r}"
                )
            ids[int(k)] = _schema_file(spec.name, f"schemas.{k}", path)
        opts["avro_schemas"] = ids
    return KafkaSource(
        spec.name,
        opts.pop("bootstrap_servers"),
        opts.pop("topic"),
        value_schema=schema,
        key_schema=key_schema,
        **opts,
    )


def _schema_file(source: str, option: str, path: Any) -> str:
    """The text of an Avro schema file named by ``option`` of ``source``."""
    if not isinstance(path, str) or not path:
        raise InvalidUsage(f"source {source!r}: {option} must be a file path, got {path!r}")
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidUsage(f"source {source!r}: {option} {path!r} cannot be read: {e}") from None


__all__ = [
    "DEFAULT_DIR",
    "ExportSpec",
    "RunSpec",
    "SourceSpec",
    "SparkSpec",
    "ViewSpec",
    "build_source",
    "check_spec",
    "format_duration",
    "load_spec",
    "parse_duration",
    "spark_packages",
]
