"""A query typed as its prepared statement's Describe binds it (``typed_as``) runs as it
is when that text does not resolve: the engine resolved it outside the fallback that
leaves the rows untyped, so the SqlError of the Describe's binding (``'null'::interval``,
22007) failed a query that resolves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.location import Location
from timeshard.persist import PersistClient, PersistConfig
from timeshard.server.engine import Engine
from timeshard.server.statements import TypedAs

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def engine(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    path = Path(tmp_path_factory.mktemp("typed_as_unresolved"))
    client = PersistClient(Location.embedded(path / "loc"), PersistConfig(heartbeat_interval_ms=0))
    writer = client.open_writer("t", pa.schema([("one", pa.int64())]))
    writer.append([((1,), 0, 1)], 0, 1)
    writer.expire()
    engine = Engine(spark, client, read_wait_s=30.0)
    try:
        yield engine
    finally:
        engine.close()


def test_a_typed_as_that_does_not_resolve_leaves_the_rows_untyped(engine: Any) -> None:
    query = (
        "SELECT DATE '2020-01-01' + INTERVAL '1-0' YEAR TO MONTH AS d, '2 days'::interval AS i "
        "FROM t"
    )
    typed_as = TypedAs(
        "SELECT DATE '2020-01-01' + CAST(NULL AS INTERVAL DAY TO SECOND) AS d, "
        "'null'::interval AS i FROM t"
    )
    rows = engine.query_rows(query, None, typed_as=typed_as)
    try:
        taken = list(rows)
    finally:
        rows.close()
    assert (rows.columns, [tuple(map(str, r)) for r in taken]) == (
        [("d", "timestamp_ntz"), ("i", "daytimeinterval")],
        [("2021-01-01 00:00:00", "2 days, 0:00:00")],
    )
