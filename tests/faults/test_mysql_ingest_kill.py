"""A MYSQL source's ingestion killed with SIGKILL at random, two instances at once.

A real MariaDB (``mariadb_server``); a thread commits random inserts, updates
and deletes to one table the whole time, in two replication domains. Two
worker processes ingest it into one shard, concurrently; one of them is
killed and restarted at seeded random moments (mid-snapshot, mid-stream,
mid-append).

The check is independent of the source's snapshot and stream decoding: a
``BinLogStreamReader`` of its own reads the binlog back from before the table
was created, with each transaction's GTID. At every time the output must
hold exactly the table as of the GTID frontier the remap bound to that time:
every transaction whose sequence number is below the frontier of its domain,
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

import pymysql
import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import MariadbGtidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent
from tests.faults.killing import race_and_kill, worker_starter

from timeshard.location import open_location
from timeshard.persist import PersistClient
from timeshard.storage import Remap

WORKER = Path(__file__).with_name("mysql_ingest_worker.py")


def connect(server: Any, database: str | None = None) -> Any:
    return pymysql.connect(
        host="127.0.0.1",
        port=server.port,
        user=server.user,
        password=server.password,
        database=database,
        autocommit=True,
    )


class Writing(threading.Thread):
    """Commits random changes to the table, in domain 0 or 9, until stopped."""

    def __init__(self, server: Any, database: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.server, self.database = server, database
        self.rng = random.Random(seed)
        self.stopped = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            conn = connect(self.server, self.database)
            with conn.cursor() as cur:
                while not self.stopped.is_set():
                    cur.execute("SET SESSION gtid_domain_id = %s", (self.rng.choice([0, 9]),))
                    cur.execute("BEGIN")
                    for _ in range(self.rng.randrange(1, 6)):
                        key, value = self.rng.randrange(30), f"v{self.rng.randrange(10**6)}"
                        op = self.rng.random()
                        if op < 0.5:
                            cur.execute("INSERT INTO t VALUES (%s, %s)", (key, value))
                        elif op < 0.8:
                            cur.execute("UPDATE t SET v = %s WHERE id = %s", (value, key))
                        else:
                            cur.execute("DELETE FROM t WHERE id = %s", (key,))
                    cur.execute("COMMIT")
                    time.sleep(0.05)
            conn.close()
        except BaseException as e:
            self.error = e


def committed(
    server: Any, database: str, start: tuple[str, int]
) -> list[tuple[str, int, list[tuple[int, Any]]]]:
    """Each transaction on ``database.t`` from binlog position ``start``: domain, seq, changes."""
    reader = BinLogStreamReader(
        connection_settings={
            "host": "127.0.0.1",
            "port": server.port,
            "user": server.user,
            "password": server.password,
        },
        server_id=random.randrange(1 << 20, 1 << 30),
        blocking=False,
        resume_stream=True,
        log_file=start[0],
        log_pos=start[1],  # by file and position (is_mariadb would ignore them)
        only_events=[MariadbGtidEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        enable_logging=False,
    )
    txns: list[tuple[str, int, list[tuple[int, Any]]]] = []
    try:
        for event in reader:
            if isinstance(event, MariadbGtidEvent):
                txns.append((str(event.domain_id), int(event.gtid_seq_no), []))
            elif event.schema == database and event.table == "t":
                changes = txns[-1][2]
                for row in event.rows:
                    if isinstance(event, UpdateRowsEvent):
                        old, new = row["before_values"], row["after_values"]
                        changes += [(-1, (old["id"], old["v"])), (1, (new["id"], new["v"]))]
                    else:
                        diff = -1 if isinstance(event, DeleteRowsEvent) else 1
                        changes.append((diff, (row["values"]["id"], row["values"]["v"])))
    finally:
        reader.close()
    return txns


@pytest.mark.faults
@pytest.mark.spark
@pytest.mark.mysql
def test_mysql_ingestion_killed_and_concurrent(tmp_path: Path, mariadb_server: Any) -> None:
    rng = random.Random(23)
    database, name = f"k_{uuid.uuid4().hex[:8]}", f"mykill_{uuid.uuid4().hex[:6]}"
    conn = connect(mariadb_server)
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        cur.execute(f"CREATE DATABASE `{database}`")
        cur.execute(f"CREATE TABLE `{database}`.t (id int, v varchar(20))")
        for i in range(20):  # before the source's first binding: its snapshot has them
            cur.execute(f"INSERT INTO `{database}`.t VALUES (%s, 'init')", (i,))
    url = mariadb_server.url.rsplit("/", 1)[0] + "/" + database
    writing = Writing(mariadb_server, database, seed=5)
    writing.start()
    blob_uri, consensus_uri = f"file://{tmp_path / 'blob'}", f"sqlite:///{tmp_path / 'c.db'}"
    stop = tmp_path / "stop"
    start = worker_starter(WORKER, [blob_uri, consensus_uri, url, name, str(stop)], tmp_path)

    client = PersistClient(open_location(blob_uri, consensus_uri))
    shard = f"{name}.t"
    try:
        hold = race_and_kill(client, shard, start, stop, rng)
    finally:
        writing.stopped.set()
        writing.join(60)
    assert writing.error is None, writing.error
    remap = Remap(client, f"{name}.remap")
    upper = client.state(shard).upper.time
    assert upper is not None and upper > 0
    txns = committed(mariadb_server, database, (file, int(pos)))
    assert {d for d, _, changes in txns if changes} == {"0", "9"}
    times = sorted({t for t, _ in remap.bindings() if t >= (hold.since.time or 0) and t < upper})
    assert len(times) >= 3
    for at in times[-12:]:
        bound = remap.frontier_at(at)
        want: Counter[Any] = Counter()
        for domain, seq, changes in txns:
            if seq < bound.get(domain, 0):
                for diff, row in changes:
                    want[row] += diff
        assert all(n >= 0 for n in want.values())
        got: Counter[Any] = Counter()
        for r in hold.snapshot(at).to_pylist():
            assert r["_err"] is None, r
            got[(r["id"], r["v"])] += r["_diff"]
        assert +got == +want, (at, sorted((+got - +want).items()), sorted((+want - +got).items()))
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE `{database}`")
    conn.close()
