"""KAFKA, POSTGRES, MYSQL and Avro FILE sources, and KAFKA and POSTGRES sinks, made with SQL
on a running ``timeshard serve``.

One server (``--packages kafka,avro``) serves the module; each test drives a
real upstream the tests start -- the Kafka broker, PostgreSQL, MariaDB, a
directory of Avro lines -- with its own client: it writes a few rows,
creates the source through psycopg, waits until SELECT shows them, changes
them upstream (new records; an update and a delete), waits until SELECT
shows the change, and drops the source. DROP of a POSTGRES source drops its
replication slot.

A sink test sinks a changing KEY VALUE source into a PostgreSQL table or a
Kafka topic, and reads the target back with its own client: the target
records the sink's progress ``F`` with the data, so it must hold exactly the
source's rows AS OF ``F - 1``, checked twice, a few ticks apart.

A wait polls with a generous deadline while the server lives, so a slow
machine is slow, never failed; a server that died fails at once, with its
log.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.integration.test_serve import Served, connect, start_serve
from tests.unavailable import skip_or_fail

from timeshard.storage.postgres_source import default_slot

pytestmark = [pytest.mark.spark]

#: How long a change may take to show: a stuck server never shows it, a slow one does.
DEADLINE_S = 300.0
#: Why the module's server has no Kafka connector or spark-avro (empty: it has them).
_NO_PACKAGES: list[str] = []


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One server for the module, with Spark's Kafka connector and spark-avro if Ivy can
    fetch them."""
    tmp = tmp_path_factory.mktemp("serve_sources")
    try:
        server = start_serve(tmp / "loc", tmp / "serve.log", "--packages", "kafka,avro")
    except pytest.fail.Exception as e:  # no Maven Central: the other sources still run
        _NO_PACKAGES.append(f"timeshard serve --packages kafka,avro cannot start: {e}")
        server = start_serve(tmp / "loc", tmp / "serve.log")
    yield server
    if server.proc.poll() is None:
        assert server.stop() == 0, server.log.read_text()


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def wait_for(served: Served, query: str, want: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Poll ``query`` until it answers ``want``, while the server lives, up to DEADLINE_S."""
    deadline = time.monotonic() + DEADLINE_S
    got: list[tuple[Any, ...]] | str = []
    with connect(served, autocommit=True) as conn, conn.cursor() as cur:
        while True:
            try:
                cur.execute(query)
                got = [tuple(r) for r in cur.fetchall()]
            except psycopg.Error as e:  # not readable yet: the server says why
                got = f"{type(e).__name__}: {e}"
            if got == want:
                return got
            assert served.proc.poll() is None, served.log.read_text()[-4000:]
            assert time.monotonic() < deadline, f"after {DEADLINE_S}s {query!r} gives {got!r}"
            time.sleep(0.5)


def execute(served: Served, sql: str) -> list[tuple[Any, ...]]:
    with connect(served, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(sql)
        return [tuple(r) for r in cur.fetchall()] if cur.description else []


def refused(served: Served, sql: str, sqlstate: str) -> str:
    with pytest.raises(psycopg.Error) as info:
        execute(served, sql)
    assert info.value.sqlstate == sqlstate, str(info.value)
    return str(info.value)


def dropped(served: Served, name: str) -> None:
    execute(served, f"DROP SOURCE {name}")
    assert name not in [r[0] for r in execute(served, "SHOW SOURCES")]


def shown(served: Served, name: str) -> tuple[Any, ...]:
    """The type and shards SHOW SOURCES lists for source ``name``."""
    rows = {r[0]: r[1:] for r in execute(served, "SHOW SOURCES")}
    return rows[name]


# -- KAFKA --------------------------------------------------------------------------------------


@pytest.mark.kafka
def test_a_kafka_source_upserts_the_topic_s_records(served: Served, kafka_broker: Any) -> None:
    from confluent_kafka import Producer

    from timeshard.dev.kafka import create_topic

    if _NO_PACKAGES:
        skip_or_fail(_NO_PACKAGES[0], "Kafka")
    bootstrap = kafka_broker.bootstrap
    topic, name = unique("orders"), unique("kf")
    create_topic(bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})

    def produce(*records: tuple[int, str | None]) -> None:
        for key, status in records:
            value = None if status is None else json.dumps({"status": status}).encode()
            producer.produce(topic, key=json.dumps({"id": key}).encode(), value=value)
        assert producer.flush(30) == 0

    produce((1, "open"), (2, "open"), (3, "paid"))
    execute(
        served,
        f"CREATE SOURCE {name} (status text) FROM KAFKA (BROKER '{bootstrap}', "
        f"TOPIC '{topic}', GROUP ID '{name}-group') KEY FORMAT JSON (id bigint) "
        "VALUE FORMAT JSON ENVELOPE UPSERT (KEY (id))",
    )
    assert shown(served, name) == ("KafkaSource", name)
    query = f"SELECT id, status FROM {name} ORDER BY id"
    wait_for(served, query, [(1, "open"), (2, "open"), (3, "paid")])
    produce((4, "open"), (1, "paid"), (2, None))  # a new key, an update, a tombstone
    wait_for(served, query, [(1, "paid"), (3, "paid"), (4, "open")])
    dropped(served, name)


# -- POSTGRES -----------------------------------------------------------------------------------


@pytest.fixture
def pg(postgres_server: Any) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        yield conn


def slots(pg: psycopg.Connection[Any], slot: str) -> list[str]:
    """``[slot]`` while the replication slot ``slot`` exists, else ``[]``."""
    query = "SELECT slot_name FROM pg_replication_slots WHERE slot_name = %s"
    return [r[0] for r in pg.execute(query, (slot,)).fetchall()]


@pytest.mark.postgres
def test_a_postgres_source_follows_its_tables_and_its_drop_drops_the_slot(
    served: Served, postgres_server: Any, pg: psycopg.Connection[Any]
) -> None:
    table, publication, name = unique("orders"), unique("pub"), unique("pg")
    slot = default_slot(name)  # the source's default slot
    other = unique("other")  # in the publication, not in FOR TABLES
    for t in (table, other):
        pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, status text)")
        pg.execute(f"ALTER TABLE {t} REPLICA IDENTITY FULL")
    pg.execute(f"INSERT INTO {table} VALUES (1, 'open'), (2, 'open'), (3, 'paid')")
    pg.execute(f"CREATE PUBLICATION {publication} FOR TABLE {table}, {other}")
    try:
        dsn = postgres_server.dsn  # trust authentication: no password
        with_password = dsn.replace("postgres@", "postgres:secret@")
        message = refused(
            served,
            f"CREATE SOURCE {name} FROM POSTGRES (DSN '{with_password}', "
            f"PUBLICATION '{publication}') FOR ALL TABLES",
            "28P01",
        )
        assert "PGPASSWORD" in message and "secret" not in message
        assert slots(pg, slot) == []  # a refused CREATE made nothing upstream
        execute(
            served,
            f"CREATE SOURCE {name} FROM POSTGRES (DSN '{dsn}', PUBLICATION '{publication}') "
            f"FOR TABLES ({table})",
        )
        assert shown(served, name) == ("PostgresSource", f"{name}.{table}")
        assert slots(pg, slot) == [slot]
        query = f"SELECT id, status FROM {name}.{table} ORDER BY id"
        wait_for(served, query, [(1, "open"), (2, "open"), (3, "paid")])
        with pg.transaction():
            pg.execute(f"UPDATE {table} SET status = 'paid' WHERE id = 1")
            pg.execute(f"DELETE FROM {table} WHERE id = 2")
            pg.execute(f"INSERT INTO {table} VALUES (4, 'open')")
        wait_for(served, query, [(1, "paid"), (3, "paid"), (4, "open")])
        dropped(served, name)
        assert slots(pg, slot) == [], "DROP SOURCE left the replication slot, which keeps WAL"
    finally:  # after a failure only: a passing test has dropped the slot already
        pg.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = %s AND NOT active",
            (slot,),
        )
        pg.execute(f"DROP PUBLICATION IF EXISTS {publication}")


# -- MYSQL --------------------------------------------------------------------------------------


@pytest.mark.mysql
def test_a_mysql_source_follows_its_database(served: Served, mariadb_server: Any) -> None:
    import pymysql

    database, user, name = unique("d"), unique("nopw"), unique("my")
    root = pymysql.connect(unix_socket=str(mariadb_server.socket), user="root", autocommit=True)
    with root.cursor() as cur:
        # SQL refuses a URL with a password, and this module's server has no MYSQL_PWD
        # (a source's other way to one): an account without one, on loopback.
        cur.execute("CREATE USER %s@'127.0.0.1'", (user,))
        cur.execute("GRANT ALL PRIVILEGES ON *.* TO %s@'127.0.0.1'", (user,))
        cur.execute(f"CREATE DATABASE {database}")
        cur.execute(f"CREATE TABLE {database}.items (id int PRIMARY KEY, name varchar(20))")
        cur.execute(f"INSERT INTO {database}.items VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    try:
        port = mariadb_server.port
        message = refused(
            served,
            f"CREATE SOURCE {name} FROM MYSQL (URL '{mariadb_server.url}') FOR ALL TABLES",
            "28P01",
        )
        assert mariadb_server.url not in message
        execute(
            served,
            f"CREATE SOURCE {name} FROM MYSQL (URL 'mysql://{user}@127.0.0.1:{port}/{database}', "
            "CONNECT TIMEOUT S 20) FOR ALL TABLES",
        )
        assert shown(served, name) == ("MySqlSource", f"{name}.items")
        query = f"SELECT id, name FROM {name}.items ORDER BY id"
        wait_for(served, query, [(1, "a"), (2, "b"), (3, "c")])
        with root.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"UPDATE {database}.items SET name = 'z' WHERE id = 1")
            cur.execute(f"DELETE FROM {database}.items WHERE id = 2")
            cur.execute(f"INSERT INTO {database}.items VALUES (4, 'd')")
            cur.execute("COMMIT")
        wait_for(served, query, [(1, "z"), (3, "c"), (4, "d")])
        dropped(served, name)
    finally:
        with root.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {database}")
            cur.execute("DROP USER IF EXISTS %s@'127.0.0.1'", (user,))
        root.close()


# -- FILE, FORMAT avro --------------------------------------------------------------------------

READING = {
    "type": "record",
    "name": "Reading",
    "fields": [{"name": "id", "type": "long"}, {"name": "v", "type": ["null", "double"]}],
}


def avro_lines(*records: dict[str, Any]) -> bytes:
    """One base64 Avro datum per line, as a FILE source in format avro reads them."""
    import base64
    import io

    import fastavro

    schema = fastavro.parse_schema(READING)
    out = b""
    for record in records:
        datum = io.BytesIO()
        fastavro.schemaless_writer(datum, schema, record)
        out += base64.b64encode(datum.getvalue()) + b"\n"
    return out


def test_an_avro_file_source_reads_with_spark_avro(served: Served, tmp_path: Path) -> None:
    if _NO_PACKAGES:
        skip_or_fail(_NO_PACKAGES[0], "Avro")
    name, root = unique("av"), tmp_path / "readings"
    root.mkdir()
    (root / "a.b64").write_bytes(avro_lines({"id": 1, "v": 0.5}, {"id": 2, "v": None}))
    execute(
        served,
        f"CREATE SOURCE {name} FROM FILE '{root}' "
        f"(FORMAT avro, AVRO SCHEMA '{json.dumps(READING)}')",
    )
    assert shown(served, name) == ("FileSource", name)
    query = f"SELECT id, v FROM {name} ORDER BY id"
    wait_for(served, query, [(1, 0.5), (2, None)])
    with (root / "a.b64").open("ab") as f:
        f.write(avro_lines({"id": 3, "v": 1.5}))
    wait_for(served, query, [(1, 0.5), (2, None), (3, 1.5)])
    dropped(served, name)


# -- SINKS --------------------------------------------------------------------------------------
#
# A sink lags its relation, which a KEY VALUE generator changes at every tick (updates and
# deletes). The target records the sink's progress F in the transaction that writes the
# data, so a snapshot of the target holds exactly the relation's rows AS OF F - 1.

#: What the relation of a sink test is made FROM: 20 keys, updated and deleted at every tick.
KEY_VALUE = (
    "LOAD GENERATOR KEY VALUE (KEYS 20, RATE 5, DELETES 0.2) ENVELOPE UPSERT (KEY (key)) "
    "WITH (RETAIN HISTORY FOR '1h')"
)
#: A target's content: the sink's progress F and its (key, value) rows at F - 1.
Snapshot = tuple[int, set[tuple[Any, ...]]]


def upper(served: Served, shard: str) -> int:
    [(value,)] = execute(served, f"SELECT upper FROM timeshard_objects WHERE name = '{shard}'")
    return int(value)


def sink_error(served: Served, sink: str) -> list[tuple[Any, ...]]:
    return execute(served, f"SELECT status, error FROM timeshard_objects WHERE name = '{sink}'")


def follows(
    served: Served, source: str, sink: str, snapshot: Callable[[], Snapshot | None]
) -> None:
    """Twice: wait until the target's progress passes a time ``source`` has reached, then
    compare the target with ``source`` AS OF that progress - 1."""
    for _ in range(2):
        reached = upper(served, source)
        deadline = time.monotonic() + DEADLINE_S
        while (got := snapshot()) is None or got[0] <= reached:
            assert served.proc.poll() is None, served.log.read_text()[-4000:]
            assert time.monotonic() < deadline, (
                f"after {DEADLINE_S}s the progress of {sink} is {got and got[0]}, not past "
                f"{reached}; the sink: {sink_error(served, sink)}"
            )
            time.sleep(0.5)
        frontier, rows = got
        want = set(execute(served, f"SELECT key, value FROM {source} AS OF {frontier - 1}"))
        assert want, f"{source} has no row at {frontier - 1}"
        assert rows == want, (frontier, sorted(rows - want), sorted(want - rows))


def sink_dropped(served: Served, sink: str, source: str) -> None:
    execute(served, f"DROP SINK {sink}")
    assert sink not in [r[0] for r in execute(served, "SHOW SINKS")]
    dropped(served, source)


def table_snapshot(dsn: str, sink: str, table: str) -> Snapshot | None:
    """The progress of ``sink`` and the rows of ``table``, in one REPEATABLE READ transaction."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        with conn.transaction():
            progress = conn.execute(
                "SELECT frontier FROM _timeshard_progress WHERE export_id = %s", (sink,)
            ).fetchone()
            rows = {tuple(r) for r in conn.execute(f"SELECT key, value FROM {table}")}
    return None if progress is None else (int(progress[0]), rows)


@pytest.mark.postgres
def test_a_postgres_sink_keeps_a_table_as_its_relation_was(
    served: Served, postgres_server: Any, pg: psycopg.Connection[Any]
) -> None:
    source, sink, table = unique("kv"), unique("to_pg"), unique("kv_table")
    execute(served, f"CREATE SOURCE {source} FROM {KEY_VALUE}")
    dsn = postgres_server.dsn  # trust authentication: no password
    with_password = dsn.replace("postgres@", "postgres:secret@")
    message = refused(
        served,
        f"CREATE SINK {sink} FROM {source} INTO POSTGRES (DSN '{with_password}', "
        f"TABLE '{table}') KEY (key)",
        "28P01",
    )
    assert "PGPASSWORD" in message and "secret" not in message
    execute(
        served,
        f"CREATE SINK {sink} FROM {source} INTO POSTGRES (DSN '{dsn}', TABLE '{table}') KEY (key)",
    )
    assert (sink, "PostgresExport", source) in execute(served, "SHOW SINKS")
    try:
        follows(served, source, sink, lambda: table_snapshot(dsn, sink, table))
        sink_dropped(served, sink, source)
    finally:
        pg.execute(f"DROP TABLE IF EXISTS {table}")


def topic_snapshot(bootstrap: str, sink: str, topic: str, progress_topic: str) -> Snapshot | None:
    """The newest committed progress of ``sink``, and the upserts of ``topic`` before it."""
    from confluent_kafka import KafkaException
    from tests.integration.test_kafka_export import read_records

    from timeshard.storage.kafka_export import read_progress

    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": f"check-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
    }
    try:
        progress = read_progress(conf, progress_topic, sink, 10.0)
    except KafkaException:  # the sink has not created its progress topic yet
        return None
    if progress is None:
        return None
    latest: dict[Any, dict[str, Any] | None] = {}
    # The records are in time order, and every one before the progress is committed with
    # it or earlier: read_records reads them all.
    for t, key, value in read_records(bootstrap, topic):
        if t >= progress.frontier:
            break
        k = json.loads(key or b"null")["key"]
        row = None if value is None else json.loads(value)
        assert row is None or row["key"] == k, (key, value)
        latest[k] = row
    rows = {(r["key"], r["value"]) for r in latest.values() if r is not None}
    return progress.frontier, rows


@pytest.mark.kafka
def test_a_kafka_sink_upserts_its_relation_into_a_topic(served: Served, kafka_broker: Any) -> None:
    from timeshard.dev.kafka import create_topic

    bootstrap = kafka_broker.bootstrap
    source, sink = unique("kv"), unique("to_kafka")
    topic, progress_topic = unique("kv-topic"), unique("kv-progress")
    create_topic(bootstrap, topic, partitions=1)
    execute(served, f"CREATE SOURCE {source} FROM {KEY_VALUE}")
    execute(
        served,
        f"CREATE SINK {sink} FROM {source} INTO KAFKA (BROKER '{bootstrap}', TOPIC '{topic}', "
        f"PROGRESS TOPIC '{progress_topic}') KEY (key) FORMAT JSON ENVELOPE UPSERT",
    )
    assert (sink, "KafkaExport", source) in execute(served, "SHOW SINKS")
    follows(served, source, sink, lambda: topic_snapshot(bootstrap, sink, topic, progress_topic))
    sink_dropped(served, sink, source)
