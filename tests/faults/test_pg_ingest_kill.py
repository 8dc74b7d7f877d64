"""A POSTGRES source's ingestion killed with SIGKILL at random, two instances at once.

A real server (``postgres_server``, ``wal_level=logical``); a thread commits
random inserts, updates and deletes to one table the whole time. Two worker
processes ingest it into one shard, concurrently; one of them is killed and
restarted at seeded random moments (mid-snapshot, mid-stream, mid-append).

The check is independent of the source's stream and snapshot: a second
replication slot, created before the first row, sees every transaction;
``pg_logical_slot_peek_binary_changes`` reads them back with each one's
commit LSN. At every time the output must hold exactly the table as of the
LSN the remap bound to that time: every transaction that committed below it,
applied to the empty table, once.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from tests.faults.killing import race_and_kill, worker_starter

from timeshard.location import open_location
from timeshard.persist import PersistClient
from timeshard.storage import Remap
from timeshard.storage.pgoutput import Begin, Change, Commit, parse_message
from timeshard.storage.postgres_source import default_slot

WORKER = Path(__file__).with_name("pg_ingest_worker.py")


class Writing(threading.Thread):
    """Commits random changes to the table until stopped."""

    def __init__(self, dsn: str, table: sql.Composable, seed: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.table = dsn, table
        self.rng = random.Random(seed)
        self.stopped = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self.stopped.is_set():
                    with conn.transaction():
                        for _ in range(self.rng.randrange(1, 6)):
                            key, value = self.rng.randrange(30), f"v{self.rng.randrange(10**6)}"
                            op = self.rng.random()
                            params: tuple[Any, ...]
                            if op < 0.5:
                                q, params = "INSERT INTO {} VALUES (%s, %s)", (key, value)
                            elif op < 0.8:
                                q, params = "UPDATE {} SET v = %s WHERE id = %s", (value, key)
                            else:
                                q, params = "DELETE FROM {} WHERE id = %s", (key,)
                            conn.execute(sql.SQL(q).format(self.table), params)
                    time.sleep(0.05)
        except BaseException as e:
            self.error = e


def committed(dsn: str, slot: str, publication: str) -> list[tuple[int, list[tuple[int, Any]]]]:
    """Every transaction the checking slot saw: (commit LSN, [(diff, (id, v))])."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
            "'proto_version', '1', 'publication_names', %s)",
            (slot, publication),
        ).fetchall()
    txns: list[tuple[int, list[tuple[int, Any]]]] = []
    current: list[tuple[int, Any]] = []
    lsn = -1
    for (data,) in rows:
        message = parse_message(bytes(data))
        if isinstance(message, Begin):
            lsn, current = message.final_lsn, []
        elif isinstance(message, Change):
            if message.old is not None:
                current.append((-1, (int(message.old[0]), message.old[1])))
            if message.new is not None:
                current.append((1, (int(message.new[0]), message.new[1])))
        elif isinstance(message, Commit):
            txns.append((lsn, current))
    return txns


@pytest.mark.faults
@pytest.mark.spark
@pytest.mark.postgres
def test_postgres_ingestion_killed_and_concurrent(tmp_path: Path, postgres_server: Any) -> None:
    rng = random.Random(17)
    dsn = postgres_server.dsn
    schema, pub = f"k_{uuid.uuid4().hex[:8]}", f"kp_{uuid.uuid4().hex[:8]}"
    check_slot, name = f"check_{uuid.uuid4().hex[:8]}", f"pgkill_{uuid.uuid4().hex[:6]}"
    table = sql.SQL("{}.t").format(sql.Identifier(schema))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE TABLE {} (id int, v text)").format(table))
        conn.execute(sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(table))
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(sql.Identifier(pub), table)
        )
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (check_slot,))
        for i in range(20):  # before the source's slot: its snapshot has them
            conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, 'init')").format(table), (i,))
    writing = Writing(dsn, table, seed=3)
    writing.start()
    blob_uri, consensus_uri = f"file://{tmp_path / 'blob'}", f"sqlite:///{tmp_path / 'c.db'}"
    stop = tmp_path / "stop"
    start = worker_starter(WORKER, [blob_uri, consensus_uri, dsn, pub, name, str(stop)], tmp_path)

    client = PersistClient(open_location(blob_uri, consensus_uri))
    shard = f"{name}.{schema}.t"
    try:
        hold = race_and_kill(client, shard, start, stop, rng)
    finally:
        writing.stopped.set()
        writing.join(60)
    assert writing.error is None, writing.error
    remap = Remap(client, f"{name}.remap")
    upper = client.state(shard).upper.time
    assert upper is not None and upper > 0
    txns = committed(dsn, check_slot, pub)
    times = sorted({t for t, _ in remap.bindings() if t >= (hold.since.time or 0) and t < upper})
    assert len(times) >= 3
    for at in times[-12:]:
        bound = remap.frontier_at(at).get("0", 0)
        want: Counter[Any] = Counter()
        for lsn, changes in txns:
            if lsn < bound:
                for diff, row in changes:
                    want[row] += diff
        assert all(n >= 0 for n in want.values())
        got: Counter[Any] = Counter()
        for r in hold.snapshot(at).to_pylist():
            assert r["_err"] is None, r
            got[(r["id"], r["v"])] += r["_diff"]
        assert +got == +want, (at, sorted((+got - +want).items()), sorted((+want - +got).items()))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (check_slot,))
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = %s AND NOT active",
            (default_slot(name),),
        )
