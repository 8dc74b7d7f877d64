"""Consensus arguments of the wrong type or out of range: InvalidUsage naming the value,
the same in every backend, before anything is read or written.

A float seqno was stored truncated by SQLite and compared as unequal by the
memory backend; a seqno past 2**63 - 1 was stored by memory and refused by
SQLite with an OverflowError (PostgreSQL: a Determinate fault, retried for
ever); a string seqno raised TypeError; a float scan limit was a Determinate
fault.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.pg_server import PostgresServer

from timeshard.errors import InvalidUsage
from timeshard.location import (
    CaSResult,
    Consensus,
    MemoryConsensus,
    PostgresConsensus,
    SqliteConsensus,
    VersionedData,
)

POSTGRES = pytest.param("postgres", marks=pytest.mark.postgres)
TOO_BIG = 2**63


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
    yield c
    if isinstance(c, SqliteConsensus | PostgresConsensus):
        c.close()


def bad_calls(c: Consensus) -> list[tuple[str, Callable[[], object]]]:
    return [
        ("1.5", lambda: c.compare_and_set("k", 0, VersionedData(1.5, b"x"))),  # type: ignore[arg-type]
        ("True", lambda: c.compare_and_set("k", 0, VersionedData(True, b"x"))),
        ("'1'", lambda: c.compare_and_set("k", 0, VersionedData("1", b"x"))),  # type: ignore[arg-type]
        (str(TOO_BIG), lambda: c.compare_and_set("k", 0, VersionedData(TOO_BIG, b"x"))),
        ("'0'", lambda: c.compare_and_set("k", "0", VersionedData(1, b"x"))),  # type: ignore[arg-type]
        ("got str", lambda: c.compare_and_set("k", 0, VersionedData(1, "text"))),  # type: ignore[arg-type]
        ("'0'", lambda: c.truncate("k", "0")),  # type: ignore[arg-type]
        ("0.0", lambda: c.truncate("k", 0.0)),  # type: ignore[arg-type]
        ("'0'", lambda: c.scan("k", "0", 10)),  # type: ignore[arg-type]
        (str(TOO_BIG), lambda: c.scan("k", TOO_BIG, 10)),
        ("1.5", lambda: c.scan("k", 0, 1.5)),  # type: ignore[arg-type]
        (str(TOO_BIG), lambda: c.scan("k", 0, TOO_BIG)),
    ]


@pytest.mark.parametrize("index", range(12))
def test_a_bad_consensus_argument_is_invalid_usage_naming_it(
    consensus: Consensus, index: int
) -> None:
    shown, call = bad_calls(consensus)[index]
    with pytest.raises(InvalidUsage) as info:
        call()
    assert shown in str(info.value)
    assert consensus.scan("k", 0, 10) == [VersionedData(0, b"a")]


def test_the_largest_seqno_and_negative_scan_starts_are_accepted(consensus: Consensus) -> None:
    top = TOO_BIG - 1
    assert consensus.compare_and_set("k", 0, VersionedData(top, b"z")) is CaSResult.COMMITTED
    assert consensus.scan("k", -5, 1) == [VersionedData(0, b"a")]
    assert consensus.scan("k", top, top) == [VersionedData(top, b"z")]
    assert consensus.truncate("k", top) == 1
