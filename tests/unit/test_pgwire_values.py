"""Values through the pgwire front end of ``timeshard serve``, without Spark.

Parameters as the client types them, and result values as PostgreSQL's
clients read them back (psycopg's loaders), through stand-in engines that
record the statements they get and answer fixed rows.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from timeshard.server.engine import Result
from timeshard.server.pgwire import PgServer
from timeshard.server.statements import Query, Statement


class Answers:
    """Records each statement; a query answers ``rows`` of ``columns``."""

    def __init__(self, columns: list[tuple[str, str]], rows: list[tuple[Any, ...]]) -> None:
        self.columns = columns
        self.rows = rows
        self.statements: list[Statement] = []

    def execute(self, statement: Statement) -> Result:
        self.statements.append(statement)
        return Result(self.columns, self.rows, f"SELECT {len(self.rows)}")


@pytest.fixture
def answering() -> Iterator[tuple[PgServer, Answers]]:
    engine = Answers([("n", "long")], [(1,)])
    server = PgServer(engine, "127.0.0.1", 0)  # type: ignore[arg-type]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, engine
    server.shutdown()
    server.server_close()


def connect(server: PgServer) -> psycopg.Connection[Any]:
    return psycopg.connect(
        host="127.0.0.1",
        port=server.port,
        user="me",
        dbname="x",
        connect_timeout=10,
        autocommit=True,
    )


def test_a_str_parameter_stays_a_string(answering: tuple[PgServer, Answers]) -> None:
    """psycopg sends a ``str`` untyped (OID 0): PostgreSQL reads it as a string literal,
    so ``'007'`` is not compared as the number 7; an ``int`` is sent typed, a number."""
    server, engine = answering
    with connect(server) as conn:
        conn.execute("SELECT * FROM kv WHERE k = %s AND j = %s AND n = %s", ("007", "1e3", 7))
    assert engine.statements == [Query("SELECT * FROM kv WHERE k = '007' AND j = '1e3' AND n = 7")]
