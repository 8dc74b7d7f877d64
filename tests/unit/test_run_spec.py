"""Declaration files for ``timeshard run``: validation names what is wrong."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from timeshard import InvalidUsage
from timeshard.cli.main import app, main
from timeshard.spec import (
    RunSpec,
    build_source,
    check_spec,
    format_duration,
    load_spec,
    parse_duration,
)
from timeshard.storage.file_source import FileSource
from timeshard.storage.sources import KeyValueGenerator

GOOD = """
[location]
dir = "loc"

[[source]]
name = "kv"
kind = "key_value"
envelope = "upsert"
key_columns = ["key"]
options = { keys = 100, rate = 10 }

[[source]]
name = "events"
kind = "file"
options = { path = "in", format = "json" }
columns = { id = "int64", name = "string" }

[[view]]
name = "n"
inputs = { kv = "kv" }
sql = "SELECT count(*) AS n FROM kv"
"""


def test_good_file(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text(GOOD)
    spec = load_spec(f)
    assert [s.name for s in spec.source] == ["kv", "events"]
    kv = build_source(spec.source[0])
    assert isinstance(kv, KeyValueGenerator) and kv.keys == 100
    events = build_source(spec.source[1])
    assert isinstance(events, FileSource) and events.schema.names == ["id", "name"]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('[[source]]\nname = "x"\nkind = "mqtt"\n', "kind"),
        ('[[source]]\nname = "x"\nkind = "counter"\ncolour = 1\n', "colour"),
        ('[[view]]\nname = "v"\n', "inputs"),
        ("not = [toml", "cannot read"),
    ],
)
def test_bad_files(tmp_path: Path, text: str, match: str) -> None:
    f = tmp_path / "run.toml"
    f.write_text(text)
    with pytest.raises(InvalidUsage, match=match):
        load_spec(f)


def test_a_file_not_in_utf8_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "run.toml"
    f.write_bytes(b'[[source]]\nname = "k\xff"\nkind = "counter"\n')
    monkeypatch.setattr(sys, "argv", ["timeshard", "run", str(f), "--seconds", "0"])
    with pytest.raises(SystemExit) as e:
        main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert f"cannot read {str(f)!r}" in err and "utf-8" in err, err


def test_bad_source_options(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text(
        '[[source]]\nname = "x"\nkind = "key_value"\noptions = { colour = 1 }\n'
        '[[source]]\nname = "y"\nkind = "file"\noptions = { path = "p", '
        'format = "json" }\ncolumns = { id = "decimal" }\n'
    )
    spec = load_spec(f)
    with pytest.raises(InvalidUsage, match="source 'x': bad options"):
        build_source(spec.source[0])
    with pytest.raises(InvalidUsage, match="unknown column types"):
        build_source(spec.source[1])


def test_tpch_source(tmp_path: Path) -> None:
    from timeshard.storage.tpch import TpchGenerator

    f = tmp_path / "run.toml"
    f.write_text(
        '[[source]]\nname = "tp"\nkind = "tpch"\n'
        "options = { scale_factor = 0.01, tick_orders = 5, seed = 3 }\n"
        '[[source]]\nname = "bad"\nkind = "tpch"\noptions = { scale_factor = -1 }\n'
    )
    spec = load_spec(f)
    tp = build_source(spec.source[0])
    assert isinstance(tp, TpchGenerator) and tp.tick_orders == 5
    assert "lineitem" in tp.outputs()
    with pytest.raises(InvalidUsage, match="-1"):
        build_source(spec.source[1])


@pytest.mark.parametrize(
    ("text", "ms"),
    [("500ms", 500), ("30s", 30_000), ("15m", 900_000), ("1h", 3_600_000), ("1d", 86_400_000)],
)
def test_retain_history_durations(tmp_path: Path, text: str, ms: int) -> None:
    f = tmp_path / "run.toml"
    f.write_text(
        f'[[source]]\nname = "kv"\nkind = "key_value"\nretain_history = "{text}"\n'
        f'[[view]]\nname = "n"\ninputs = {{ kv = "kv" }}\nsql = "SELECT 1"\n'
        f'retain_history = "{text}"\n'
    )
    spec = load_spec(f)
    assert spec.source[0].retain_history_ms == ms and spec.view[0].retain_history_ms == ms
    assert parse_duration(format_duration(ms)) == ms


@pytest.mark.parametrize(
    "text", ["999999999999999999999999d", "106751991168d", "9223372036854775808ms"]
)
def test_a_duration_beyond_int64_milliseconds_is_refused(text: str) -> None:
    """It was taken, and its milliseconds, past what a timestamp or a shard state holds,
    went into the catalog and the holds' tokens."""
    with pytest.raises(InvalidUsage, match=f"duration '{text}' is .* beyond the longest"):
        parse_duration(text)
    assert parse_duration("9223372036854775807ms") == 2**63 - 1


def test_retain_history_absent_is_none(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text(GOOD)
    spec = load_spec(f)
    assert spec.source[0].retain_history_ms is None and spec.view[0].retain_history_ms is None


@pytest.mark.parametrize("bad", ["30x", "1.5h", "-1s", "", "h", "10 minutes"])
def test_bad_retain_history_is_one_line_naming_it(tmp_path: Path, bad: str) -> None:
    f = tmp_path / "run.toml"
    f.write_text(f'[[source]]\nname = "kv"\nkind = "key_value"\nretain_history = "{bad}"\n')
    with pytest.raises(InvalidUsage) as e:
        load_spec(f)
    message = str(e.value)
    assert "retain_history" in message and repr(bad) in message and "\n" not in message


def test_validation_errors_are_one_line(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text('[[source]]\nname = "x"\nkind = "mqtt"\ncolour = 1\n')
    with pytest.raises(InvalidUsage) as e:
        load_spec(f)
    assert "\n" not in str(e.value) and "colour" in str(e.value) and "kind" in str(e.value)


def test_format_duration_picks_the_largest_exact_unit() -> None:
    assert [format_duration(ms) for ms in (0, 1500, 90_000, 7_200_000, 172_800_000)] == [
        "0s",
        "1500ms",
        "90s",
        "2h",
        "2d",
    ]


TWO_VIEWS = """
[[source]]
name = "auction"
kind = "auction"

[[view]]
name = "late"
inputs = { t = "totals" }
sql = "SELECT * FROM t"

[[view]]
name = "totals"
inputs = { b = "auction.bids", x = "elsewhere" }
sql = "SELECT count(*) AS n FROM b"
"""


def test_view_inputs_must_be_declared_or_exist(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text(TWO_VIEWS)
    spec = load_spec(f)
    with pytest.raises(InvalidUsage, match="view 'late' reads 'totals', which is declared after"):
        check_spec(spec, existing=[])
    ok = spec.model_copy(update={"view": spec.view[1:]})
    with pytest.raises(InvalidUsage, match="view 'totals' reads 'elsewhere'") as e:
        check_spec(ok, existing=[])
    assert "auction.bids" in str(e.value)  # the shards it could read are named
    check_spec(ok, existing=["elsewhere"])


@pytest.mark.parametrize(
    ("sources", "views", "match"),
    [
        ([("a", "auction"), ("a.bids", "counter")], [], r"source 'a' and source 'a.bids'"),
        ([("s", "counter"), ("s.remap", "counter")], [], r"source 's.remap' and source 's'"),
        ([("timeshard_status", "counter")], [], r"the location's own shard"),
        ([("c", "counter")], [("timeshard_catalog", "c")], r"the location's own shard"),
        ([("c", "counter")], [("c", "c")], r"source 'c' and view 'c'"),
        ([("c", "counter")], [("v", "v")], r"view 'v' reads its own shard"),
        ([("c", "counter")], [("../x", "c")], r"invalid shard id '../x'"),
        ([("ключ", "counter")], [], r"invalid shard id 'ключ'"),
    ],
)
def test_every_shard_the_declaration_writes_is_valid_and_written_once(
    sources: list[tuple[str, str]], views: list[tuple[str, str]], match: str
) -> None:
    """Distinct names could still write one shard (a source ``a.bids`` beside an AUCTION
    source ``a``; a source ``s.remap``) or the location's own; found only once Spark ran."""
    spec = RunSpec.model_validate(
        {
            "source": [{"name": n, "kind": k} for n, k in sources],
            "view": [{"name": n, "inputs": {"i": i}, "sql": "SELECT * FROM i"} for n, i in views],
        }
    )
    with pytest.raises(InvalidUsage, match=match):
        check_spec(spec, existing=["v"])


def test_view_inputs_that_differ_only_in_case_are_refused(tmp_path: Path) -> None:
    """Each input is a temp view, and Spark folds their case: ``A`` would read ``a``'s shard."""
    f = tmp_path / "run.toml"
    f.write_text(
        '[[source]]\nname = "x"\nkind = "counter"\n[[source]]\nname = "y"\nkind = "counter"\n'
        '[[view]]\nname = "v"\ninputs = { A = "x", a = "y" }\nsql = "SELECT * FROM A, a"\n'
    )
    with pytest.raises(InvalidUsage, match="view 'v': inputs 'A' and 'a' differ only in case"):
        check_spec(load_spec(f), existing=[])


def test_run_validates_before_spark_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import timeshard.spark

    def no_spark(*args: object, **kwargs: object) -> None:
        raise AssertionError("Spark started before the declaration was validated")

    monkeypatch.setattr(timeshard.spark, "spark_session", no_spark)
    f = tmp_path / "run.toml"
    f.write_text(f'[location]\ndir = "{tmp_path / "loc"}"\n' + TWO_VIEWS)
    out = CliRunner().invoke(app, ["run", str(f), "--seconds", "0"])
    assert isinstance(out.exception, InvalidUsage), out.output
    assert "reads 'totals'" in str(out.exception)
    assert not (tmp_path / "loc").exists()  # a bad declaration writes nothing


EXPORTS = """
[[source]]
name = "kv"
kind = "key_value"
envelope = "upsert"
key_columns = ["key"]

[[export]]
name = "kv-out"
kind = "kafka"
input = "kv"
key_columns = ["key"]
options = { bootstrap_servers = "127.0.0.1:9092", topic = "kv" }
"""


def test_exports_read_what_is_declared_or_exists(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text(EXPORTS)
    spec = load_spec(f)
    check_spec(spec, existing=[])
    [export] = spec.export
    assert (export.envelope, export.version) == ("upsert", 1)
    far = export.model_copy(update={"input": "nowhere"})
    with pytest.raises(InvalidUsage, match="export 'kv-out' reads 'nowhere'"):
        check_spec(spec.model_copy(update={"export": [far]}), existing=[])
    twice = spec.model_copy(update={"export": [export, export]})
    with pytest.raises(InvalidUsage, match="declared twice"):
        check_spec(twice, existing=[])
    bad = export.model_copy(update={"options": {"topic": "kv", "acks": "all"}})
    with pytest.raises(InvalidUsage, match=r"missing \['bootstrap_servers'\], unknown \['acks'\]"):
        check_spec(spec.model_copy(update={"export": [bad]}), existing=[])
    f.write_text(EXPORTS.replace('kind = "kafka"', 'kind = "mqtt"'))
    with pytest.raises(InvalidUsage, match=r"export\.0\.kind"):
        load_spec(f)


def test_a_postgres_export_needs_its_options(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text(
        EXPORTS.replace('kind = "kafka"', 'kind = "postgres"').replace(
            'options = { bootstrap_servers = "127.0.0.1:9092", topic = "kv" }',
            'options = { dsn = "postgresql://x@127.0.0.1/db", table = "kv", schema = "s" }',
        )
    )
    spec = load_spec(f)
    check_spec(spec, existing=[])
    [export] = spec.export
    bad = export.model_copy(update={"options": {"dsn": "postgresql://x@h/db"}})
    with pytest.raises(InvalidUsage, match=r"postgres export's options need \['dsn', 'table'\]"):
        check_spec(spec.model_copy(update={"export": [bad]}), existing=[])


def test_a_declared_kafka_export_takes_its_format_and_schema_ids(tmp_path: Path) -> None:
    """``format``, ``key_schema_id`` and ``value_schema_id`` reach the KafkaExport (they
    were checked but dropped, so a declared export wrote JSON)."""
    import pyarrow as pa

    from timeshard.controller import build_export
    from timeshard.location import Location
    from timeshard.persist import PersistClient
    from timeshard.spec import ExportSpec

    client = PersistClient(Location.embedded(tmp_path))
    schema = pa.schema([("key", pa.string()), ("value", pa.string())])
    client.open_writer("kv", schema).expire()
    options = {"bootstrap_servers": "127.0.0.1:9", "topic": "kv", "progress_topic": "p"}
    avro = {"format": "avro", "key_schema_id": 3, "value_schema_id": 4}
    spec = ExportSpec(
        name="kv-out", kind="kafka", input="kv", key_columns=["key"], options=options | avro
    )
    export = build_export(None, client, spec)
    assert (export.format, export.key_schema_id, export.value_schema_id) == ("avro", 3, 4)
    assert export.progress_topic == "p"
    plain = build_export(None, client, spec.model_copy(update={"options": options}))
    assert (plain.format, plain.key_schema_id, plain.value_schema_id) == ("json", None, None)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (
            {"envelope": "append"},
            r"export 'kv-out': envelope must be one of \('upsert', 'debezium'\)",
        ),
        ({"version": 0}, "export 'kv-out': version must be a positive integer, got 0"),
        ({"name": "kv out"}, "export 'kv out': export_id must be 1-200"),
        ({"key_columns": []}, "export 'kv-out': envelope 'upsert' needs key_columns"),
    ],
)
def test_an_exports_envelope_id_version_and_keys_are_checked_before_spark(
    tmp_path: Path, change: dict[str, object], match: str
) -> None:
    """Checked by ``check_spec``, so a bad export writes nothing (it was found only once the
    export was built, after the sources had run)."""
    f = tmp_path / "run.toml"
    f.write_text(EXPORTS)
    spec = load_spec(f)
    [export] = spec.export
    with pytest.raises(InvalidUsage, match=match):
        check_spec(spec.model_copy(update={"export": [export.model_copy(update=change)]}), [])
    # A Delta export appends without keys; a PostgreSQL export only upserts.
    delta = export.model_copy(
        update={"kind": "delta", "envelope": "append", "key_columns": [], "options": {}}
    )
    delta = delta.model_copy(update={"options": {"table_uri": str(tmp_path / "t")}})
    check_spec(spec.model_copy(update={"export": [delta]}), [])
    pg = export.model_copy(
        update={"kind": "postgres", "envelope": "debezium", "options": {"dsn": "x", "table": "t"}}
    )
    with pytest.raises(InvalidUsage, match=r"envelope must be one of \('upsert',\)"):
        check_spec(spec.model_copy(update={"export": [pg]}), [])


@pytest.mark.parametrize(
    ("kind", "options", "match"),
    [
        ("kafka", {"format": "xml"}, "format must be one of"),
        ("kafka", {"topic": "bad topic/"}, "topic must be 1-249"),
        ("kafka", {"key_schema_id": 3}, "key_schema_id goes with format 'avro'"),
        ("postgres", {"dsn": "x", "table": "my-table"}, "table must be a PostgreSQL name"),
        ("delta", {"table_uri": 5}, "table_uri must be a path or URI, got 5"),
    ],
)
def test_an_exports_option_values_are_checked_before_spark(
    tmp_path: Path, kind: str, options: dict[str, object], match: str
) -> None:
    """They were checked only when the export was built, after the sources had written."""
    f = tmp_path / "run.toml"
    f.write_text(EXPORTS)
    spec = load_spec(f)
    [export] = spec.export
    if kind == "kafka":
        options = {**export.options, **options}
    bad = export.model_copy(update={"kind": kind, "options": options})
    with pytest.raises(InvalidUsage, match=f"export 'kv-out': {match}"):
        check_spec(spec.model_copy(update={"export": [bad]}), [])


def test_two_exports_to_one_table_are_refused(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text(EXPORTS)
    spec = load_spec(f)
    [export] = spec.export
    pg = {"kind": "postgres", "options": {"dsn": "host=h", "table": "t"}}
    first = export.model_copy(update={**pg, "name": "a"})
    second = export.model_copy(update={**pg, "name": "b"})
    with pytest.raises(InvalidUsage, match="exports 'a' and 'b' write the same table"):
        check_spec(spec.model_copy(update={"export": [first, second]}), [])
    other = export.model_copy(
        update={**pg, "name": "b", "options": {"dsn": "host=h", "table": "u"}}
    )
    check_spec(spec.model_copy(update={"export": [first, other]}), [])


@pytest.mark.parametrize(
    ("kind", "one", "other"),
    [
        (
            "postgres",
            {"dsn": "host=h dbname=d", "table": "t"},
            {"dsn": "postgresql://h/d", "table": "t"},
        ),
        (
            "postgres",
            {"dsn": "host=h port=5432 dbname=d", "table": "t"},
            {"dsn": "host=h dbname=d application_name=x user=u", "table": "t"},
        ),
        ("delta", {"table_uri": "{tmp}/x"}, {"table_uri": "{tmp}/x/"}),
        ("delta", {"table_uri": "{tmp}/x"}, {"table_uri": "file://{tmp}/x"}),
        ("delta", {"table_uri": "{tmp}/x"}, {"table_uri": "{tmp}/y/../x"}),
    ],
)
def test_two_exports_to_one_table_spelled_two_ways_are_refused(
    tmp_path: Path, kind: str, one: dict[str, str], other: dict[str, str]
) -> None:
    """The check compared the options' text: one table spelled two ways passed, and each
    export overwrote the other's rows."""
    f = tmp_path / "run.toml"
    f.write_text(EXPORTS)
    spec = load_spec(f)
    [export] = spec.export

    def spelled(options: dict[str, str]) -> dict[str, str]:
        return {k: v.replace("{tmp}", str(tmp_path)) for k, v in options.items()}

    first = export.model_copy(update={"kind": kind, "name": "a", "options": spelled(one)})
    second = export.model_copy(update={"kind": kind, "name": "b", "options": spelled(other)})
    with pytest.raises(InvalidUsage, match="exports 'a' and 'b' write the same table"):
        check_spec(spec.model_copy(update={"export": [first, second]}), [])


def test_a_sources_envelope_and_a_views_refresh_are_checked_before_spark(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text(EXPORTS)
    spec = load_spec(f)
    [kv] = spec.source
    keyless = kv.model_copy(update={"key_columns": []})
    with pytest.raises(InvalidUsage, match="source 'kv': envelope 'upsert' needs key_columns"):
        check_spec(spec.model_copy(update={"source": [keyless], "export": []}), [])
    f.write_text(TWO_VIEWS)
    views = load_spec(f)
    [auction] = views.source
    upsert = auction.model_copy(update={"envelope": "upsert", "key_columns": ["id"]})
    with pytest.raises(InvalidUsage, match="kind 'auction' writes several shards"):
        check_spec(views.model_copy(update={"source": [upsert], "view": []}), [])
    totals = views.view[1].model_copy(
        update={"refresh_every_ms": 0, "inputs": {"b": "auction.bids"}}
    )
    with pytest.raises(InvalidUsage, match="view 'totals': refresh_every_ms must be positive"):
        check_spec(views.model_copy(update={"view": [totals]}), [])


def test_an_ingestion_refuses_an_envelope_for_a_source_with_several_outputs(
    tmp_path: Path,
) -> None:
    """The envelope was silently dropped: an AUCTION source writes auction.bids, ... ."""
    from timeshard.location import Location
    from timeshard.persist import PersistClient
    from timeshard.storage.ingest import Ingestion
    from timeshard.storage.sources import AuctionGenerator

    client = PersistClient(Location.embedded(tmp_path))
    with pytest.raises(InvalidUsage, match=r"give one per output with envelopes="):
        Ingestion(None, client, AuctionGenerator(), envelope="upsert", key_columns=["id"])
    assert client.list_shards() == []  # nothing opened
