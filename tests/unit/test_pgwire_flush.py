"""``Flush`` ('H') without ``Sync``: a client that sends Parse, Bind, Execute and Flush
gets their answers (ParseComplete, BindComplete, the rows, CommandComplete) at once,
with no ReadyForQuery before its Sync; after an error, what it sends up to the Sync is
skipped (no answers), and the Sync's ReadyForQuery comes once."""

from __future__ import annotations

import threading

import psycopg
import pytest
from tests.unit.test_pgwire_cursor import StandIn, connect
from tests.unit.test_pgwire_lifetimes import (
    SYNC,
    Client,
    bind,
    execute,
    message,
    parse,
    query,
)

from timeshard.server.pgwire import PgServer

FLUSH = message(b"H")


def kinds(messages: list[tuple[bytes, bytes]]) -> bytes:
    return b"".join(kind for kind, _ in messages)


def test_a_flush_answers_without_a_sync(served: tuple[PgServer, StandIn]) -> None:
    server, _ = served
    client = Client(server)
    client.sock.sendall(parse("SELECT 1") + bind() + execute() + FLUSH)
    assert kinds(client.until(b"C")) == b"12DDDDDC"  # ParseComplete .. CommandComplete
    # the next answers are the Sync's ReadyForQuery, then the query's: no ReadyForQuery
    # came before the Sync
    client.sock.sendall(SYNC + query("SELECT 1"))
    assert kinds(client.until(b"Z")) == b"Z"
    assert kinds(client.until(b"Z")) == b"TDDDDDCZ"


def test_a_flush_after_an_error_skips_to_the_sync(served: tuple[PgServer, StandIn]) -> None:
    server, _ = served
    client = Client(server)
    missing = message(b"B", b"\0missing\0" + b"\0\0\0\0\0\0")
    client.sock.sendall(missing + execute() + FLUSH)
    answered = client.until(b"E")
    assert kinds(answered) == b"E", answered
    assert b"C26000" in answered[-1][1]
    # skipped up to the Sync: no answer to these, however flushed
    client.sock.sendall(parse("SELECT 1") + bind() + execute() + FLUSH + SYNC)
    assert kinds(client.until(b"Z")) == b"Z"
    client.sock.sendall(parse("SELECT 1") + bind() + execute() + FLUSH)
    assert kinds(client.until(b"C")) == b"12DDDDDC"


def test_psycopg_pipeline_fetches_before_its_sync(served: tuple[PgServer, StandIn]) -> None:
    """psycopg's pipeline asks for a cursor's rows with a Flush, no Sync. It runs on a
    thread: a server that waits for a Sync leaves it stuck, told from slow by a deadline
    far past any run's."""
    server, _ = served
    outcome: list[object] = []

    def pipeline() -> None:
        try:
            with connect(server, autocommit=True) as conn, conn.pipeline():
                first = conn.execute("SELECT %s", [1])
                outcome.append(len(first.fetchall()))
                failed = conn.execute("FETCH 1 missing")
                with pytest.raises(psycopg.errors.InvalidCursorName):
                    failed.fetchall()
                outcome.append("refused")
        except BaseException as e:  # the assertion below shows it
            outcome.append(e)

    thread = threading.Thread(target=pipeline, daemon=True)
    thread.start()
    thread.join(timeout=120)
    assert not thread.is_alive(), f"the pipeline is stuck waiting for answers: {outcome}"
    assert outcome == [5, "refused"]
