"""Fixtures shared by every tier: a throwaway PostgreSQL server and a Kafka broker, started once.

Tests that use ``postgres_dsn`` carry ``@pytest.mark.postgres``. If the server
cannot start they are skipped with the reason printed, except in CI
(``CI`` set), where they fail: CI must run them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.integration.kafka_broker import kafka_broker  # noqa: F401 (a fixture of every tier)
from tests.pg_server import PostgresServer


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        server.start()
    except Exception as e:
        server.cleanup()
        reason = f"PostgreSQL cannot start: {e}"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI must run the PostgreSQL tests)")
        print(reason, file=sys.stderr)
        pytest.skip(reason)
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def postgres_dsn(postgres_server: PostgresServer) -> str:
    """The DSN of the session's server (database ``postgres``, user ``postgres``)."""
    return postgres_server.dsn
