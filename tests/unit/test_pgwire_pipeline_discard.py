"""DISCARD ALL in an extended-protocol pipeline, as PostgreSQL.

In the extended protocol the messages up to a Sync are one implicit transaction:
once a statement of it has been executed, PostgreSQL refuses DISCARD ALL (25001,
"DISCARD ALL cannot be executed within a pipeline"; checked against PostgreSQL
15); first in it, DISCARD ALL runs. The server ran it anywhere in a pipeline,
forgetting the prepared statements and the settings the pipeline was using.
"""

from __future__ import annotations

import pytest
from psycopg import errors
from tests.unit.test_pgwire_cursor import StandIn, connect
from tests.unit.test_pgwire_lifetimes import Client
from tests.unit.test_pgwire_session_reset import answers, bind, execute, parse, sqlstates

from timeshard.server.pgwire import PgServer


def executed(sql: str) -> bytes:
    """Parse, Bind and Execute of ``sql`` as the unnamed statement and portal."""
    return parse(b"", sql) + bind(b"", b"") + execute(b"")


def test_discard_all_after_a_statement_of_a_pipeline_is_refused(
    served: tuple[PgServer, StandIn],
) -> None:
    server, _ = served
    client = Client(server)
    assert sqlstates(answers(client, parse(b"kept", "SELECT 1"))) == []
    assert sqlstates(answers(client, executed("SET statement_timeout = '5s'"))) == []
    refused = answers(client, executed("SET statement_timeout = '7s'") + executed("DISCARD ALL"))
    assert sqlstates(refused) == ["25001"], refused
    assert b"DISCARD ALL cannot be executed within a pipeline" in refused[-2][1], refused
    # nothing was discarded: the named statement and the setting stay (the failed
    # pipeline's own SET is rolled back with it, as PostgreSQL's)
    assert sqlstates(answers(client, bind(b"", b"kept") + execute(b""))) == []
    shown = answers(client, executed("SHOW statement_timeout"))
    assert [body for kind, body in shown if kind == b"D"] == [b"\0\x01\0\0\0\x025s"], shown


def test_discard_all_first_in_a_pipeline_runs(served: tuple[PgServer, StandIn]) -> None:
    server, _ = served
    client = Client(server)
    assert sqlstates(answers(client, parse(b"gone", "SELECT 1"))) == []
    ran = answers(client, executed("DISCARD ALL") + executed("SELECT 2"))
    assert sqlstates(ran) == [] and (b"C", b"DISCARD ALL\0") in ran, ran
    assert sqlstates(answers(client, bind(b"", b"gone"))) == ["26000"]
    # the next pipeline starts afresh: DISCARD ALL first in it runs again
    assert sqlstates(answers(client, executed("DISCARD ALL"))) == []


def test_discard_all_in_a_psycopg_pipeline_is_refused(served: tuple[PgServer, StandIn]) -> None:
    server, _ = served
    with connect(server, autocommit=True) as conn:
        with pytest.raises(errors.ActiveSqlTransaction, match="pipeline"), conn.pipeline():
            conn.execute("SELECT 1")
            conn.execute("DISCARD ALL")
        assert conn.execute("SELECT 1").fetchall()  # the connection goes on
