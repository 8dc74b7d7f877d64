"""A view that the catalog records is installed from its recorded Spark SQL at a restore,
not resolved again (no Spark: the view's install is stubbed, and records its entry as
the real one does).

Before, a restore resolved the view's statement again: once serve's typing rewrites
changed (a later version of the code), a typed view's query came out otherwise, and the
view was redefined from its shard's upper on (or refused for its shard's schema).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from tests.unit.test_catalog_claims import engine, run

import timeshard.compute as compute
import timeshard.server.engine as engine_module
from timeshard.catalog import Catalog, read_catalog, record_view
from timeshard.location import Location
from timeshard.persist import PersistClient


@pytest.fixture
def client(tmp_path: Path) -> PersistClient:
    return PersistClient(Location.embedded(tmp_path / "loc"))


def create(client: PersistClient, sql: str) -> None:
    """Run a client's CREATE on a server of its own, then stop it."""
    served = engine(client)
    try:
        run(served, sql)
    finally:
        served.close()


def restart(client: PersistClient) -> None:
    """Start a server (a restart: it restores what the catalog records), then stop it."""
    served = engine(client)
    try:
        assert served.start() == []  # every recorded object restored
    finally:
        served.close()


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch, client: PersistClient) -> list[Any]:
    """Each definition a view was installed with; the install records it, as the real one."""
    definitions: list[Any] = []

    def install(spark: Any, client_: PersistClient, definition: Any, **_: Any) -> Any:
        definitions.append(definition)
        record_view(client_, definition, 0)
        return SimpleNamespace(close=lambda: None, drop=lambda: None)

    monkeypatch.setattr(compute.MaterializedView, "install", staticmethod(install))
    return definitions


def test_a_restored_view_is_the_query_its_entry_records_not_the_rewrites_of_now(
    client: PersistClient, installed: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = client.open_writer("t", pa.schema([("d", pa.float64())]))
    try:
        create(client, "CREATE MATERIALIZED VIEW v AS SELECT d::numeric AS x FROM t")
        [created] = installed
        recorded = {e.name: e.definition for e in read_catalog(client) if e.kind == "view"}
        assert recorded["v"]["sql"] == created.sql
        # A later server whose rewrites type the query otherwise (here: not at all).
        monkeypatch.setattr(
            engine_module, "_numeric_casts", lambda tree, columns_of, version=0: None
        )
        monkeypatch.setattr(engine_module, "_naive_timestamps", lambda tree: None)
        later = engine(client)
        try:
            assert later.resolve("SELECT d::numeric AS x FROM t")[0] != created.sql
        finally:
            later.close()
        restart(client)  # the view restored, no failure
        assert [d.sql for d in installed] == [created.sql, created.sql]
        assert installed[1].inputs == created.inputs
    finally:
        writer.expire()


def test_a_taken_over_view_whose_create_died_before_its_install_is_restored_as_created(
    client: PersistClient, installed: list[Any]
) -> None:
    """A run file's view ``v`` (``d AS x``), which a client's CREATE took over (``d * 2 AS
    y``) and claimed, then died before its install recorded the view: a restore from the
    view's catalog entry would have installed the run file's query under the client's
    statement. It installs the resolution its statement records."""
    writer = client.open_writer("t", pa.schema([("d", pa.float64())]))
    try:
        record_view(client, compute.ViewDefinition("v", {"t": "t"}, "SELECT d AS x FROM t"), 0)
        create(client, "CREATE MATERIALIZED VIEW v AS SELECT d * 2 AS y FROM t")
        [created] = installed
        assert "* 2" in created.sql
        # As if it died before its install: the view entry is the run file's again.
        record_view(client, compute.ViewDefinition("v", {"t": "t"}, "SELECT d AS x FROM t"), 0)
        restart(client)  # the view restored, no failure
        assert installed[1].sql == created.sql
    finally:
        writer.expire()


def test_a_statement_recorded_before_resolutions_were_gets_the_one_its_view_was_restored_from(
    client: PersistClient, installed: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry from before 37ce78e has no ``resolved``: its first restore resolves it
    and records that, and later versions restore it from there."""
    writer = client.open_writer("t", pa.schema([("d", pa.float64())]))
    try:
        create(client, "CREATE MATERIALIZED VIEW v AS SELECT d::numeric AS x FROM t")
        [created] = installed
        # As an older server recorded it: the same statement, without its resolution.
        [held] = [e for e in read_catalog(client) if e.kind == "statement"]
        older = {k: v for k, v in held.definition.items() if k != "resolved"}
        Catalog(client).amend_statement("v", held.definition, older)
        restart(client)  # the view restored, no failure
        [held] = [e for e in read_catalog(client) if e.kind == "statement"]
        assert held.definition["resolved"] == {"sql": created.sql, "inputs": {"t": "t"}}
        # A later version whose rewrites type the query otherwise restores it as it was.
        monkeypatch.setattr(
            engine_module, "_numeric_casts", lambda tree, columns_of, version=0: None
        )
        restart(client)  # the view restored, no failure
        assert [d.sql for d in installed] == [created.sql] * 3
    finally:
        writer.expire()


def test_a_claim_whose_view_is_not_recorded_yet_is_not_amended(
    client: PersistClient, installed: list[Any]
) -> None:
    """An older server's CREATE under way: its claim has no resolution and its view's
    install has not recorded the view yet. Another server that runs it must leave the
    claim as it is, which the older server gives back (compare-and-set) if its CREATE
    fails."""
    writer = client.open_writer("t", pa.schema([("d", pa.float64())]))
    try:
        claim = {"sql": "CREATE MATERIALIZED VIEW v AS SELECT d AS x FROM t", "seq": 1}
        claim["object"] = "view"
        assert Catalog(client).claim_statement("v", claim) is None
        restart(client)
        assert len(installed) == 1  # it runs the view ...
        [held] = [e for e in read_catalog(client) if e.kind == "statement"]
        assert "resolved" not in held.definition  # ... and leaves the claim as it is
        assert Catalog(client).forget_statement("v", claim) == 1  # the older server's undo
    finally:
        writer.expire()


def test_an_old_statement_that_resolves_otherwise_now_is_amended_only_once_its_view_is(
    client: PersistClient, installed: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry from before resolutions were, first restored by a version whose rewrites
    type its query otherwise: that restore redefines the view (from its shard's upper on)
    and leaves the statement; the next restore, whose view entry is the new query, records
    it."""
    writer = client.open_writer("t", pa.schema([("d", pa.float64())]))
    try:
        create(client, "CREATE MATERIALIZED VIEW v AS SELECT d::numeric AS x FROM t")
        [held] = [e for e in read_catalog(client) if e.kind == "statement"]
        older = {k: v for k, v in held.definition.items() if k != "resolved"}
        Catalog(client).amend_statement("v", held.definition, older)
        monkeypatch.setattr(
            engine_module, "_numeric_casts", lambda tree, columns_of, version=0: None
        )
        restart(client)
        [held] = [e for e in read_catalog(client) if e.kind == "statement"]
        assert "resolved" not in held.definition
        redefined = installed[1].sql
        assert redefined != installed[0].sql
        restart(client)
        [held] = [e for e in read_catalog(client) if e.kind == "statement"]
        assert held.definition["resolved"]["sql"] == redefined
    finally:
        writer.expire()
