"""``timeshard verify`` against the upstream of a MYSQL source: the tables, read again.

Verify rebuilds the source from the catalog (its URL recorded without the
password, which ``MYSQL_PWD`` gives back), reads the tables now and rewinds
them with the binlog to the remap's first binding, then rolls forward to
each sampled binding: every time at or beyond the remap's since is checked
while the binlog holds it. Changes committed after the pipeline stopped must
not matter; a wrong row in a subsource's shard must be found at its time.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from tests.integration.test_mysql_source import Upstream

from timeshard.catalog import read_catalog
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.ingest import Ingestion
from timeshard.storage.mysql_source import MySqlSource
from timeshard.storage.reclock import Remap
from timeshard.verify import verify_location

pytestmark = [pytest.mark.spark, pytest.mark.mysql]


@pytest.fixture
def upstream(mariadb_server: Any) -> Any:
    u = Upstream(mariadb_server)
    yield u
    u.close()


def test_verify_checks_mysql_subsources_against_the_tables(
    spark: SparkSession,
    upstream: Upstream,
    mariadb_server: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    upstream.sql("CREATE TABLE a (id int PRIMARY KEY, v varchar(10))")
    upstream.sql("CREATE TABLE b (k int, n decimal(10, 2))")
    upstream.txn(
        ("INSERT INTO a VALUES (1, 'one'), (2, 'two'), (3, NULL)", None),
        ("INSERT INTO b VALUES (1, 1.50), (1, 1.50), (2, NULL)", None),
    )
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    clock = itertools.count(1000, 10)
    ing = Ingestion(spark, client, MySqlSource("my", upstream.url), clock=lambda: next(clock))
    holds = [client.open_leased_reader(s) for s in ("my.a", "my.b", "my.remap")]
    ing.step()  # the snapshot
    upstream.txn(("UPDATE a SET v = 'uno' WHERE id = 1", None))
    upstream.txn(
        ("DELETE FROM a WHERE id = 2", None),
        ("DELETE FROM b WHERE k = 1", None),
        ("INSERT INTO b VALUES (3, 3.25)", None),
        domain=4,
    )
    ing.step()
    upstream.txn(("INSERT INTO a VALUES (4, 'four')", None))
    ing.step()
    ing.close()
    # Changes after the pipeline stopped: the bound of each time leaves them out.
    upstream.txn(
        ("UPDATE a SET v = 'late' WHERE id = 4", None), ("INSERT INTO b VALUES (9, 9)", None)
    )

    [entry] = [e for e in read_catalog(client) if e.kind == "source"]
    assert entry.definition["source_kind"] == "mysql"
    assert f":{mariadb_server.password}@" not in entry.definition["options"]["url"]

    # Without the password verify cannot read the upstream: a note, not a finding.
    monkeypatch.delenv("MYSQL_PWD", raising=False)
    report = verify_location(client, spark=lambda packages: spark, samples=20, seed=5)
    assert report.ok and any("not checked" in n for n in report.objects["my.a"].notes)

    monkeypatch.setenv("MYSQL_PWD", mariadb_server.password)
    report = verify_location(client, spark=lambda packages: spark, samples=20, seed=5)
    assert report.ok, [f.describe() for f in report.findings]
    for shard in ("my.a", "my.b"):
        obj = report.objects[shard]
        assert obj.kind == "export" and not obj.notes, (shard, obj.notes)
        assert len(obj.times["records"]) >= 3  # the snapshot's time and the later ones

    # A wrong row in table a's shard, at a time the remap has bound.
    upper = client.state("my.a").upper.time
    assert upper is not None
    Remap(client, "my.remap").mint(upper + 5, {})
    client.open_writer("my.a").append([((4, "FOUR"), upper, 1)], upper, upper + 1)
    report = verify_location(client, spark=lambda packages: spark, samples=20, seed=5)
    assert [(f.object, f.check, f.time) for f in report.findings] == [("my.a", "records", upper)]
    [wrong] = report.findings
    assert wrong.extra == ({"id": 4, "v": "FOUR", "_err": None, "_diff": 1},)
    for hold in holds:
        hold.expire()
