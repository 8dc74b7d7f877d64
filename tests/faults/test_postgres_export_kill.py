"""A PostgreSQL export killed with SIGKILL at random points, three times: the table stays exact.

The test appends KEY VALUE changes (updates and deletes) to a shard the whole
time; a worker process exports it to a PostgreSQL table and is killed (its
whole process group) and restarted three times, at seeded random moments
(``export_kill.py``). When the appends stop, a last worker catches up. After
every kill, and at the end, the table equals the shard's snapshot at the
progress the table's database records, minus one: no change lost or applied
twice, and the progress and the rows committed together.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg
import pytest
from tests.faults.export_kill import ExportUnderKills


@pytest.mark.faults
@pytest.mark.spark
@pytest.mark.postgres
def test_postgres_export_killed_three_times_keeps_the_table_exact(
    tmp_path: Path, postgres_dsn: str
) -> None:
    pg_schema = f"kill_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE SCHEMA {}").format(psycopg.sql.Identifier(pg_schema)))
    run = ExportUnderKills(tmp_path, seed=23, target=["postgres", postgres_dsn, pg_schema])

    def table_and_progress() -> tuple[dict[str, int], int]:
        """The table and its progress, read in one REPEATABLE READ transaction: one snapshot
        (under READ COMMITTED each statement took its own, and an export's commit between
        the two reads paired progress 29 with the rows of 30)."""
        with psycopg.connect(postgres_dsn) as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            try:
                progress = conn.execute(
                    psycopg.sql.SQL("SELECT frontier FROM {}").format(
                        psycopg.sql.Identifier(pg_schema, "_timeshard_progress")
                    )
                ).fetchone()
                rows = conn.execute(
                    psycopg.sql.SQL("SELECT k, v FROM {}").format(
                        psycopg.sql.Identifier(pg_schema, "kv")
                    )
                ).fetchall()
            except psycopg.errors.UndefinedTable:
                return {}, 0
        return {k: v for k, v in rows}, (progress[0] if progress else 0)

    check = run.checker(table_and_progress)

    run.run(check, after_kill=check)
    assert check() == run.t
    assert table_and_progress()[0] == run.model
