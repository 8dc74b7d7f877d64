"""Declaration files for ``timeshard run FILE``: sources and views in TOML.

    [location]
    dir = ".timeshard/mine"          # or blob = "...", consensus = "..."

    [[source]]
    name = "kv"
    kind = "key_value"               # key_value | counter | auction | tpch | file
    envelope = "upsert"              # none | upsert (upsert needs key_columns)
    key_columns = ["key"]
    options = { keys = 1000, rate = 200 }

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

    [[view]]
    name = "keys_per_prefix"
    inputs = { kv = "kv" }
    sql = "SELECT substr(value, 1, 1) AS p, count(*) AS n FROM kv GROUP BY p"
    refresh_every_ms = 5000          # optional

The file is validated with pydantic: an unknown field, kind, envelope or
column type is an InvalidUsage that names it. An ``avro`` FILE source takes
its columns from ``avro_schema`` (declare no ``columns``) and needs the
spark-avro jar: :func:`spark_packages` names the Maven packages the run's
SparkSession must load, spark-avro only when some source uses Avro.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from timeshard.errors import InvalidUsage

TYPES = {
    "int64": pa.int64(),
    "int32": pa.int32(),
    "float64": pa.float64(),
    "string": pa.string(),
    "bool": pa.bool_(),
    "binary": pa.binary(),
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LocationSpec(_Strict):
    dir: str | None = None
    blob: str | None = None
    consensus: str | None = None


class SourceSpec(_Strict):
    name: str
    kind: Literal["key_value", "counter", "auction", "tpch", "file"]
    envelope: Literal["none", "upsert"] = "none"
    key_columns: list[str] = Field(default_factory=list)
    options: dict[str, Any] = Field(default_factory=dict)
    columns: dict[str, str] = Field(default_factory=dict)


class ViewSpec(_Strict):
    name: str
    inputs: dict[str, str]
    sql: str
    refresh_every_ms: int | None = None


class RunSpec(_Strict):
    location: LocationSpec = LocationSpec(dir=".timeshard/run")
    source: list[SourceSpec] = Field(default_factory=list)
    view: list[ViewSpec] = Field(default_factory=list)


def load_spec(path: Path) -> RunSpec:
    """Parse and validate a declaration file; InvalidUsage names what is wrong."""
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise InvalidUsage(f"cannot read {str(path)!r}: {e}") from e
    try:
        return RunSpec.model_validate(raw)
    except ValidationError as e:
        raise InvalidUsage(f"invalid declaration file {str(path)!r}: {e}") from e


def spark_packages(spec: RunSpec) -> list[str]:
    """The Maven packages the SparkSession of ``spec`` needs (none for the defaults)."""
    if any(s.kind == "file" and s.options.get("format") == "avro" for s in spec.source):
        from timeshard.spark.session import spark_avro_package

        return [spark_avro_package()]
    return []


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
        unknown = [t for t in spec.columns.values() if t not in TYPES]
        if unknown:
            raise InvalidUsage(
                f"source {spec.name!r}: unknown column types {unknown}; use {sorted(TYPES)}"
            )
        schema = pa.schema([(c, TYPES[t]) for c, t in spec.columns.items()]) or None
        return FileSource(spec.name, opts.pop("path"), opts.pop("format"), schema, **opts)
    except (TypeError, KeyError) as e:
        raise InvalidUsage(f"source {spec.name!r}: bad options {spec.options}: {e}") from e


__all__ = ["RunSpec", "SourceSpec", "ViewSpec", "build_source", "load_spec", "spark_packages"]
