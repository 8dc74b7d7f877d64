"""A Bind must supply as many parameters as its prepared statement has, without Spark.

A Bind of fewer parameters than the statement's ``$n`` ran it with ``$1`` left in
its text (the engine got ``WHERE n > $1``), and one of more ran it with the extra
ones dropped. PostgreSQL refuses both with 08P01 ("bind message supplies 0
parameters, but prepared statement "" requires 1"); so does serve now, and the
engine never sees the statement.
"""

from __future__ import annotations

import struct

import pytest
from tests.unit.test_pgwire_cursor import StandIn
from tests.unit.test_pgwire_lifetimes import Client, message
from tests.unit.test_pgwire_session_reset import answers, execute, sqlstates

from timeshard.server.pgwire import PgServer


def parse(name: bytes, sql: str, oids: list[int]) -> bytes:
    types = struct.pack(f"!h{len(oids)}i", len(oids), *oids)
    return message(b"P", name + b"\0" + sql.encode() + b"\0" + types)


def bind(statement: bytes, values: list[bytes]) -> bytes:
    body = b"\0" + statement + b"\0" + struct.pack("!h", 0) + struct.pack("!h", len(values))
    body += b"".join(struct.pack("!i", len(v)) + v for v in values)
    return message(b"B", body + struct.pack("!h", 0))


@pytest.mark.parametrize(
    ("sql", "oids", "values", "requires"),
    [
        ("SELECT n FROM t WHERE n > $1", [], [], 1),
        ("SELECT n FROM t WHERE n > $1", [], [b"1", b"2"], 1),
        ("SELECT n FROM t", [], [b"1"], 0),
        ("SELECT n FROM t WHERE n > $1", [23, 23], [b"1"], 2),  # declared types count too
    ],
)
def test_a_bind_of_another_parameter_count_is_refused(
    served: tuple[PgServer, StandIn], sql: str, oids: list[int], values: list[bytes], requires: int
) -> None:
    server, engine = served
    client = Client(server)
    got = answers(client, parse(b"s", sql, oids) + bind(b"s", values) + execute(b""))
    assert sqlstates(got) == ["08P01"], got
    supplies = f"bind message supplies {len(values)} parameters"
    want = f'{supplies}, but prepared statement "s" requires {requires}'
    assert want.encode() in got[-2][1], got
    assert engine.statements == []
    ok = answers(client, bind(b"s", [b"1"] * requires) + execute(b""))  # the connection goes on
    assert sqlstates(ok) == [] and len(engine.statements) == 1, ok
