"""A CancelRequest cancels a CREATE MATERIALIZED VIEW until the view is added, never after.

A CREATE of a view claims its name in the catalog, installs the view (its shard, its
holds on its inputs, its catalog entry), then adds it to the running objects. A cancel
did nothing to it: the client waited for the install, and the view was made. Now a
cancel that comes before the view is added cancels its Spark jobs and undoes it, as a
failed CREATE is undone (no entry, no object, no hold; its retry creates it), with
57014; one that comes once it is added changes nothing: the CREATE answers as done.

The cancel is a real CancelRequest, sent by the client while the engine is at a
chosen step (the test wraps the step): no race with the time an install takes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg import errors
from pyspark.sql import SparkSession

from timeshard.catalog import read_catalog
from timeshard.compute import MaterializedView
from timeshard.location import Location
from timeshard.persist import PersistClient, PersistConfig
from timeshard.server.engine import Engine
from timeshard.server.pgwire import PgServer

pytestmark = pytest.mark.spark

CREATE = "CREATE MATERIALIZED VIEW v AS SELECT k, count(*) AS n FROM kv GROUP BY k"


@pytest.fixture
def served(spark: SparkSession, tmp_path: Path) -> Iterator[tuple[PgServer, Engine]]:
    client = PersistClient(
        Location.embedded(tmp_path / "loc"), PersistConfig(heartbeat_interval_ms=0)
    )
    writer = client.open_writer("kv", pa.schema([("k", pa.int64()), ("v", pa.string())]))
    writer.append([((k, "a"), 0, 1) for k in range(10)], 0, 1)
    writer.expire()
    engine = Engine(spark, client, read_wait_s=30.0)
    server = PgServer(engine, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, engine
    server.shutdown()
    server.server_close()
    engine.close()


def connect(server: PgServer) -> psycopg.Connection[Any]:
    return psycopg.connect(
        host="127.0.0.1", port=server.port, user="me", dbname="x", autocommit=True
    )


def canceling(conn: psycopg.Connection[Any], step: Callable[..., Any]) -> Callable[..., Any]:
    """``step``, then a CancelRequest of ``conn``'s statement (answered once it landed)."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        out = step(*args, **kwargs)
        conn.cancel_safe()
        return out

    return wrapped


def views(engine: Engine) -> list[str]:
    recorded = read_catalog(engine.client)
    return sorted(e.name for e in recorded if e.kind in ("statement", "view"))


def test_a_cancel_during_the_install_undoes_the_create(
    served: tuple[PgServer, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, engine = served
    with connect(server) as conn:
        install = MaterializedView.install
        monkeypatch.setattr(MaterializedView, "install", staticmethod(canceling(conn, install)))
        with pytest.raises(errors.QueryCanceled, match="user request"):
            conn.execute(CREATE)
        monkeypatch.undo()
        assert "v" not in engine.objects and views(engine) == []
        assert not engine.client.state("kv").critical_readers  # no hold on its input
        conn.execute(CREATE)  # its retry creates it
        assert "v" in engine.objects and views(engine) == ["v", "v"]


def test_a_cancel_once_the_view_is_added_changes_nothing(
    served: tuple[PgServer, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, engine = served
    with connect(server) as conn:
        monkeypatch.setattr(engine, "_create", canceling(conn, engine._create))
        assert conn.execute(CREATE).statusmessage == "CREATE MATERIALIZED VIEW"
        assert "v" in engine.objects and views(engine) == ["v", "v"]
        conn.execute("SHOW MATERIALIZED VIEWS")  # the connection is usable
