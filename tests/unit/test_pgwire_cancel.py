"""A CancelRequest cancels the query its connection runs, without Spark.

The stand-in engine's query blocks until the engine is told to cancel the jobs
of the tag it ran under (as :meth:`~timeshard.server.engine.Engine.cancel`
cancels Spark jobs with a job tag). A cancel reached only a SUBSCRIBE and a
waiting FETCH: a running SELECT ran on, and the client waited for it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors
from tests.unit.test_pgwire_cursor import StandIn, connect, until
from tests.unit.test_pgwire_lifetimes import TERMINATE, Client, query

from timeshard.server.engine import Result, Stream
from timeshard.server.pgwire import PgServer
from timeshard.server.statements import Query, Statement


class Blocking(StandIn):
    """A query naming ``slow`` runs until its tag's statement is canceled, then fails as a
    canceled Spark job does; any other answers at once.

    As the engine's, a statement's cancel is taken from the moment it is cancellable: a
    cancel that came before the query began to wait (a short statement_timeout) still
    ends it. The stand-in took it only once the query waited, and such a cancel was lost:
    the query waited for ever."""

    def __init__(self) -> None:
        super().__init__()
        self.local = threading.local()
        self.cancels: dict[str, threading.Event] = {}  # tag -> canceled, while cancellable
        self.running: dict[str, threading.Event] = {}  # the slow queries': tag -> canceled
        self.lock = threading.Lock()
        self.canceled: list[str] = []
        self.before_wait = 0.0  # seconds a slow query takes before it waits

    @contextlib.contextmanager
    def cancellable(self, tag: str) -> Iterator[None]:
        self.local.tag = tag
        with self.lock:
            self.cancels[tag] = threading.Event()
        try:
            yield
        finally:
            with self.lock:
                del self.cancels[tag]
            del self.local.tag

    def cancel(self, tag: str) -> None:
        with self.lock:
            self.canceled.append(tag)
            event = self.cancels.get(tag)
        if event is not None:
            event.set()

    def execute(self, statement: Statement) -> Result | Stream:
        if isinstance(statement, Query) and "slow" in statement.query:
            tag = self.local.tag  # an AttributeError if the query runs untagged
            with self.lock:
                event = self.cancels[tag]
            time.sleep(self.before_wait)
            with self.lock:
                self.running[tag] = event
            try:
                event.wait()
            finally:
                with self.lock:
                    del self.running[tag]
            raise RuntimeError(f"Job cancelled: part of cancelled job tags {tag}")
        return super().execute(statement)


@pytest.fixture
def served(serve: Callable[..., PgServer]) -> tuple[PgServer, Blocking]:
    engine = Blocking()
    return serve(engine), engine


def run_slow(conn: psycopg.Connection[Any], out: dict[str, BaseException | None]) -> None:
    try:
        conn.execute("SELECT * FROM slow")
        out["error"] = None
    except BaseException as e:
        out["error"] = e


def test_a_cancel_stops_the_running_query_of_its_connection_only(
    served: tuple[PgServer, Blocking],
) -> None:
    server, engine = served
    with connect(server, autocommit=True) as first, connect(server, autocommit=True) as second:
        outs: list[dict[str, BaseException | None]] = [{}, {}]
        threads = [
            threading.Thread(target=run_slow, args=(conn, out))
            for conn, out in zip((first, second), outs, strict=True)
        ]
        for thread in threads:
            thread.start()
        until(lambda: len(engine.running) == 2, "the two queries never ran")
        tags = set(engine.running)
        first.cancel_safe()
        until(lambda: "error" in outs[0], "the canceled query ran on")
        assert isinstance(outs[0]["error"], errors.QueryCanceled), outs[0]
        assert "canceling statement due to user request" in str(outs[0]["error"])
        assert "error" not in outs[1] and len(engine.running) == 1  # the other runs on
        (other,) = engine.running
        assert engine.canceled == [next(iter(tags - {other}))]
        assert first.execute("SELECT n FROM t").fetchall()  # the connection goes on
        second.cancel_safe()
        for thread in threads:
            thread.join()
        assert isinstance(outs[1]["error"], errors.QueryCanceled), outs[1]
        assert second.execute("SELECT n FROM t").fetchall()


@pytest.mark.parametrize("terminate", [True, False], ids=["terminate", "close"])
def test_a_client_leaving_a_running_query_cancels_it(
    served: tuple[PgServer, Blocking], terminate: bool
) -> None:
    """Its jobs ran on for no one (for ever, a query that never ends), its readers held."""
    server, engine = served
    client = Client(server)
    client.sock.sendall(query("SELECT * FROM slow"))
    until(lambda: len(engine.running) == 1, "the query never ran")
    (tag,) = engine.running
    if terminate:  # what libpq's PQfinish does: Terminate, then close
        client.sock.sendall(TERMINATE)
    client.sock.close()
    until(lambda: not engine.running, "the query outlived its client")
    assert engine.canceled == [tag]


def test_a_query_answers_what_was_pipelined_behind_it(served: tuple[PgServer, Blocking]) -> None:
    """What the client sent while a query ran is read after it, in order."""
    server, engine = served
    client = Client(server)
    client.sock.sendall(query("SELECT * FROM slow"))
    until(lambda: len(engine.running) == 1, "the query never ran")
    client.sock.sendall(query("SELECT 1") + query("SELECT 2"))
    (tag,) = engine.running
    engine.cancel(tag)
    got = client.until(b"Z")
    assert [kind for kind, _ in got] == [b"E", b"Z"], got
    for _ in range(2):
        assert [kind for kind, _ in client.until(b"Z")] == [b"T", *[b"D"] * 5, b"C", b"Z"]


def test_a_query_past_its_statement_timeout_is_canceled(served: tuple[PgServer, Blocking]) -> None:
    """``SET statement_timeout`` was accepted and ignored: the query ran on for ever."""
    server, engine = served
    with connect(server, autocommit=True) as conn:
        conn.execute("SET statement_timeout = 50")
        assert conn.execute("SHOW statement_timeout").fetchall() == [("50ms",)]
        with pytest.raises(
            errors.QueryCanceled, match="canceling statement due to statement timeout"
        ):
            conn.execute("SELECT * FROM slow")  # it never ends by itself
        assert len(engine.canceled) == 1 and not engine.running  # its jobs were canceled
        # A quick one is not, nor the session. Under a timeout it cannot reach on a loaded
        # machine: 50 ms can pass before any query is answered, which is not this cancel.
        conn.execute("SET statement_timeout TO '2min'")
        assert conn.execute("SELECT n FROM t").fetchall()
        assert conn.execute("SHOW statement_timeout").fetchall() == [("2min",)]
        conn.execute("RESET statement_timeout")
        assert conn.execute("SHOW statement_timeout").fetchall() == [("0",)]


def test_a_prepared_query_past_its_statement_timeout_is_canceled(
    served: tuple[PgServer, Blocking],
) -> None:
    """Its timeout goes off before the query waits: such a cancel is taken too."""
    server, engine = served
    engine.before_wait = 0.2
    with connect(server, autocommit=True) as conn:
        conn.execute("SET statement_timeout = '20ms'")
        with pytest.raises(errors.QueryCanceled, match="statement timeout"):
            conn.execute("SELECT * FROM slow WHERE n < %s", (3,), prepare=True)
        # The next runs under a timeout it cannot reach on a loaded machine (20 ms can pass
        # before any query is answered): what it checks is that no cancel is left over.
        conn.execute("SET statement_timeout = '2min'")
        assert conn.execute("SELECT n FROM t WHERE n < %s", (3,), prepare=True).fetchall()


def test_set_local_statement_timeout_holds_until_the_block_ends(
    served: tuple[PgServer, Blocking],
) -> None:
    server, _ = served
    with connect(server, autocommit=True) as conn:
        conn.execute("SET statement_timeout = 1000")
        conn.execute("BEGIN")
        conn.execute("SET LOCAL statement_timeout = 20")
        with pytest.raises(errors.QueryCanceled, match="statement timeout"):
            conn.execute("SELECT * FROM slow")
        conn.execute("ROLLBACK")
        assert conn.execute("SHOW statement_timeout").fetchall() == [("1s",)]
        conn.execute("SET LOCAL statement_timeout = 20")  # outside a block: no effect
        assert conn.execute("SHOW statement_timeout").fetchall() == [("1s",)]
        conn.execute("DISCARD ALL")
        assert conn.execute("SHOW statement_timeout").fetchall() == [("0",)]


@pytest.mark.parametrize(
    ("value", "message"),
    [("-1", "outside the valid range"), ("'soon'", "invalid value"), ("2147483648", "outside")],
)
def test_a_statement_timeout_that_is_none_is_refused(
    served: tuple[PgServer, Blocking], value: str, message: str
) -> None:
    server, _ = served
    with connect(server, autocommit=True) as conn:
        with pytest.raises(errors.InvalidParameterValue, match=message):
            conn.execute(f"SET statement_timeout = {value}")
        assert conn.execute("SHOW statement_timeout").fetchall() == [("0",)]
