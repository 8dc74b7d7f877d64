"""``explain`` looks its view up row by row: a catalog row of another object that does not
decode is no reason to refuse it, and the view's own row that does not decode is named."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from timeshard.catalog import CATALOG_KEYS, CATALOG_SCHEMA, CATALOG_SHARD, record_view
from timeshard.cli.explain import view_entry_named
from timeshard.compute.view import ViewDefinition
from timeshard.errors import CorruptState, InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.upsert import FeedbackUpsert, UpsertCommand


def location(root: Path, bad: tuple[str, str]) -> PersistClient:
    """A view ``v`` over ``orders``, and the catalog row ``bad`` that does not decode."""
    client = PersistClient(Location.embedded(root))
    client.open_writer("orders", pa.schema([("k", pa.string())])).expire()
    record_view(client, ViewDefinition("v", {"o": "orders"}, "SELECT k FROM o"), 0)
    upsert = FeedbackUpsert(client, CATALOG_SHARD, CATALOG_SCHEMA, list(CATALOG_KEYS))
    upper = client.state(CATALOG_SHARD).upper.time
    assert upper is not None
    upsert.apply([UpsertCommand(bad, ("{not json",), upper, (0,))], upper + 1)
    upsert.close()
    return client


def test_a_view_is_explained_beside_another_objects_row_that_does_not_decode(
    tmp_path: Path,
) -> None:
    client = location(tmp_path, ("kv", "source"))
    assert view_entry_named(client, "v").definition["sql"] == "SELECT k FROM o"


def test_the_views_own_row_that_does_not_decode_is_named(tmp_path: Path) -> None:
    client = location(tmp_path, ("w", "view"))
    with pytest.raises(CorruptState, match=r"\('w', 'view'\).*not JSON"):
        view_entry_named(client, "w")
    with pytest.raises(InvalidUsage, match=r"no view 'x'.*'v'.*\('w', 'view'\)"):
        view_entry_named(client, "x")
