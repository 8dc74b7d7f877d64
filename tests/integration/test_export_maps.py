"""Shards with map columns: consolidated by Spark, exported to Delta, PostgreSQL and Kafka.

Spark (4.0 on) groups maps by their entries in any order, so a retraction of
a map row whose entries come in another order cancels its insertion. Every
export refused such a shard when declared ("Spark cannot group by maps").
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from psycopg import sql
from pyspark.sql import SparkSession

from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark.snapshot import snapshot_df
from timeshard.storage.delta_export import DeltaExport

pytestmark = pytest.mark.spark
MAP = pa.map_(pa.string(), pa.int64())
SCHEMA = pa.schema(
    [
        ("k", pa.int64()),
        ("m", MAP),
        ("s", pa.struct([("inner", MAP)])),
        ("l", pa.list_(MAP)),
    ]
)
AB, BA = [("a", 1), ("b", 2)], [("b", 2), ("a", 1)]


def _row(k: int, entries: list[tuple[str, int]]) -> tuple[Any, ...]:
    return (k, entries, {"inner": entries}, [entries])


def _writer(tmp_path: Path) -> tuple[PersistClient, Any]:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    return client, client.open_writer("s", SCHEMA)


def _history(writer: Any) -> None:
    """Key 1 has ``{a: 1, b: 2}`` at 0, retracted at 1 with its entries in another order
    (at every depth); key 2 has ``{z: 9}`` from 1 on."""
    writer.append([(_row(1, BA), 0, 1)], 0, 1)
    writer.append([(_row(1, AB), 1, -1), (_row(2, [("z", 9)]), 1, 1)], 1, 2)


def test_a_map_retraction_with_its_entries_in_another_order_cancels_the_insertion(
    spark: SparkSession, tmp_path: Path
) -> None:
    client, writer = _writer(tmp_path)
    _history(writer)
    reader = client.open_leased_reader("s")
    try:
        at0 = snapshot_df(spark, reader, 0).collect()
        at1 = snapshot_df(spark, reader, 1).collect()
    finally:
        reader.expire()
    assert [(r["k"], r["m"], r["s"]["inner"], r["l"], r["_diff"]) for r in at0] == [
        (1, dict(AB), dict(AB), [dict(AB)], 1)
    ]
    assert [(r["k"], r["m"], r["_diff"]) for r in at1] == [(2, {"z": 9}, 1)]


def test_a_delta_export_writes_map_columns_as_delta_maps(
    spark: SparkSession, tmp_path: Path
) -> None:
    client, writer = _writer(tmp_path)
    writer.append([(_row(1, BA), 0, 1), (_row(3, []), 0, 1)], 0, 1)
    uri = str(tmp_path / "delta")
    export = DeltaExport(spark, client, "s", uri, key_columns=["k"])
    try:
        assert export.step().status == "committed"
        table = DeltaTable(uri).to_pyarrow_table()
        assert pa.types.is_map(table.schema.field("m").type)
        assert pa.types.is_map(table.schema.field("s").type.field("inner").type)
        assert _by_key(table) == {1: (AB, {"inner": AB}, [AB]), 3: ([], {"inner": []}, [[]])}
        writer.append([(_row(1, AB), 1, -1), (_row(2, [("z", 9)]), 1, 1)], 1, 2)
        assert export.step().status == "committed"
        z = [("z", 9)]
        assert _by_key(DeltaTable(uri).to_pyarrow_table()) == {
            2: (z, {"inner": z}, [z]),
            3: ([], {"inner": []}, [[]]),
        }
    finally:
        export.drop()


def test_a_delta_append_export_writes_each_map_change_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    client, writer = _writer(tmp_path)
    _history(writer)
    uri = str(tmp_path / "delta")
    export = DeltaExport(spark, client, "s", uri, envelope="append")
    try:
        assert export.step().status == "committed"
        rows = DeltaTable(uri).to_pyarrow_table().to_pylist()
        changes = sorted((r["_ts"], r["k"], sorted(r["m"]), r["_diff"]) for r in rows)
        assert changes == [(0, 1, AB, 1), (1, 1, AB, -1), (1, 2, [("z", 9)], 1)]
    finally:
        export.drop()


def _by_key(table: pa.Table) -> dict[int, tuple[Any, ...]]:
    return {
        r["k"]: (sorted(r["m"]), _sorted(r["s"]), [sorted(x) for x in r["l"]])
        for r in table.to_pylist()
    }


def _sorted(struct: dict[str, Any]) -> dict[str, Any]:
    return {"inner": sorted(struct["inner"])}


def test_an_export_keyed_by_a_map_is_refused_when_declared(tmp_path: Path) -> None:
    """A tick sorts by the key columns, which Spark does for no map."""
    client, writer = _writer(tmp_path)
    writer.expire()
    for key in ("m", "s", "l"):
        with pytest.raises(InvalidUsage, match=f"cannot be exported keyed by {key!r}"):
            DeltaExport(None, client, "s", str(tmp_path / "t"), key_columns=[key])
    state = client.state("s")
    assert state.critical_readers == {} and state.leased_readers == {}


@pytest.fixture
def pg_schema(postgres_dsn: str) -> str:
    name = f"s_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    return name


@pytest.mark.postgres
def test_a_postgres_export_writes_map_columns_as_jsonb(
    spark: SparkSession, postgres_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    from timeshard.storage.postgres_export import PostgresExport

    client, writer = _writer(tmp_path)
    writer.append([(_row(1, BA), 0, 1)], 0, 1)
    export = PostgresExport(
        spark, client, "s", postgres_dsn, "t", key_columns=["k"], schema=pg_schema
    )
    query = sql.SQL("SELECT k, m, s, l, pg_typeof(m)::text FROM {}").format(
        sql.Identifier(pg_schema, "t")
    )
    try:
        assert export.step().status == "committed"
        with psycopg.connect(postgres_dsn) as conn:
            assert [tuple(r) for r in conn.execute(query)] == [
                (1, dict(AB), {"inner": dict(AB)}, [dict(AB)], "jsonb")
            ]
        writer.append([(_row(1, AB), 1, -1), (_row(2, [("z", 9)]), 1, 1)], 1, 2)
        assert export.step().status == "committed"
        with psycopg.connect(postgres_dsn) as conn:
            assert [tuple(r)[:2] for r in conn.execute(query)] == [(2, {"z": 9})]
    finally:
        export.drop()


@pytest.mark.kafka
def test_a_kafka_json_export_writes_map_columns_as_json_objects(
    spark_kafka: SparkSession, kafka_broker: Any, tmp_path: Path
) -> None:
    """A map was written as the list of pairs Arrow gives: ``[["a", 1], ["b", 2]]``."""
    from tests.integration.test_kafka_export import read_records

    from timeshard.dev.kafka import create_topic
    from timeshard.storage.kafka_export import KafkaExport

    client, writer = _writer(tmp_path)
    _history(writer)
    bootstrap = kafka_broker.bootstrap
    topic = f"x-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, partitions=1)
    export = KafkaExport(spark_kafka, client, "s", bootstrap, topic, key_columns=["k"])
    try:
        assert export.step().status == "committed"
    finally:
        export.drop()
    records = [
        (t, json.loads(k), v and json.loads(v)) for t, k, v in read_records(bootstrap, topic)
    ]
    one = {"k": 1, "m": dict(AB), "s": {"inner": dict(AB)}, "l": [dict(AB)]}
    two = {"k": 2, "m": {"z": 9}, "s": {"inner": {"z": 9}}, "l": [{"z": 9}]}
    assert records == [(0, {"k": 1}, one), (1, {"k": 1}, None), (1, {"k": 2}, two)]


def test_a_map_with_keys_that_are_not_strings_is_a_json_object_of_their_json_text() -> None:
    from timeshard.storage.export import json_value

    arrow = pa.list_(pa.map_(pa.int64(), pa.struct([("on", pa.map_(pa.string(), MAP))])))
    value = [[(1, {"on": [("x", [("y", 2)])]}), (-3, None)], None]
    assert json_value(value, arrow) == [{"1": {"on": {"x": {"y": 2}}}, "-3": None}, None]
