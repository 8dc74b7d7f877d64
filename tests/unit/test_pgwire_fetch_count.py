"""A FETCH count past what a machine word holds, on a query cursor, without Spark.

``FETCH 99999999999999999999 c`` on a cursor over a SELECT answered XX000 (an
internal error, logged with its traceback: ``islice`` takes no count past
``sys.maxsize``) and failed the transaction block. No cursor holds that many rows:
such a count takes them all, as a count past the rows left does.
"""

from __future__ import annotations

import pytest
from tests.unit.test_pgwire_cursor import StandIn, connect

from timeshard.server.pgwire import PgServer


@pytest.mark.parametrize("count", [2**63 - 1, 2**63, 10**20])
def test_a_huge_fetch_count_takes_every_row(served: tuple[PgServer, StandIn], count: int) -> None:
    server, _ = served
    with connect(server, autocommit=True) as conn:
        conn.execute("BEGIN")
        conn.execute("DECLARE q CURSOR FOR SELECT n FROM t")
        cur = conn.execute(f"FETCH {count} q")
        assert (cur.statusmessage, cur.fetchall()) == (
            "FETCH 5",
            [(n, f"row {n}") for n in range(5)],
        )
        conn.execute("COMMIT")
