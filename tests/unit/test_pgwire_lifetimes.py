"""When the pgwire front end lets go of a SUBSCRIBE, without Spark.

A SUBSCRIBE holds a leased reader of its shard until its stream is closed;
the stand-in engine of :mod:`tests.unit.test_pgwire_cursor` counts the
streams opened and closed. The tests check each way a client ends one: it
leaves (``Terminate`` then closing, as libpq's ``PQfinish`` does; or only
closing) during a COPY OUT or a waiting FETCH, sends ``CopyFail``, or drops
a portal that holds one (Close, a Bind over it, the Sync ending the unnamed
portal's implicit transaction, the connection's end).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from tests.unit.test_pgwire_cursor import StandIn

from timeshard.server.pgwire import PgServer


@pytest.fixture
def served() -> Iterator[tuple[PgServer, StandIn]]:
    engine = StandIn()
    server = PgServer(engine, "127.0.0.1", 0)  # type: ignore[arg-type]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, engine
    server.shutdown()
    server.server_close()


def until(condition: Any, what: str, within_s: float = 5.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def message(kind: bytes, body: bytes = b"") -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def query(sql: str) -> bytes:
    return message(b"Q", sql.encode() + b"\0")


def parse(sql: str) -> bytes:
    return message(b"P", b"\0" + sql.encode() + b"\0" + struct.pack("!h", 0))


def bind(portal: bytes = b"") -> bytes:
    return message(b"B", portal + b"\0\0" + struct.pack("!hhh", 0, 0, 0))


def describe(portal: bytes = b"") -> bytes:
    return message(b"D", b"P" + portal + b"\0")


def execute(portal: bytes = b"") -> bytes:
    return message(b"E", portal + b"\0" + struct.pack("!i", 0))


def close(portal: bytes = b"") -> bytes:
    return message(b"C", b"P" + portal + b"\0")


SYNC, TERMINATE = message(b"S"), message(b"X")


class Client:
    """A raw protocol-3 client: it sends bytes and reads messages up to a kind."""

    def __init__(self, server: PgServer) -> None:
        self.sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        body = struct.pack("!i", 196608) + b"user\0me\0database\0x\0\0"
        self.sock.sendall(struct.pack("!i", len(body) + 4) + body)
        self.buf = b""
        self.until(b"Z")

    def until(self, kind: bytes) -> list[tuple[bytes, bytes]]:
        """The messages read, up to and with the first of ``kind``."""
        out = []
        while True:
            while len(self.buf) >= 5 and len(self.buf) >= 1 + struct.unpack("!i", self.buf[1:5])[0]:
                n = struct.unpack("!i", self.buf[1:5])[0]
                out.append((self.buf[:1], self.buf[5 : 1 + n]))
                self.buf = self.buf[1 + n :]
                if out[-1][0] == kind:
                    return out
            data = self.sock.recv(1 << 16)
            assert data, f"the server closed before a {kind!r} message: {out}"
            self.buf += data


@pytest.mark.parametrize("terminate", [True, False], ids=["terminate", "close"])
def test_a_client_leaving_a_copy_out_ends_its_subscribe(
    served: tuple[PgServer, StandIn], terminate: bool
) -> None:
    server, engine = served
    client = Client(server)
    client.sock.sendall(query("SUBSCRIBE v"))
    client.until(b"H")  # CopyOutResponse
    engine.feed((1, 1, "a"))
    client.until(b"d")
    if terminate:  # what libpq's PQfinish does: Terminate, then close
        client.sock.sendall(TERMINATE)
    client.sock.close()
    until(lambda: engine.closed == 1, "the SUBSCRIBE outlived its client")


def test_psycopg_closing_after_a_copy_ends_its_subscribe(
    served: tuple[PgServer, StandIn],
) -> None:
    server, engine = served
    engine.feed((1, 1, "a"))
    conn = psycopg.connect(
        host="127.0.0.1", port=server.port, user="me", dbname="x", autocommit=True
    )
    with (
        contextlib.suppress(psycopg.Error),
        conn.cursor().copy("COPY (SUBSCRIBE v) TO STDOUT") as copy,
    ):
        for _ in copy:
            break  # leaving the block early: the COPY runs on, unread
    conn.close()
    until(lambda: engine.closed == 1, "the SUBSCRIBE outlived its connection")


def test_a_client_leaving_a_waiting_fetch_ends_its_subscribe(
    served: tuple[PgServer, StandIn],
) -> None:
    server, engine = served
    client = Client(server)
    client.sock.sendall(query("BEGIN; DECLARE c CURSOR FOR SUBSCRIBE v"))
    client.until(b"Z")
    client.sock.sendall(query("FETCH ALL c"))  # waits for a first row: none comes
    time.sleep(0.2)
    client.sock.sendall(TERMINATE)
    client.sock.close()
    until(lambda: engine.closed == 1, "the cursor's SUBSCRIBE outlived its client")


def test_copy_fail_ends_a_copy_out_with_an_error(served: tuple[PgServer, StandIn]) -> None:
    server, engine = served
    client = Client(server)
    client.sock.sendall(query("SUBSCRIBE v"))
    client.until(b"H")
    client.sock.sendall(message(b"f", b"enough\0"))
    got = client.until(b"Z")
    errors = [body for kind, body in got if kind == b"E"]
    assert len(errors) == 1 and b"C57014\0" in errors[0] and b"enough" in errors[0], got
    assert engine.closed == 1
    client.sock.sendall(query("SELECT 1"))
    assert [kind for kind, _ in client.until(b"Z")] == [b"T", *[b"D"] * 5, b"C", b"Z"]


def test_a_query_sent_during_a_copy_out_is_answered_after_it(
    served: tuple[PgServer, StandIn],
) -> None:
    server, engine = served
    client = Client(server)
    client.sock.sendall(query("SUBSCRIBE v UP TO 2"))
    client.until(b"H")
    client.sock.sendall(query("SELECT 1"))  # read while the COPY runs: not an error
    time.sleep(0.1)
    engine.feed((1, 1, "a"), None)
    assert [kind for kind, _ in client.until(b"Z")] == [b"d", b"c", b"C", b"Z"]
    assert engine.closed == 1
    assert [kind for kind, _ in client.until(b"Z")] == [b"T", *[b"D"] * 5, b"C", b"Z"]
