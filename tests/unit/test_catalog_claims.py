"""Two servers creating one name at once: the catalog gives it to one of them.

``Catalog.claim_statement`` decides on what is stored at the catalog's upper
and writes only at that upper (a compare-and-set), so a claim decided on a
read that another claim overtook is decided again, on what is stored now. A
``timeshard serve`` CREATE claims its name before it builds anything: the
losing server answers 42710 and has built (and written) nothing; a CREATE
that fails gives its claim back. No Spark: the engine's builders are stubbed.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from timeshard.catalog import CATALOG_KEYS, CATALOG_SCHEMA, CATALOG_SHARD, Catalog, read_catalog
from timeshard.errors import Determinate, UpperMismatch
from timeshard.location import Location
from timeshard.persist import Appended, PersistClient
from timeshard.server.engine import Engine, _Object
from timeshard.server.statements import Empty, SqlError, parse
from timeshard.storage.upsert import FeedbackUpsert, UpsertCommand

A = {"sql": "CREATE MATERIALIZED VIEW v AS SELECT 1 AS one FROM t", "seq": 1, "object": "view"}
B = {"sql": "CREATE MATERIALIZED VIEW v AS SELECT 2 AS two FROM t", "seq": 1, "object": "view"}


@pytest.fixture
def client(tmp_path: Path) -> PersistClient:
    return PersistClient(Location.embedded(tmp_path / "loc"))


def statements(client: PersistClient) -> dict[str, Any]:
    return {e.name: dict(e.definition) for e in read_catalog(client) if e.kind == "statement"}


def catalog_upper(client: PersistClient) -> int | None:
    return client.state(CATALOG_SHARD).upper.time


def test_a_free_name_is_claimed_and_a_held_one_is_not(client: PersistClient) -> None:
    first, second = Catalog(client, lambda: 10), Catalog(client, lambda: 20)
    assert first.claim_statement("v", A) is None
    upper = catalog_upper(client)
    held = second.claim_statement("v", B)
    assert held is not None and dict(held.definition) == A
    assert first.claim_statement("v", A) is None  # claiming it again: already this statement's
    assert catalog_upper(client) == upper  # neither wrote
    assert statements(client) == {"v": A}


def test_of_two_claims_decided_on_one_read_only_the_first_append_lands(
    client: PersistClient,
) -> None:
    # A second server claims the name between this one's read and its append: the append
    # must not land on the stale read; decided again, the name is held.
    Catalog(client, lambda: 1).record_statement("other", {"sql": "x", "seq": 0, "object": "view"})
    first, second = Catalog(client, lambda: 10), Catalog(client, lambda: 20)
    reads: list[int] = []
    stored = first._stored

    def overtaken() -> Any:
        out = stored()
        reads.append(out[1])
        if len(reads) == 1:  # after this claim read, before it appends
            assert second.claim_statement("v", B) is None
        return out

    first._stored = overtaken  # type: ignore[method-assign]
    held = first.claim_statement("v", A)
    assert held is not None and dict(held.definition) == B
    assert len(reads) == 2 and reads[0] < reads[1], reads
    assert statements(client) == {"other": {"sql": "x", "seq": 0, "object": "view"}, "v": B}


def overtaken_times(client: PersistClient, catalog: Catalog, times: int | None) -> list[int]:
    """Make ``times`` (None: every) reads of ``catalog`` be overtaken by another writer's
    record before its append; the list of reads grows as they happen."""
    reads: list[int] = []
    stored = catalog._stored
    other = Catalog(client, lambda: 1)

    def overtaken() -> Any:
        out = stored()
        reads.append(out[1])
        if times is None or len(reads) <= times:
            other.record_statement(f"o{len(reads)}", {"sql": "x", "seq": 0, "object": "view"})
        return out

    catalog._stored = overtaken  # type: ignore[method-assign]
    return reads


def test_a_write_overtaken_many_times_is_decided_again_until_it_lands(
    client: PersistClient,
) -> None:
    """It gave up after 10 reads with an AssertionError: 8 processes starting at once on
    one location lost entries that way."""
    catalog = Catalog(client, lambda: 10)
    reads = overtaken_times(client, catalog, 15)
    assert catalog.claim_statement("v", A) is None
    assert len(reads) == 16
    assert statements(client)["v"] == A


def test_a_write_always_overtaken_is_a_determinate_fault_in_the_end(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    import timeshard.catalog as catalog_module

    monkeypatch.setattr(catalog_module, "RETRY_FOR_S", 0.5)
    catalog = Catalog(client, lambda: 10)
    reads = overtaken_times(client, catalog, None)
    with pytest.raises(Determinate, match=r"could not write \[\('v', 'statement'\)\]"):
        catalog.claim_statement("v", A)
    assert len(reads) > 1 and "v" not in statements(client)


def test_a_claim_given_back_forgets_only_its_own_statement(client: PersistClient) -> None:
    catalog = Catalog(client, lambda: 10)
    assert catalog.claim_statement("v", A) is None
    assert catalog.forget_statement("v", B) == 0  # another statement: it stays
    assert statements(client) == {"v": A}
    assert catalog.forget_statement("v", A) == 1
    assert statements(client) == {}


def test_an_upsert_append_expecting_another_upper_writes_nothing(client: PersistClient) -> None:
    upsert = FeedbackUpsert(client, CATALOG_SHARD, CATALOG_SCHEMA, list(CATALOG_KEYS))
    try:
        row = ("v", "statement")
        landed = upsert.apply([UpsertCommand(row, ("{}",), 0, (0,))], 1, expected_lower=0)
        assert isinstance(landed, Appended)
        stale = upsert.apply([UpsertCommand(row, None, 1, (1,))], 2, expected_lower=0)
        assert isinstance(stale, UpperMismatch) and stale.current.time == 1
        assert catalog_upper(client) == 1
    finally:
        upsert.close()


class Built:
    """Stub builders for an engine: what each CREATE built, and an optional failure."""

    def __init__(self, engine: Engine, fail: Exception | None = None) -> None:
        self.names: list[str] = []
        self.fail = fail
        engine._create_view = self.view  # type: ignore[method-assign]

    def view(self, statement: Any, seq: int, *, typed: bool, recorded: Any = None) -> _Object:
        if self.fail is not None:
            raise self.fail
        self.names.append(statement.name)
        runner = SimpleNamespace(close=lambda: None, drop=lambda: None)
        return _Object(statement.name, "view", statement.sql, seq, runner, [statement.name])


def run(engine: Engine, sql: str) -> Any:
    statement = parse(sql)
    assert not isinstance(statement, Empty)
    return engine.execute(statement)


def engine(client: PersistClient) -> Engine:
    return Engine(SimpleNamespace(), client, follow_s=3600)  # no follower pass in a test


def test_the_second_server_to_create_a_name_answers_42710_and_builds_nothing(
    client: PersistClient,
) -> None:
    first, second = engine(client), engine(client)
    built_first, built_second = Built(first), Built(second)
    try:
        run(first, "CREATE MATERIALIZED VIEW v AS SELECT 1 AS one FROM t")
        with pytest.raises(SqlError) as refused:
            run(second, "CREATE MATERIALIZED VIEW v AS SELECT 2 AS two FROM t")
        assert refused.value.sqlstate == "42710" and "another server" in str(refused.value)
        done = run(second, "CREATE MATERIALIZED VIEW IF NOT EXISTS v AS SELECT 2 AS two FROM t")
        assert done.tag == "CREATE MATERIALIZED VIEW"
        assert built_first.names == ["v"] and built_second.names == []
        assert second.objects == {}
        sql = statements(client)["v"]["sql"]
        assert sql == "CREATE MATERIALIZED VIEW v AS SELECT 1 AS one FROM t"
    finally:
        first.close()
        second.close()


def test_a_create_that_fails_gives_its_name_back(client: PersistClient) -> None:
    failing, other = engine(client), engine(client)
    Built(failing, SqlError("its query does not resolve", "42P01"))
    built = Built(other)
    try:
        with pytest.raises(SqlError):
            run(failing, "CREATE MATERIALIZED VIEW v AS SELECT 1 AS one FROM t")
        assert statements(client) == {} and failing.objects == {}
        run(other, "CREATE MATERIALIZED VIEW v AS SELECT 2 AS two FROM t")
        assert built.names == ["v"] and list(statements(client)) == ["v"]
    finally:
        failing.close()
        other.close()
