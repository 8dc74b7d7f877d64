"""Consensus constructor arguments of the wrong type or out of range are InvalidUsage
naming the argument, before anything is opened.

``SqliteConsensus(123)`` raised a bare TypeError, ``busy_timeout_s="30"`` too;
``busy_timeout_s=True`` and ``1e300`` were taken. ``PostgresConsensus(None)`` raised
AttributeError; ``lock_timeout_s="30"`` TypeError; ``connect_timeout_s=True`` and
``lock_timeout_s=1e300`` (beyond PostgreSQL's int of milliseconds) became a
Determinate fault at connecting, which callers retry for ever.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from timeshard.errors import InvalidUsage
from timeshard.location import PostgresConsensus, SqliteConsensus

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/postgres"


@pytest.mark.parametrize("path", [123, None, b"c.db"])
def test_a_sqlite_path_that_is_not_a_path_is_invalid_usage(path: object) -> None:
    with pytest.raises(
        InvalidUsage, match=rf"SQLite consensus path .*got {re.escape(repr(path))}$"
    ):
        SqliteConsensus(path)  # type: ignore[arg-type]


@pytest.mark.parametrize("busy_timeout_s", ["30", True, None, 1e300, 2**31])
def test_a_sqlite_busy_timeout_that_is_not_seconds_is_invalid_usage(
    tmp_path: Path, busy_timeout_s: object
) -> None:
    with pytest.raises(
        InvalidUsage, match=rf"busy_timeout_s .*got {re.escape(repr(busy_timeout_s))}$"
    ):
        SqliteConsensus(tmp_path / "c.db", busy_timeout_s=busy_timeout_s)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_a_sqlite_busy_timeout_of_whole_seconds_is_taken(tmp_path: Path) -> None:
    SqliteConsensus(tmp_path / "c.db", busy_timeout_s=2).close()


@pytest.mark.parametrize("dsn", [None, 5, b"postgresql://postgres@127.0.0.1:1/postgres"])
def test_a_postgres_dsn_that_is_not_a_str_is_invalid_usage(dsn: object) -> None:
    with pytest.raises(InvalidUsage, match=f"DSN must be a str, got {type(dsn).__name__}$"):
        PostgresConsensus(dsn)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("connect_timeout_s", True),
        ("connect_timeout_s", "10"),
        ("lock_timeout_s", "30"),
        ("lock_timeout_s", True),
        ("lock_timeout_s", 1e300),
        ("lock_timeout_s", 2**31),
        ("idle_in_transaction_s", True),
        ("idle_in_transaction_s", None),
    ],
)
def test_a_postgres_timeout_that_is_not_seconds_is_invalid_usage(name: str, value: object) -> None:
    with pytest.raises(InvalidUsage, match=rf"{name} .*got {re.escape(repr(value))}$"):
        PostgresConsensus(UNREACHABLE, **{name: value})  # type: ignore[arg-type]
