"""Prepared statements and DISCARD ALL in the pgwire front end, without Spark.

PostgreSQL refuses a Parse of a named statement that exists (42P05) and keeps
the one it has; the unnamed statement is replaced. DISCARD ALL gives the
session back as a new connection has it: no prepared statement, portal or
cursor, every setting at its default; it is refused in a transaction block.
"""

from __future__ import annotations

import struct

import pytest
from psycopg import errors
from tests.unit.test_pgwire_cursor import StandIn, connect
from tests.unit.test_pgwire_lifetimes import SYNC, Client, message, query

from timeshard.server.pgwire import PgServer


def parse(name: bytes, sql: str) -> bytes:
    return message(b"P", name + b"\0" + sql.encode() + b"\0" + struct.pack("!h", 0))


def bind(portal: bytes, statement: bytes) -> bytes:
    return message(b"B", portal + b"\0" + statement + b"\0" + struct.pack("!hhh", 0, 0, 0))


def describe_statement(name: bytes) -> bytes:
    return message(b"D", b"S" + name + b"\0")


def execute(portal: bytes) -> bytes:
    return message(b"E", portal + b"\0" + struct.pack("!i", 0))


def answers(client: Client, sent: bytes) -> list[tuple[bytes, bytes]]:
    """The messages the server answers ``sent`` (and a Sync) with."""
    client.sock.sendall(sent + SYNC)
    return client.until(b"Z")


def sqlstates(messages: list[tuple[bytes, bytes]]) -> list[str]:
    """The SQLSTATE of each ErrorResponse among ``messages``."""
    out = []
    for kind, body in messages:
        if kind == b"E":
            fields = dict((f[:1], f[1:]) for f in body.split(b"\0") if f)
            out.append(fields[b"C"].decode())
    return out


def test_parse_of_an_existing_named_statement_is_refused_and_keeps_it(
    served: tuple[PgServer, StandIn],
) -> None:
    server, _ = served
    client = Client(server)
    assert sqlstates(answers(client, parse(b"s1", "SELECT 1"))) == []
    refused = answers(client, parse(b"s1", "SHOW statement_timeout"))
    assert sqlstates(refused) == ["42P05"], refused
    assert b"already exists" in refused[0][1]
    # the one prepared first stays: a query's rows (n, s), not SHOW's one column
    executed = answers(client, describe_statement(b"s1") + bind(b"", b"s1") + execute(b""))
    assert [kind for kind, _ in executed] == [b"t", b"T", b"2", *[b"D"] * 5, b"C", b"Z"]
    # the unnamed statement is replaced, silently
    assert sqlstates(answers(client, parse(b"", "SELECT 1"))) == []
    replaced = answers(client, parse(b"", "SHOW statement_timeout") + bind(b"", b"") + execute(b""))
    assert sqlstates(replaced) == [] and (b"C", b"SHOW\0") in replaced, replaced


def test_a_statement_deallocated_can_be_prepared_again(
    served: tuple[PgServer, StandIn],
) -> None:
    server, _ = served
    client = Client(server)
    assert sqlstates(answers(client, parse(b"s1", "SELECT 1"))) == []
    client.sock.sendall(query("DEALLOCATE s1"))
    assert sqlstates(client.until(b"Z")) == []
    assert sqlstates(answers(client, parse(b"s1", "SELECT 2"))) == []


def test_discard_all_forgets_prepared_statements_and_settings(
    served: tuple[PgServer, StandIn],
) -> None:
    server, _ = served
    client = Client(server)
    assert sqlstates(answers(client, parse(b"s1", "SELECT 1"))) == []
    client.sock.sendall(query("SET statement_timeout = '5s'"))
    client.until(b"Z")
    client.sock.sendall(query("DISCARD ALL"))
    assert sqlstates(client.until(b"Z")) == []
    assert sqlstates(answers(client, describe_statement(b"s1"))) == ["26000"]
    client.sock.sendall(query("SHOW statement_timeout"))
    shown = client.until(b"Z")
    assert [body for kind, body in shown if kind == b"D"] == [b"\0\x01\0\0\0\x010"], shown
    assert sqlstates(answers(client, parse(b"s1", "SELECT 2"))) == []  # the name is free again


@pytest.mark.parametrize("block", ["BEGIN", None])
def test_discard_all_is_refused_in_a_transaction_block(
    served: tuple[PgServer, StandIn], block: str | None
) -> None:
    server, _ = served
    with connect(server, autocommit=True) as conn:
        conn.execute("SET statement_timeout = '5s'")
        if block is not None:
            conn.execute(block)
            with pytest.raises(errors.ActiveSqlTransaction, match="DISCARD ALL"):
                conn.execute("DISCARD ALL")
            conn.execute("ROLLBACK")
        else:  # a message of several statements is an implicit block
            with pytest.raises(errors.ActiveSqlTransaction, match="DISCARD ALL"):
                conn.execute("SELECT 1; DISCARD ALL")
        assert conn.execute("SHOW statement_timeout").fetchall() == [("5s",)]


def test_psycopg_prepares_again_after_discard_all(served: tuple[PgServer, StandIn]) -> None:
    """psycopg forgets its prepared statements on DISCARD ALL and prepares them again
    under the same names: the server must have forgotten them too (else 42P05)."""
    server, _ = served
    with connect(server, autocommit=True, prepare_threshold=0) as conn:
        for _ in range(2):
            assert conn.execute("SELECT %s", (1,)).fetchone() is not None
            conn.execute("DISCARD ALL")
        assert conn.execute("SELECT %s", (1,)).fetchone() is not None
