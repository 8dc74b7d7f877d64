"""A query's rows are sent as the engine makes them, without Spark.

The stand-in engine's query answers :class:`~timeshard.server.engine.QueryRows`
over 200,000 rows and counts the rows taken from it, and whether it was
closed. The server collected a result whole before its first DataRow; an
Execute with a row limit (its portal suspended) now takes the rows it sends and
one more, the next Execute goes on from there, and the portal's Close (or the
Sync ending its implicit transaction, or the client's going) closes the rows:
their readers go, and no job of theirs runs again.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Generator
from typing import Any

import pytest
from tests.unit.test_pgwire_cursor import StandIn, connect, until
from tests.unit.test_pgwire_lifetimes import SYNC, Client, close, message, parse

from timeshard.server.engine import QueryRows, Result, Stream
from timeshard.server.pgwire import PgServer
from timeshard.server.statements import Query, Statement

ROWS = 200_000


class Counting(StandIn):
    """A query's rows, counted as they are taken: ``taken``, and ``closed`` once closed."""

    def __init__(self) -> None:
        super().__init__()
        self.taken = 0
        self.rows_closed = 0

    def execute(self, statement: Statement) -> Result | Stream | QueryRows:
        if isinstance(statement, Query):
            return QueryRows([("n", "long")], self._numbers(), {})
        return super().execute(statement)

    def _numbers(self) -> Generator[tuple[Any, ...], None, None]:
        try:
            for n in range(ROWS):
                self.taken += 1
                yield (n,)
        finally:
            self.rows_closed += 1


@pytest.fixture
def counted(serve: Callable[..., PgServer]) -> tuple[PgServer, Counting]:
    engine = Counting()
    return serve(engine), engine


def execute(portal: bytes, max_rows: int) -> bytes:
    return message(b"E", portal + b"\0" + struct.pack("!i", max_rows))


def bind(portal: bytes) -> bytes:
    return message(b"B", portal + b"\0\0" + struct.pack("!hhh", 0, 0, 0))


def values(got: list[tuple[bytes, bytes]]) -> list[int]:
    """The DataRows' one value each."""
    return [int(body[6:]) for kind, body in got if kind == b"D"]


def test_an_execute_with_a_row_limit_takes_only_its_rows(
    counted: tuple[PgServer, Counting],
) -> None:
    server, engine = counted
    client = Client(server)
    client.sock.sendall(parse("SELECT n FROM t") + bind(b"p") + execute(b"p", 3) + message(b"H"))
    got = client.until(b"s")  # PortalSuspended
    assert values(got) == [0, 1, 2]
    assert engine.taken <= 4  # its rows, and one to know that more are left
    client.sock.sendall(execute(b"p", 2) + message(b"H"))
    assert values(client.until(b"s")) == [3, 4]
    assert engine.taken <= 6 and engine.rows_closed == 0
    client.sock.sendall(close(b"p") + SYNC)
    client.until(b"Z")
    assert engine.rows_closed == 1  # the Close let go of them
    assert engine.taken <= 6


def test_the_sync_ending_an_implicit_transaction_closes_a_suspended_query(
    counted: tuple[PgServer, Counting],
) -> None:
    server, engine = counted
    client = Client(server)
    client.sock.sendall(parse("SELECT n FROM t") + bind(b"") + execute(b"", 1) + SYNC)
    got = client.until(b"Z")
    assert [kind for kind, _ in got] == [b"1", b"2", b"D", b"s", b"Z"], got
    assert engine.rows_closed == 1 and engine.taken <= 2


def test_a_client_leaving_a_suspended_query_closes_it(counted: tuple[PgServer, Counting]) -> None:
    server, engine = counted
    client = Client(server)
    client.sock.sendall(parse("SELECT n FROM t") + bind(b"p") + execute(b"p", 1) + message(b"H"))
    client.until(b"s")
    client.sock.close()
    until(lambda: engine.rows_closed == 1, "the suspended query outlived its client")


def test_a_query_cursor_takes_the_rows_of_its_fetches(counted: tuple[PgServer, Counting]) -> None:
    server, engine = counted
    with connect(server) as conn:
        conn.execute("DECLARE c CURSOR FOR SELECT n FROM t")
        assert conn.execute("FETCH 2 c").fetchall() == [(0,), (1,)]
        assert conn.execute("FETCH 1 c").fetchall() == [(2,)]
        assert engine.taken <= 4
        conn.rollback()
        assert engine.rows_closed == 1


def test_a_simple_query_streams_every_row(counted: tuple[PgServer, Counting]) -> None:
    server, engine = counted
    with connect(server, autocommit=True) as conn:
        cur = conn.execute("SELECT n FROM t")
        assert cur.statusmessage == f"SELECT {ROWS}"
        assert cur.rowcount == ROWS
    assert engine.rows_closed == 1
