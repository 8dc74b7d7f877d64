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
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from tests.unit.test_pgwire_cursor import StandIn

from timeshard.errors import InvalidUsage
from timeshard.server.engine import Result, Stream
from timeshard.server.pgwire import PgServer
from timeshard.server.statements import Statement


class Leasing(StandIn):
    """A SUBSCRIBE's rows count their close in ``released``, read or not, as the
    engine's expire their reader (the stand-in's count only rows that started)."""

    def __init__(self) -> None:
        super().__init__()
        self.released = 0

    def execute(self, statement: Statement) -> Result | Stream:
        result = super().execute(statement)
        if isinstance(result, Stream):
            return Stream(result.columns, _Leased(result.rows, self))
        return result


class _Leased:
    def __init__(self, rows: Iterator[tuple[Any, ...]], engine: Leasing) -> None:
        self.rows = rows
        self.engine = engine
        self.closed = False

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return self

    def __next__(self) -> tuple[Any, ...]:
        return next(self.rows)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.engine.released += 1
            close = getattr(self.rows, "close", None)
            if close is not None:
                close()


@pytest.fixture
def served(serve: Callable[..., PgServer]) -> tuple[PgServer, Leasing]:
    engine = Leasing()
    return serve(engine), engine


def until(condition: Any, what: str, within_s: float = 30.0) -> None:
    """Wait for ``condition``; a stuck server never meets it, a slow one within 30 s."""
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
    served: tuple[PgServer, Leasing], terminate: bool
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
    served: tuple[PgServer, Leasing],
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
    served: tuple[PgServer, Leasing],
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


def test_copy_fail_ends_a_copy_out_with_an_error(served: tuple[PgServer, Leasing]) -> None:
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
    served: tuple[PgServer, Leasing],
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


@pytest.mark.parametrize("ending", ["up to", "copy fail"])
def test_a_subscribe_through_the_extended_protocol_leaves_the_connection_usable(
    served: tuple[PgServer, Leasing], ending: str
) -> None:
    """Parse, Bind, Describe, Execute and Sync in one write (psycopg's, libpq's way): the
    COPY OUT, then the Sync's ReadyForQuery, then the next statement's answer (the codec
    took the Sync after the COPY for a simple query's and closed the connection)."""
    server, engine = served
    client = Client(server)
    client.sock.sendall(parse("SUBSCRIBE v") + bind() + describe() + execute() + SYNC)
    client.until(b"H")
    if ending == "up to":
        engine.feed((1, 1, "a"), None)
        kinds = [b"d", b"c", b"C", b"Z"]
    else:
        client.sock.sendall(message(b"f", b"enough\0"))
        kinds = [b"E", b"Z"]
    assert [kind for kind, _ in client.until(b"Z")] == kinds
    assert engine.released == 1
    client.sock.sendall(parse("SELECT 1") + bind() + execute() + SYNC)
    assert [kind for kind, _ in client.until(b"Z")] == [b"1", b"2", *[b"D"] * 5, b"C", b"Z"]
    client.sock.sendall(query("SELECT 1"))
    assert [kind for kind, _ in client.until(b"Z")] == [b"T", *[b"D"] * 5, b"C", b"Z"]


def describe_subscribe(client: Client, portal: bytes) -> None:
    """Bind ``portal`` to a SUBSCRIBE and describe it (which runs it), not executed."""
    client.sock.sendall(parse("SUBSCRIBE v") + bind(portal) + describe(portal) + message(b"H"))
    client.until(b"n")  # NoData; Flush, not Sync: the portal lives on


@pytest.mark.parametrize(
    "drop",
    ["close", "bind again", "sync", "simple query", "connection end"],
)
def test_dropping_a_subscribe_portal_closes_it(served: tuple[PgServer, Leasing], drop: str) -> None:
    server, engine = served
    client = Client(server)
    describe_subscribe(client, b"" if drop in ("sync", "simple query") else b"p")
    assert (engine.opened, engine.released) == (1, 0)
    if drop == "close":
        client.sock.sendall(close(b"p") + SYNC)
    elif drop == "bind again":
        client.sock.sendall(parse("SELECT 1") + bind(b"p") + SYNC)
    elif drop == "sync":
        client.sock.sendall(SYNC)
    elif drop == "simple query":
        client.sock.sendall(query("SELECT 1"))
    if drop == "connection end":
        client.sock.sendall(TERMINATE)
        client.sock.close()
    else:
        client.until(b"Z")
    until(lambda: engine.released == 1, f"the SUBSCRIBE outlived its portal ({drop})")


def test_a_portal_in_a_transaction_block_lives_until_its_end(
    served: tuple[PgServer, Leasing],
) -> None:
    server, engine = served
    client = Client(server)
    client.sock.sendall(query("BEGIN"))
    client.until(b"Z")
    describe_subscribe(client, b"p")
    client.sock.sendall(SYNC)
    client.until(b"Z")
    assert engine.released == 0  # a Sync in a transaction block ends nothing
    client.sock.sendall(query("COMMIT"))
    client.until(b"Z")
    client.sock.sendall(SYNC)
    client.until(b"Z")
    assert engine.released == 1


def test_a_described_subscribe_portal_releases_its_readers_lease() -> None:
    """r2b: the engine's SUBSCRIBE of a portal only described, then closed, leaves no
    leased reader on its shard."""
    from types import SimpleNamespace

    import pyarrow as pa

    from timeshard.location import Location
    from timeshard.location.memory import MemoryBlob, MemoryConsensus
    from timeshard.persist import PersistClient
    from timeshard.server.engine import Engine

    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    writer = client.open_writer("v", pa.schema([("k", pa.string())]))
    writer.compare_and_append_batch([writer.batch([(("a",), 0, 1)], 0, 1)], 0, 1)
    server = PgServer(Engine(SimpleNamespace(), client, follow_s=3600), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        wire = Client(server)
        describe_subscribe(wire, b"p")
        assert len(client._machine("v", None).fetch().leased_readers) == 1
        wire.sock.sendall(close(b"p") + SYNC)
        wire.until(b"Z")
        assert client._machine("v", None).fetch().leased_readers == {}
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("sent", [b"", struct.pack("!i", 40) + b"\0\3"], ids=["nothing", "half"])
def test_a_client_that_does_not_start_up_in_time_is_disconnected(sent: bytes) -> None:
    """A connection that sends no startup message, or stops inside one, is closed after
    the startup timeout (it held its thread for ever); a session that started idles
    past it and is answered."""
    server = PgServer(StandIn(), "127.0.0.1", 0, startup_timeout_s=0.5)  # type: ignore[arg-type]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        started = Client(server)
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        sock.sendall(sent)
        assert sock.recv(1) == b"", "the server should close a client that never started"
        time.sleep(1.0)
        started.sock.sendall(query("SELECT 1"))
        assert [kind for kind, _ in started.until(b"Z")] == [b"T", *[b"D"] * 5, b"C", b"Z"]
    finally:
        server.shutdown()
        server.server_close()


def test_the_startup_timeout_must_be_positive() -> None:
    with pytest.raises(InvalidUsage, match="startup_timeout_s"):
        PgServer(StandIn(), "127.0.0.1", 0, startup_timeout_s=0)  # type: ignore[arg-type]
