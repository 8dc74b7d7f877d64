"""Transaction blocks in the pgwire front end, without Spark.

In a failed transaction block only COMMIT and ROLLBACK are accepted (25P02
for anything else, SET and BEGIN included), and COMMIT answers ``ROLLBACK``:
the block's work is not committed, as PostgreSQL answers it.
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors
from tests.unit.test_pgwire_cursor import StandIn, connect

from timeshard.server.pgwire import PgServer


def test_commit_of_a_failed_transaction_block_answers_rollback(
    served: tuple[PgServer, StandIn],
) -> None:
    server, _ = served
    with connect(server, autocommit=True) as conn:
        conn.execute("BEGIN")
        with pytest.raises(psycopg.Error):
            conn.execute("SELEC 1")
        cur = conn.execute("COMMIT")
        assert cur.statusmessage == "ROLLBACK"
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        conn.execute("BEGIN")
        assert conn.execute("COMMIT").statusmessage == "COMMIT"  # a block that did not fail


@pytest.mark.parametrize("statement", ["SET x = 1", "BEGIN", "DISCARD ALL"])
def test_a_failed_transaction_block_refuses_all_but_its_end(
    served: tuple[PgServer, StandIn], statement: str
) -> None:
    server, _ = served
    with connect(server, autocommit=True) as conn:
        conn.execute("BEGIN")
        with pytest.raises(psycopg.Error):
            conn.execute("SELEC 1")
        with pytest.raises(errors.InFailedSqlTransaction):
            conn.execute(statement)
        assert conn.execute("ROLLBACK").statusmessage == "ROLLBACK"
