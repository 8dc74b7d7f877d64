"""A stored consensus row whose seqno is not a whole number, or whose data is not bytes,
is CorruptState naming the key, in every call that reads it.

SQLite and PostgreSQL read rows back with ``int(seqno)`` and ``bytes(data)``: a
text seqno made ``head`` (and ``scan``, ``compare_and_set``, ``truncate``) raise a
bare ValueError (``invalid literal for int()``), text data a bare TypeError, and
a seqno 1.5 (a SQLite REAL, a PostgreSQL NUMERIC) was silently read as 1. Such
rows come from something other than timeshard (SQLite stores any type in any
column; an administrator may create the PostgreSQL table with other types).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from tests.pg_server import PostgresServer

from timeshard.errors import CorruptState
from timeshard.location import Consensus, PostgresConsensus, SqliteConsensus, VersionedData


def calls(c: Consensus, key: str, message: str) -> list[Callable[[], object]]:
    """The calls that read the bad row: all four for a bad seqno, those that read data for
    bad data (``compare_and_set`` and ``truncate`` read only the head's seqno)."""
    reads: list[Callable[[], object]] = [lambda: c.head(key), lambda: c.scan(key, -1, 10)]
    if "data" in message:
        return reads
    return [
        *reads,
        lambda: c.compare_and_set(key, 7, VersionedData(8, b"x")),
        lambda: c.truncate(key, 0),
    ]


SQLITE_ROWS = [
    ("'abc'", "x'00'", r"seqno 'abc' \(str\)"),
    ("1.5", "x'00'", r"seqno 1.5 \(float\)"),
    ("-1", "x'00'", r"seqno -1 \(int\)"),
    ("1", "'text'", "version 1 whose data is str, not bytes"),
]


@pytest.mark.parametrize(("seqno", "data", "message"), SQLITE_ROWS)
def test_a_bad_sqlite_row_is_corrupt_state(
    tmp_path: Path, seqno: str, data: str, message: str
) -> None:
    path = tmp_path / "consensus.sqlite"
    c = SqliteConsensus(path)
    with sqlite3.connect(path) as conn:
        conn.execute(f"INSERT INTO consensus (shard, seqno, data) VALUES ('s1', {seqno}, {data})")
    try:
        for call in calls(c, "s1", message):
            with pytest.raises(CorruptState, match=f"consensus key 's1' holds .*{message}"):
                call()
        assert c.head("s2") is None  # other keys are unaffected
    finally:
        c.close()


PG_TABLES = [
    ("seqno TEXT, data BYTEA", "column seqno bigint, but it has it as text"),
    ("seqno NUMERIC, data BYTEA", "column seqno bigint, but it has it as numeric"),
    ("seqno BIGINT, data TEXT", "column data bytea, but it has it as text"),
    ("seqno BIGINT", "column data bytea, but it has no such column"),
]


@pytest.mark.postgres
@pytest.mark.parametrize(("columns", "message"), PG_TABLES)
def test_a_postgres_table_of_other_types_is_corrupt_state(
    postgres_server: PostgresServer, columns: str, message: str
) -> None:
    dsn = postgres_server.isolated_dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:  # an administrator's table
        conn.execute(f"CREATE TABLE consensus (shard TEXT, {columns})")  # type: ignore[arg-type]
        schema = conn.execute("SELECT current_schema()").fetchone()
    assert schema is not None
    with pytest.raises(CorruptState, match=rf"table {schema[0]}\.consensus needs {message}"):
        PostgresConsensus(dsn)


@pytest.mark.postgres
def test_a_bad_postgres_row_is_corrupt_state(postgres_server: PostgresServer) -> None:
    dsn = postgres_server.isolated_dsn()
    c = PostgresConsensus(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:  # altered once c checked it
        conn.execute("ALTER TABLE consensus ALTER COLUMN seqno TYPE NUMERIC")
        conn.execute("INSERT INTO consensus VALUES ('s1', 1.5, '\\x00'::bytea)")
    try:
        for call in calls(c, "s1", "seqno"):
            with pytest.raises(CorruptState, match=r"key 's1' holds .*seqno Decimal\('1.5'\)"):
                call()
        assert c.head("s2") is None
    finally:
        c.close()
