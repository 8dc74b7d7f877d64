"""An export whose progress is gone from its target while its hold is still on its input.

The export took a missing progress for "nothing exported yet" and exported everything
again from time 0 over an input that had compacted since: a Kafka topic got every change
twice, a Delta append table its history twice, silently. The hold now records that the
export committed a progress; a progress missing while it says so is refused, naming the
export, the hold and how to start over (delete the progress from the target and drop the
export, then declare it again). An export that never committed (its first step failed
before, a hold written by older code) is never refused.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from tests.integration.test_kafka_export import _read_all, _topic

from timeshard.controller import drop_object
from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.delta_export import DeltaExport
from timeshard.storage.kafka_export import KafkaExport
from timeshard.storage.postgres_export import PostgresExport

pytestmark = pytest.mark.spark
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])


@pytest.fixture
def shard(tmp_path: Path) -> tuple[PersistClient, Any]:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    return client, client.open_writer("s", SCHEMA)


def _snapshot(client: PersistClient, t: int) -> dict[str, int]:
    reader = client.open_leased_reader("s")
    try:
        return {r["k"]: r["v"] for r in reader.snapshot(t).to_pylist()}
    finally:
        reader.expire()


def _ticks(writer: Any, export: Any, keys: str, start: int = 0) -> None:
    """One change per key, each at its own time, and a step after each (the hold moves)."""
    for t, key in enumerate(keys, start=start):
        writer.append([((key, t), t, 1)], t, t + 1)
        assert export.step().status == "committed"


def _hold(client: PersistClient, export_id: str) -> Any:
    return client.state("s").critical_readers[f"export.{export_id}"]


@pytest.mark.kafka
def test_kafka_a_progress_deleted_by_a_tombstone_is_refused_then_started_over(
    spark_kafka: SparkSession, kafka_broker: Any, shard: tuple[PersistClient, Any]
) -> None:
    from confluent_kafka import Producer

    client, writer = shard
    bootstrap = kafka_broker.bootstrap
    topic, progress_topic = _topic(bootstrap), f"p-{uuid.uuid4().hex[:10]}"

    def declared() -> KafkaExport:
        return KafkaExport(
            spark_kafka,
            client,
            "s",
            bootstrap,
            topic,
            key_columns=["k"],
            export_id="kx",
            progress_topic=progress_topic,
        )

    export = declared()
    _ticks(writer, export, "abc")
    assert client.state("s").since.time == 2  # the hold moved with the progress
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(progress_topic, key=b"kx", value=None, partition=0)
    assert producer.flush(30) == 0
    writer.append([(("d", 3), 3, 1)], 3, 4)
    for attempt in (export, declared()):  # running, and after a restart
        with pytest.raises(InvalidUsage) as refused:
            attempt.step()
        message = str(refused.value)
        assert "export 'kx'" in message and "export.kx" in message and "since 2" in message
        assert "timeshard drop kx" in message and "tombstone" in message, message
        attempt.close()
    assert [k["k"] for _, k, _ in _read_all(bootstrap, topic)] == ["a", "b", "c"]
    # Starting over: the progress is deleted (it is), the export dropped, declared again.
    assert [h.name for h in drop_object(client, "kx")] == ["kx"]
    again = declared()
    step = again.step()
    assert (step.lower, step.upper, step.status) == (0, 4, "committed")
    records = _read_all(bootstrap, topic)[3:]
    assert {k["k"]: v["v"] for _, k, v in records} == _snapshot(client, 3)
    assert min(t for t, _, _ in records) >= 0
    again.drop()


@pytest.mark.postgres
def test_postgres_a_deleted_progress_row_is_refused_then_started_over(
    spark: SparkSession, postgres_dsn: str, shard: tuple[PersistClient, Any]
) -> None:
    client, writer = shard
    schema = f"s_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE SCHEMA {}").format(psycopg.sql.Identifier(schema)))

    def declared() -> PostgresExport:
        return PostgresExport(
            spark, client, "s", postgres_dsn, "t", key_columns=["k"], schema=schema, export_id="px"
        )

    def execute(statement: str) -> None:
        with psycopg.connect(postgres_dsn) as conn:
            conn.execute(psycopg.sql.SQL(statement).format(psycopg.sql.Identifier(schema)))

    export = declared()
    _ticks(writer, export, "abc")
    execute("DELETE FROM {}._timeshard_progress WHERE export_id = 'px'")
    writer.append([(("d", 3), 3, 1)], 3, 4)
    with pytest.raises(InvalidUsage) as refused:
        export.step()
    message = str(refused.value)
    assert "export 'px'" in message and "export.px" in message and "since 2" in message
    assert "timeshard drop px" in message and "DELETE FROM" in message, message
    export.close()
    # Starting over into an empty table: delete the progress and the rows, drop, declare.
    execute("DELETE FROM {}.t")
    drop_object(client, "px")
    again = declared()
    assert again.step().status == "committed"
    with psycopg.connect(postgres_dsn) as conn:
        query = psycopg.sql.SQL("SELECT k, v FROM {}.t").format(psycopg.sql.Identifier(schema))
        assert dict(conn.execute(query).fetchall()) == _snapshot(client, 3)
    again.drop()


@pytest.mark.postgres
def test_postgres_a_dropped_table_says_to_drop_the_export_too(
    spark: SparkSession, postgres_dsn: str, shard: tuple[PersistClient, Any]
) -> None:
    """The refusal of a dropped table said to delete the progress row alone: the export's
    hold still said it had committed, and the next step was refused again."""
    client, writer = shard
    schema = f"s_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE SCHEMA {}").format(psycopg.sql.Identifier(schema)))

    def declared() -> PostgresExport:
        return PostgresExport(
            spark, client, "s", postgres_dsn, "t", key_columns=["k"], schema=schema, export_id="py"
        )

    export = declared()
    _ticks(writer, export, "ab")
    export.close()
    with psycopg.connect(postgres_dsn) as conn:
        conn.execute(psycopg.sql.SQL("DROP TABLE {}.t").format(psycopg.sql.Identifier(schema)))
    with pytest.raises(InvalidUsage) as refused:
        declared()
    assert "timeshard drop py" in str(refused.value), refused.value
    with psycopg.connect(postgres_dsn) as conn:
        conn.execute(
            psycopg.sql.SQL("DELETE FROM {}._timeshard_progress").format(
                psycopg.sql.Identifier(schema)
            )
        )
    drop_object(client, "py")
    again = declared()
    assert again.step().status == "committed"
    again.drop()


def test_delta_a_table_lost_is_refused(
    spark: SparkSession, shard: tuple[PersistClient, Any], tmp_path: Path
) -> None:
    """An append table deleted (with its log, which held the progress) and created again:
    the export wrote the input's whole history into it again."""
    import shutil

    client, writer = shard
    uri = tmp_path / "delta"

    def declared() -> DeltaExport:
        return DeltaExport(spark, client, "s", str(uri), envelope="append", export_id="dx")

    export = declared()
    _ticks(writer, export, "abc")
    export.close()
    shutil.rmtree(uri)
    writer.append([(("d", 3), 3, 1)], 3, 4)
    again = declared()
    with pytest.raises(InvalidUsage, match=r"export 'dx'.*timeshard drop dx"):
        again.step()
    again.close()


@pytest.mark.kafka
def test_kafka_a_fresh_export_whose_first_step_failed_goes_on_after_a_restart(
    spark_kafka: SparkSession, kafka_broker: Any, shard: tuple[PersistClient, Any]
) -> None:
    """A hold registered by a first step that committed nothing (the topic did not exist
    yet), on an input whose since is already past 0: the restarted export is not refused."""
    from timeshard.dev.kafka import create_topic
    from timeshard.errors import TimeshardError

    client, writer = shard
    bootstrap = kafka_broker.bootstrap
    topic = f"x-{uuid.uuid4().hex[:10]}"
    for t in range(3):
        writer.append([((f"k{t}", t), t, 1)], t, t + 1)
    other = client.open_critical_since("s", "someone", "x")
    other.compare_and_downgrade_since("x", "x", 2)
    client.drop_critical_since("s", "someone")
    assert client.state("s").since.time == 2

    def declared() -> KafkaExport:
        return KafkaExport(
            spark_kafka, client, "s", bootstrap, topic, key_columns=["k"], export_id="fx"
        )

    first = declared()
    with pytest.raises(TimeshardError, match="does not exist"):
        first.step()
    assert _hold(client, "fx").opaque == "1"
    first.close()
    create_topic(bootstrap, topic)
    restarted = declared()
    assert restarted.step().status == "committed"
    assert {k["k"] for _, k, _ in _read_all(bootstrap, topic)} == {"k0", "k1", "k2"}
    restarted.drop()


@pytest.mark.postgres
def test_postgres_a_hold_of_older_code_is_never_refused_and_learns_of_a_commit(
    spark: SparkSession, postgres_dsn: str, shard: tuple[PersistClient, Any]
) -> None:
    """A hold written before it recorded commits (its opaque the version alone) says
    nothing of one: a missing progress is then taken as none, as before. A progress the
    export finds makes the hold record it."""
    client, writer = shard
    schema = f"s_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE SCHEMA {}").format(psycopg.sql.Identifier(schema)))
    writer.append([(("a", 1), 0, 1), (("b", 2), 1, 1)], 0, 2)
    old = client.open_critical_since("s", "export.ox", "1")
    old.compare_and_downgrade_since("1", "1", 1)
    export = PostgresExport(
        spark, client, "s", postgres_dsn, "t", key_columns=["k"], schema=schema, export_id="ox"
    )
    assert export.step().status == "committed"
    assert _hold(client, "ox").opaque == "1+"
    export.close()
    old.compare_and_downgrade_since("1+", "1", 1)  # as older code left it, with a progress
    restarted = PostgresExport(
        spark, client, "s", postgres_dsn, "t", key_columns=["k"], schema=schema, export_id="ox"
    )
    assert restarted.step().status == "idle"
    assert _hold(client, "ox").opaque == "1+"
    restarted.drop()
