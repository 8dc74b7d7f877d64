"""The pgwire front end of ``timeshard serve`` without Spark: access and protocol.

A stand-in engine answers every statement with one row, so these tests see
only what :mod:`timeshard.server.pgwire` does: SCRAM-SHA-256 when a password
is set, the refusal of a non-loopback bind without one, errors that leave
the connection usable, and a client's cancel of a running SUBSCRIBE.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors

from timeshard.errors import InvalidUsage
from timeshard.server.engine import Result, Stream
from timeshard.server.pgwire import PgServer
from timeshard.server.statements import Query, SqlError, Statement, Subscribe


class StandIn:
    """Answers a query with its text; SUBSCRIBE streams one row per 10 ms, for ever."""

    def __init__(self) -> None:
        self.streams_closed = 0

    def execute(self, statement: Statement) -> Result | Stream:
        if isinstance(statement, Query):
            if "boom" in statement.query:
                raise SqlError("boom is not a table", "42P01")
            if "crash" in statement.query:
                raise RuntimeError("a bug")
            return Result([("q", "string"), ("n", "long")], [(statement.query, 1)], "SELECT 1")
        if isinstance(statement, Subscribe):
            return Stream([("mz_timestamp", "long"), ("mz_diff", "long")], self._rows())
        return Result([], [], "OK")

    @contextlib.contextmanager
    def cancellable(self, tag: str) -> Iterator[None]:
        """Its queries answer at once: no job to tag."""
        yield

    def cancel(self, tag: str) -> None:
        """Nothing runs long enough to cancel."""

    def _rows(self) -> Iterator[tuple[Any, ...]]:
        try:
            n = 0
            while True:
                n += 1
                yield (n, 1)
                time.sleep(0.01)
        finally:
            self.streams_closed += 1


def serve(password: str | None = None) -> tuple[PgServer, StandIn]:
    engine = StandIn()
    server = PgServer(engine, "127.0.0.1", 0, password)  # type: ignore[arg-type]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, engine


def connect(server: PgServer, **kwargs: Any) -> psycopg.Connection[Any]:
    return psycopg.connect(
        host="127.0.0.1", port=server.port, user="me", dbname="x", connect_timeout=10, **kwargs
    )


@pytest.fixture
def open_server() -> Iterator[tuple[PgServer, StandIn]]:
    server, engine = serve()
    yield server, engine
    server.shutdown()
    server.server_close()


def test_a_password_means_scram_and_a_wrong_one_is_refused() -> None:
    server, _ = serve(password="s3cret")
    try:
        with connect(server, password="s3cret", autocommit=True) as conn:
            assert conn.execute("SELECT 7").fetchone() == ("SELECT 7", 1)
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            connect(server, password="wrong")
        with pytest.raises(psycopg.OperationalError):
            connect(server)  # no password at all
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.7", "example.com"])
def test_a_bind_off_loopback_needs_a_password(host: str) -> None:
    with pytest.raises(InvalidUsage, match=host):
        PgServer(StandIn(), host, 0, None)  # type: ignore[arg-type]


def test_errors_keep_the_connection_usable(open_server: tuple[PgServer, StandIn]) -> None:
    server, _ = open_server
    with connect(server, autocommit=True) as conn:
        with pytest.raises(errors.UndefinedTable, match="boom"):
            conn.execute("SELECT * FROM boom")
        with pytest.raises(errors.InternalError_, match="RuntimeError: a bug"):
            conn.execute("SELECT crash")
        with pytest.raises(errors.FeatureNotSupported, match="FROB"):
            conn.execute("FROB the thing")
        assert conn.execute("SELECT %s::text", ("ok",)).fetchone() == ("SELECT 'ok'::text", 1)


def test_a_cancel_ends_a_subscribe_and_frees_its_stream(
    open_server: tuple[PgServer, StandIn],
) -> None:
    server, engine = open_server
    with connect(server, autocommit=True) as conn:
        got: list[Any] = []
        failure: list[BaseException] = []

        def follow() -> None:
            try:
                with conn.cursor().copy("COPY (SUBSCRIBE s) TO STDOUT") as copy:
                    got.extend(copy.rows())
            except BaseException as e:
                failure.append(e)

        reader = threading.Thread(target=follow)
        reader.start()
        while len(got) < 5 and reader.is_alive():
            time.sleep(0.01)
        conn.cancel_safe()
        reader.join(timeout=30)
        assert not reader.is_alive(), "the SUBSCRIBE did not end on cancel"
        assert failure and isinstance(failure[0], errors.QueryCanceled), failure
        assert engine.streams_closed == 1
        assert conn.execute("SELECT 1").fetchone() == ("SELECT 1", 1)  # still usable


def test_prepared_statements_are_reused_and_deallocated(
    open_server: tuple[PgServer, StandIn],
) -> None:
    server, _ = open_server
    with connect(server, autocommit=True, prepare_threshold=0) as conn:
        for n in range(3):  # prepared once (named), then executed again
            bound = f"SELECT CAST({n} AS SMALLINT)"  # psycopg sends a small int as int2
            assert conn.execute("SELECT %s", (n,)).fetchone() == (bound, 1)
        conn.execute("DEALLOCATE ALL")
        assert conn.execute("SELECT %s", (9,)).fetchone() == ("SELECT CAST(9 AS SMALLINT)", 1)
        with pytest.raises(errors.InvalidSqlStatementName, match="nope"):
            conn.execute("DEALLOCATE nope")
