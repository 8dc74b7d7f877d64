"""An extended-protocol pipeline as PostgreSQL runs it, without Spark.

Outside a transaction block, PostgreSQL runs the messages up to a Sync as one
implicit transaction: an error in it rolls it back, and with it the ``SET``s of
the statements executed before the error. serve kept them: ``SET
statement_timeout = '1s'`` then a failing statement, then Sync, left every later
statement of the session canceled after a second.
"""

from __future__ import annotations

from tests.unit.test_pgwire_cursor import StandIn
from tests.unit.test_pgwire_lifetimes import Client, query
from tests.unit.test_pgwire_session_reset import (
    answers,
    bind,
    describe_statement,
    execute,
    parse,
    sqlstates,
)

from timeshard.server.pgwire import PgServer


def executed(sql: str) -> bytes:
    """Parse, Bind and Execute of ``sql`` as the unnamed statement and portal."""
    return parse(b"", sql) + bind(b"", b"") + execute(b"")


def shown(client: Client) -> bytes:
    """statement_timeout as SHOW answers it."""
    rows = [
        body for kind, body in answers(client, executed("SHOW statement_timeout")) if kind == b"D"
    ]
    assert len(rows) == 1, rows
    return rows[0][6:]


def test_a_failed_pipeline_undoes_its_sets(served: tuple[PgServer, StandIn]) -> None:
    server, _ = served
    client = Client(server)
    assert sqlstates(answers(client, executed("SET statement_timeout = '5s'"))) == []
    failed = answers(client, executed("SET statement_timeout = '1s'") + executed("SELEC"))
    assert sqlstates(failed) == ["0A000"], failed
    assert shown(client) == b"5s"
    # an error at Bind rolls the pipeline back too
    unbound = answers(client, executed("RESET statement_timeout") + bind(b"", b"missing"))
    assert sqlstates(unbound) == ["26000"], unbound
    assert shown(client) == b"5s"


def test_a_discard_all_first_in_a_failed_pipeline_stays(
    served: tuple[PgServer, StandIn],
) -> None:
    """DISCARD ALL takes effect at once (PostgreSQL refuses it later in a pipeline): a
    failure after it in its pipeline does not bring back the timeout it reset, which a
    pool's next client would otherwise get."""
    server, _ = served
    client = Client(server)
    assert sqlstates(answers(client, executed("SET statement_timeout = '5s'"))) == []
    failed = answers(client, executed("DISCARD ALL") + executed("SELEC"))
    assert sqlstates(failed) == ["0A000"], failed
    assert shown(client) == b"0"


def test_a_pipeline_that_succeeds_or_commits_keeps_its_sets(
    served: tuple[PgServer, StandIn],
) -> None:
    server, _ = served
    client = Client(server)
    assert sqlstates(answers(client, executed("SET statement_timeout = '2s'"))) == []
    assert shown(client) == b"2s"
    # what a COMMIT in the pipeline committed stays; what follows it is rolled back
    ended = executed("SET statement_timeout = '3s'") + executed("COMMIT")
    failed = answers(client, ended + executed("SET statement_timeout = '4s'") + executed("SELEC"))
    assert sqlstates(failed) == ["0A000"], failed
    assert shown(client) == b"3s"


def test_a_parse_of_several_statements_is_refused(served: tuple[PgServer, StandIn]) -> None:
    """PostgreSQL refuses them at Parse (42601); serve took them, described them as
    NoData, and refused only their Execute."""
    server, _ = served
    client = Client(server)
    refused = answers(client, parse(b"two", "SELECT 1; SELECT $1"))
    assert sqlstates(refused) == ["42601"], refused
    assert b"cannot insert multiple commands into a prepared statement" in refused[0][1]
    assert sqlstates(answers(client, bind(b"", b"two"))) == ["26000"]  # it was not prepared
    # one statement, and a trailing semicolon, are one statement
    ran = answers(client, executed("SELECT 1;"))
    assert sqlstates(ran) == [] and (b"C", b"SELECT 5\0") in ran, ran


def test_a_failed_block_refuses_parse_and_bind_but_of_its_end(
    served: tuple[PgServer, StandIn],
) -> None:
    """PostgreSQL refuses Parse, Bind and a statement's Describe in a failed transaction
    block (25P02) but for COMMIT and ROLLBACK; serve refused only Execute."""
    server, engine = served
    client = Client(server)
    assert sqlstates(answers(client, parse(b"before", "SELECT 1"))) == []
    client.sock.sendall(query("BEGIN; SELEC"))
    assert client.until(b"Z")[-1] == (b"Z", b"E")
    parsed = answers(client, parse(b"after", "SELECT 1"))
    assert sqlstates(parsed) == ["25P02"] and parsed[-1] == (b"Z", b"E"), parsed
    assert sqlstates(answers(client, bind(b"", b"before"))) == ["25P02"]
    assert sqlstates(answers(client, describe_statement(b"before"))) == ["25P02"]
    assert sqlstates(answers(client, bind(b"", b"after"))) == ["26000"]  # never prepared
    assert engine.statements == []  # nothing ran
    ended = answers(client, parse(b"end", "ROLLBACK") + describe_statement(b"end"))
    assert sqlstates(ended) == [], ended
    ended = answers(client, bind(b"", b"end") + execute(b""))
    assert sqlstates(ended) == [] and ended[-2:] == [(b"C", b"ROLLBACK\0"), (b"Z", b"I")], ended
    ran = answers(client, bind(b"", b"before") + execute(b""))
    assert sqlstates(ran) == [] and (b"C", b"SELECT 5\0") in ran, ran


def test_a_failed_block_describes_a_statement_of_no_rows(
    served: tuple[PgServer, StandIn],
) -> None:
    """PostgreSQL refuses a statement's Describe in a failed block only if the statement
    answers rows; a SET is described (no columns) as outside one."""
    server, engine = served
    client = Client(server)
    prepared = parse(b"set", "SET statement_timeout = '1s'") + parse(b"sel", "SELECT 1")
    assert sqlstates(answers(client, prepared)) == []
    client.sock.sendall(query("BEGIN; SELEC"))
    assert client.until(b"Z")[-1] == (b"Z", b"E")
    described = answers(client, describe_statement(b"set"))
    assert sqlstates(described) == [] and (b"n", b"") in described, described
    assert sqlstates(answers(client, describe_statement(b"sel"))) == ["25P02"]
    assert engine.statements == []  # nothing ran


def test_a_portal_ends_with_its_transaction_block(served: tuple[PgServer, StandIn]) -> None:
    """PostgreSQL closes a block's portals at its COMMIT or ROLLBACK; serve kept them
    until the next Sync outside a block, so an Execute after a COMMIT ran them."""
    server, _ = served
    client = Client(server)
    for end in ("COMMIT", "ROLLBACK"):
        client.sock.sendall(query("BEGIN"))
        client.until(b"Z")
        assert sqlstates(answers(client, parse(b"", "SELECT 1") + bind(b"p", b""))) == []
        client.sock.sendall(query(end))
        client.until(b"Z")
        assert sqlstates(answers(client, execute(b"p"))) == ["34000"], end
    # a COMMIT executed through a portal ends the others, and completes itself
    client.sock.sendall(query("BEGIN"))
    client.until(b"Z")
    kept = parse(b"", "SELECT 1") + bind(b"p", b"")
    ended = answers(client, kept + parse(b"", "COMMIT") + bind(b"", b"") + execute(b""))
    assert sqlstates(ended) == [] and (b"C", b"COMMIT\0") in ended, ended
    assert sqlstates(answers(client, execute(b"p"))) == ["34000"]
