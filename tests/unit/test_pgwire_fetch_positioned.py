"""``FETCH FIRST``, ``LAST``, ``ABSOLUTE n`` and ``RELATIVE n`` were syntax errors
(42601). They are read, and answered as PostgreSQL answers them on a ``NO SCROLL``
cursor: a query cursor moves forward to the row they name and takes it (``FETCH 1``
or ``FETCH 0`` past the end); a move that needs a step back is 55000 "cursor can only
scan forward"; a SUBSCRIBE cursor refuses them (0A000)."""

from __future__ import annotations

import pytest
from tests.unit.test_pgwire_cursor import StandIn, connect
from tests.unit.test_pgwire_lifetimes import Client, query
from tests.unit.test_pgwire_session_reset import sqlstates

from timeshard.server.pgwire import PgServer
from timeshard.server.statements import Fetch, SqlError, parse


@pytest.mark.parametrize(
    ("sql", "name", "count", "position"),
    [
        ("FETCH FIRST c", "c", 1, "absolute"),
        ("FETCH LAST FROM c", "c", None, "last"),
        ("FETCH ABSOLUTE 3 IN c", "c", 3, "absolute"),
        ("FETCH ABSOLUTE -2 c", "c", -2, "absolute"),
        ("FETCH RELATIVE 0 c", "c", 0, "relative"),
        ("FETCH RELATIVE -1 FROM c", "c", -1, "relative"),
        ("FETCH first", "first", 1, "forward"),  # a cursor named first
        ("FETCH 2 FROM last", "last", 2, "forward"),
        ('FETCH LAST "C"', "C", None, "last"),
        ("FETCH RELATIVE +2 c", "c", 2, "relative"),
        ("FETCH ABSOLUTE +2 FROM c", "c", 2, "absolute"),
        ("FETCH +2 c", "c", 2, "forward"),
        ("FETCH FORWARD +3 IN c", "c", 3, "forward"),
    ],
)
def test_positioned_fetches_are_read(sql: str, name: str, count: int | None, position: str) -> None:
    assert parse(sql) == Fetch(name, count, position=position)


@pytest.mark.parametrize(
    ("sql", "name", "timeout_s"),
    [
        ("FETCH last WITH (TIMEOUT = 1)", "last", 1.0),
        ("FETCH first WITH (TIMEOUT = 0)", "first", 0.0),
        ("FETCH relative WITH (TIMEOUT = 0)", "relative", 0.0),
        ("FETCH absolute WITH (TIMEOUT = 2)", "absolute", 2.0),
        ("FETCH relative", "relative", None),
    ],
)
def test_a_cursor_named_like_a_direction_is_fetched(
    sql: str, name: str, timeout_s: float | None
) -> None:
    """FIRST or LAST is the direction before FROM, IN or a cursor's name (ending the
    statement or before WITH), ABSOLUTE or RELATIVE before a count: else it is the
    cursor's name. These were syntax errors (42601)."""
    assert parse(sql) == Fetch(name, 1, timeout_s)


@pytest.mark.parametrize(
    "sql", ["FETCH BACKWARD FIRST c", "FETCH ABSOLUTE x c", "FETCH last c extra"]
)
def test_a_malformed_positioned_fetch_is_a_syntax_error(sql: str) -> None:
    with pytest.raises(SqlError) as raised:
        parse(sql)
    assert raised.value.sqlstate == "42601"


#: The stand-in's query cursor has five rows, (0, 'row 0') .. (4, 'row 4').
DECLARE = "BEGIN; DECLARE c NO SCROLL CURSOR FOR SELECT 1"


@pytest.mark.parametrize(
    ("fetches", "rows"),
    [
        (["FETCH FIRST c"], [[0]]),
        (["FETCH ABSOLUTE 3 c"], [[2]]),
        (["FETCH 1 c", "FETCH ABSOLUTE 4 c", "FETCH NEXT c"], [[0], [3], [4]]),
        (["FETCH RELATIVE 2 c", "FETCH RELATIVE 3 c"], [[1], [4]]),
        (["FETCH ABSOLUTE 9 c", "FETCH ABSOLUTE 12 c"], [[], []]),
        (["FETCH RELATIVE 0 c", "FETCH ABSOLUTE 0 c", "FETCH 1 c"], [[], [], [0]]),
        (["FETCH ALL c", "FETCH RELATIVE 0 c"], [[0, 1, 2, 3, 4], []]),
    ],
)
def test_forward_moves_take_the_row_they_name(
    served: tuple[PgServer, StandIn], fetches: list[str], rows: list[list[int]]
) -> None:
    server, _ = served
    with connect(server) as conn:
        conn.execute(DECLARE)
        for sql, expected in zip(fetches, rows, strict=True):
            got = [n for n, _ in conn.execute(sql).fetchall()]
            assert got == expected, (sql, got)


@pytest.mark.parametrize(
    "fetches",
    [
        ["FETCH LAST c"],
        ["FETCH ABSOLUTE -1 c"],
        ["FETCH RELATIVE -1 c"],
        ["FETCH 1 c", "FETCH FIRST c"],
        ["FETCH 2 c", "FETCH ABSOLUTE 2 c"],
        ["FETCH 1 c", "FETCH RELATIVE 0 c"],
        ["FETCH 1 c", "FETCH ABSOLUTE 0 c"],
        ["FETCH ALL c", "FETCH ABSOLUTE 6 c"],
    ],
)
def test_moves_back_are_55000(served: tuple[PgServer, StandIn], fetches: list[str]) -> None:
    server, _ = served
    client = Client(server)
    text = "; ".join([DECLARE, *fetches])
    client.sock.sendall(query(text))
    answered = client.until(b"Z")
    assert sqlstates(answered) == ["55000"], (fetches, answered)
    assert b"cursor can only scan forward" in answered[-2][1]


def test_a_subscribe_cursor_refuses_them(served: tuple[PgServer, StandIn]) -> None:
    server, _ = served
    client = Client(server)
    client.sock.sendall(query("BEGIN; DECLARE c CURSOR FOR SUBSCRIBE t; FETCH ABSOLUTE 1 c"))
    assert sqlstates(client.until(b"Z")) == ["0A000"]
