"""Declaration files for ``timeshard run FILE``: sources, views and exports in TOML.

The format -- ``[location]``, ``[spark]``, ``[[source]]`` of every kind,
``[[view]]``, ``[[export]]``, durations, column types, the Maven packages a
file needs -- is documented in ``docs/run-spec.md``, with a complete example;
``tests/unit/test_run_spec_doc.py`` loads every example there and checks the
page names every field, kind, option and type the models below accept.

The file is validated with pydantic: an unknown field, kind, envelope,
column type or duration is an InvalidUsage that names it, on one line.
:func:`check_spec` checks, without Spark, that every view reads a shard the
location holds or the declaration writes (a source ``s`` writes ``s`` or
``s.<subsource>``; a view writes its name), declared before the view, and
builds every source (:func:`build_source`) so that a bad option is reported
before anything runs. :func:`spark_packages` names the Maven packages the
run's SparkSession must load, each only when some source uses it.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from timeshard.errors import InvalidUsage
from timeshard.progress import MAX_TIMESTAMP

if TYPE_CHECKING:
    from timeshard.catalog import CatalogEntry

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
    ms = int(match[1]) * UNITS_MS[match[2]]
    if ms > MAX_TIMESTAMP:
        raise InvalidUsage(
            f"duration {text!r} is {ms} ms, beyond the longest timeshard keeps "
            f"({MAX_TIMESTAMP} ms, about 292 million years)"
        )
    return ms


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

    @field_validator("dir", "blob", "consensus")
    @classmethod
    def _not_empty(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError(f"must name a location, got {value!r} (leave it out for the default)")
        return value

    @model_validator(mode="after")
    def _one_location(self) -> LocationSpec:
        """A directory, or a blob and a consensus URI: one location, named one way."""
        given = {k: v for k, v in (("blob", self.blob), ("consensus", self.consensus)) if v}
        if self.dir is not None and given:
            uris = " and ".join(f"{k} {v!r}" for k, v in given.items())
            raise ValueError(
                f"dir {self.dir!r} and {uris} name two locations: give dir, or blob and "
                "consensus, not both"
            )
        if len(given) == 1:
            [(have, uri)] = given.items()
            lacking = "consensus" if have == "blob" else "blob"
            raise ValueError(
                f"{have} {uri!r} goes with {lacking}: give both, or neither (then dir names "
                "the location)"
            )
        return self


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
    refresh_every_ms: StrictInt | None = None


class ExportSpec(_Strict):
    name: str
    kind: Literal["kafka", "postgres", "delta"]
    input: str
    envelope: Literal["upsert", "debezium", "append"] = "upsert"
    key_columns: list[str] = Field(default_factory=list)
    version: StrictInt = 1
    options: dict[str, Any] = Field(default_factory=dict)


#: The load generators' kinds: their columns are their own.
GENERATORS = ("key_value", "counter", "auction", "tpch")
#: The source kinds that write several shards (``<name>.<subsource>``), with no envelope.
SEVERAL_OUTPUTS = ("auction", "tpch")
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
        raw = tomllib.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:  # TOML is UTF-8
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


def check_spec(
    spec: RunSpec, existing: Collection[str], catalog: Sequence[CatalogEntry] = ()
) -> None:
    """Check, without Spark, what :func:`load_spec` cannot see alone.

    Every source's options are checked (by building it), and every view input
    must be a shard in ``existing`` (the location's) or one the declaration
    writes before the view: a source's outputs, or an earlier view.
    InvalidUsage names the view, the input and the shards it could read.
    Every shard the declaration writes must be one no other object of
    ``catalog`` (the location's entries) writes (:func:`check_new_shard_owner`).
    """
    from timeshard.compute import ViewDefinition
    from timeshard.controller import spec_shard_writers
    from timeshard.storage.delta_export import DeltaExport
    from timeshard.storage.export import ShardExport
    from timeshard.storage.kafka_export import KafkaExport
    from timeshard.storage.postgres_export import PostgresExport

    for source in spec.source:
        if source.envelope == "upsert" and not source.key_columns:
            raise InvalidUsage(f"source {source.name!r}: envelope 'upsert' needs key_columns")
        if source.kind in SEVERAL_OUTPUTS and (source.envelope != "none" or source.key_columns):
            raise InvalidUsage(
                f"source {source.name!r}: kind {source.kind!r} writes several shards and "
                "takes no envelope or key_columns"
            )
        if source.key_columns and source.envelope != "upsert":
            raise InvalidUsage(
                f"source {source.name!r}: key_columns {source.key_columns} go with envelope "
                f"'upsert' only, and the envelope is {source.envelope!r}"
            )
        if source.kind in GENERATORS and source.columns:
            raise InvalidUsage(
                f"source {source.name!r}: a {source.kind} generator makes its own columns; "
                f"declare no columns (got {source.columns})"
            )
    for view in spec.view:
        if view.refresh_every_ms is not None and view.refresh_every_ms <= 0:
            raise InvalidUsage(
                f"view {view.name!r}: refresh_every_ms must be positive, "
                f"got {view.refresh_every_ms}"
            )
        ViewDefinition(view.name, view.inputs, view.sql)  # its aliases, say
    exports: dict[str, type[ShardExport]] = {
        "kafka": KafkaExport,
        "postgres": PostgresExport,
        "delta": DeltaExport,
    }
    check_options: dict[str, Callable[..., None]] = {
        "kafka": KafkaExport.check_options,
        "postgres": PostgresExport.check_options,
        "delta": DeltaExport.check_options,
    }
    for export in spec.export:
        try:
            exports[export.kind].check_declared(
                envelope=export.envelope,
                key_columns=export.key_columns,
                export_id=export.name,
                version=export.version,
            )
        except InvalidUsage as e:
            raise InvalidUsage(f"export {export.name!r}: {e}") from e
    built = [build_source(checked_only(s)) for s in spec.source]  # checks their options
    for source, made in zip(spec.source, built, strict=True):
        if source.envelope == "upsert":
            _check_keys(source, made)
    views = [v.name for v in spec.view]
    writers = spec_shard_writers(spec, built)
    check_spec_writers(spec, writers, shard_owners(catalog))
    sources = [shard for shard, _ in writers][: -len(views) or None]
    readable = set(existing) | set(sources)
    for i, view in enumerate(spec.view):
        for shard in view.inputs.values():
            if shard == view.name:
                raise InvalidUsage(f"view {view.name!r} reads its own shard")
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
    # Health is kept by object name: an export named like another object overwrites its.
    objects = {shard: f"the shard {shard!r} of the location" for shard in existing}
    objects |= {shard: writer for shard, writer in writers}
    objects |= {s.name: f"source {s.name!r}" for s in spec.source}
    for export in spec.export:
        if names.count(export.name) > 1:
            raise InvalidUsage(f"export name {export.name!r} is declared twice")
        if export.name in objects:
            raise InvalidUsage(
                f"export {export.name!r} is named like {objects[export.name]}: health and "
                "status are kept by name, and one would overwrite the other's; rename the export"
            )
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
        try:  # each target's values (each constructor checks its own with it first)
            check_options[export.kind](**export.options)
        except InvalidUsage as e:
            raise InvalidUsage(f"export {export.name!r}: {e}") from e
    targets: dict[tuple[Any, ...], str] = {}
    for export in spec.export:  # two exports' progress and rows in one table overwrite
        target = export_target(export.kind, export.options)
        if target is not None and target in targets:
            raise InvalidUsage(
                f"exports {targets[target]!r} and {export.name!r} write the same table: "
                "each would overwrite the other's rows"
            )
        if target is not None:
            targets[target] = export.name


def _check_keys(source: SourceSpec, built: Any) -> None:
    """The ``key_columns`` of an UPSERT source (``built``) are distinct columns of its
    output, which has a value column besides them (and its metadata): InvalidUsage names
    them."""
    from timeshard.persist._internal.parts import DIFF
    from timeshard.storage.sources import metadata_columns

    names = [f.name for f in built.payload_schema() if f.name != DIFF]
    keys = source.key_columns
    unknown = [k for k in keys if k not in names]
    if unknown:
        raise InvalidUsage(
            f"source {source.name!r}: key_columns {unknown} are not columns of its output, "
            f"which has {names}"
        )
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise InvalidUsage(f"source {source.name!r}: key_columns name {repeated} twice")
    if set(names) <= {*keys, *metadata_columns(built)}:
        raise InvalidUsage(
            f"source {source.name!r}: its output {names} has no value column besides its "
            f"key_columns {keys} (and metadata): every command would read as a delete; "
            "use the envelope 'none'"
        )


#: Names a location keeps for itself: the catalog, the status collection, and the
#: introspection relation of ``timeshard serve``. No source or view is called one.
SYSTEM_NAMES = ("timeshard_catalog", "timeshard_status", "timeshard_objects")


def shard_writer(kind: str, name: str) -> str:
    """How the object that writes a shard is named in messages and in :func:`shard_owners`:
    ``source 'a'`` (kind ``source``, its outputs), ``source 'a' (its remap)`` (kind
    ``remap``) or ``view 'v'`` (kind ``view``)."""
    if kind == "remap":
        return f"source {name!r} (its remap)"
    if kind not in ("source", "view"):
        raise InvalidUsage(f"a shard writer is a 'source', 'remap' or 'view', got {kind!r}")
    return f"{kind} {name!r}"


def shard_owners(catalog: Sequence[CatalogEntry]) -> dict[str, str]:
    """Every shard the objects of ``catalog`` write, to its writer (:func:`shard_writer`):
    a view its shard, a source its outputs (its ``export`` entries) and its remap."""
    owners: dict[str, str] = {}
    for entry in catalog:
        if entry.kind == "view":
            owners[entry.name] = shard_writer("view", entry.name)
        elif entry.kind == "export" and isinstance(entry.definition.get("source"), str):
            owners[entry.name] = shard_writer("source", entry.definition["source"])
        elif entry.kind == "source" and isinstance(entry.definition.get("remap"), str):
            owners[entry.definition["remap"]] = shard_writer("remap", entry.name)
    return owners


def check_new_shard_owner(shard: str, writer: str, owners: Mapping[str, str]) -> None:
    """Refuse ``writer`` (:func:`shard_writer`) the shard ``shard`` unless it may write it.

    ``shard`` must be a valid shard id and none of :data:`SYSTEM_NAMES`; a view's
    shard must not be named like a source's remap (``<name>.remap``); and no other
    object of ``owners`` (:func:`shard_owners` of the location's catalog) writes it:
    a view over a source's shard would rewrite the source's rows with its own, a
    source writing a view's shard would mix its records into the view's.
    InvalidUsage names the shard and its owner.
    """
    from timeshard.persist.client import check_shard_id

    check_shard_id(shard)
    if shard in SYSTEM_NAMES:
        raise InvalidUsage(
            f"{writer} would write {shard!r}, the location's own shard or relation "
            f"(one of {list(SYSTEM_NAMES)}): choose another name"
        )
    if writer.startswith("view ") and shard.endswith(".remap"):
        raise InvalidUsage(
            f"{writer} would write {shard!r}, the name of the remap shard of a source "
            f"{shard.removesuffix('.remap')!r}: choose another name"
        )
    owner = owners.get(shard)
    if owner is not None and owner != writer:
        raise InvalidUsage(
            f"{writer} would write the shard {shard!r}, which {owner} writes (so the "
            "location's catalog records): choose another name, or drop that object first"
        )


def checked_only(source: SourceSpec) -> SourceSpec:
    """``source`` as :func:`check_spec` builds it: a POSTGRES source without creating its
    replication slot (a declaration refused later must leave nothing upstream holding
    WAL; the build that runs it creates the slot)."""
    if source.kind != "postgres" or "create_slot" in source.options:
        return source
    return source.model_copy(update={"options": {**source.options, "create_slot": False}})


def check_spec_writers(
    spec: RunSpec, writers: Sequence[tuple[str, str]], recorded: Mapping[str, str]
) -> None:
    """Every shard the declaration writes (``writers``: shard, what writes it; and each
    source's remap) passes :func:`check_new_shard_owner` against the objects
    ``recorded`` (the catalog's), and no two objects of the declaration write one."""
    remaps = [(f"{s.name}.remap", shard_writer("remap", s.name)) for s in spec.source]
    owners: dict[str, str] = {}
    for shard, writer in [*writers, *remaps]:
        check_new_shard_owner(shard, writer, recorded)
        if shard in owners:
            raise InvalidUsage(f"{owners[shard]} and {writer} would both write the shard {shard!r}")
        owners[shard] = writer


def export_target(kind: str, options: dict[str, Any]) -> tuple[Any, ...] | None:
    """The table an export of ``kind`` writes, to tell two exports of one table (None for a
    Kafka topic, which several exports may share).

    Spelled one way whatever the declaration's spelling: a DSN as the server and
    database it names (host, port, dbname; the user and options do not change
    the table), a Delta table as its absolute URI without a trailing ``/`` (a
    local path and its ``file://`` URI alike).
    """
    if kind == "postgres":
        server = _dsn_server(str(options["dsn"]))
        return ("postgres", server, options.get("schema", "public"), options["table"])
    if kind == "delta":
        return ("delta", _table_uri(str(options["table_uri"])))
    return None


def _dsn_server(dsn: str) -> tuple[str, ...]:
    """The hosts, ports and database of a libpq DSN (libpq's defaults where it names none)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return (dsn,)  # the export refuses it when it is built
    host = str(params.get("host") or params.get("hostaddr") or "")
    port = str(params.get("port") or "5432")
    user = str(params.get("user") or "")
    return (host, port, str(params.get("dbname") or user))


def _table_uri(uri: str) -> str:
    """A Delta table URI or path as one spelling: an absolute local path for ``file:``
    URIs and paths, the URI otherwise; no trailing ``/``."""
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(uri)
    if parts.scheme in ("", "file"):
        path = unquote(parts.path) if parts.scheme == "file" else uri
        return os.path.normpath(os.path.abspath(os.path.expanduser(path)))
    return uri.rstrip("/")


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
    """The source object a spec declares; InvalidUsage, naming the source, for a bad option."""
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
    except InvalidUsage as e:  # a source class's own check: say which source it is
        if str(e).startswith(f"source {spec.name!r}"):
            raise
        raise InvalidUsage(f"source {spec.name!r}: {e}") from e


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
            # One spelling per id: "01" beside "1" would name id 1 twice, the later winning.
            text = str(k) if isinstance(k, int) and not isinstance(k, bool) else k
            if not isinstance(text, str) or not re.fullmatch(r"0|[1-9][0-9]*", text):
                raise InvalidUsage(
                    f"source {spec.name!r}: schemas keys must be schema ids written as "
                    f"decimal numbers without leading zeros (0, 1, ...), got {k!r}"
                )
            if int(text) in ids:
                raise InvalidUsage(f"source {spec.name!r}: schemas names schema id {k!r} twice")
            ids[int(text)] = _schema_file(spec.name, f"schemas.{k}", path)
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
    "SYSTEM_NAMES",
    "ExportSpec",
    "RunSpec",
    "SourceSpec",
    "SparkSpec",
    "ViewSpec",
    "build_source",
    "check_new_shard_owner",
    "check_spec",
    "check_spec_writers",
    "format_duration",
    "load_spec",
    "parse_duration",
    "shard_owners",
    "shard_writer",
    "spark_packages",
]
