"""A SET rolled back with its transaction is undone, without Spark.

PostgreSQL undoes a SET (and a RESET) of a transaction that is rolled back: a
ROLLBACK, the COMMIT of a failed block, or a message of several statements one of
which fails. serve kept it: ``BEGIN; SET statement_timeout = '1s'; ROLLBACK`` left
every later statement of the session canceled after a second.
"""

from __future__ import annotations

import psycopg
import pytest
from tests.unit.test_pgwire_cursor import StandIn, connect

from timeshard.server.pgwire import PgServer


def shown(conn: psycopg.Connection[object]) -> object:
    row = conn.execute("SHOW statement_timeout").fetchone()
    assert row is not None
    return row[0]


@pytest.mark.parametrize("end", ["ROLLBACK", "failed COMMIT"])
@pytest.mark.parametrize("change", ["SET statement_timeout = '1s'", "RESET statement_timeout"])
def test_a_set_in_a_rolled_back_block_is_undone(
    served: tuple[PgServer, StandIn], end: str, change: str
) -> None:
    server, _ = served
    with connect(server, autocommit=True) as conn:
        conn.execute("SET statement_timeout = '5s'")
        conn.execute("BEGIN")
        conn.execute(change)
        if end == "ROLLBACK":
            conn.execute("ROLLBACK")
        else:
            with pytest.raises(psycopg.Error):
                conn.execute("SELEC 1")
            assert conn.execute("COMMIT").statusmessage == "ROLLBACK"
        assert shown(conn) == "5s"


def test_a_set_in_a_committed_block_stays(served: tuple[PgServer, StandIn]) -> None:
    server, _ = served
    with connect(server, autocommit=True) as conn:
        conn.execute("BEGIN")
        conn.execute("SET statement_timeout = '1s'")
        conn.execute("COMMIT")
        assert shown(conn) == "1s"


def test_a_set_in_a_failed_message_of_several_statements_is_undone(
    served: tuple[PgServer, StandIn],
) -> None:
    server, _ = served
    with connect(server, autocommit=True) as conn:
        with pytest.raises(psycopg.Error):
            conn.execute("SET statement_timeout = '1s'; SELEC 1")
        assert shown(conn) == "0"
        conn.execute("SET statement_timeout = '2s'; SELECT n FROM t")
        assert shown(conn) == "2s"
        with pytest.raises(psycopg.Error):  # what its COMMIT committed stays
            conn.execute("SET statement_timeout = '3s'; COMMIT; SET statement_timeout = 0; SELEC")
        assert shown(conn) == "3s"
