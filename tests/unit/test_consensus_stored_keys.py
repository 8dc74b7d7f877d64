"""A stored consensus row whose key is not a valid consensus key makes ``list_keys`` raise
CorruptState naming it.

SQLite stores any type in any column, and an administrator (or another program)
may insert into the PostgreSQL table. ``list_keys`` returned such a key as it
was (a SQLite BLOB key as the text ``"b'\\x00'"``), and every caller that then
read it (GC, ``status``) got InvalidUsage from ``head``: a caller mistake
reported for state found in the database, which the caller cannot fix.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest
from tests.pg_server import PostgresServer

from timeshard.errors import CorruptState
from timeshard.location import PostgresConsensus, SqliteConsensus, VersionedData

SQLITE_KEYS = [
    ("x'00ff'", r"b'\\x00\\xff' \(bytes\)"),
    ("'a b'", r"'a b' \(str\)"),
    ("''", r"'' \(str\)"),
    ("'../s1'", r"'../s1' \(str\)"),
]


@pytest.mark.parametrize(("key", "shown"), SQLITE_KEYS)
def test_a_bad_sqlite_key_is_corrupt_state(tmp_path: Path, key: str, shown: str) -> None:
    path = tmp_path / "consensus.sqlite"
    c = SqliteConsensus(path)
    c.compare_and_set("s1", None, VersionedData(1, b"x"))
    with sqlite3.connect(path) as conn:
        conn.execute(f"INSERT INTO consensus (shard, seqno, data) VALUES ({key}, 1, x'00')")
    try:
        with pytest.raises(CorruptState, match=f"consensus holds a key {shown}"):
            c.list_keys()
        assert c.head("s1") == VersionedData(1, b"x")  # other keys are unaffected
    finally:
        c.close()


def test_a_sqlite_key_stored_as_a_number_is_its_text(tmp_path: Path) -> None:
    """The column's TEXT affinity stores the integer 5 as the key '5', which is valid."""
    path = tmp_path / "consensus.sqlite"
    c = SqliteConsensus(path)
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO consensus (shard, seqno, data) VALUES (5, 1, x'00')")
    try:
        assert c.list_keys() == ["5"]
        assert c.head("5") == VersionedData(1, b"\x00")
    finally:
        c.close()


@pytest.mark.postgres
@pytest.mark.parametrize("key", ["a b", "", "../s1"])
def test_a_bad_postgres_key_is_corrupt_state(postgres_server: PostgresServer, key: str) -> None:
    dsn = postgres_server.isolated_dsn()
    c = PostgresConsensus(dsn)
    c.compare_and_set("s1", None, VersionedData(1, b"x"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO consensus VALUES (%s, 1, '\\x00'::bytea)", (key,))
    try:
        with pytest.raises(CorruptState, match=f"consensus holds a key '{key}' \\(str\\)"):
            c.list_keys()
        assert c.head("s1") == VersionedData(1, b"x")
    finally:
        c.close()
