"""Fixtures of the unit tier's pgwire tests: a :class:`~timeshard.server.pgwire.PgServer`
in front of a stand-in engine, listening on a port of its own on loopback.

``serve(engine, **options)`` starts a server in front of ``engine`` (``options`` are
PgServer's); every server a test started is shut down after it. ``served`` is a
server in front of :class:`tests.unit.test_pgwire_cursor.StandIn`, and that engine.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests.unit.test_pgwire_cursor import StandIn

from timeshard.server.pgwire import PgServer


@pytest.fixture
def serve() -> Iterator[Callable[..., PgServer]]:
    started: list[PgServer] = []

    def start(engine: Any, **options: Any) -> PgServer:
        server = PgServer(engine, "127.0.0.1", 0, **options)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


@pytest.fixture
def served(serve: Callable[..., PgServer]) -> tuple[PgServer, StandIn]:
    engine = StandIn()
    return serve(engine), engine
