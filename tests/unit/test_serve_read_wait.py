"""A SELECT waiting for a readable time ends on a cancel or its statement_timeout.

A query without AS OF over a shard that holds no readable time yet (a view
just created) waits for one, up to the engine's ``read_wait_s``. That wait ran
no Spark job, so neither a CancelRequest nor statement_timeout (which cancel
the statement's jobs) reached it: the client waited the whole ``read_wait_s``
(60 s by default). PostgreSQL ends such a wait with 57014 at once.

The engine here is the real one, on an embedded location, in front of a
stand-in SparkSession that tags jobs and runs none: the query never gets past
its wait, which is what is tested.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from tests.unit.test_pgwire_cursor import until
from tests.unit.test_pgwire_lifetimes import Client, query

from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.server.engine import Engine
from timeshard.server.pgwire import PgServer

#: Far longer than any test runs: a wait that only this ends is stuck.
READ_WAIT_S = 3600.0


class StandInContext:
    """A SparkContext's job tags and cancels (PySpark's names), with no job ever running."""

    def __init__(self) -> None:
        self.properties: dict[str, Any] = {}
        self.canceled: list[str] = []

    def getLocalProperty(self, key: str) -> Any:
        return self.properties.get(key)

    def setLocalProperty(self, key: str, value: Any) -> None:
        self.properties[key] = value

    def addJobTag(self, tag: str) -> None:
        pass

    def removeJobTag(self, tag: str) -> None:
        pass

    def setInterruptOnCancel(self, value: bool) -> None:
        pass

    def cancelJobsWithTag(self, tag: str) -> None:
        self.canceled.append(tag)


class _Spark:
    def __init__(self) -> None:
        self.sparkContext = StandInContext()

    def newSession(self) -> _Spark:
        return self


@pytest.fixture
def waiting(tmp_path: Path, serve: Callable[..., PgServer]) -> tuple[PgServer, PersistClient]:
    """A server whose shard ``v`` holds no readable time (its upper is the least)."""
    client = PersistClient(Location.embedded(tmp_path))
    client.open_writer("v", pa.schema([("k", pa.string())]))
    engine = Engine(_Spark(), client, read_wait_s=READ_WAIT_S)
    return serve(engine), client


class _Client(Client):
    """A raw client that keeps its BackendKeyData, to send a CancelRequest, and waits
    up to a minute for an answer (a stuck server then fails the test, not hangs it)."""

    def __init__(self, server: PgServer) -> None:
        self.server = server
        self.sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
        body = struct.pack("!i", 196608) + b"user\0me\0database\0x\0\0"
        self.sock.sendall(struct.pack("!i", len(body) + 4) + body)
        self.buf = b""
        self.key = dict(self.until(b"Z"))[b"K"]

    def cancel(self) -> None:
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=60) as sock:
            sock.sendall(struct.pack("!ii", 16, 80877102) + self.key)
            sock.recv(1)  # the server closes it, having canceled

    def error(self, sql: str) -> str:
        """The message of the ErrorResponse ``sql`` is answered with."""
        try:
            answered = self.until(b"Z")
        except TimeoutError:
            pytest.fail(f"no answer to {sql!r} within a minute: the server is stuck")
        errors = [body for kind, body in answered if kind == b"E"]
        assert errors, answered
        fields = dict((f[:1].decode(), f[1:].decode()) for f in errors[0].split(b"\0") if f)
        return f"{fields['C']}: {fields['M']}"


def reading(client: PersistClient) -> bool:
    """Whether a query holds a reader of ``v`` (it is in its wait, or about to be)."""
    return bool(client.state("v").leased_readers)


def test_statement_timeout_ends_a_wait_for_a_readable_time(
    waiting: tuple[PgServer, PersistClient],
) -> None:
    server, client = waiting
    conn = _Client(server)
    conn.sock.sendall(query("SET statement_timeout = 200"))
    conn.until(b"Z")
    conn.sock.sendall(query("SELECT * FROM v"))
    assert conn.error("SELECT * FROM v") == "57014: canceling statement due to statement timeout"
    assert not reading(client), "the canceled SELECT's reader was not expired"


def test_a_cancel_request_ends_a_wait_for_a_readable_time(
    waiting: tuple[PgServer, PersistClient],
) -> None:
    server, client = waiting
    conn = _Client(server)
    conn.sock.sendall(query("SELECT * FROM v"))
    until(lambda: reading(client), "the SELECT opened no reader")
    conn.cancel()
    assert conn.error("SELECT * FROM v") == "57014: canceling statement due to user request"
    assert not reading(client), "the canceled SELECT's reader was not expired"
    conn.sock.sendall(query("SHOW statement_timeout"))  # the connection is usable
    assert [kind for kind, _ in conn.until(b"Z")] == [b"T", b"D", b"C", b"Z"]
