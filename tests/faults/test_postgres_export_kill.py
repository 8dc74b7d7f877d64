"""A PostgreSQL export killed with SIGKILL at random points, three times: the table stays exact.

The test appends KEY VALUE changes (updates and deletes) to a shard the whole
time; a worker process exports it to a PostgreSQL table and is killed (its
whole process group) and restarted three times, at seeded random moments.
When the appends stop, a last worker catches up. After every kill, and at
the end, the table equals the shard's snapshot at the progress the table's
database records, minus one: no change lost or applied twice, and the
progress and the rows committed together.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest

from timeshard.location import open_location
from timeshard.persist import PersistClient

WORKER = Path(__file__).with_name("export_worker.py")
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])


@pytest.mark.faults
@pytest.mark.spark
@pytest.mark.postgres
def test_postgres_export_killed_three_times_keeps_the_table_exact(
    tmp_path: Path, postgres_dsn: str
) -> None:
    rng = random.Random(23)
    pg_schema = f"kill_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE SCHEMA {}").format(psycopg.sql.Identifier(pg_schema)))
    blob_uri, consensus_uri = f"file://{tmp_path / 'blob'}", f"sqlite:///{tmp_path / 'c.db'}"
    client = PersistClient(open_location(blob_uri, consensus_uri))
    writer = client.open_writer("kv", SCHEMA)
    reader = client.open_leased_reader("kv")
    stop = tmp_path / "stop"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    model: dict[str, int] = {}
    t = 0

    def append_some() -> None:
        nonlocal t
        updates = []
        for k in rng.sample([f"k{i}" for i in range(25)], 5):
            if k in model:
                updates.append(((k, model[k]), t, -1))
            if rng.random() < 0.25 and k in model:
                del model[k]
            else:
                model[k] = rng.randrange(10**6)
                updates.append(((k, model[k]), t, 1))
        writer.append(updates, t, t + 1)
        t += 1

    def start() -> subprocess.Popen[bytes]:
        log = (tmp_path / f"worker-{time.monotonic_ns()}.log").open("wb")
        args = [str(stop), "postgres", postgres_dsn, pg_schema]
        return subprocess.Popen(
            [sys.executable, str(WORKER), blob_uri, consensus_uri, *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )

    def table_and_progress() -> tuple[dict[str, int], int]:
        """The table and its progress, read in one transaction."""
        with psycopg.connect(postgres_dsn) as conn:
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

    def check() -> int:
        table, frontier = table_and_progress()
        if frontier > 0:
            want = {r["k"]: r["v"] for r in reader.snapshot(frontier - 1).to_pylist()}
            assert table == want, frontier
        else:
            assert table == {}
        return frontier

    worker = start()
    try:
        for _ in range(3):
            before = check()
            deadline = time.monotonic() + 180
            while check() <= before:  # the export moves: not stuck
                assert time.monotonic() < deadline, "the export made no progress"
                append_some()
                time.sleep(0.3)
            for _ in range(rng.randrange(1, 8)):
                append_some()
                time.sleep(rng.uniform(0.0, 0.5))
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
            check()
            worker = start()
        for _ in range(5):
            append_some()
        stop.touch()
        worker.wait(timeout=300)
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
    assert check() == t
    assert table_and_progress()[0] == model
