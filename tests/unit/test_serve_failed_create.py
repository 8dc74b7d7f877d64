"""A CREATE that fails part way leaves nothing that refuses its retry.

``MaterializedView.install`` makes the view's shard, registers holds on the
inputs and records the view, in that order; a failure after the shard was
made (a Spark error, a check that comes late) left a shard that no catalog
entry owned, and the retry of the same CREATE was refused with 42710 ("the
location has a shard that is no view's") though nothing usable existed. No
Spark: the view builder is stubbed, as in ``test_server_drop.py``.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from tests.unit.test_catalog_claims import engine, run

import timeshard.compute as compute
from timeshard.catalog import read_catalog, record_view
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.persist.holds import view_hold_id
from timeshard.server.statements import SqlError

SCHEMA = pa.schema([("one", pa.int64())])


@pytest.fixture
def client(tmp_path: Path) -> PersistClient:
    c = PersistClient(Location.embedded(tmp_path / "loc"))
    c.open_writer("t", SCHEMA).append([((1,), 0, 1)], 0, 5)
    return c


class Install:
    """A stub of ``MaterializedView.install`` that does what the real one does to the
    location (the shard, the hold on each input, the catalog entry) and fails, while
    ``fail_after`` names a step, right after it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fail_after: str | None = None
        monkeypatch.setattr(compute.MaterializedView, "install", self.install)

    def install(self, spark: Any, client: PersistClient, definition: Any, **_: Any) -> Any:
        if definition.name not in client.list_shards():
            client.open_writer(definition.name, SCHEMA).expire()
        self.failing("shard")
        for shard in definition.inputs.values():
            client.open_critical_since(shard, view_hold_id(definition.name), "")
        self.failing("holds")
        record_view(client, definition, 5)
        self.failing("recorded")
        return SimpleNamespace(close=lambda: None, drop=lambda: None, step=lambda: None)

    def failing(self, step: str) -> None:
        if self.fail_after == step:
            raise RuntimeError(f"Spark failed after the {step}")


@pytest.mark.parametrize("step", ["shard", "holds", "recorded"])
def test_a_view_create_that_fails_part_way_can_be_retried_and_holds_nothing(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    install = Install(monkeypatch)
    served = engine(client)
    create = "CREATE MATERIALIZED VIEW v AS SELECT one FROM t"
    try:
        install.fail_after = step
        with pytest.raises(RuntimeError, match=f"after the {step}"):
            run(served, create)
        assert served.objects == {}
        assert [(e.name, e.kind) for e in read_catalog(client)] == []
        assert view_hold_id("v") not in client.state("t").critical_readers
        install.fail_after = None
        assert run(served, create).tag == "CREATE MATERIALIZED VIEW"
        assert set(served.objects) == {"v"}
    finally:
        served.close()


def test_a_shard_another_program_wrote_is_still_refused(client: PersistClient) -> None:
    """Only a shard that holds nothing is taken as a failed CREATE's leftover."""
    client.open_writer("v", SCHEMA).append([((1,), 0, 1)], 0, 1)
    served = engine(client)
    try:
        with pytest.raises(SqlError, match="no view's") as refused:
            run(served, "CREATE MATERIALIZED VIEW v AS SELECT one FROM t")
        assert refused.value.sqlstate == "42710"
    finally:
        served.close()
