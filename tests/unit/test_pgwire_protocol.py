"""The pgwire front end's answer to a malformed message, without Spark.

A message that does not decode (lengths that do not add up, a string without
its end, a kind no client sends, a length shorter than itself) is a protocol
violation: PostgreSQL answers FATAL 08P01 naming it, then closes the
connection. The server answered nothing and closed (or read a message of
length -1 as a Sync, again and again).
"""

from __future__ import annotations

import struct

import pytest
from tests.unit.test_pgwire_cursor import StandIn
from tests.unit.test_pgwire_lifetimes import SYNC, Client, message, parse

from timeshard.server.pgwire import PgServer


def fields(body: bytes) -> dict[str, str]:
    """An ErrorResponse's fields by their code."""
    return {f[:1].decode(): f[1:].decode() for f in body.split(b"\0") if f}


def closed(client: Client) -> bool:
    """True once the server closes the connection (after what it sent before)."""
    while True:
        data = client.sock.recv(1 << 16)
        if not data:
            return True
        client.buf += data


@pytest.mark.parametrize(
    "garbled",
    [
        message(b"B", b"\0s\0" + struct.pack("!hhhih", 0, 1, 1, -1, 0)),  # lengths past its end
        message(b"B", b"\0s"),  # a name without its end
    ],
    ids=["bind-lengths", "bind-truncated"],
)
def test_a_malformed_message_is_a_fatal_protocol_violation(
    served: tuple[PgServer, StandIn], garbled: bytes
) -> None:
    server, _ = served
    client = Client(server)
    client.sock.sendall(parse("SELECT 1") + garbled + SYNC)
    got = client.until(b"E")
    assert [kind for kind, _ in got] == [b"1", b"E"], got
    error = fields(got[-1][1])
    assert (error["S"], error["C"]) == ("FATAL", "08P01"), error
    assert "Bind" in error["M"], error
    assert closed(client)
    assert client.buf == b"", client.buf  # the error is the last word


def first(client: Client) -> tuple[bytes, bytes]:
    """The next message the server sends."""
    while len(client.buf) < 5 or len(client.buf) < 1 + struct.unpack("!i", client.buf[1:5])[0]:
        data = client.sock.recv(1 << 16)
        assert data, f"the server closed with {client.buf!r} unread"
        client.buf += data
    n = struct.unpack("!i", client.buf[1:5])[0]
    out = (client.buf[:1], client.buf[5 : 1 + n])
    client.buf = client.buf[1 + n :]
    return out


@pytest.mark.parametrize(
    ("garbled", "named"),
    [
        (b"S" + struct.pack("!i", -1), "Sync"),  # it was read as a Sync, again and again
        (b"Q" + struct.pack("!i", 2) + b"SELECT 1\0", "Query"),
        (message(b"Z", b"I"), "Z"),  # no client sends a ReadyForQuery
    ],
    ids=["negative-length", "short-length", "unknown-kind"],
)
def test_a_garbled_frame_is_a_fatal_protocol_violation(
    served: tuple[PgServer, StandIn], garbled: bytes, named: str
) -> None:
    server, _ = served
    client = Client(server)
    client.sock.sendall(garbled)
    kind, body = first(client)
    assert kind == b"E", (kind, body)
    error = fields(body)
    assert (error["S"], error["C"]) == ("FATAL", "08P01"), error
    assert named in error["M"], error
    assert closed(client)
    assert client.buf == b"", client.buf


def test_a_garbled_message_behind_a_subscribe_is_a_fatal_protocol_violation(
    served: tuple[PgServer, StandIn],
) -> None:
    server, engine = served
    client = Client(server)
    client.sock.sendall(message(b"Q", b"SUBSCRIBE v\0"))
    client.until(b"H")
    client.sock.sendall(b"S" + struct.pack("!i", 1))
    got = client.until(b"E")
    error = fields(got[-1][1])
    assert (error["S"], error["C"]) == ("FATAL", "08P01"), error
    assert closed(client)
    assert engine.closed == 1  # the SUBSCRIBE let go of its reader


def raw_bind(formats: list[int], values: list[bytes | None]) -> bytes:
    """A Bind of the unnamed statement to the unnamed portal with these parameter
    formats and values, asking for text results."""
    body = (
        b"\0\0" + struct.pack("!h", len(formats)) + b"".join(struct.pack("!h", f) for f in formats)
    )
    body += struct.pack("!h", len(values))
    for v in values:
        body += struct.pack("!i", -1) if v is None else struct.pack("!i", len(v)) + v
    return message(b"B", body + struct.pack("!h", 0))


@pytest.mark.parametrize(
    ("bound", "code"),
    [
        (raw_bind([0, 0], [b"1", b"2", b"3"]), "08P01"),  # 2 formats for 3 parameters
        (raw_bind([1], [b"\x00\x01", bytes(8), bytes(8)]), "22P03"),  # an int8 of 2 bytes
        (raw_bind([0], [b"\xff\xfe", b"1", b"1"]), "22021"),  # no UTF-8
    ],
    ids=["format-count", "short-binary", "not-utf8"],
)
def test_a_bad_bind_is_an_error_of_its_statement_not_an_internal_one(
    served: tuple[PgServer, StandIn], bound: bytes, code: str
) -> None:
    """They answered XX000 with a logged traceback (an IndexError, a struct.error, a
    UnicodeDecodeError); the connection stays usable."""
    server, _ = served
    client = Client(server)
    typed = message(b"P", b"\0SELECT $1, $2, $3\0" + struct.pack("!hiii", 3, 20, 20, 20))
    client.sock.sendall(typed + bound + SYNC)
    got = client.until(b"Z")
    errors = [fields(body) for kind, body in got if kind == b"E"]
    assert [(e["S"], e["C"]) for e in errors] == [("ERROR", code)], got
