"""CopyData, CopyDone and CopyFail outside a COPY FROM are ignored, without Spark.

A client may still be sending COPY data when the server has refused its COPY (serve
has no COPY FROM STDIN: it answers 0A000): PostgreSQL accepts and ignores CopyData,
CopyDone and CopyFail then, as the protocol says. serve ended the connection with
FATAL 08P01 ("invalid CopyData message"), losing the session of a client that
pipelined its data behind the COPY.
"""

from __future__ import annotations

from tests.unit.test_pgwire_cursor import StandIn
from tests.unit.test_pgwire_lifetimes import Client, message, query

from timeshard.server.pgwire import PgServer

STRAY = message(b"d", b"1\tone\n") + message(b"c") + message(b"f", b"gave up\0")


def test_copy_messages_behind_a_refused_copy_are_ignored(
    served: tuple[PgServer, StandIn],
) -> None:
    server, _ = served
    client = Client(server)
    client.sock.sendall(query("COPY t FROM STDIN") + STRAY + query("SELECT n FROM t"))
    refused = client.until(b"Z")
    assert [kind for kind, _ in refused] == [b"E", b"Z"], refused
    assert b"C0A000" in refused[0][1], refused
    answered = client.until(b"Z")
    assert [kind for kind, _ in answered] == [b"T"] + [b"D"] * 5 + [b"C", b"Z"], answered
