"""A ``consensus`` table dropped, renamed or stripped of a column after the consensus was
opened is CorruptState naming the location, in every call; a privilege taken away stays a
fault.

Opening checks the table's shape, but a later change went unnoticed: SQLite's "no such
table: consensus" (and PostgreSQL's ``undefined_table``, 42P01) came out as Determinate,
a fault retried for ever, although the versions stored there are gone and no retry brings
them back. A PostgreSQL permission error (42501) is a fault an administrator can fix: it
stays Determinate, and the consensus works again once the privilege is granted.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from tests.pg_server import PostgresServer

from timeshard.errors import CorruptState, Determinate
from timeshard.location import (
    CaSResult,
    Consensus,
    PostgresConsensus,
    SqliteConsensus,
    VersionedData,
)

CALLS: dict[str, Callable[[Consensus], object]] = {
    "head": lambda c: c.head("s"),
    "scan": lambda c: c.scan("s", 0, 10),
    "compare_and_set": lambda c: c.compare_and_set("s", 0, VersionedData(1, b"y")),
    "truncate": lambda c: c.truncate("s", 0),
    "list_keys": lambda c: c.list_keys(),
}

#: The calls that name the data column (``truncate`` and ``list_keys`` do not: they work on
#: without it).
DATA_CALLS = ["head", "scan", "compare_and_set"]
SQLITE_CHANGES = {
    "dropped": ("DROP TABLE consensus", "table consensus is missing", list(CALLS)),
    "renamed": ("ALTER TABLE consensus RENAME TO old", "table consensus is missing", list(CALLS)),
    "data renamed": (
        "ALTER TABLE consensus RENAME COLUMN data TO d",
        "has column d NOT NULL without a default",
        DATA_CALLS,
    ),
}


@pytest.mark.parametrize("change", SQLITE_CHANGES)
def test_a_sqlite_table_changed_since_opening_is_corrupt_state(tmp_path: Path, change: str) -> None:
    path = tmp_path / "consensus.sqlite"
    c = SqliteConsensus(path)
    try:
        assert c.compare_and_set("s", None, VersionedData(0, b"x")) is CaSResult.COMMITTED
        statement, message, calls = SQLITE_CHANGES[change]
        with sqlite3.connect(path) as conn:
            conn.execute(statement)
        for call in calls * 2:  # not once: every call
            with pytest.raises(CorruptState) as e:
                CALLS[call](c)
            assert str(path) in str(e.value) and message in str(e.value), e.value
    finally:
        c.close()


PG_CHANGES = {
    "dropped": ("DROP TABLE consensus", "has no table consensus on its search_path", list(CALLS)),
    "renamed": ("ALTER TABLE consensus RENAME TO old", "has no table consensus on", list(CALLS)),
    "data dropped": (
        "ALTER TABLE consensus DROP COLUMN data",
        r"consensus needs column data bytea, but it has no such column",
        DATA_CALLS,
    ),
}


def _schema(dsn: str) -> str:
    options = psycopg.conninfo.conninfo_to_dict(dsn)["options"]
    assert isinstance(options, str)
    return options.rpartition("=")[2]


@pytest.mark.postgres
@pytest.mark.parametrize("change", PG_CHANGES)
def test_a_postgres_table_changed_since_opening_is_corrupt_state(
    postgres_server: PostgresServer, change: str
) -> None:
    dsn = postgres_server.isolated_dsn()
    c = PostgresConsensus(dsn)
    try:
        assert c.compare_and_set("s", None, VersionedData(0, b"x")) is CaSResult.COMMITTED
        statement, message, calls = PG_CHANGES[change]
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(statement)  # type: ignore[arg-type]
        for call in calls * 2:  # not once: every call
            with pytest.raises(CorruptState, match=message) as e:
                CALLS[call](c)
            assert _schema(dsn) in str(e.value), e.value
    finally:
        c.close()


@pytest.mark.postgres
def test_a_postgres_privilege_taken_away_is_a_fault(postgres_server: PostgresServer) -> None:
    """42501 is Determinate (retried), and the calls work again once it is granted."""
    dsn = postgres_server.isolated_dsn()
    PostgresConsensus(dsn).close()  # the administrator creates the table
    schema = _schema(dsn)
    role = f"app_{uuid.uuid4().hex[:8]}"
    grant = f"GRANT SELECT, INSERT, DELETE ON {schema}.consensus TO {role}"
    with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")  # type: ignore[arg-type]
        admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")  # type: ignore[arg-type]
        admin.execute(grant)  # type: ignore[arg-type]
    c = PostgresConsensus(dsn.replace("postgres@", f"{role}@", 1))
    try:
        assert c.compare_and_set("s", None, VersionedData(0, b"x")) is CaSResult.COMMITTED
        with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:
            admin.execute(f"REVOKE ALL ON {schema}.consensus FROM {role}")  # type: ignore[arg-type]
        for call in CALLS.values():
            with pytest.raises(Determinate, match="permission denied"):
                call(c)
        with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:
            admin.execute(grant)  # type: ignore[arg-type]
        assert c.compare_and_set("s", 0, VersionedData(1, b"y")) is CaSResult.COMMITTED
        assert c.head("s") == VersionedData(1, b"y")
    finally:
        c.close()
        with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:
            admin.execute(f"DROP OWNED BY {role}")  # type: ignore[arg-type]
            admin.execute(f"DROP ROLE {role}")  # type: ignore[arg-type]
