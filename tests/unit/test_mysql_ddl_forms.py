"""DDL forms that change a source table's rows with no row events: ``SET STATEMENT ... FOR``,
``CONVERT PARTITION``/``CONVERT TABLE``, and ALTERs that change existing values."""

from __future__ import annotations

import pytest

from timeshard.storage.mysql_ddl import ddl_tables


@pytest.mark.parametrize(
    ("sql", "want"),
    [
        ("SET STATEMENT lock_wait_timeout=5 FOR TRUNCATE a", [("truncated", "d", "a")]),
        (
            "set statement max_statement_time = (1 + 2), sql_mode = 'FOR' for DROP TABLE a, b",
            [("dropped", "d", "a"), ("dropped", "d", "b")],
        ),
        (
            "SET STATEMENT x=1 FOR RENAME TABLE a TO b",
            [("renamed", "d", "a"), ("renamed", "d", "b")],
        ),
        ("SET STATEMENT x=1 FOR INSERT INTO a VALUES (1)", []),
        ("SET @a = 1", []),
        (
            "ALTER TABLE p CONVERT PARTITION p1 TO TABLE p1moved",
            [("partly emptied", "d", "p"), ("replaced", "d", "p1moved")],
        ),
        (
            "ALTER TABLE q CONVERT TABLE x.y TO PARTITION p1 VALUES LESS THAN (100)",
            [("replaced", "d", "q"), ("replaced", "x", "y")],
        ),
    ],
)
def test_statements_that_change_rows_without_row_events(
    sql: str, want: list[tuple[str, str, str]]
) -> None:
    assert ddl_tables(sql, "d") == want
