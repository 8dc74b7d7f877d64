"""Fixtures shared by every tier: a PostgreSQL server started by the tests."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.pg_server import PostgresServer


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        server.start()
    except Exception as e:  # the server truly cannot start here
        server.cleanup()
        reason = f"PostgreSQL cannot start: {e!r}"
        if os.environ.get("CI"):
            pytest.fail(reason + " (CI must run the PostgreSQL tests)")
        print(reason, file=sys.stderr)
        pytest.skip(reason)
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def postgres_dsn(postgres_server: PostgresServer) -> str:
    return postgres_server.dsn
