"""Cursors in the pgwire front end of ``timeshard serve``, without Spark.

A stand-in engine's SUBSCRIBE yields the rows a test feeds it, with a
heartbeat every 20 ms while none are waiting, as the engine's does every
0.5 s; its queries answer five rows. The tests check what Materialize's
cursors do: DECLARE only in a transaction block, FETCH waiting for a first
row (or not past its TIMEOUT) and then taking the ready rows up to its
count, a cancel ending a waiting FETCH, and CLOSE, COMMIT, ROLLBACK and the
connection's end closing the SUBSCRIBE -- in the simple protocol, the
extended one and through psycopg's named cursors.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors

from timeshard.server.engine import Result, Stream
from timeshard.server.pgwire import PgServer
from timeshard.server.statements import Query, Statement, Subscribe

COLUMNS = [("mz_timestamp", "long"), ("mz_diff", "long"), ("v", "string")]


class StandIn:
    """A SUBSCRIBE yields what :meth:`feed` puts in, heartbeats between; a query five rows."""

    def __init__(self) -> None:
        self.fed: queue.Queue[tuple[Any, ...] | None] = queue.Queue()  # None: UP TO passed
        self.opened = 0
        self.closed = 0
        self.statements: list[Statement] = []

    def feed(self, *rows: tuple[Any, ...]) -> None:
        for row in rows:
            self.fed.put(row)

    def execute(self, statement: Statement) -> Result | Stream:
        self.statements.append(statement)
        if isinstance(statement, Subscribe):
            self.opened += 1
            return Stream(COLUMNS, self._rows())
        if isinstance(statement, Query):
            rows = [(n, f"row {n}") for n in range(5)]
            return Result([("n", "long"), ("s", "string")], rows, "SELECT 5")
        return Result([], [], "OK")

    def describe(self, statement: Statement) -> list[tuple[str, str]] | None:
        return [("n", "long"), ("s", "string")] if isinstance(statement, Query) else None

    @contextlib.contextmanager
    def cancellable(self, tag: str) -> Iterator[None]:
        """Its queries answer at once: no job to tag."""
        yield

    def cancel(self, tag: str) -> None:
        """Nothing runs long enough to cancel."""

    def _rows(self) -> Iterator[tuple[Any, ...]]:
        try:
            while True:
                try:
                    row = self.fed.get(timeout=0.02)
                except queue.Empty:
                    yield ()
                    continue
                if row is None:
                    return
                yield row
        finally:
            self.closed += 1


def connect(server: PgServer, **kwargs: Any) -> psycopg.Connection[Any]:
    return psycopg.connect(
        host="127.0.0.1", port=server.port, user="me", dbname="x", connect_timeout=10, **kwargs
    )


def fed(n: int, start: int = 1) -> list[tuple[Any, ...]]:
    """``n`` rows to feed the stand-in's SUBSCRIBE, as psycopg reads them back."""
    return [(t, 1, f"v{t}") for t in range(start, start + n)]


def until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_declare_needs_a_transaction_block(served: tuple[PgServer, StandIn]) -> None:
    server, engine = served
    with connect(server, autocommit=True) as conn:
        with pytest.raises(errors.NoActiveSqlTransaction, match="transaction blocks"):
            conn.execute("DECLARE c CURSOR FOR SUBSCRIBE s")
        assert engine.opened == 0  # refused before the SUBSCRIBE runs
        with pytest.raises(errors.InvalidCursorName, match="'c'"):
            conn.execute("FETCH ALL c")


@pytest.mark.parametrize("params", [False, True], ids=["simple", "extended"])
def test_a_subscribe_cursor_fetches_ready_rows(
    served: tuple[PgServer, StandIn], params: bool
) -> None:
    server, engine = served

    def fetch(sql: str, *args: Any) -> list[tuple[Any, ...]]:
        # psycopg prepares a statement in the extended protocol; else it sends a simple query
        cur = conn.execute(sql, args, prepare=True) if params else conn.execute(sql % args)
        assert [(d.name, d.type_code) for d in cur.description or []] == [
            ("mz_timestamp", 20),
            ("mz_diff", 20),
            ("v", 25),
        ]
        return cur.fetchall()

    with connect(server) as conn:  # not autocommit: psycopg begins a transaction
        conn.execute("DECLARE c CURSOR FOR SUBSCRIBE s")
        engine.feed(*fed(3))
        assert fetch("FETCH ALL c") == fed(3)
        assert fetch("FETCH ALL c WITH (TIMEOUT = %s)", "0s" if params else "'0s'") == []
        engine.feed(*fed(3, start=4))
        assert fetch("FETCH 2 c") == fed(2, start=4)
        assert fetch("FETCH FORWARD 5 FROM c") == fed(1, start=6)
        # No TIMEOUT: the FETCH waits for a first row, however late.
        threading.Timer(0.3, engine.feed, fed(2, start=7)).start()
        assert fetch("FETCH ALL IN c") in (fed(2, start=7), fed(1, start=7))
        with pytest.raises(errors.DuplicateCursor, match="'c'"):
            conn.execute("DECLARE c CURSOR FOR SELECT 1")
        conn.rollback()
        assert engine.closed == 1  # ROLLBACK closed the cursor, and its SUBSCRIBE


def test_a_fetch_waits_at_most_its_timeout_and_ends_with_the_subscribe(
    served: tuple[PgServer, StandIn],
) -> None:
    server, engine = served
    with connect(server) as conn:
        conn.execute("DECLARE c CURSOR FOR SUBSCRIBE s UP TO 3")
        assert conn.execute("FETCH ALL c WITH (TIMEOUT = 0.2)").fetchall() == []
        engine.feed(*fed(2), None)  # then the UP TO passes
        assert conn.execute("FETCH ALL c").fetchall() == fed(2)
        assert engine.closed == 1
        assert conn.execute("FETCH ALL c").fetchall() == []  # ended: no wait
        cur = conn.execute("CLOSE c")
        assert cur.statusmessage == "CLOSE CURSOR"
        with pytest.raises(errors.InvalidCursorName):
            conn.execute("CLOSE c")


def test_a_cancel_ends_a_waiting_fetch(served: tuple[PgServer, StandIn]) -> None:
    server, engine = served
    with connect(server) as conn:
        conn.execute("DECLARE c CURSOR FOR SUBSCRIBE s")
        failure: list[BaseException] = []

        def wait() -> None:
            try:
                conn.execute("FETCH ALL c")
            except BaseException as e:
                failure.append(e)

        waiting = threading.Thread(target=wait)
        waiting.start()
        time.sleep(0.2)
        assert waiting.is_alive()
        conn.cancel_safe()
        waiting.join(timeout=30)
        assert not waiting.is_alive(), "the FETCH did not end on cancel"
        assert failure and isinstance(failure[0], errors.QueryCanceled), failure
        conn.rollback()
        assert engine.closed == 1
        assert conn.execute("SELECT 1").fetchone() == (0, "row 0")  # still usable


def test_commit_close_and_the_connection_end_close_subscribes(
    served: tuple[PgServer, StandIn],
) -> None:
    server, engine = served
    with connect(server) as conn:
        conn.execute("DECLARE a CURSOR WITHOUT HOLD FOR SUBSCRIBE s")
        conn.execute("DECLARE b CURSOR FOR SUBSCRIBE s")
        engine.feed(*fed(1))
        assert len(conn.execute("FETCH a").fetchall()) == 1  # started: it has a finally to run
        assert len(conn.execute("FETCH b WITH (TIMEOUT = '50ms')").fetchall()) == 0
        conn.execute("CLOSE a")
        assert engine.closed == 1
        conn.commit()
        assert engine.closed == 2
        with pytest.raises(errors.InvalidCursorName):
            conn.execute("FETCH b")
        conn.rollback()
        conn.execute("DECLARE c CURSOR FOR SUBSCRIBE s")
        conn.execute("FETCH c WITH (TIMEOUT = '0s')")
        conn.close()  # neither COMMIT nor ROLLBACK
    until(lambda: engine.closed == 3, "the connection's end did not close its cursor")


def test_a_query_cursor_fetches_its_rows_in_parts(served: tuple[PgServer, StandIn]) -> None:
    server, _ = served
    with connect(server) as conn:
        conn.execute("DECLARE q CURSOR FOR SELECT n, s FROM t")
        cur = conn.execute("FETCH 2 q")
        assert cur.fetchall() == [(0, "row 0"), (1, "row 1")]
        assert cur.statusmessage == "FETCH 2"
        assert conn.execute("FETCH q").fetchall() == [(2, "row 2")]
        assert conn.execute("FETCH ALL FROM q").fetchall() == [(3, "row 3"), (4, "row 4")]
        cur = conn.execute("FETCH ALL q")
        assert cur.fetchall() == [] and cur.statusmessage == "FETCH 0"


def test_psycopg_named_cursors_declare_describe_and_fetch(
    served: tuple[PgServer, StandIn],
) -> None:
    server, engine = served
    with connect(server) as conn:
        with conn.cursor(name="named") as cur:
            cur.execute("SELECT n, s FROM t WHERE n < %s", (9,))
            assert [d.name for d in cur.description or []] == ["n", "s"]
            assert cur.fetchmany(2) == [(0, "row 0"), (1, "row 1")]
            assert cur.fetchall() == [(2, "row 2"), (3, "row 3"), (4, "row 4")]
        with conn.cursor(name="subscribed") as cur:
            cur.execute("SUBSCRIBE s")
            engine.feed(*fed(2))
            assert cur.fetchmany(5) in (fed(2), fed(1))
        conn.commit()
    declared = [s for s in engine.statements if isinstance(s, Query)]
    assert declared == [Query("SELECT n, s FROM t WHERE n < CAST(9 AS SMALLINT)")]


def test_several_statements_in_one_message_are_an_implicit_transaction(
    served: tuple[PgServer, StandIn],
) -> None:
    server, _ = served
    with connect(server, autocommit=True) as conn:
        cur = conn.execute("DECLARE q CURSOR FOR SELECT n FROM t; FETCH 3 q; FETCH ALL q")
        assert cur.statusmessage == "DECLARE CURSOR"
        assert cur.nextset() and cur.fetchall() == [(0, "row 0"), (1, "row 1"), (2, "row 2")]
        assert cur.nextset() and cur.fetchall() == [(3, "row 3"), (4, "row 4")]
        with pytest.raises(errors.InvalidCursorName):  # the message's end closed it
            conn.execute("FETCH ALL q")


def test_float_specials_are_written_as_postgresql_writes_them() -> None:
    """JDBC and node-postgres parse ``NaN``, ``Infinity`` and ``-Infinity``, not Python's."""
    from timeshard.server.pgwire import encode_value

    specials = [float("nan"), float("inf"), float("-inf"), 1.5]
    assert [encode_value(v) for v in specials] == [b"NaN", b"Infinity", b"-Infinity", b"1.5"]


def test_decimals_are_sent_as_numeric() -> None:
    """Sent as text (OID 25), a decimal column read back as a str in psycopg and JDBC."""
    from decimal import Decimal

    class Decimals(StandIn):
        def execute(self, statement: Statement) -> Result:
            rows = [(Decimal("1.50"),), (Decimal("1E+2"),), (None,)]
            return Result([("d", "decimal")], rows, "SELECT 3")

    server = PgServer(Decimals(), "127.0.0.1", 0)  # type: ignore[arg-type]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with connect(server, autocommit=True) as conn:
            cur = conn.execute("SELECT d FROM t")
            assert [d.type_code for d in cur.description or []] == [1700]
            assert cur.fetchall() == [(Decimal("1.50"),), (Decimal("100"),), (None,)]
    finally:
        server.shutdown()
        server.server_close()
