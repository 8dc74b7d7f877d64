"""docs/run-spec.md stays true to the declaration file's code (no Spark, no servers).

Every ```toml block of the page is a whole declaration file: it loads with
``load_spec`` and passes ``check_spec`` (POSTGRES and MYSQL sources are
replaced by stand-ins that take the real constructors' arguments, and the
Avro schema files the blocks name are written to a temporary directory).
The page documents exactly what the models accept: every field of every
model, every source and export kind, every column type, envelope and
duration unit, and, per kind, exactly the options the code takes, with the
code's required options and defaults.
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pydantic import BaseModel

from timeshard.spec import (
    EXPORT_OPTIONS,
    TYPES,
    UNITS_MS,
    ExportSpec,
    LocationSpec,
    RunSpec,
    SourceSpec,
    SparkSpec,
    ViewSpec,
    check_spec,
    load_spec,
)
from timeshard.storage import file_source, kafka_export, kafka_source
from timeshard.storage.delta_export import DeltaExport
from timeshard.storage.file_source import FileSource
from timeshard.storage.kafka_export import KafkaExport
from timeshard.storage.kafka_source import KafkaSource
from timeshard.storage.mysql_source import MySqlSource
from timeshard.storage.postgres_export import PostgresExport
from timeshard.storage.postgres_source import PostgresSource
from timeshard.storage.sources import AuctionGenerator, CounterGenerator, KeyValueGenerator
from timeshard.storage.tpch import TpchGenerator

PAGE = Path(__file__).resolve().parents[2] / "docs" / "run-spec.md"
TEXT = PAGE.read_text()
BLOCKS = re.findall(r"^```toml\n(.*?)^```$", TEXT, flags=re.MULTILINE | re.DOTALL)
#: The page without its fenced blocks (whose ``#`` lines are not headings).
PROSE = re.sub(r"^```.*?^```$", "", TEXT, flags=re.MULTILINE | re.DOTALL)

#: The section of the page that documents each table of the file.
SECTIONS: dict[str, type[BaseModel]] = {
    "`[location]`": LocationSpec,
    "`[spark]`": SparkSpec,
    "`[[source]]`": SourceSpec,
    "`[[view]]`": ViewSpec,
    "`[[export]]`": ExportSpec,
}
SOURCE_CLASSES: dict[str, Any] = {
    "key_value": KeyValueGenerator,
    "counter": CounterGenerator,
    "auction": AuctionGenerator,
    "tpch": TpchGenerator,
    "file": FileSource,
    "kafka": KafkaSource,
    "postgres": PostgresSource,
    "mysql": MySqlSource,
}
#: Constructor arguments that are not options: the generators' ``ticks`` is their position
#: (the ingestion sets it when it resumes); FILE's ``schema`` is the spec's ``columns``;
#: KAFKA's ``value_schema`` is ``columns`` and ``avro_schemas`` comes from ``schemas`` (a
#: TOML table's keys are strings, not the ids it needs).
NOT_OPTIONS: dict[str, set[str]] = {
    "key_value": {"ticks"},
    "counter": {"ticks"},
    "auction": {"ticks"},
    "tpch": {"ticks"},
    "file": {"schema"},
    "kafka": {"value_schema", "avro_schemas"},
}
#: Options ``build_source`` renames or reads itself before it calls the constructor.
RENAMED = {"file": {"fmt": "format"}}
SPEC_ONLY = {"kafka": {"key_schema_file", "value_schema_file", "schemas"}}
EXPORT_CLASSES: dict[str, Any] = {
    "kafka": KafkaExport,
    "postgres": PostgresExport,
    "delta": DeltaExport,
}


def _sections(text: str, level: int) -> dict[str, str]:
    """The body of each heading of ``level`` in ``text``, by the heading's title."""
    out: dict[str, str] = {}
    title = None
    for line in text.splitlines():
        heading = re.match(r"(#+) (.*)", line)
        if heading and len(heading[1]) <= level:
            title = heading[2].strip() if len(heading[1]) == level else None
            if title is not None:
                out[title] = ""
        elif title is not None:
            out[title] += line + "\n"
    return out


def _section(title: str) -> str:
    return _sections(PROSE, 2)[title]


def _kinds(section: str) -> dict[str, str]:
    """The ``### `kind = "x"` `` subsections of a section, by kind."""
    out = {}
    for title, body in _sections(section, 3).items():
        match = re.fullmatch(r'`kind = "(\w+)"`', title)
        if match:
            out[match[1]] = body
    return out


def _table(body: str, first: str) -> dict[str, list[str]]:
    """The first markdown table of ``body`` whose first header is ``first``: cells by row."""
    rows: dict[str, list[str]] = {}
    inside = in_table = False
    for line in body.splitlines():
        if not line.startswith("|"):
            if inside:
                break
            in_table = False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not in_table:  # a table's first row: its header
            in_table = True
            inside = cells[0] == first
            continue
        if not inside:
            continue
        if set(cells[0]) <= {"-", ":"}:
            continue
        match = re.match(r"`([^`]+)`", cells[0])
        assert match, f"a row of the {first!r} table does not start with `name`: {line}"
        rows[match[1]] = cells[1:]
    assert rows, f"no table with the header {first!r} in:\n{body[:300]}"
    return rows


def _literal(model: type[BaseModel], field: str) -> tuple[str, ...]:
    return typing.get_args(model.model_fields[field].annotation)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def _options(cls: Any, kind: str) -> dict[str, inspect.Parameter]:
    """The options a source kind's constructor takes, by name, as ``build_source`` passes them."""
    params = dict(inspect.signature(cls).parameters)
    params.pop("name")
    for old, new in RENAMED.get(kind, {}).items():
        params[new] = params.pop(old).replace(name=new)
    for name in NOT_OPTIONS.get(kind, set()):
        params.pop(name)
    for name in SPEC_ONLY.get(kind, set()):
        params[name] = inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None)
    return params


def _check_options(
    documented: dict[str, list[str]], params: dict[str, inspect.Parameter], where: str
) -> None:
    assert set(documented) == set(params), (
        f"{where}: the page documents {sorted(documented)}, the code takes {sorted(params)}"
    )
    for name, param in params.items():
        required, _meaning, default = documented[name]
        needed = param.default is inspect.Parameter.empty
        assert (required == "yes") == needed, f"{where}: {name} required is {required!r}"
        value = param.default
        if not needed and value is not None and isinstance(value, bool | int | float | str):
            assert f"`{_toml(value)}`" in default, f"{where}: {name}'s default is {value!r}"


class _Offline:
    """A POSTGRES or MYSQL source that takes the real constructor's arguments, offline."""

    real: Any = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        bound = inspect.signature(self.real).bind(*args, **kwargs)  # TypeError: bad options
        self.tables = list(bound.arguments.get("tables") or [])

    def outputs(self) -> dict[str, pa.Schema]:
        return {t: pa.schema([("id", pa.int64())]) for t in self.tables}


def _write_schema_files(spec: RunSpec, root: Path) -> None:
    """Avro record schemas at the paths the KAFKA sources of ``spec`` name (a key schema's
    fields are the source's ``key_columns``, as the page says they must be)."""
    for source in spec.source:
        opts = source.options
        named = [opts.get("key_schema_file"), opts.get("value_schema_file")]
        named += list((opts.get("schemas") or {}).values())
        for i, path in enumerate(p for p in named if p is not None):
            names = [f"f{i}"]  # distinct: no column repeats
            if path == opts.get("key_schema_file") and source.key_columns:
                names = list(source.key_columns)
            fields = [{"name": n, "type": ["null", "string"]} for n in names]
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps({"type": "record", "name": f"R{i}", "fields": fields}))


def test_the_page_has_toml_blocks_for_every_kind(tmp_path: Path) -> None:
    assert BLOCKS, f"no ```toml blocks in {PAGE}"
    specs = []
    for i, block in enumerate(BLOCKS):
        f = tmp_path / f"{i}.toml"
        f.write_text(block)
        specs.append(load_spec(f))
    assert {s.kind for spec in specs for s in spec.source} == set(_literal(SourceSpec, "kind"))
    assert {e.kind for spec in specs for e in spec.export} == set(_literal(ExportSpec, "kind"))
    first = specs[0]  # the complete example uses every table of the file
    assert first.source and first.view and first.export
    assert set(first.model_fields_set) == set(RunSpec.model_fields)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_every_toml_block_loads_and_checks(
    index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import timeshard.storage.mysql_source
    import timeshard.storage.postgres_source

    f = tmp_path / "run.toml"
    f.write_text(BLOCKS[index])
    spec = load_spec(f)
    for module, real in (
        (timeshard.storage.postgres_source, PostgresSource),
        (timeshard.storage.mysql_source, MySqlSource),
    ):
        monkeypatch.setattr(module, real.__name__, type(real.__name__, (_Offline,), {"real": real}))
    _write_schema_files(spec, tmp_path)
    monkeypatch.chdir(tmp_path)
    check_spec(spec, existing=[])


def test_every_field_of_every_model_is_documented() -> None:
    titles = _sections(PROSE, 2)
    for field in RunSpec.model_fields:
        assert any(f"[{field}]" in t for t in titles), f"no section for [{field}]"
    for title, model in SECTIONS.items():
        section = _section(title)
        fields_at = _sections(section, 3).get("Fields", section)
        documented = _table(fields_at, "Field")
        assert set(documented) == set(model.model_fields), title
        for name, info in model.model_fields.items():
            required = documented[name][0]
            assert (required == "yes") == info.is_required(), f"{title} {name}: {required!r}"


def test_every_kind_is_documented_with_its_options() -> None:
    sources = _kinds(_section("`[[source]]`"))
    assert set(sources) == set(_literal(SourceSpec, "kind"))
    for kind, cls in SOURCE_CLASSES.items():
        options = _table(sources[kind], "Key")
        _check_options(options, _options(cls, kind), f"source kind {kind}")
    exports = _kinds(_section("`[[export]]`"))
    assert set(exports) == set(_literal(ExportSpec, "kind")) == set(EXPORT_OPTIONS)
    for kind, (needed, optional) in EXPORT_OPTIONS.items():
        signature = inspect.signature(EXPORT_CLASSES[kind]).parameters
        params = {
            name: signature[name]
            if name in signature
            else inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None)
            for name in optional
        }
        params |= {name: inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY) for name in needed}
        _check_options(_table(exports[kind], "Key"), params, f"export kind {kind}")


def test_types_envelopes_units_and_formats_are_documented() -> None:
    source = _section("`[[source]]`")
    types = _table(_sections(source, 3)["Column types"], "Type")
    assert set(types) == set(TYPES)
    envelopes = _table(_sections(source, 3)["Envelopes"], "Envelope")
    assert set(envelopes) == set(_literal(SourceSpec, "envelope"))
    export = _section("`[[export]]`")
    envelopes = _table(_sections(export, 3)["Envelopes"], "Envelope")
    assert set(envelopes) == set(_literal(ExportSpec, "envelope"))
    units = _table(_section("Durations"), "Unit")
    assert set(units) == set(UNITS_MS)
    kinds = _kinds(source)
    assert set(_table(kinds["file"], "`format`")) == {f'"{f}"' for f in file_source.FORMATS}
    assert set(_table(kinds["kafka"], "Format")) == {f'"{f}"' for f in kafka_source.FORMATS}
    for name in kafka_source.METADATA:
        assert f'`"{name}"`' in kinds["kafka"], f"kafka metadata {name!r}"
    for fmt in kafka_export.FORMATS:
        assert f'`"{fmt}"`' in _kinds(export)["kafka"], f"kafka export format {fmt!r}"


def test_maven_packages_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from timeshard.spark.session import (
        HADOOP_AWS_PACKAGE_ENV,
        SPARK_AVRO_PACKAGE_ENV,
        hadoop_aws_package,
        spark_avro_package,
        spark_kafka_package,
    )

    monkeypatch.delenv(SPARK_AVRO_PACKAGE_ENV, raising=False)
    monkeypatch.delenv(HADOOP_AWS_PACKAGE_ENV, raising=False)
    packages = _table(_section("Maven packages"), "Package")
    for package in (spark_avro_package(), spark_kafka_package(), hadoop_aws_package()):
        group_artifact = package.rsplit(":", 1)[0]
        assert any(p.startswith(group_artifact + ":") for p in packages), package
    assert SPARK_AVRO_PACKAGE_ENV in TEXT and HADOOP_AWS_PACKAGE_ENV in TEXT
