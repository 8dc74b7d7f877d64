"""A prepared statement whose rows are typed as its Describe binds it (a year-month
interval bound where the Describe's placeholder is a day-time one) resolves that text
once, not at every Bind: each Execute resolved both the query and the text it is typed
as. Resolutions are counted (``Engine.resolve`` wrapped), not timed; the rows sent are
the same at every Execute."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from tests.integration.test_serve_declared_types_spark import describe_prepared
from tests.integration.test_serve_time_params_spark import served_pgconn

from timeshard.server import pgwire
from timeshard.server.engine import Engine

pytestmark = pytest.mark.spark

MOVED = b"SELECT DATE '2020-01-01' + $1 AS d FROM t"


@pytest.fixture(scope="module")
def pgconn(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    path = Path(tmp_path_factory.mktemp("typed_once"))
    with served_pgconn(spark, path, pa.schema([("one", pa.int64())]), (1,)) as conn:
        yield conn


@pytest.fixture
def resolved(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The queries the engine resolves from now on."""
    seen: list[str] = []
    resolve = Engine.resolve

    def counted(self: Engine, query: str, **kwargs: Any) -> Any:
        seen.append(query)
        return resolve(self, query, **kwargs)

    monkeypatch.setattr(Engine, "resolve", counted)
    return seen


def test_each_execute_resolves_its_statement_once(pgconn: Any, resolved: list[str]) -> None:
    prepared = pgconn.prepare(b"s", MOVED, [1186])
    assert prepared.status == psycopg.pq.ExecStatus.COMMAND_OK, prepared.error_message
    answers = []
    for _ in range(3):
        before = len(resolved)
        result = pgconn.exec_prepared(b"s", [b"1 year"])
        assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
        answers.append((result.ftype(0), result.get_value(0, 0), len(resolved) - before))
    # the first resolves the text it is typed as too; the others find it resolved
    assert answers == [(1114, b"2021-01-01 00:00:00", 2)] + [(1114, b"2021-01-01 00:00:00", 1)] * 2
    closed = pgconn.exec_(b"DEALLOCATE s")
    assert closed.status == psycopg.pq.ExecStatus.COMMAND_OK, closed.error_message


def test_a_day_time_interval_is_not_typed_as_another(pgconn: Any, resolved: list[str]) -> None:
    prepared = pgconn.prepare(b"", MOVED, [1186])
    assert prepared.status == psycopg.pq.ExecStatus.COMMAND_OK, prepared.error_message
    assert describe_prepared(pgconn).ftype(0) == 1114
    before = len(resolved)
    result = pgconn.exec_prepared(b"", [b"1 day"])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert (result.get_value(0, 0), len(resolved) - before) == (b"2020-01-02 00:00:00", 1)


def test_the_resolved_text_goes_with_its_statement() -> None:
    """The memo is the prepared statement's: none outlives it."""
    prepared = pgwire._Prepared.of(MOVED.decode(), [1186])
    typed_as = prepared.typed_as()
    assert typed_as is not None and typed_as is prepared.typed_as()
    gone = weakref.ref(typed_as)
    del prepared, typed_as
    gc.collect()
    assert gone() is None
