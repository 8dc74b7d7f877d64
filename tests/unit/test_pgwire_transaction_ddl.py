"""DDL in a transaction block is refused (25001), without Spark.

Transaction statements only move the status serve reports: a CREATE or DROP took
effect at once, so ``BEGIN; CREATE MATERIALIZED VIEW ...; ROLLBACK`` left the view
created, where PostgreSQL undoes it. serve cannot defer nor undo a CREATE as a
transaction would, so it does what Materialize does: DDL runs only as a statement
of its own, outside a transaction block (an explicit one, or the implicit one of a
message of several statements), and anywhere else it is refused with 25001 naming
it, before the engine sees it. A client in psycopg's default (not autocommit) mode
learns so at once, instead of DDL that its ROLLBACK silently keeps.
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors
from tests.unit.test_pgwire_cursor import StandIn, connect
from tests.unit.test_pgwire_lifetimes import Client
from tests.unit.test_pgwire_pipeline_discard import executed
from tests.unit.test_pgwire_session_reset import answers, sqlstates

from timeshard.server.ddl import CreateView
from timeshard.server.pgwire import PgServer
from timeshard.server.statements import Drop

DDL = [
    ("CREATE MATERIALIZED VIEW v AS SELECT n FROM t", "CREATE MATERIALIZED VIEW"),
    ("DROP MATERIALIZED VIEW v", "DROP MATERIALIZED VIEW"),
    ("DROP SOURCE IF EXISTS s", "DROP SOURCE"),
]


def ddl_seen(engine: StandIn) -> list[object]:
    return [s for s in engine.statements if isinstance(s, CreateView | Drop)]


@pytest.mark.parametrize(("sql", "named"), DDL)
def test_ddl_in_a_transaction_block_is_refused_and_rollback_leaves_nothing(
    served: tuple[PgServer, StandIn], sql: str, named: str
) -> None:
    server, engine = served
    with connect(server, autocommit=True) as conn:
        conn.execute("BEGIN")
        with pytest.raises(errors.ActiveSqlTransaction) as e:
            conn.execute(sql)
        assert named in str(e.value)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
        assert conn.execute("ROLLBACK").statusmessage == "ROLLBACK"
    assert ddl_seen(engine) == []


@pytest.mark.parametrize(("sql", "named"), DDL)
def test_ddl_in_a_message_of_several_statements_is_refused(
    served: tuple[PgServer, StandIn], sql: str, named: str
) -> None:
    server, engine = served
    with connect(server, autocommit=True) as conn:
        with pytest.raises(errors.ActiveSqlTransaction) as e:
            conn.execute(f"SELECT n FROM t; {sql}")
        assert named in str(e.value)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert ddl_seen(engine) == []


def test_psycopg_default_mode_is_told_to_use_autocommit(served: tuple[PgServer, StandIn]) -> None:
    server, engine = served
    with connect(server) as conn:  # not autocommit: psycopg sends BEGIN first
        with pytest.raises(errors.ActiveSqlTransaction):
            conn.execute(DDL[0][0])
        conn.rollback()
    assert ddl_seen(engine) == []


@pytest.mark.parametrize(("sql", "_named"), DDL)
def test_ddl_of_its_own_runs(served: tuple[PgServer, StandIn], sql: str, _named: str) -> None:
    server, engine = served
    with connect(server, autocommit=True) as conn:
        conn.execute(sql)  # the simple protocol's
        conn.execute(sql, prepare=True)  # the extended protocol's
        conn.execute("BEGIN")
        conn.execute("COMMIT")
        conn.execute(sql)  # once the block ended
    assert len(ddl_seen(engine)) == 3


def test_ddl_after_a_statement_of_a_pipeline_is_refused(served: tuple[PgServer, StandIn]) -> None:
    server, engine = served
    client = Client(server)
    refused = answers(client, executed("SELECT n FROM t") + executed(DDL[0][0]))
    assert sqlstates(refused) == ["25001"], refused
    assert b"CREATE MATERIALIZED VIEW cannot be executed within a pipeline" in refused[-2][1]
    assert sqlstates(answers(client, executed(DDL[0][0]))) == []  # first in one, it runs
    assert len(ddl_seen(engine)) == 1
