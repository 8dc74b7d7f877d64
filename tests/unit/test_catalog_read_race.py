"""A read of the catalog while another writer records into it never reads it as empty.

Each catalog write moves the catalog's since to just below its new upper. A read
that took the upper before such a write and looked at the since (or read) after
it used to find the since past ``upper - 1`` and return no rows, silently: tools
(``verify``, ``status``, ``explain``) saw an empty catalog. A read now reads
again at the new upper, and raises SinceError naming the shard and its
frontiers if the upper keeps moving.
"""

from __future__ import annotations

from typing import Any

import pytest

from timeshard.catalog import CATALOG_SHARD, Catalog, CatalogEntry, read_catalog
from timeshard.errors import CorruptState, SinceError
from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient
from timeshard.persist._internal.machine import Machine


@pytest.fixture
def location() -> Location:
    return Location(MemoryBlob(), MemoryConsensus())


def write_after_fetches(
    monkeypatch: pytest.MonkeyPatch, location: Location, after: set[int]
) -> None:
    """After the n-th head fetch of the catalog (n in ``after``, counted from now), another
    client records one more view, ``w<n>``, as if it had landed just then."""
    fetch = Machine.fetch
    seen = {"fetches": 0, "busy": False}
    other = Catalog(PersistClient(location))

    def fetched(self: Machine) -> Any:
        state = fetch(self)
        if self.shard_id != CATALOG_SHARD or seen["busy"]:
            return state
        seen["fetches"] += 1
        if seen["fetches"] in after:
            seen["busy"] = True
            try:
                other.record([CatalogEntry(f"w{seen['fetches']}", "view", {"sql": "x"})])
            finally:
                seen["busy"] = False
        return state

    monkeypatch.setattr(Machine, "fetch", fetched)


@pytest.mark.parametrize("after", [1, 2, 3, 4])
def test_a_write_landing_during_a_read_is_read_or_not_but_nothing_is_lost(
    location: Location, monkeypatch: pytest.MonkeyPatch, after: int
) -> None:
    client = PersistClient(location)
    Catalog(client).record([CatalogEntry("v", "view", {"sql": "select 1"})])
    write_after_fetches(monkeypatch, location, {after})
    names = [e.name for e in read_catalog(client)]
    assert names in (["v"], ["v", f"w{after}"])


def test_a_catalog_whose_upper_keeps_moving_raises_naming_its_frontiers(
    location: Location, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = PersistClient(location)
    Catalog(client).record([CatalogEntry("v", "view", {"sql": "select 1"})])
    write_after_fetches(monkeypatch, location, set(range(1, 100)))
    with pytest.raises(SinceError, match=rf"shard {CATALOG_SHARD!r}.*since .*upper "):
        read_catalog(client)


def test_a_closed_catalog_shard_is_reported_not_asserted(location: Location) -> None:
    client = PersistClient(location)
    Catalog(client).record([CatalogEntry("v", "view", {"sql": "SELECT 1"})])
    client.close_shard(CATALOG_SHARD)
    with pytest.raises(CorruptState, match="catalog shard 'timeshard_catalog' is closed"):
        read_catalog(client)
