"""Fixtures of the integration tier: one standalone cluster.

(``spark``, the one local SparkSession of every tier, is in ``tests/conftest.py``.)

``spark_standalone`` starts a Spark standalone master and one worker (1 core,
1g) on 127.0.0.1 with ``spark-class`` (``standalone_cluster.py``) and yields
the master URL. A process holds one SparkContext, and this one holds the local
session, so tests never connect to the cluster from this process: they run
their checks in a child Python process (``standalone_main.py``) that builds
its own session on the master URL. That leaves the local session untouched (no
stop and restart in the middle of the tier), and a failed cluster run cannot
leave this process with a broken SparkContext.

If the cluster cannot start, the tests that need it are skipped with the
reason printed -- except when ``CI`` is set: then they fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import py4j.clientserver
import py4j.protocol
import pytest
from tests.integration.standalone_cluster import StandaloneCluster
from tests.unavailable import skip_or_fail


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a running standalone master with one registered worker."""
    cluster = StandaloneCluster(tmp_path_factory.mktemp("standalone"), cores=1, memory="1g")
    try:
        cluster.start()
    except Exception as e:
        skip_or_fail(f"Spark standalone cluster cannot start: {e}", "standalone")
    yield cluster.url
    cluster.stop()


@pytest.fixture
def upstream(mariadb_server: Any) -> Iterator[Any]:
    """A connection to the MariaDB server's test database (``Upstream`` of the MySQL
    upstream-change tests), closed after the test."""
    from tests.integration.test_mysql_upstream_changes import Upstream

    u = Upstream(mariadb_server)
    yield u
    u.conn.close()


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many py4j commands the driver sent (one counter, reset by the test).

    py4j's own "forget this object" commands are not counted: Python's garbage
    collector sends them whenever it runs, for objects of earlier tests.
    """
    count = [0]
    send = py4j.clientserver.ClientServerConnection.send_command
    forget = py4j.protocol.MEMORY_COMMAND_NAME + py4j.protocol.MEMORY_DEL_SUBCOMMAND_NAME

    def counted(self: object, command: str) -> str:
        if not command.startswith(forget):
            count[0] += 1
        return str(send(self, command))  # type: ignore[arg-type]

    monkeypatch.setattr(py4j.clientserver.ClientServerConnection, "send_command", counted)
    return count
