"""PostgreSQL exports of one-byte integers and nested values, against a real server.

A Spark ``ByteType`` (Arrow ``int8``) is a ``smallint``; an array of a scalar
is that scalar's PostgreSQL array; a struct, a map and an array of nested
values are ``jsonb``. The export refused every one of them when declared.
"""

from __future__ import annotations

import datetime
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql
from pyspark.sql import SparkSession

from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.postgres_export import PostgresExport

pytestmark = [pytest.mark.spark, pytest.mark.postgres]
POINT = pa.struct([("x", pa.int64()), ("tags", pa.list_(pa.string())), ("on", pa.date32())])
SCHEMA = pa.schema(
    [
        ("k", pa.int8()),
        ("small", pa.int8()),
        ("ids", pa.list_(pa.int64())),
        ("names", pa.list_(pa.string())),
        ("amounts", pa.list_(pa.decimal128(10, 2))),
        ("point", POINT),
        ("grid", pa.list_(pa.list_(pa.int64()))),
    ]
)
#: The types of the table the export creates, as PostgreSQL formats them.
PG_COLUMNS = {
    "k": "smallint",
    "small": "smallint",
    "ids": "bigint[]",
    "names": "text[]",
    "amounts": "numeric(10,2)[]",
    "point": "jsonb",
    "grid": "jsonb",
}
DAY = datetime.date(2024, 2, 29)
ONE = (
    1,
    -128,
    [1, 2**40],
    ["a", None],
    [Decimal("1.50")],
    {"x": 1, "tags": ["p"], "on": DAY},
    [[1], [2, 3]],
)
TWO = (2, 127, [], None, [None], None, [])
THREE = (3, None, None, [], [], {"x": None, "tags": None, "on": None}, [[]])
ONE_AGAIN = (1, 5, [7], ["b"], [Decimal("-2.25"), None], {"x": 2, "tags": [], "on": None}, None)


def _json(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """``row`` as the table gives it back: the struct's date as its JSON text."""
    point = row[5]
    if point is not None and point["on"] is not None:
        point = {**point, "on": point["on"].isoformat()}
    return (*row[:5], point, row[6])


@pytest.fixture
def pg_schema(postgres_dsn: str) -> str:
    name = f"s_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    return name


def _rows(dsn: str, schema: str, table: str) -> dict[int, tuple[Any, ...]]:
    query = sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(map(sql.Identifier, SCHEMA.names)), sql.Identifier(schema, table)
    )
    with psycopg.connect(dsn) as conn:
        return {r[0]: tuple(r) for r in conn.execute(query)}


def _types(dsn: str, schema: str, table: str) -> dict[str, str]:
    with psycopg.connect(dsn) as conn:
        return dict(
            conn.execute(
                "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = to_regclass(format('%%I.%%I', %s::text, %s::text)) "
                "AND attnum > 0 AND NOT attisdropped",
                (schema, table),
            ).fetchall()
        )


def _export(spark: SparkSession, client: PersistClient, dsn: str, schema: str, table: str) -> Any:
    return PostgresExport(spark, client, "s", dsn, table, key_columns=["k"], schema=schema)


def test_bytes_and_nested_values_round_trip_through_inserts_updates_and_deletes(
    spark: SparkSession, postgres_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("s", SCHEMA)
    writer.append([(ONE, 0, 1), (TWO, 0, 1), (THREE, 0, 1)], 0, 1)
    export = _export(spark, client, postgres_dsn, pg_schema, "t")
    try:
        assert export.step().status == "committed"
        assert _types(postgres_dsn, pg_schema, "t") == PG_COLUMNS
        assert _rows(postgres_dsn, pg_schema, "t") == {r[0]: _json(r) for r in (ONE, TWO, THREE)}
        writer.append([(ONE, 1, -1), (ONE_AGAIN, 1, 1), (TWO, 1, -1)], 1, 2)
        assert export.step().status == "committed"
        assert _rows(postgres_dsn, pg_schema, "t") == {r[0]: _json(r) for r in (ONE_AGAIN, THREE)}
    finally:
        export.drop()


def test_an_existing_table_of_those_types_is_accepted_and_one_of_others_refused(
    spark: SparkSession, postgres_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("s", SCHEMA)
    writer.append([(ONE, 0, 1)], 0, 1)
    columns = dict(PG_COLUMNS)
    with psycopg.connect(postgres_dsn) as conn:
        for table, ids in (("same", "bigint[]"), ("other", "integer[]")):
            columns["ids"] = ids
            conn.execute(
                sql.SQL("CREATE TABLE {} ({}, PRIMARY KEY (k))").format(
                    sql.Identifier(pg_schema, table),
                    sql.SQL(", ").join(
                        sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t))
                        for n, t in columns.items()
                    ),
                )
            )
    with pytest.raises(InvalidUsage, match=r"'ids': \('integer\[\]', 'bigint\[\]'\)"):
        _export(spark, client, postgres_dsn, pg_schema, "other")
    export = _export(spark, client, postgres_dsn, pg_schema, "same")
    try:
        assert export.step().status == "committed"
        assert _rows(postgres_dsn, pg_schema, "same") == {1: _json(ONE)}
    finally:
        export.drop()


@pytest.mark.parametrize("key", ["ids", "point", "grid"])
def test_a_nested_key_column_is_refused_naming_it(
    spark: SparkSession, postgres_dsn: str, pg_schema: str, tmp_path: Path, key: str
) -> None:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    client.open_writer("s", SCHEMA).append([], 0, 1)
    with pytest.raises(InvalidUsage, match=f"key columns {{'{key}': .*nested"):
        PostgresExport(spark, client, "s", postgres_dsn, "t", key_columns=[key], schema=pg_schema)
    assert client.state("s").critical_readers == {}
    assert _types(postgres_dsn, pg_schema, "t") == {}  # no table made
