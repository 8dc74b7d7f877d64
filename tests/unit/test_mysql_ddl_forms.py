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


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER TABLE t DROP COLUMN v, ADD COLUMN v varchar(10)",
        "ALTER TABLE t RENAME COLUMN x TO y, RENAME COLUMN y TO x",
        "ALTER TABLE t MODIFY v char(10)",
        "ALTER TABLE t MODIFY COLUMN v varchar(3)",
        "ALTER TABLE t CHANGE v v varchar(20)",
        "ALTER TABLE t ADD COLUMN c int FIRST",
        "ALTER TABLE t ADD c int AFTER id",
        "ALTER TABLE t CONVERT TO CHARACTER SET latin1",
        "ALTER IGNORE TABLE t ADD UNIQUE KEY (v)",
        "ALTER TABLE t ENGINE = MyISAM",
        "ALTER TABLE t ADD SYSTEM VERSIONING",
        "ALTER TABLE t ALTER COLUMN v SET INVISIBLE",
        "ALTER TABLE t DROP COLUMN c, ADD PARTITION (PARTITION p9 VALUES LESS THAN (9))",
        "ALTER TABLE t ADD INDEX (v), DROP v",
        "SET STATEMENT sql_mode='' FOR ALTER TABLE t MODIFY v varchar(3)",
        "ALTER TABLE t SOMETHING NEW",
        "ALTER TABLE t ADD FOREIGN KEY (p) REFERENCES o (id) ON DELETE CASCADE",
        "ALTER TABLE t ADD CONSTRAINT k FOREIGN KEY (p) REFERENCES o (id) ON UPDATE SET NULL",
        "ALTER TABLE t ADD p int REFERENCES o (id) ON DELETE SET DEFAULT",
    ],
)
def test_an_alter_that_may_change_existing_values_is_an_error(sql: str) -> None:
    assert ddl_tables(sql, "d") == [("altered", "d", "t")]


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER TABLE t ADD COLUMN c int",
        "ALTER TABLE t ADD COLUMN IF NOT EXISTS c int NOT NULL DEFAULT 'AFTER'",
        "ALTER TABLE t ADD (c int, e text), ADD f int DEFAULT 3",
        "ALTER TABLE t ADD COLUMN `first` int",
        "ALTER TABLE t ADD INDEX i (a, b), ADD UNIQUE KEY (c), ADD PRIMARY KEY (id)",
        "ALTER TABLE t ADD CONSTRAINT k FOREIGN KEY (p) REFERENCES o (id), DROP FOREIGN KEY f",
        "ALTER TABLE t DROP INDEX i, DROP KEY j, DROP PRIMARY KEY, DROP CONSTRAINT c",
        "ALTER TABLE t RENAME INDEX i TO j, RENAME KEY k TO l",
        "ALTER TABLE t ALTER COLUMN v SET DEFAULT 'x', ALTER v DROP DEFAULT",
        "ALTER TABLE t ALTER INDEX i IGNORED",
        "ALTER TABLE t ADD COLUMN c int, ALGORITHM=INSTANT, LOCK=NONE",
        "ALTER TABLE t FORCE",
        "ALTER TABLE t ENGINE=InnoDB",
        "ALTER TABLE t COMMENT 'x', AUTO_INCREMENT = 5",
        "ALTER TABLE t DISABLE KEYS",
        "ALTER TABLE t REORGANIZE PARTITION p0 INTO (PARTITION p1 VALUES LESS THAN (5))",
        "ALTER TABLE t ADD PARTITION (PARTITION p9 VALUES LESS THAN (9))",
        "ALTER TABLE t PARTITION BY HASH (id) PARTITIONS 4",
        "ALTER TABLE t REMOVE PARTITIONING",
        "ALTER TABLE t",
    ],
)
def test_an_alter_that_keeps_existing_values_is_not(sql: str) -> None:
    assert ddl_tables(sql, "d") == []
