"""What a client can make the pgwire front end hold in memory, without Spark.

``timeshard serve`` takes no ``COPY ... FROM STDIN`` (it answers 0A000 before
any data comes); what it buffers is a message until it is whole, and what a
client sends while a COPY OUT (a SUBSCRIBE) or a waiting FETCH runs. Both grew
without bound: a message header declaring 2 GiB made the server buffer all of
it, and a client streaming behind a SUBSCRIBE made it keep every byte. Past
the server's limit (``max_message_bytes``) the client gets a FATAL 54000 and
the connection ends.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Callable

import psycopg
import pytest
from tests.unit.test_pgwire_cursor import StandIn
from tests.unit.test_pgwire_lifetimes import SYNC, Client, query

from timeshard.errors import InvalidUsage
from timeshard.server.pgwire import PgServer

LIMIT = 1 << 20


@pytest.fixture
def served(serve: Callable[..., PgServer]) -> tuple[PgServer, StandIn]:
    engine = StandIn()
    return serve(engine, max_message_bytes=LIMIT), engine


def fatal(client: Client) -> bytes:
    """The FATAL error the server answers, once it has closed the connection."""
    got = client.until(b"E")
    assert got[-1][1].startswith(b"SFATAL\0"), got
    while client.sock.recv(1 << 16):
        pass
    return got[-1][1]


def send_all(sock: socket.socket, data: bytes) -> None:
    """Send ``data``, or stop when the server closes."""
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        sock.sendall(data)


def test_a_message_longer_than_the_limit_ends_the_connection(
    served: tuple[PgServer, StandIn],
) -> None:
    server, _ = served
    client = Client(server)
    send_all(client.sock, b"Q" + struct.pack("!i", 1 << 30) + b"x" * (2 * LIMIT))
    assert b"C54000\0" in fatal(client)


def test_a_client_streaming_behind_a_subscribe_ends_the_connection(
    served: tuple[PgServer, StandIn],
) -> None:
    server, engine = served
    client = Client(server)
    client.sock.sendall(query("SUBSCRIBE v"))
    client.until(b"H")
    send_all(client.sock, SYNC * (2 * LIMIT // len(SYNC)))
    assert b"C54000\0" in fatal(client)
    assert engine.closed == 1  # the SUBSCRIBE let go of its reader


def test_copy_from_stdin_is_refused_before_any_data(served: tuple[PgServer, StandIn]) -> None:
    server, _ = served
    with psycopg.connect(
        host="127.0.0.1", port=server.port, user="me", dbname="x", autocommit=True
    ) as conn:
        with (
            pytest.raises(psycopg.errors.FeatureNotSupported, match="COPY supports only"),
            conn.cursor().copy("COPY t FROM STDIN") as copy,
        ):
            copy.write(b"1\n")
        assert conn.execute("SELECT n FROM t").fetchall()  # the connection goes on


def test_a_limit_that_is_not_positive_is_refused() -> None:
    with pytest.raises(InvalidUsage, match="max_message_bytes must be positive, got 0"):
        PgServer(StandIn(), "127.0.0.1", 0, max_message_bytes=0)  # type: ignore[arg-type]
