"""The extended protocol's Describe of a prepared statement, without Spark.

A client that describes a statement before it executes it (JDBC once it
prepares, a driver's prepared statements) reads the rows with the columns
Describe gave: it answered NoData for a SELECT, and such a client then read
no columns. PostgreSQL answers a RowDescription for a statement that returns
rows, and NoData for one that does not.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from tests.unit.test_pgwire_cursor import StandIn
from tests.unit.test_pgwire_lifetimes import SYNC, Client, message

from timeshard.server.pgwire import PgServer


@pytest.fixture
def server(serve: Callable[..., PgServer]) -> PgServer:
    return serve(StandIn())


def parse(name: bytes, sql: str) -> bytes:
    return message(b"P", name + b"\0" + sql.encode() + b"\0" + struct.pack("!h", 0))


def describe_statement(name: bytes) -> bytes:
    return message(b"D", b"S" + name + b"\0")


def field_names(body: bytes) -> list[bytes]:
    (count,) = struct.unpack("!h", body[:2])
    names, rest = [], body[2:]
    for _ in range(count):
        name, rest = rest.split(b"\0", 1)
        names.append(name)
        rest = rest[18:]  # table oid, column, type oid, size, modifier, format
    return names


@pytest.mark.parametrize(
    ("sql", "want"),
    [
        ("SELECT n, s FROM t WHERE n > $1", [b"n", b"s"]),
        ("SELECT n, s FROM t", [b"n", b"s"]),
        ("CREATE MATERIALIZED VIEW v AS SELECT n FROM t", None),
        ("SUBSCRIBE t", None),
        ("BEGIN", None),
    ],
)
def test_describe_of_a_statement_answers_its_columns(
    server: PgServer, sql: str, want: list[bytes] | None
) -> None:
    client = Client(server)
    client.sock.sendall(parse(b"s1", sql) + describe_statement(b"s1") + SYNC)
    got = client.until(b"Z")
    kinds = [kind for kind, _ in got]
    assert kinds == [b"1", b"t", b"T" if want else b"n", b"Z"], got
    if want:
        assert field_names(got[2][1]) == want


@pytest.mark.parametrize(
    ("sql", "declared", "want"),
    [
        ("SELECT n FROM t WHERE n = $1 OR n > $1", 0, 1),
        ("SELECT n FROM t WHERE s = '$$' AND n = $2", 0, 2),
        ("SELECT n FROM t -- $3\nWHERE n = $1", 0, 1),
        ("SELECT n FROM t", 2, 2),
    ],
)
def test_describe_answers_as_many_parameters_as_the_statement_has(
    server: PgServer, sql: str, declared: int, want: int
) -> None:
    """PostgreSQL answers the highest ``$n`` (or the types declared, if more): every ``$``
    of the text was counted, so ``$1`` used twice was two parameters, and a client that
    binds as many as Describe says (JDBC) was refused for the second."""
    client = Client(server)
    body = b"s1\0" + sql.encode() + b"\0" + struct.pack(f"!h{declared}i", declared, *[0] * declared)
    client.sock.sendall(message(b"P", body) + describe_statement(b"s1") + SYNC)
    got = client.until(b"Z")
    assert [kind for kind, _ in got][:2] == [b"1", b"t"], got
    assert struct.unpack("!h", got[1][1][:2])[0] == want
