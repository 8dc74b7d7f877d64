"""PostgreSQL exports against a real server the tests start: the table is the shard's snapshot."""

from __future__ import annotations

import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.errors import Fenced, InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark.jobs import JobCounter
from timeshard.storage.export import ExportError
from timeshard.storage.postgres_export import PostgresExport

pytestmark = [pytest.mark.spark, pytest.mark.postgres]
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64()), ("note", pa.string())])


@pytest.fixture
def pg_schema(postgres_dsn: str) -> str:
    name = f"s_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE SCHEMA {}").format(psycopg.sql.Identifier(name)))
    return name


def _table(dsn: str, schema: str, table: str) -> dict[str, tuple[Any, ...]]:
    query = psycopg.sql.SQL("SELECT k, v, note FROM {}").format(
        psycopg.sql.Identifier(schema, table)
    )
    with psycopg.connect(dsn) as conn:
        return {r[0]: (r[1], r[2]) for r in conn.execute(query)}


def _snapshot(client: PersistClient, t: int) -> dict[str, tuple[Any, ...]]:
    reader = client.open_leased_reader("s")
    try:
        return {r["k"]: (r["v"], r["note"]) for r in reader.snapshot(t).to_pylist()}
    finally:
        reader.expire()


def test_the_table_is_the_snapshot_at_the_progress(
    spark: SparkSession, postgres_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("s", SCHEMA)
    writer.append(
        [
            (("a", 1, "x"), 0, 1),
            (("b", 2, None), 0, 1),
            (("a", 1, "x"), 1, -1),
            (("a", 3, "y"), 1, 1),
        ],
        0,
        2,
    )
    export = PostgresExport(
        spark, client, "s", postgres_dsn, "t", key_columns=["k"], schema=pg_schema
    )
    assert export.progress() is None
    with JobCounter(spark) as jobs:
        step = export.step()
    assert (step.lower, step.upper, step.records, step.status) == (0, 2, 2, "committed")
    assert jobs.count == 1
    assert (
        _table(postgres_dsn, pg_schema, "t")
        == _snapshot(client, 1)
        == {
            "a": (3, "y"),
            "b": (2, None),
        }
    )
    with JobCounter(spark) as jobs:
        assert export.step().status == "idle"
    assert jobs.count == 0
    writer.append([(("b", 2, None), 2, -1), (("c", 5, "z"), 3, 1), (("c", 5, "z"), 4, -1)], 2, 5)
    writer.append([(("d", 9, None), 5, 1)], 5, 6)
    export.close()
    export = PostgresExport(
        spark, client, "s", postgres_dsn, "t", key_columns=["k"], schema=pg_schema
    )
    assert export.step().upper == 6
    assert (
        _table(postgres_dsn, pg_schema, "t")
        == _snapshot(client, 5)
        == {
            "a": (3, "y"),
            "d": (9, None),
        }
    )
    assert export.progress() is not None and export.progress().frontier == 6  # type: ignore[union-attr]
    export.drop()


def test_decimals_are_exported_as_numeric_and_a_key_changed_back_stays(
    spark: SparkSession, postgres_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    """A decimal column was refused (no PostgreSQL type); a key changed and changed back
    within one tick was deleted from the table."""
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    schema = pa.schema([("k", pa.string()), ("amount", pa.decimal128(10, 2))])
    writer = client.open_writer("s", schema)
    writer.append([(("a", Decimal("1.50")), 0, 1), (("b", Decimal("-2.25")), 0, 1)], 0, 1)
    export = PostgresExport(
        spark, client, "s", postgres_dsn, "d", key_columns=["k"], schema=pg_schema
    )
    export.step()
    one, two = Decimal("1.50"), Decimal("9.99")
    writer.append(
        [(("a", one), 1, -1), (("a", two), 1, 1), (("a", two), 2, -1), (("a", one), 2, 1)], 1, 3
    )
    assert export.step().status == "committed"
    query = psycopg.sql.SQL("SELECT k, amount FROM {} ORDER BY k").format(
        psycopg.sql.Identifier(pg_schema, "d")
    )
    with psycopg.connect(postgres_dsn) as conn:
        assert conn.execute(query).fetchall() == [("a", Decimal("1.50")), ("b", Decimal("-2.25"))]
    export.drop()


def test_errors_commit_nothing_and_versions_fence(
    spark: SparkSession, postgres_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("s", SCHEMA)
    writer.append([(("a", 1, None), 0, 1)], 0, 1)
    old = PostgresExport(spark, client, "s", postgres_dsn, "t", key_columns=["k"], schema=pg_schema)
    old.step()
    writer.append([(("b", 1, None), 1, 1), (("b", 2, None), 1, 1)], 1, 2)
    with pytest.raises(ExportError, match="has 2 rows"):
        old.step()
    assert _table(postgres_dsn, pg_schema, "t") == {"a": (1, None)}
    assert old.progress().frontier == 1  # type: ignore[union-attr]
    other = PersistClient(Location.embedded(tmp_path / "loc2"))
    w2 = other.open_writer("s", SCHEMA)
    w2.append(
        pa.table(
            {
                "k": pa.array([None], pa.string()),
                "v": pa.array([None], pa.int64()),
                "note": pa.array([None], pa.string()),
                "_ts": pa.array([0], pa.int64()),
                "_diff": pa.array([1], pa.int64()),
                "_err": pa.array(["bad cast"], pa.string()),
            }
        ),
        0,
        1,
    )
    errs = PostgresExport(
        spark, other, "s", postgres_dsn, "t2", key_columns=["k"], schema=pg_schema
    )
    with pytest.raises(ExportError, match="error at time 0, which an export cannot write: bad"):
        errs.step()
    assert _table(postgres_dsn, pg_schema, "t2") == {}
    # Version 2 takes the table over; version 1 is fenced.
    w3 = other.open_writer("s3", SCHEMA)
    w3.append([(("a", 1, None), 0, 1)], 0, 1)
    v2 = PostgresExport(
        spark, other, "s3", postgres_dsn, "t3", key_columns=["k"], schema=pg_schema, version=2
    )
    v2.step()
    w3.append([(("a", 1, None), 1, -1)], 1, 2)
    v1 = PostgresExport(
        spark, other, "s3", postgres_dsn, "t3", key_columns=["k"], schema=pg_schema, version=1
    )
    with pytest.raises(Fenced, match="version 2"):
        v1.step()
    assert _table(postgres_dsn, pg_schema, "t3") == {"a": (1, None)}


@pytest.mark.parametrize(
    ("row", "said"),
    [((None, 1, "x"), "null value"), (("a", 1, "nul\x00byte"), "NUL")],
    ids=["null-key", "nul-byte"],
)
def test_a_row_the_table_refuses_is_an_export_error(
    spark: SparkSession,
    postgres_dsn: str,
    pg_schema: str,
    tmp_path: Path,
    row: tuple[Any, ...],
    said: str,
) -> None:
    """A NULL in the key (the table's primary key) or a NUL byte in a text value follows
    from the data: the tick commits nothing and says so (ExportError), as for other rows it
    cannot write. The task failed with psycopg's error before, which the job retried as a
    fault at every tick."""
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("s", SCHEMA)
    writer.append([(("b", 2, None), 0, 1)], 0, 1)
    export = PostgresExport(
        spark, client, "s", postgres_dsn, "t", key_columns=["k"], schema=pg_schema
    )
    export.step()
    writer.append([(row, 1, 1)], 1, 2)
    with pytest.raises(ExportError, match=said):
        export.step()
    assert _table(postgres_dsn, pg_schema, "t") == {"b": (2, None)}
    assert export.progress().frontier == 1  # type: ignore[union-attr]
    export.close()


def test_bad_arguments_and_tables(
    spark: SparkSession, postgres_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    client.open_writer("s", SCHEMA).append([], 0, 1)
    with pytest.raises(InvalidUsage, match="table must be a PostgreSQL name"):
        PostgresExport(spark, client, "s", postgres_dsn, "t; drop", key_columns=["k"])
    with pytest.raises(InvalidUsage, match="needs key_columns"):
        PostgresExport(spark, client, "s", postgres_dsn, "t", key_columns=[])
    with psycopg.connect(postgres_dsn) as conn:
        conn.execute(
            psycopg.sql.SQL("CREATE TABLE {} (k text PRIMARY KEY)").format(
                psycopg.sql.Identifier(pg_schema, "narrow")
            )
        )
    with pytest.raises(InvalidUsage, match=r"lacks the columns \['v', 'note'\]"):
        PostgresExport(
            spark, client, "s", postgres_dsn, "narrow", key_columns=["k"], schema=pg_schema
        )
    # ON CONFLICT (k) needs a unique index on exactly k: every tick failed in its task.
    with psycopg.connect(postgres_dsn) as conn:
        for table, key in (("nokey", ""), ("wide", ", PRIMARY KEY (k, v)")):
            conn.execute(
                psycopg.sql.SQL("CREATE TABLE {} (k text, v bigint, note text" + key + ")").format(
                    psycopg.sql.Identifier(pg_schema, table)
                )
            )
    for table in ("nokey", "wide"):
        with pytest.raises(InvalidUsage, match=r"no primary key or unique index on .*\['k'\]"):
            PostgresExport(
                spark, client, "s", postgres_dsn, table, key_columns=["k"], schema=pg_schema
            )
    assert client.state("s").critical_readers == {}  # a refused export holds nothing
    with psycopg.connect(postgres_dsn) as conn:  # an INCLUDE column is no part of the key
        conn.execute(
            psycopg.sql.SQL(
                "CREATE TABLE {} (k text, v bigint, note text, PRIMARY KEY (k) INCLUDE (v))"
            ).format(psycopg.sql.Identifier(pg_schema, "incl"))
        )
    PostgresExport(
        spark, client, "s", postgres_dsn, "incl", key_columns=["k"], schema=pg_schema
    ).close()
