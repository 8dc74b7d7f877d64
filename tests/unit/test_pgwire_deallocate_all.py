"""DEALLOCATE ALL beside the unnamed statement, as PostgreSQL.

DEALLOCATE ALL forgets the named prepared statements only: PostgreSQL keeps the
unnamed one apart, and it survives (checked against PostgreSQL 15). The server
forgot it too, and a Bind of it was then refused (26000).
"""

from __future__ import annotations

import psycopg
from tests.unit.test_pgwire_cursor import StandIn, connect
from tests.unit.test_pgwire_lifetimes import Client, query
from tests.unit.test_pgwire_session_reset import answers, bind, execute, parse, sqlstates

from timeshard.server.pgwire import PgServer


def test_deallocate_all_keeps_the_unnamed_statement(served: tuple[PgServer, StandIn]) -> None:
    server, _ = served
    client = Client(server)
    prepared = parse(b"", "SELECT 41") + parse(b"named", "SELECT 42")
    assert sqlstates(answers(client, prepared + parse(b"d", "DEALLOCATE ALL"))) == []
    dropped = answers(client, bind(b"", b"d") + execute(b""))
    assert sqlstates(dropped) == [] and (b"C", b"DEALLOCATE ALL\0") in dropped, dropped
    # the unnamed statement was prepared before, and survives it
    kept = answers(client, bind(b"", b"") + execute(b""))
    assert sqlstates(kept) == [] and (b"C", b"SELECT 5\0") in kept, kept
    assert sqlstates(answers(client, bind(b"", b"named"))) == ["26000"]


def test_deallocate_all_by_psycopg_keeps_its_unnamed_statement(
    served: tuple[PgServer, StandIn],
) -> None:
    """psycopg's unprepared queries are the unnamed statement; a DEALLOCATE ALL run
    prepared (its own name) leaves the one psycopg has."""
    server, _ = served
    with connect(server, autocommit=True) as conn:
        pgconn = conn.pgconn
        assert pgconn.prepare(b"", b"SELECT 41").status == psycopg.pq.ExecStatus.COMMAND_OK
        assert pgconn.prepare(b"d", b"DEALLOCATE ALL").status == psycopg.pq.ExecStatus.COMMAND_OK
        assert pgconn.exec_prepared(b"d", []).status == psycopg.pq.ExecStatus.COMMAND_OK
        kept = pgconn.exec_prepared(b"", [])
        assert kept.status == psycopg.pq.ExecStatus.TUPLES_OK, kept.error_message


def test_a_simple_query_drops_the_unnamed_statement(served: tuple[PgServer, StandIn]) -> None:
    """PostgreSQL runs a simple query as if through the unnamed statement and portal, and
    drops a prepared unnamed statement first (checked against PostgreSQL 15); the named
    ones stay."""
    server, _ = served
    client = Client(server)
    prepared = parse(b"", "SELECT 41") + parse(b"named", "SELECT 42")
    assert sqlstates(answers(client, prepared)) == []
    client.sock.sendall(query("SELECT 43"))
    assert sqlstates(client.until(b"Z")) == []
    assert sqlstates(answers(client, bind(b"", b""))) == ["26000"]
    kept = answers(client, bind(b"", b"named") + execute(b""))
    assert sqlstates(kept) == [], kept
