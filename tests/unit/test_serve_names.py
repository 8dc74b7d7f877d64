"""The names ``timeshard serve`` gives to and reads from shards.

A view's name is its shard's: a view named after the catalog, the status
collection, the introspection relation or a source's remap shard -- or after
any shard no view owns -- is refused before anything is built, and a
source's remap shard (its reclocking bindings, internal to its ingestion) is
read by no query, view or sink. No Spark: the view builder is stubbed.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from tests.unit.test_catalog_claims import engine, run

import timeshard.compute as compute
from timeshard.catalog import CATALOG_SHARD, read_catalog
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.server.engine import Engine
from timeshard.server.statements import SqlError
from timeshard.storage.health import STATUS_SHARD

ONE = pa.schema([("one", pa.int64())])


@pytest.fixture
def client(tmp_path: Path) -> PersistClient:
    return PersistClient(Location.embedded(tmp_path / "loc"))


class Installs:
    """A stub of ``MaterializedView.install``: the names installed; it creates the shard."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: list[str] = []
        monkeypatch.setattr(compute.MaterializedView, "install", self.install)

    def install(self, spark: Any, client: PersistClient, definition: Any, **_: Any) -> Any:
        self.names.append(definition.name)
        if definition.name not in client.list_shards():
            client.open_writer(definition.name, ONE).expire()
        return SimpleNamespace(close=lambda: None, drop=lambda: None, step=lambda: None)


def served_with_input(client: PersistClient) -> Engine:
    client.open_writer("t", ONE).append([((1,), 0, 1)], 0, 5)
    return engine(client)


@pytest.mark.parametrize(
    ("name", "sqlstate"),
    [
        (CATALOG_SHARD, "42939"),
        (STATUS_SHARD, "42939"),
        ("timeshard_objects", "42939"),
        ("s.remap", "42939"),  # the remap shard of a source s, existing or not
        ("later.remap", "42939"),  # a source named later would take it for its remap
        ("foreign", "42710"),  # a shard of the location no view owns
    ],
)
def test_a_view_takes_over_no_shard_it_does_not_own(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch, name: str, sqlstate: str
) -> None:
    """A view named so was installed into that shard: a view ``timeshard_catalog`` wrote
    rows the catalog could not decode (the server never started again), and DROP of a view
    ``s.remap`` closed the source's remap shard (the source stalled for good)."""
    installs = Installs(monkeypatch)
    served = served_with_input(client)
    client.open_writer("s.remap", pa.schema([("partition", pa.string()), ("offset", pa.int64())]))
    client.open_writer("foreign", ONE).append([((7,), 0, 1)], 0, 3)
    before = {s: client.state(s).upper for s in client.list_shards()}
    try:
        with pytest.raises(SqlError) as refused:
            run(served, f'CREATE MATERIALIZED VIEW "{name}" AS SELECT one FROM t')
        assert refused.value.sqlstate == sqlstate, refused.value
        assert name in str(refused.value)
        assert installs.names == [] and served.objects == {}
        assert not [e for e in read_catalog(client) if e.kind == "statement"]
        assert {s: client.state(s).upper for s in before} == before
    finally:
        served.close()


def test_a_view_s_own_shard_is_taken_again_when_its_statement_is_restored(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal of a shard no view owns leaves a view's own shard to it on a restart."""
    installs = Installs(monkeypatch)
    served = served_with_input(client)
    try:
        run(served, "CREATE MATERIALIZED VIEW v AS SELECT one FROM t")
    finally:
        served.close()
    from timeshard.catalog import record_view
    from timeshard.compute import ViewDefinition

    record_view(client, ViewDefinition("v", {"t": "t"}, "SELECT one FROM t"), 0)
    restarted = engine(client)
    try:
        assert restarted.start() == []
        assert set(restarted.objects) == {"v"} and installs.names == ["v", "v"]
    finally:
        restarted.close()


@pytest.mark.parametrize(
    "sql",
    [
        'SELECT * FROM "s.remap"',
        "SELECT * FROM s.remap",
        'CREATE MATERIALIZED VIEW r AS SELECT count(*) AS n FROM "s.remap"',
        'SUBSCRIBE "s.remap"',
        "CREATE SINK r FROM \"s.remap\" INTO DELTA (URI '/nowhere') KEY (partition)",
    ],
)
def test_a_source_s_remap_shard_is_read_by_nothing(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch, sql: str
) -> None:
    """A view reading ``s.remap`` was not one of the source's readers: DROP SOURCE s without
    CASCADE closed the remap under it, and the view was stuck at its upper for good."""
    installs = Installs(monkeypatch)
    served = served_with_input(client)
    remap = pa.schema([("partition", pa.string()), ("offset", pa.int64())])
    client.open_writer("s.remap", remap).append([(("0", 3), 0, 1)], 0, 5)
    try:
        with pytest.raises(SqlError) as refused:
            run(served, sql)
        assert refused.value.sqlstate == "42501", refused.value
        assert "'s.remap'" in str(refused.value) and "remap shard" in str(refused.value)
        assert installs.names == [] and served.objects == {}
    finally:
        served.close()


def test_the_relations_listed_are_those_a_query_reads(client: PersistClient) -> None:
    served = served_with_input(client)
    client.open_writer("s.remap", pa.schema([("partition", pa.string()), ("offset", pa.int64())]))
    try:
        with pytest.raises(SqlError, match=r"the location has: t, timeshard_objects$"):
            served.resolve("SELECT * FROM nowhere")
    finally:
        served.close()


@pytest.mark.parametrize("shard", ["123", "1e5", "12L", "7.days", "2d"])
def test_every_alias_is_a_name_spark_takes_for_a_temp_view(
    client: PersistClient, shard: str
) -> None:
    """A source named ``"123"`` (a valid shard id) could not be read: its alias ``123`` is a
    number to Spark's parser ("Invalid view name: 123"), as views' aliases are too."""
    client.open_writer(shard, ONE).expire()
    served = engine(client)
    try:
        spark_sql, aliases = served.resolve(f'SELECT count(*) FROM "{shard}"')
        assert list(aliases.values()) == [shard]
        (alias,) = aliases
        assert re.fullmatch(r"[A-Za-z_]\w*", alias, re.ASCII), alias
        assert f"FROM {alias} AS" in spark_sql, spark_sql
    finally:
        served.close()


def test_unquoted_names_fold_to_lower_case_and_quoted_ones_stay(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``CREATE SOURCE Ev`` creates ``ev`` (the DDL folds), but ``SELECT ... FROM Ev``
    answered 42P01 'unknown relation Ev': a query's names did not fold as PostgreSQL's do."""
    installs = Installs(monkeypatch)
    for shard in ("ev", "KV"):
        client.open_writer(shard, ONE).append([((1,), 0, 1)], 0, 5)
    served = engine(client)
    seen: list[Any] = []
    monkeypatch.setattr(
        compute.MaterializedView,
        "install",
        lambda spark, client, definition, **kw: (
            seen.append(definition) or installs.install(spark, client, definition, **kw)
        ),
    )
    try:
        spark_sql, aliases = served.resolve('SELECT One AS N FROM Ev JOIN "KV" USING (One)')
        assert sorted(aliases.values()) == ["KV", "ev"]
        assert "AS n" in spark_sql and "one" in spark_sql and "One" not in spark_sql, spark_sql
        for quoted in ('SELECT * FROM "Ev"', "SELECT * FROM kv"):
            with pytest.raises(SqlError, match="unknown relation") as unknown:
                served.resolve(quoted)
            assert unknown.value.sqlstate == "42P01"
        run(served, "CREATE MATERIALIZED VIEW V AS SELECT One FROM EV")
        (definition,) = seen
        assert definition.name == "v" and list(definition.inputs.values()) == ["ev"]
    finally:
        served.close()
