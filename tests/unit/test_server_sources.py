"""What ``timeshard serve`` checks of a connector source before it builds one, without Spark.

The engine refuses a CREATE SOURCE whose DSN or URL holds a password (the
statement is kept in the catalog) and one that needs a Maven package its
SparkSession did not load, naming the ``--packages`` to restart with; the
packages a server loads are those ``--packages`` names and those the
catalog's recorded statements need. The SparkSession is a stand-in that
only says which packages it loaded: nothing here reaches a broker or a
database, and every refusal leaves no catalog entry.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from timeshard.catalog import Catalog, read_catalog
from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.server.engine import Engine
from timeshard.server.packages import named, needed, recorded, session_packages
from timeshard.server.statements import CreateSource, SqlError, parse
from timeshard.spark.session import spark_avro_package, spark_kafka_package

KAFKA = "CREATE SOURCE k FROM KAFKA (BROKER '127.0.0.1:1', TOPIC 't')"


def session(*packages: str) -> Any:
    """A stand-in SparkSession whose context loaded ``packages`` (coordinates)."""
    conf = {"spark.jars.packages": ",".join(packages)}
    return SimpleNamespace(sparkContext=SimpleNamespace(getConf=lambda: conf))


@pytest.fixture
def client(tmp_path: Path) -> PersistClient:
    return PersistClient(Location.embedded(tmp_path / "loc"))


def source(sql: str) -> CreateSource:
    s = parse(sql)
    assert isinstance(s, CreateSource)
    return s


def refused(engine: Engine, sql: str, sqlstate: str, *in_message: str) -> None:
    with pytest.raises(SqlError) as info:
        engine.execute(source(sql))
    assert info.value.sqlstate == sqlstate, str(info.value)
    for part in in_message:
        assert part in str(info.value)
    assert engine.objects == {}
    assert [e for e in read_catalog(engine.client) if e.kind == "statement"] == []


# -- packages ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (None, []),
        ("", []),
        ("kafka", ["kafka"]),
        ("Kafka, avro", ["kafka", "avro"]),
        ("avro,kafka,avro", ["avro", "kafka"]),
    ],
)
def test_packages_are_named_by_short_names(text: str | None, want: list[str]) -> None:
    assert named(text) == want


def test_an_unknown_package_name_is_refused() -> None:
    with pytest.raises(InvalidUsage, match="kafka, avro, got mqtt"):
        named("kafka,mqtt")


@pytest.mark.parametrize(
    ("sql", "want"),
    [
        (KAFKA, ["kafka"]),
        (f"{KAFKA} FORMAT TEXT", ["kafka"]),
        (f"{KAFKA} VALUE FORMAT AVRO", ["avro", "kafka"]),
        (f"{KAFKA} KEY FORMAT AVRO VALUE FORMAT BYTES", ["avro", "kafka"]),
        ("CREATE SOURCE f FROM FILE '/x' (FORMAT avro)", ["avro"]),
        ("CREATE SOURCE f FROM FILE '/x' (FORMAT json)", []),
        ("CREATE SOURCE p FROM POSTGRES (DSN 'host=h', PUBLICATION 'p') FOR ALL TABLES", []),
        ("CREATE SOURCE m FROM MYSQL (URL 'mysql://h/d') FOR ALL TABLES", []),
        ("CREATE SOURCE c FROM LOAD GENERATOR COUNTER", []),
    ],
)
def test_the_packages_a_source_needs(sql: str, want: list[str]) -> None:
    assert sorted(needed(source(sql))) == want


def test_a_server_loads_the_packages_named_and_those_its_recorded_sources_need(
    client: PersistClient,
) -> None:
    assert recorded(client) == []
    assert session_packages(client, None) == []
    catalog = Catalog(client)
    catalog.record_statement("c", {"sql": "CREATE SOURCE c FROM LOAD GENERATOR COUNTER", "seq": 1})
    catalog.record_statement("k", {"sql": KAFKA, "seq": 2})
    catalog.record_statement("v", {"sql": "CREATE MATERIALIZED VIEW v AS SELECT 1", "seq": 3})
    catalog.record_statement("bad", {"sql": "CREATE SOURCE", "seq": 4})  # reported at restore
    assert recorded(client) == ["kafka"]
    assert session_packages(client, None) == [spark_kafka_package()]
    assert session_packages(client, "avro,kafka") == [spark_avro_package(), spark_kafka_package()]


# -- the engine's refusals ---------------------------------------------------------------------


def test_a_kafka_source_on_a_session_without_the_connector_is_refused(
    client: PersistClient,
) -> None:
    engine = Engine(session(), client)
    refused(engine, KAFKA, "0A000", "'k'", "--packages kafka", "restart timeshard serve")
    engine = Engine(session(spark_kafka_package()), client)
    refused(engine, f"{KAFKA} FORMAT AVRO", "0A000", "--packages avro")
    engine = Engine(session(spark_avro_package()), client)
    refused(engine, f"{KAFKA} FORMAT AVRO", "0A000", "--packages kafka")


def test_an_avro_file_source_needs_spark_avro(client: PersistClient) -> None:
    engine = Engine(session(spark_kafka_package()), client)
    refused(engine, "CREATE SOURCE f FROM FILE '/x' (FORMAT avro)", "0A000", "--packages avro")


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://repl:secret@db/shop",
        "postgresql://repl@db/shop?password=secret",
        "host=db user=repl password=secret dbname=shop",
    ],
)
def test_a_postgres_dsn_with_a_password_is_refused(client: PersistClient, dsn: str) -> None:
    engine = Engine(session(), client)
    sql = f"CREATE SOURCE p FROM POSTGRES (DSN '{dsn}', PUBLICATION 'p') FOR ALL TABLES"
    refused(engine, sql, "28P01", "DSN", "PGPASSWORD", "~/.pgpass")


def test_a_mysql_url_with_a_password_is_refused(client: PersistClient) -> None:
    engine = Engine(session(), client)
    sql = "CREATE SOURCE m FROM MYSQL (URL 'mysql://repl:secret@db:3306/d') FOR ALL TABLES"
    refused(engine, sql, "28P01", "URL", "MYSQL_PWD", "run file")


def test_a_schema_registry_url_with_a_password_is_refused(client: PersistClient) -> None:
    engine = Engine(session(spark_kafka_package()), client)
    sql = (
        "CREATE SOURCE k FROM KAFKA (BROKER 'h:1', TOPIC 't', "
        "SCHEMA REGISTRY URL 'https://u:secret@registry:8081') FORMAT TEXT"
    )
    refused(engine, sql, "28P01", "SCHEMA REGISTRY URL")


@pytest.mark.parametrize(
    ("option", "url"),
    [("SCHEMA REGISTRY URL", "http://[::1"), ("SCHEMA REGISTRY URL", "http://u:p@[::1:8081")],
)
def test_a_url_that_does_not_parse_is_refused_without_showing_it(
    client: PersistClient, option: str, url: str
) -> None:
    """An unclosed IPv6 address made urlsplit raise ValueError: an internal error (XX000)."""
    engine = Engine(session(spark_kafka_package()), client)
    sql = f"CREATE SOURCE k FROM KAFKA (BROKER 'h:1', TOPIC 't', {option} '{url}') FORMAT TEXT"
    with pytest.raises(SqlError) as info:
        engine.execute(source(sql))
    assert info.value.sqlstate == "22023", str(info.value)
    assert option in str(info.value) and ":p@" not in str(info.value)
    assert engine.objects == {}


def test_a_dsn_libpq_cannot_read_is_refused(client: PersistClient) -> None:
    engine = Engine(session(), client)
    sql = "CREATE SOURCE p FROM POSTGRES (DSN 'host', PUBLICATION 'p') FOR ALL TABLES"
    refused(engine, sql, "22023", "DSN")


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE SOURCE p FROM POSTGRES (DSN 'postgresql://repl@db/shop', PUBLICATION 'p') "
        "FOR ALL TABLES",
        "CREATE SOURCE p FROM POSTGRES (DSN 'host=db user=repl', PUBLICATION 'p') FOR ALL TABLES",
        "CREATE SOURCE m FROM MYSQL (URL 'mysql://repl@db/d') FOR ALL TABLES",
        "CREATE SOURCE m FROM MYSQL (URL 'mysql://repl:@db/d') FOR ALL TABLES",
        f"{KAFKA.removesuffix(')')}, SCHEMA REGISTRY URL 'http://registry:8081')",
    ],
)
def test_a_dsn_or_url_without_a_password_passes(sql: str) -> None:
    Engine._refuse_passwords(source(sql))
