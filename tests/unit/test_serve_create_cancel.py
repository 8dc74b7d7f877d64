"""A CancelRequest or the statement_timeout cancels any CREATE until its object is added.

A CREATE MATERIALIZED VIEW could be canceled by a CancelRequest, but a CREATE
SOURCE or CREATE SINK could not: the client waited for the first read of the
source (or the build of the sink), and the object was made, cancel or not. And
the statement_timeout, which PostgreSQL applies to every statement, applied to no
CREATE. Now each is canceled (57014, "user request" or "statement timeout") until
its object is added, and what it made is undone as for a CREATE that failed: no
object, no catalog entry, and its retry creates it.

No Spark: the engine runs on a stand-in SparkContext that records the cancel of the
connection's jobs, and the step that would run Spark jobs (a source's first read, a
sink's build, a view's install) is stubbed; the cancel lands while it runs (the
stub sends the CancelRequest, or waits for the timeout's cancel), and the stub then
returns, as a Spark job that had finished does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg import errors
from tests.unit.test_serve_read_wait import StandInContext

import timeshard.compute as compute
import timeshard.controller as controller
from timeshard.catalog import read_catalog
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.server.engine import Engine
from timeshard.server.pgwire import PgServer
from timeshard.storage.ingest import Ingestion

SOURCE = "CREATE SOURCE a FROM LOAD GENERATOR AUCTION"
SINK = "CREATE SINK k FROM t INTO DELTA (URI '/nowhere') KEY (one)"
VIEW = "CREATE MATERIALIZED VIEW v AS SELECT one FROM t"


class Context(StandInContext):
    """A stand-in SparkContext that loaded no package and notes the cancel of jobs as an
    event (a test waits on it)."""

    def __init__(self) -> None:
        super().__init__()
        self.cancel_seen = threading.Event()

    def getConf(self) -> dict[str, str]:
        return {}

    def cancelJobsWithTag(self, tag: str) -> None:
        super().cancelJobsWithTag(tag)
        self.cancel_seen.set()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    client.open_writer("t", pa.schema([("one", pa.int64())])).append([((1,), 0, 1)], 0, 5)
    out = Engine(SimpleNamespace(sparkContext=Context()), client, follow_s=3600)
    yield out
    out.close()


def connect(server: PgServer) -> psycopg.Connection[Any]:
    return psycopg.connect(
        host="127.0.0.1", port=server.port, user="me", dbname="x", autocommit=True
    )


def entries(engine: Engine) -> list[tuple[str, str]]:
    return sorted((e.name, e.kind) for e in read_catalog(engine.client))


class Steps:
    """The stubbed steps of the CREATEs: each runs ``during`` (a cancel), then returns."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.during: Callable[[], None] = lambda: None
        self.closed: list[str] = []
        monkeypatch.setattr(Ingestion, "step", lambda ingestion: self.during())
        monkeypatch.setattr(controller, "build_export", self.build_export)
        monkeypatch.setattr(compute.MaterializedView, "install", self.install)

    def build_export(self, spark: Any, client: PersistClient, spec: Any) -> Any:
        self.during()
        return self.runner(spec.name)

    def install(self, spark: Any, client: PersistClient, definition: Any, **_: Any) -> Any:
        self.during()
        return self.runner(definition.name)

    def runner(self, name: str) -> Any:
        return SimpleNamespace(
            step=lambda: None, close=lambda: self.closed.append(name), drop=lambda: None
        )


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> Steps:
    return Steps(monkeypatch)


@pytest.mark.parametrize(("sql", "name"), [(SOURCE, "a"), (SINK, "k")], ids=["source", "sink"])
def test_a_cancel_request_undoes_a_create(
    serve: Callable[..., PgServer], engine: Engine, steps: Steps, sql: str, name: str
) -> None:
    server = serve(engine)
    before = entries(engine)
    with connect(server) as conn:
        steps.during = conn.cancel_safe  # answered once the cancel landed
        with pytest.raises(errors.QueryCanceled, match="due to user request"):
            conn.execute(sql)
        assert name not in engine.objects
        assert entries(engine) == before  # no statement, source or export entry left
        steps.during = lambda: None
        assert conn.execute(sql).statusmessage == " ".join(sql.split()[:2])  # CREATE SOURCE
        assert name in engine.objects


@pytest.mark.parametrize(
    ("sql", "name"), [(SOURCE, "a"), (SINK, "k"), (VIEW, "v")], ids=["source", "sink", "view"]
)
def test_the_statement_timeout_cancels_a_create(
    serve: Callable[..., PgServer], engine: Engine, steps: Steps, sql: str, name: str
) -> None:
    server = serve(engine)
    canceled = engine.spark.sparkContext.cancel_seen

    def until_canceled() -> None:  # a stuck timeout returns after a minute: the CREATE is done
        canceled.wait(60)

    with connect(server) as conn:
        conn.execute("SET statement_timeout = '200ms'")
        steps.during = until_canceled
        with pytest.raises(errors.QueryCanceled, match="due to statement timeout"):
            conn.execute(sql)
        assert canceled.is_set() and name not in engine.objects
