"""The KAFKA source's Avro options (no broker, no Spark): a bad one raises InvalidUsage naming it.

Also the declaration file: ``value_schema_file`` / ``key_schema_file``,
``schema_registry_url`` and ``schemas`` parsed into a KafkaSource, and the
spark-avro package asked for when a kafka source uses Avro.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from timeshard.errors import InvalidUsage, SourceUnavailable
from timeshard.spark.session import spark_avro_package, spark_kafka_package
from timeshard.spec import build_source, load_spec, spark_packages
from timeshard.storage.kafka_source import KafkaSource
from timeshard.storage.schema_registry import (
    SchemaFiles,
    SchemaRegistry,
    redacted,
    without_userinfo,
)

ORDER = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "fields": [{"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"]}],
    }
)
KEY = json.dumps({"type": "record", "name": "K", "fields": [{"name": "k", "type": "string"}]})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"value_format": "avro"}, "value_avro_schema goes with value_format 'avro'"),
        ({"value_avro_schema": ORDER}, "value_avro_schema goes with value_format 'avro'"),
        (
            {"value_format": "avro", "value_avro_schema": ORDER, "value_schema": pa.schema([])},
            "takes its columns from value_avro_schema",
        ),
        ({"key_avro_schema": KEY}, "key_avro_schema goes with key_format 'avro'"),
        ({"value_format": "avro", "value_avro_schema": '"long"'}, "must be an Avro record"),
        (
            {"value_format": "avro", "value_avro_schema": ORDER.replace("note", "_offset")},
            "reserved",
        ),
        (
            {
                "value_format": "avro",
                "value_avro_schema": ORDER,
                "schema_registry_url": "http://127.0.0.1:8081",
                "avro_schemas": {1: ORDER},
            },
            "schema_registry_url or avro_schemas, not both",
        ),
        (
            {"value_format": "text", "schema_registry_url": "http://127.0.0.1:8081"},
            "go with key_format or value_format 'avro'",
        ),
        (
            {"value_format": "avro", "value_avro_schema": ORDER, "schema_registry_url": "r:1"},
            "must be an http",
        ),
        (
            {"value_format": "avro", "value_avro_schema": ORDER, "avro_schemas": {-1: ORDER}},
            "schema ids",
        ),
        (
            {"value_format": "avro", "value_avro_schema": ORDER, "avro_schemas": {1: "{x"}},
            "schema id 1 is not JSON",
        ),
        (
            {
                "key_format": "avro",
                "key_avro_schema": ORDER,
                "value_format": "avro",
                "value_avro_schema": ORDER,
            },
            "repeat",
        ),
    ],
)
def test_bad_avro_arguments_name_the_value(kwargs: dict[str, Any], match: str) -> None:
    args: dict[str, Any] = {"bootstrap_servers": "127.0.0.1:9", "topic": "t", **kwargs}
    with pytest.raises(InvalidUsage, match=match):
        KafkaSource("bad", **args)


def test_avro_columns_and_writer_schemas() -> None:
    source = KafkaSource(
        "k",
        "127.0.0.1:9",
        "t",
        key_format="avro",
        key_avro_schema=KEY,
        value_format="avro",
        value_avro_schema=ORDER,
        metadata=["offset"],
    )
    assert source.key_columns == ["k"]
    assert source.payload_schema() == pa.schema(
        [("k", pa.string()), ("id", pa.int64()), ("note", pa.string()), ("offset", pa.int64())]
    )
    assert source.writer_schemas is None  # bare datums
    wired = KafkaSource(
        "w", "127.0.0.1:9", "t", value_format="avro", value_avro_schema=ORDER, avro_schemas={3: KEY}
    )
    assert isinstance(wired.writer_schemas, SchemaFiles)
    assert wired.writer_schemas.schema(3) == KEY and wired.writer_schemas.schema(4) is None
    registry = KafkaSource(
        "r",
        "127.0.0.1:9",
        "t",
        value_format="avro",
        value_avro_schema=ORDER,
        schema_registry_url="http://127.0.0.1:8081/",
    )
    assert isinstance(registry.writer_schemas, SchemaRegistry)
    assert registry.writer_schemas.url == "http://127.0.0.1:8081"


def _spec(tmp_path: Path, options: str, extra: str = "") -> Path:
    f = tmp_path / "run.toml"
    f.write_text(
        f'[[source]]\nname = "orders"\nkind = "kafka"\n{extra}'
        f'options = {{ bootstrap_servers = "127.0.0.1:9", topic = "orders", {options} }}\n'
    )
    return f


def test_a_declared_avro_kafka_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "order.avsc").write_text(ORDER)
    (tmp_path / "key.avsc").write_text(KEY)
    (tmp_path / "v1.avsc").write_text(ORDER)
    spec = load_spec(
        _spec(
            tmp_path,
            'key_format = "avro", key_schema_file = "key.avsc", value_format = "avro", '
            'value_schema_file = "order.avsc", schemas = { 1 = "v1.avsc", 7 = "key.avsc" }',
            'envelope = "upsert"\nkey_columns = ["k"]\n',
        )
    )
    assert spark_packages(spec) == [spark_avro_package(), spark_kafka_package()]
    source = build_source(spec.source[0])
    assert isinstance(source, KafkaSource)
    assert source.key_columns == ["k"] and source.value_schema.names == ["id", "note"]
    assert source.value_avro_schema == ORDER and source.key_avro_schema == KEY
    assert source.avro_schemas == {1: ORDER, 7: KEY}
    registry = load_spec(
        _spec(
            tmp_path,
            'value_format = "avro", value_schema_file = "order.avsc", '
            'schema_registry_url = "http://127.0.0.1:8081"',
        )
    )
    built = build_source(registry.source[0])
    assert isinstance(built.writer_schemas, SchemaRegistry)
    json_only = load_spec(_spec(tmp_path, 'value_format = "text"'))
    assert spark_packages(json_only) == [spark_kafka_package()]


@pytest.mark.parametrize(
    ("options", "extra", "match"),
    [
        ('value_format = "avro"', "", "value_avro_schema goes with value_format 'avro'"),
        (
            'value_format = "avro", value_schema_file = "missing.avsc"',
            "",
            "value_schema_file 'missing.avsc' cannot be read",
        ),
        ('value_format = "avro", value_schema_file = 3', "", "must be a file path"),
        (
            'value_format = "avro", value_schema_file = "order.avsc", '
            'schema_registry_url = "http://127.0.0.1:8081", schemas = { 1 = "order.avsc" }',
            "",
            "not both",
        ),
        (
            'value_format = "avro", value_schema_file = "order.avsc", schemas = { a = "x" }',
            "",
            "schemas keys must be schema ids",
        ),
        (
            'value_format = "avro", value_schema_file = "order.avsc", schemas = { 1 = "no" }',
            "",
            "schemas.1 'no' cannot be read",
        ),
        (
            'value_format = "avro", value_schema_file = "order.avsc"',
            'columns = { id = "int64" }\n',
            "takes its columns from value_avro_schema",
        ),
        (
            'value_format = "json", value_schema_file = "order.avsc"',
            'columns = { id = "int64" }\n',
            "value_avro_schema goes with value_format 'avro'",
        ),
    ],
)
def test_bad_declared_avro_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: str, extra: str, match: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "order.avsc").write_text(ORDER)
    spec = load_spec(_spec(tmp_path, options, extra))
    with pytest.raises(InvalidUsage, match=match):
        build_source(spec.source[0])


def test_a_url_that_is_no_registry_is_a_fault(tmp_path: Path) -> None:
    """A real HTTP server that is not a schema registry: its 404s are not "schema not found"."""
    import functools
    import http.server
    import threading

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        registry = SchemaRegistry(f"http://127.0.0.1:{server.server_port}", timeout_s=5)
        with pytest.raises(SourceUnavailable, match="schema id 1 could not be fetched"):
            registry.schema(1)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_closed_port_is_a_fault() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    registry = SchemaRegistry(f"http://127.0.0.1:{port}", timeout_s=2)
    with pytest.raises(SourceUnavailable, match=f"schema registry at http://127.0.0.1:{port}"):
        registry.schema(7)


def test_a_registered_schema_that_is_not_self_contained_avro_is_a_data_error() -> None:
    """A record naming a PROTOBUF or JSON id, an Avro schema with references, or a text
    that is not Avro: no writer schema (the record's err row), never a stalled source."""
    from confluent_kafka.schema_registry import Schema, SchemaReference

    from timeshard.storage.schema_registry import SchemaRegistry

    good = '{"type": "record", "name": "r", "fields": [{"name": "n", "type": "long"}]}'
    registered = {
        1: Schema(good, "AVRO"),
        2: Schema('syntax = "proto3"; message M {}', "PROTOBUF"),
        3: Schema('{"type": "object"}', "JSON"),
        4: Schema(good, "AVRO", [SchemaReference("Other", "other-value", 1)]),
        5: Schema('{"type": "record", "name": "r", "fields": [{"name": "x", "type": "Nope"}]}'),
        6: Schema(good, None),  # older registries leave the type out for Avro
    }

    class Answers:
        def get_schema(self, schema_id: int) -> Schema:
            return registered[schema_id]

    registry = SchemaRegistry("http://user:secret@127.0.0.1:9")
    registry._client = Answers()
    assert [registry.schema(i) is not None for i in sorted(registered)] == [
        True,
        False,
        False,
        False,
        False,
        True,
    ]
    assert "secret" not in registry.describe() and "at http://127.0.0.1:9 " in registry.describe()


def test_a_schema_file_that_is_not_avro_is_refused() -> None:
    from timeshard.storage.schema_registry import SchemaFiles

    with pytest.raises(InvalidUsage, match="schema id 3 is not a valid Avro schema"):
        SchemaFiles(
            {3: '{"type": "record", "name": "r", "fields": [{"name": "x", "type": "Nope"}]}'}
        )


def test_an_id_that_is_no_int32_schema_id_is_unknown_without_asking_the_registry() -> None:
    """The wire format's id is a signed int32, and a registry's ids are not negative: bytes
    ff ff ff ff are id -1, which no registry has (read unsigned, they were looked up as
    4294967295, which a real registry answers with a 404 without code 40403: a fault, and
    one corrupt record stalled the source for good)."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    asked: list[int] = []

    class Answers:
        def get_schema(self, schema_id: int) -> Any:
            asked.append(schema_id)
            raise SchemaRegistryError(404, 404, "HTTP 404 Not Found")

    registry = SchemaRegistry("http://127.0.0.1:9")
    registry._client = Answers()
    for schema_id in (-1, -(2**31), 2**31, 2**32 - 1):
        assert registry.schema(schema_id) is None
    assert asked == []


SECRET_URLS = [
    "http://alice:s3cr@t@127.0.0.1:{port}",  # a password with '@'
    "HTTP://alice:hunter2@127.0.0.1:{port}",  # an uppercase scheme
    "https://alice:hunter2@127.0.0.1:{port}/prefix",
]


@pytest.mark.parametrize("template", SECRET_URLS)
def test_no_message_or_err_row_shows_the_registry_credentials(template: str) -> None:
    """describe() is written into err rows, stored data: it names the URL without its user
    information, as the catalog keeps it and verify rebuilds the source from it. Messages
    mask it. (The mask stopped at the first '@', and an uppercase scheme was refused with
    the URL in the message.)"""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = template.format(port=port)
    registry = SchemaRegistry(url, timeout_s=2)
    shown = registry.describe()
    assert "alice" not in shown and "s3cr" not in shown and "hunter2" not in shown
    assert shown == SchemaRegistry(without_userinfo(url)).describe()
    assert f"http{'s' if 'https' in url else ''}://127.0.0.1:{port}" in shown
    with pytest.raises(SourceUnavailable) as e:
        registry.schema(7)
    assert "s3cr" not in str(e.value) and "t@" not in str(e.value)
    assert "hunter2" not in str(e.value) and "***@127.0.0.1" in str(e.value)
    for kwargs in (
        {"value_format": "avro", "value_avro_schema": ORDER, "avro_schemas": {1: ORDER}},
        {"value_format": "text"},
    ):
        with pytest.raises(InvalidUsage) as refused:
            KafkaSource("s", "127.0.0.1:9", "t", schema_registry_url=url, **kwargs)
        assert "hunter2" not in str(refused.value) and "s3cr" not in str(refused.value)
        assert "***@127.0.0.1" in str(refused.value)


def test_redacted_masks_up_to_the_last_at_sign() -> None:
    assert redacted("at http://a:b@c@h:1/x, then") == "at http://***@h:1/x, then"
    assert without_userinfo("http://a:b@c@h:1/x@y") == "http://h:1/x@y"
    assert without_userinfo("http://h:1/x@y") == "http://h:1/x@y"


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("http://127.0.0.1:notaport", "port"),
        ("http://127.0.0.1:99999", "port"),
        ("http://127.0.0.1:0", "port"),
        ("http://", "host"),
        ("http://alice:hunter2@:8081", "host"),
        ("http://alice:hunter2@127.0.0.1:notaport", "port"),
        ("http://alice:hunt/er2@127.0.0.1:8081", "port"),  # an unquoted '/' in the password
        ("http://127.0.0.1:1,ftp://x", "one URL"),
        ("http://127.0.0.1:1,http://127.0.0.1:2", "one URL"),
        ("http://127.0.0.1:1/x?y=1", "query"),
        ("http://127.0.0.1:1/#f", "fragment"),
        ("http://127.0.0.1 :1", "whitespace"),
        ("http://127.0.0.1:1\n", "whitespace"),
        ("http://alice:hunter2@[::1:8081", "Invalid IPv6 URL"),
        ("ftp://alice:hunter2@127.0.0.1", "scheme"),
        ("HTTP:/127.0.0.1", "scheme"),
    ],
)
def test_a_malformed_registry_url_is_invalid_usage_naming_it_masked(url: str, match: str) -> None:
    """It was accepted, then every lookup failed in the client, a fault: the source stalled
    for good on a typo."""
    with pytest.raises(InvalidUsage, match=match) as e:
        SchemaRegistry(url)
    assert "hunter2" not in str(e.value) and "er2" not in str(e.value)
    assert "schema_registry_url" in str(e.value)


def test_registry_urls_that_are_well_formed_are_accepted() -> None:
    for url in (
        "http://[::1]:8081",
        "https://registry.example.com/prefix/",
        "http://registry",
        "HTTPS://alice:s%2Fcr%40t@registry:8081",
    ):
        SchemaRegistry(url)


@pytest.mark.parametrize(
    ("ids", "match"),
    [
        ('"01" = "order.avsc"', "'01'"),  # "1" and "01" both were id 1, the later one won
        ('1 = "order.avsc", "01" = "order.avsc"', "'01'"),
        ('"²" = "order.avsc"', "'²'"),  # isdigit() but no int: a ValueError
        ('"-1" = "order.avsc"', "'-1'"),
        ('" 1" = "order.avsc"', "' 1'"),
    ],
)
def test_schema_ids_of_a_declaration_are_canonical_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ids: str, match: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "order.avsc").write_text(ORDER)
    spec = load_spec(
        _spec(
            tmp_path,
            f'value_format = "avro", value_schema_file = "order.avsc", schemas = {{ {ids} }}',
        )
    )
    with pytest.raises(InvalidUsage, match=f"schemas keys must be schema ids.*{match}"):
        build_source(spec.source[0])


def test_a_schema_id_given_twice_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A declaration built in Python may key an id by int and by str."""
    from timeshard.spec import SourceSpec

    monkeypatch.chdir(tmp_path)
    (tmp_path / "order.avsc").write_text(ORDER)
    options = {
        "bootstrap_servers": "127.0.0.1:9",
        "topic": "orders",
        "value_format": "avro",
        "value_schema_file": "order.avsc",
        "schemas": {1: "order.avsc", "1": "order.avsc"},
    }
    spec = SourceSpec.model_validate({"name": "orders", "kind": "kafka", "options": options})
    with pytest.raises(InvalidUsage, match="schema id '1' twice"):
        build_source(spec)
