"""The connections of the SQL consensus backends: one per thread, ended with the thread.

A server runs a thread per client (pgwire), and every query opens a leased
reader, which reads and writes consensus: a connection that outlived its
thread was a file descriptor pair (SQLite) or a server session (PostgreSQL)
lost per client, until the process ran out of them.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from tests.pg_server import PostgresServer

from timeshard.location import CaSResult, PostgresConsensus, SqliteConsensus, VersionedData

PROC_FDS = Path("/proc/self/fd")


def open_fds(under: Path) -> int:
    """This process's open descriptors of files under ``under`` (a SQLite database and its
    journal): other threads of the process (a Spark session's sockets) open and close
    descriptors of their own at any time, and a count of all of them moved with those."""
    count = 0
    for fd in os.listdir(PROC_FDS):
        try:
            target = os.readlink(PROC_FDS / fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith(f"{under}{os.sep}"):
            count += 1
    return count


def in_a_thread(call: Callable[[], object]) -> None:
    t = threading.Thread(target=call)
    t.start()
    t.join()


class Parked:
    """A thread that made one call and waits, alive, until released."""

    def __init__(self, call: Callable[[], object]) -> None:
        self.called, self.release = threading.Event(), threading.Event()

        def run() -> None:
            call()
            self.called.set()
            self.release.wait(60)

        self.thread = threading.Thread(target=run)
        self.thread.start()
        assert self.called.wait(60)

    def end(self) -> None:
        self.release.set()
        self.thread.join()


@pytest.mark.skipif(not PROC_FDS.is_dir(), reason="counts descriptors in /proc/self/fd")
def test_sqlite_closes_the_connection_of_an_ended_thread(tmp_path: Path) -> None:
    c = SqliteConsensus(tmp_path / "consensus.sqlite")
    c.compare_and_set("k", None, VersionedData(0, b"x"))
    before = open_fds(tmp_path)
    for _ in range(40):
        in_a_thread(lambda: c.head("k"))
    assert open_fds(tmp_path) <= before + 2, "connections of ended threads are still open"
    parked = [Parked(lambda: c.head("k")) for _ in range(3)]
    assert open_fds(tmp_path) >= before + 3
    c.close()  # closes the connections of live threads too
    assert open_fds(tmp_path) <= before
    for p in parked:
        p.end()
    assert c.head("k") == VersionedData(0, b"x")  # reopens
    c.close()


def sessions(server: PostgresServer, application: str, settle_to: int | None = None) -> int:
    """The server's sessions of ``application``; with ``settle_to``, waiting up to 30 s for
    at most that many (a backend leaves ``pg_stat_activity`` as it exits, a moment later)."""
    deadline = time.monotonic() + 30
    while True:
        with psycopg.connect(server.dsn, autocommit=True) as admin:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                (application,),
            ).fetchone()
        assert row is not None
        if settle_to is None or row[0] <= settle_to or time.monotonic() > deadline:
            return int(row[0])
        time.sleep(0.05)


@pytest.mark.postgres
def test_postgres_ends_the_session_of_an_ended_thread(postgres_server: PostgresServer) -> None:
    application = f"conn-test-{uuid.uuid4().hex[:8]}"
    c = PostgresConsensus(f"{postgres_server.isolated_dsn()}&application_name={application}")
    c.compare_and_set("k", None, VersionedData(0, b"x"))
    for _ in range(20):
        in_a_thread(lambda: c.head("k"))
    assert sessions(postgres_server, application, settle_to=1) <= 1, "ended threads' sessions"
    parked = [Parked(lambda: c.head("k")) for _ in range(3)]
    assert sessions(postgres_server, application) >= 3
    c.close()  # closes the sessions of live threads too
    assert sessions(postgres_server, application, settle_to=0) == 0
    for p in parked:
        p.end()
    assert c.head("k") == VersionedData(0, b"x")  # reopens
    c.close()


@pytest.mark.postgres
def test_postgres_opens_a_created_table_with_data_privileges_only(
    postgres_server: PostgresServer,
) -> None:
    """An application role may read and write the table an administrator created, and
    nothing more: opening ran ``CREATE TABLE IF NOT EXISTS`` anyway, which PostgreSQL
    refuses without CREATE on the schema (Determinate, so retried for ever)."""
    dsn = postgres_server.isolated_dsn()
    PostgresConsensus(dsn).close()  # the administrator creates the table
    schema = psycopg.conninfo.conninfo_to_dict(dsn)["options"]
    assert isinstance(schema, str)
    schema = schema.rpartition("=")[2]
    role = f"app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        admin.execute(f"GRANT SELECT, INSERT, DELETE ON {schema}.consensus TO {role}")
    try:
        app_dsn = dsn.replace("postgres@", f"{role}@", 1)
        c = PostgresConsensus(app_dsn)
        assert c.compare_and_set("k", None, VersionedData(0, b"x")) is CaSResult.COMMITTED
        assert c.compare_and_set("k", 0, VersionedData(1, b"y")) is CaSResult.COMMITTED
        assert c.truncate("k", 1) == 1
        assert c.head("k") == VersionedData(1, b"y")
        c.close()
    finally:
        with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")
