"""A backward FETCH of a cursor is refused as PostgreSQL refuses it on a ``NO SCROLL``
cursor: 55000 "cursor can only scan forward" (after 34000 if there is no such cursor).
serve's cursors scan forward only; ``FETCH -1 c`` and ``FETCH BACKWARD 1 c`` were a
syntax error (42601), which told the client its SQL was wrong rather than the cursor."""

from __future__ import annotations

import pytest
from tests.unit.test_pgwire_cursor import StandIn
from tests.unit.test_pgwire_lifetimes import Client, query
from tests.unit.test_pgwire_session_reset import sqlstates

from timeshard.server.pgwire import PgServer
from timeshard.server.statements import Fetch, parse


@pytest.mark.parametrize(
    ("sql", "count"),
    [
        ("FETCH -1 c", 1),
        ("FETCH FORWARD -3 FROM c", 3),
        ("FETCH BACKWARD 1 c", 1),
        ("FETCH BACKWARD ALL IN c", None),
        ("FETCH BACKWARD c", 1),
        ("FETCH PRIOR c", 1),
    ],
)
def test_backward_fetches_are_read(sql: str, count: int | None) -> None:
    assert parse(sql) == Fetch("c", count, backward=True)


def test_forward_fetches_stay_forward() -> None:
    assert parse("FETCH 2 c") == Fetch("c", 2)
    assert parse("FETCH FORWARD ALL c") == Fetch("c", None)
    assert parse("FETCH BACKWARD -2 c") == Fetch("c", 2)  # backward by -2: forward, as in PG


def test_a_backward_fetch_is_refused_and_the_cursor_goes_on(
    served: tuple[PgServer, StandIn],
) -> None:
    server, _ = served
    client = Client(server)
    client.sock.sendall(query("FETCH BACKWARD 1 missing"))
    assert sqlstates(client.until(b"Z")) == ["34000"]
    for sql in ("FETCH -1 c", "FETCH BACKWARD 1 c", "FETCH PRIOR c"):
        client.sock.sendall(query(f"BEGIN; DECLARE c CURSOR FOR SELECT 1; FETCH 1 c; {sql}"))
        refused = client.until(b"Z")
        assert sqlstates(refused) == ["55000"], (sql, refused)
        assert b"cursor can only scan forward" in refused[-2][1]
        client.sock.sendall(query("ROLLBACK"))
        client.until(b"Z")
