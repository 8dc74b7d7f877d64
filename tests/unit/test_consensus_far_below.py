"""``scan`` and ``truncate`` take any ``int`` up to ``MAX_SEQNO`` (consensus invariant 5),
in every backend: one below ``-2**63`` is below every version too.

SQLite bound such a seqno as is and raised a bare OverflowError ("Python int too
large to convert to SQLite INTEGER"), where memory and PostgreSQL answered.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.pg_server import PostgresServer

from timeshard.location import (
    CaSResult,
    Consensus,
    MemoryConsensus,
    PostgresConsensus,
    SqliteConsensus,
    VersionedData,
)

POSTGRES = pytest.param("postgres", marks=pytest.mark.postgres)


@pytest.fixture(params=["memory", "sqlite", POSTGRES])
def consensus(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Consensus]:
    c: Consensus
    if request.param == "memory":
        c = MemoryConsensus()
    elif request.param == "sqlite":
        c = SqliteConsensus(tmp_path / "consensus.sqlite")
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        c = PostgresConsensus(server.isolated_dsn())
    assert c.compare_and_set("k", None, VersionedData(0, b"a")) is CaSResult.COMMITTED
    assert c.compare_and_set("k", 0, VersionedData(3, b"b")) is CaSResult.COMMITTED
    yield c
    if isinstance(c, SqliteConsensus | PostgresConsensus):
        c.close()


@pytest.mark.parametrize("below", [-1, -(2**63), -(2**63) - 1, -(2**70)])
def test_a_seqno_far_below_zero_is_below_every_version(consensus: Consensus, below: int) -> None:
    assert [v.seqno for v in consensus.scan("k", below, 10)] == [0, 3]
    assert consensus.truncate("k", below) == 0
    assert [v.seqno for v in consensus.scan("k", below, 1)] == [0]
