"""A SQLite consensus file whose ``consensus`` is not the table timeshard makes is
CorruptState naming the file and the column at opening.

``CREATE TABLE IF NOT EXISTS`` leaves a ``consensus`` table (or view) that
something else made as it is. One without the ``data`` column opened fine, and
then every call raised Determinate ("no such column: data"), a fault that
callers retry for ever, although no retry can change the file; one whose
``seqno`` was declared REAL stored every seqno as a float.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from timeshard.errors import CorruptState
from timeshard.location import SqliteConsensus, VersionedData

TABLES = [
    ("TABLE consensus (shard TEXT, seqno INTEGER)", "needs column data BLOB, but it has none"),
    ("TABLE consensus (shard TEXT, data BLOB)", "needs column seqno INTEGER, but it has none"),
    (
        "TABLE consensus (shard TEXT, seqno REAL, data BLOB)",
        "needs column seqno INTEGER, but it has it as 'REAL'",
    ),
    ("TABLE consensus (shard, seqno, data)", "needs column shard TEXT, but it has it as ''"),
    ("VIEW consensus AS SELECT 's1' AS shard, 1 AS seqno, x'00' AS data", "is a view"),
    # CREATE TABLE IF NOT EXISTS raised "there is already an index named consensus":
    # Determinate, retried for ever.
    ("INDEX consensus ON other (x)", "is an index, not a table"),
    # Every compare_and_set failed "NOT NULL constraint failed": Determinate, for ever.
    (
        "TABLE consensus (shard TEXT, seqno INTEGER, data BLOB, extra TEXT NOT NULL)",
        "has column extra NOT NULL without a default",
    ),
]


@pytest.mark.parametrize(("made", "message"), TABLES)
def test_a_table_of_another_shape_is_corrupt_state(tmp_path: Path, made: str, message: str) -> None:
    path = tmp_path / "consensus.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE other (x)")
        conn.execute(f"CREATE {made}")
    with pytest.raises(CorruptState) as e:
        SqliteConsensus(path)
    assert str(path) in str(e.value) and message in str(e.value), e.value


def test_an_extra_column_that_takes_nulls_or_a_default_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "consensus.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE consensus (shard TEXT, seqno INTEGER, data BLOB, "
            "note TEXT, made INTEGER NOT NULL DEFAULT 0)"
        )
    c = SqliteConsensus(path)
    try:
        assert c.compare_and_set("s1", None, VersionedData(1, b"x"))
        assert c.head("s1") == VersionedData(1, b"x")
    finally:
        c.close()


def test_the_table_timeshard_made_opens_again(tmp_path: Path) -> None:
    path = tmp_path / "consensus.sqlite"
    c = SqliteConsensus(path)
    c.compare_and_set("s1", None, VersionedData(1, b"x"))
    c.close()
    again = SqliteConsensus(path)
    try:
        assert again.head("s1") == VersionedData(1, b"x")
    finally:
        again.close()


@pytest.mark.parametrize("table_first", [False, True])
def test_a_trigger_named_consensus_is_no_table_of_that_name(
    tmp_path: Path, table_first: bool
) -> None:
    """Triggers have names of their own: one named ``consensus`` (made before the table,
    or on a database without one) was taken for the table, and a valid file was refused
    as CorruptState ("consensus is a trigger, not a table")."""
    path = tmp_path / "consensus.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE other (x)")
        conn.execute("CREATE TRIGGER consensus AFTER INSERT ON other BEGIN SELECT 1; END")
    if table_first:
        c = SqliteConsensus(path)
        c.compare_and_set("s1", None, VersionedData(1, b"x"))
        c.close()
    again = SqliteConsensus(path)
    try:
        assert again.head("s1") == (VersionedData(1, b"x") if table_first else None)
        assert again.compare_and_set("s2", None, VersionedData(1, b"y")).name == "COMMITTED"
    finally:
        again.close()
