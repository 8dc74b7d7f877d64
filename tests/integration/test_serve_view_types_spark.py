"""A view serve creates types its query as an ad-hoc query is typed, and keeps it.

serve typed an ad-hoc query as PostgreSQL does (an unconstrained ``numeric`` keeps its
operand's value, ``timestamp`` has no zone), but a view's query kept Spark's types: in
``CREATE MATERIALIZED VIEW v AS SELECT d::numeric ...`` the bare DECIMAL is Spark's
DECIMAL(10, 0), so the view stored 9.99 as 10, and ``::timestamp`` was an instant (1184).
Now a new view's query has the typing rewrites, and its statement's entry records that
(``typed``): a restore types it again, to the schema its shard holds. A view recorded
without ``typed`` (before this) keeps Spark's types at its restore.
"""

from __future__ import annotations

import datetime
import decimal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.catalog import Catalog, read_catalog
from timeshard.location import Location
from timeshard.persist import PersistClient, PersistConfig
from timeshard.server.engine import TYPED_VIEWS, Engine
from timeshard.server.pgwire import PgServer

pytestmark = pytest.mark.spark

D = decimal.Decimal
NAIVE = datetime.datetime(2024, 1, 2, 3, 4, 5)
SCHEMA = pa.schema([("d", pa.decimal128(10, 3)), ("f", pa.float64()), ("ts", pa.timestamp("us"))])
QUERY = "SELECT d::numeric AS dn, f::numeric AS fn, ts::timestamp AS tn FROM t"
#: What PostgreSQL answers for QUERY over the row (9.99, 2.5, NAIVE): the scale of a
#: double cast to numeric is 18 here (one column's, see query_rewrites._numeric_casts).
TYPED = (D("9.990"), D("2.500000000000000000"), NAIVE)


@pytest.fixture
def client(tmp_path: Path) -> PersistClient:
    client = PersistClient(
        Location.embedded(tmp_path / "loc"), PersistConfig(heartbeat_interval_ms=0)
    )
    writer = client.open_writer("t", SCHEMA)
    writer.append([((D("9.990"), 2.5, NAIVE), 0, 1)], 0, 1)
    writer.expire()
    return client


@contextmanager
def served(spark: SparkSession, client: PersistClient) -> Iterator[Any]:
    """A started engine (it restores what the catalog records) and a connection to it."""
    engine = Engine(spark, client, read_wait_s=60.0)
    assert engine.start() == []
    server = PgServer(engine, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with psycopg.connect(
            host="127.0.0.1", port=server.port, user="me", dbname="x", autocommit=True
        ) as conn:
            yield conn
    finally:
        server.shutdown()
        server.server_close()
        engine.close()


def rows(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    return conn.execute(sql).fetchall()


def test_a_view_types_its_query_as_a_query_is_typed_and_keeps_it_at_a_restore(
    spark: SparkSession, client: PersistClient
) -> None:
    with served(spark, client) as conn:
        assert rows(conn, QUERY) == [TYPED]
        conn.execute(f"CREATE MATERIALIZED VIEW v AS {QUERY}")
        assert rows(conn, "SELECT dn, fn, tn FROM v") == [TYPED]
    entry = next(e for e in read_catalog(client) if e.kind == "statement" and e.name == "v")
    # The lowest version of the typing rewrites that resolves it alike: no rewrite of
    # version 2 changes this query, so a server of version 1 reads its entry right.
    assert entry.definition.get("typed") == 1 < TYPED_VIEWS
    with served(spark, client) as conn:  # the restore types it again, as stored
        assert rows(conn, "SELECT dn, fn, tn FROM v") == [TYPED]


def test_a_view_recorded_before_views_were_typed_keeps_spark_s_types(
    spark: SparkSession, client: PersistClient
) -> None:
    """Its shard holds Spark's types (DECIMAL(10, 0), TIMESTAMP): its restore resolves
    its query to them again, and runs (typed, it would be refused: another schema)."""
    sql = f"CREATE MATERIALIZED VIEW v AS {QUERY}"
    assert Catalog(client).claim_statement("v", {"sql": sql, "seq": 1, "object": "view"}) is None
    with served(spark, client) as conn:
        (dn, fn, tn), *more = rows(conn, "SELECT dn, fn, tn FROM v")
        assert not more
        assert (dn, fn) == (D("10"), D("3"))  # Spark's DECIMAL(10, 0) rounds
        assert tn.tzinfo is not None  # Spark's TIMESTAMP: an instant


def test_a_create_again_of_a_typed_view_whose_entry_stayed_takes_it_typed(
    spark: SparkSession, client: PersistClient
) -> None:
    """A typed CREATE that failed once its view was recorded, and whose undo could not
    forget the view's entry, leaves the entry and the typed shard. Before: its retry took
    the entry for a run file's view and resolved the query untyped, which the shard's
    schema refused ("exists with schema"), for good. Now it is typed, as the entry is."""
    with served(spark, client) as conn:
        conn.execute(f"CREATE MATERIALIZED VIEW v AS {QUERY}")
        assert rows(conn, "SELECT dn, fn, tn FROM v") == [TYPED]
    Catalog(client).forget_statement("v")  # the CREATE's claim given back; the entry stays
    with served(spark, client) as conn:
        conn.execute(f"CREATE MATERIALIZED VIEW v AS {QUERY}")
        assert rows(conn, "SELECT dn, fn, tn FROM v") == [TYPED]
