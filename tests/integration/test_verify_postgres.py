"""``timeshard verify`` against the upstream of a POSTGRES source: the tables, read again.

The server keeps no history, so verify reads each table *now*, rewinds it to
the source's slot position with the slot's own changes and rolls forward to
each sampled binding (:func:`timeshard.verify.replay.replay_floor`). Times
bound before the slot's position cannot be told and are counted in a note;
changes committed upstream after the pipeline stopped must not matter; a
wrong row in a subsource's shard must be found at its time.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from tests.integration.test_postgres_source import Upstream

from timeshard.catalog import read_catalog
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.ingest import Ingestion
from timeshard.storage.postgres_source import PostgresSource
from timeshard.storage.reclock import Remap
from timeshard.verify import verify_location

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


@pytest.fixture
def upstream(postgres_server: Any) -> Any:
    u = Upstream(postgres_server.dsn)
    yield u
    u.close()


def test_verify_checks_postgres_subsources_against_the_tables(
    spark: SparkSession, upstream: Upstream, tmp_path: Path
) -> None:
    upstream.create("a", "id int PRIMARY KEY, v text")
    upstream.create("b", "k int, n numeric(10, 2)")
    upstream.publish("a", "b")
    upstream.txn(
        ("a", "INSERT INTO {t} VALUES (1, 'one'), (2, 'two'), (3, NULL)", None),
        ("b", "INSERT INTO {t} VALUES (1, 1.50), (1, 1.50), (2, NULL)", None),
    )
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    clock = itertools.count(1000, 10)
    source = PostgresSource("pg", upstream.dsn, upstream.pub, slot=f"v_{upstream.schema}")
    shards = {sub.rsplit(".", 1)[-1]: f"pg.{sub}" for sub in source.outputs()}
    ing = Ingestion(spark, client, source, clock=lambda: next(clock))
    holds = [client.open_leased_reader(s) for s in [*shards.values(), "pg.remap"]]
    ing.step()
    upstream.txn(("a", "UPDATE {t} SET v = 'uno' WHERE id = 1", None))
    upstream.txn(
        ("a", "DELETE FROM {t} WHERE id = 2", None),
        ("b", "DELETE FROM {t} WHERE k = 1", None),
        ("b", "INSERT INTO {t} VALUES (3, 3.25)", None),
    )
    ing.step()
    upstream.txn(("a", "INSERT INTO {t} VALUES (4, 'four')", None))
    ing.step()
    ing.close()
    # Changes after the pipeline stopped: verify must rewind them, not count them.
    upstream.txn(
        ("a", "UPDATE {t} SET v = 'late' WHERE id = 4", None),
        ("b", "INSERT INTO {t} VALUES (9, 9.99)", None),
    )

    [entry] = [e for e in read_catalog(client) if e.kind == "source"]
    assert entry.definition["source_kind"] == "postgres"
    assert "password" not in entry.definition["options"]["dsn"]
    report = verify_location(client, spark=lambda packages: spark, samples=20, seed=5)
    assert report.ok, [f.describe() for f in report.findings]
    for shard in shards.values():
        obj = report.objects[shard]
        assert obj.kind == "export" and obj.times["records"], (shard, obj)
        assert all("not checked:" in n and "times" in n for n in obj.notes), obj.notes
    assert (
        max(report.objects[shards["a"]].times["records"])
        == client.state(shards["a"]).upper.time - 1
    )

    # A wrong row in table a's shard, at a time whose binding the slot still covers.
    upper = client.state(shards["a"]).upper.time
    assert upper is not None
    Remap(client, "pg.remap").mint(upper + 5, {})
    client.open_writer(shards["a"]).append([((4, "FOUR"), upper, 1)], upper, upper + 1)
    report = verify_location(client, spark=lambda packages: spark, samples=20, seed=5)
    assert [(f.object, f.check, f.time) for f in report.findings] == [
        (shards["a"], "records", upper)
    ]
    [wrong] = report.findings
    assert wrong.extra == ({"id": 4, "v": "FOUR", "_err": None, "_diff": 1},)
    for hold in holds:
        hold.expire()
    source.drop()
