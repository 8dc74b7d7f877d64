"""A view recorded anew: its holds on inputs it no longer reads go, its as_of moves on.

A view holds each input with the critical since handle ``view.<name>``. Redefined
to read other inputs, it must let the inputs it no longer reads compact: the
record of the new definition releases those holds. A redefined view's shard
holds the old query's result below its upper, so the new definition is correct
only from that upper on: the catalog's ``as_of`` says so. No Spark: the holds
are opened as the sink opens them, and the view is recorded directly.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from timeshard.catalog import record_view, stored_entry
from timeshard.compute.view import ViewDefinition
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.persist.holds import view_hold_id

SCHEMA = pa.schema([("n", pa.int64())])


@pytest.fixture
def client(tmp_path: Path) -> PersistClient:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    for shard in ("a", "b", "v"):
        client.open_writer(shard, SCHEMA).expire()
    return client


def hold(client: PersistClient, shard: str) -> None:
    client.open_critical_since(shard, view_hold_id("v"), "")


def held(client: PersistClient, shard: str) -> bool:
    return view_hold_id("v") in client.state(shard).critical_readers


def view(*inputs: str, sql: str = "SELECT 1 AS n") -> ViewDefinition:
    return ViewDefinition("v", {s: s for s in inputs}, sql)


def test_a_view_redefined_releases_the_inputs_it_no_longer_reads(client: PersistClient) -> None:
    hold(client, "a")
    hold(client, "b")
    record_view(client, view("a", "b"), 0)
    record_view(client, view("b"), 0)
    assert not held(client, "a")
    assert held(client, "b")
    assert stored_entry(client, "v", "view").definition["holds"] == {"b": "view.v"}  # type: ignore[union-attr]


def test_a_view_recorded_again_unchanged_keeps_its_holds(client: PersistClient) -> None:
    hold(client, "a")
    record_view(client, view("a"), 0)
    record_view(client, view("a"), 0)
    assert held(client, "a")


def test_a_redefined_view_is_correct_from_its_shard_upper(client: PersistClient) -> None:
    writer = client.open_writer("v", SCHEMA)
    writer.compare_and_append_batch([], 0, 10)  # the old query's result, below 10
    writer.expire()
    record_view(client, view("a"), 0)
    record_view(client, view("a", sql="SELECT 2 AS n"), 9)  # installed at upper - 1
    assert stored_entry(client, "v", "view").definition["as_of"] == 10  # type: ignore[union-attr]
    record_view(client, view("a", sql="SELECT 2 AS n"), 9)  # unchanged: keeps its as_of
    assert stored_entry(client, "v", "view").definition["as_of"] == 10  # type: ignore[union-attr]


def test_a_view_records_its_session_and_another_one_is_a_new_definition(
    client: PersistClient,
) -> None:
    """Nothing recorded the settings a view's content depends on (ANSI): explain classified
    it with its own. Recorded now; an entry from before keeps its as_of, another setting
    is a redefinition (the shard holds the old setting's content below its upper)."""
    writer = client.open_writer("v", SCHEMA)
    writer.compare_and_append_batch([], 0, 10)
    writer.expire()
    record_view(client, view("a"), 0)  # recorded before sessions were
    on = {"spark.sql.ansi.enabled": "true"}
    record_view(client, view("a"), 9, session=on)
    entry = stored_entry(client, "v", "view")
    assert entry is not None and entry.definition["session"] == on
    assert entry.definition["as_of"] == 0  # the same view: correct since it was
    record_view(client, view("a"), 9, session={"spark.sql.ansi.enabled": "false"})
    entry = stored_entry(client, "v", "view")
    assert entry is not None and entry.definition["as_of"] == 10
