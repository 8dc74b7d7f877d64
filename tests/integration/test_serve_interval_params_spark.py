"""Interval parameters, in text and in binary (psycopg's ``timedelta``), are Spark
intervals: ``SELECT TIMESTAMP '2026-01-01 00:00:00' + $1`` answers the moment they
move it to. They were bound as strings, and Spark refused the sum (42K09). And a
statement whose rows are typed as its Describe binds it resolves that text once."""

from __future__ import annotations

import datetime
import gc
import struct
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

MOVED = b"SELECT CAST(TIMESTAMP '2026-01-01 00:00:00' + $1 AS STRING) AS x FROM t"


@pytest.fixture(scope="module")
def pgconn(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    path = Path(tmp_path_factory.mktemp("intervals"))
    with served_pgconn(spark, path, pa.schema([("one", pa.int64())]), (1,)) as conn:
        yield conn


@pytest.mark.parametrize(
    ("value", "binary", "moved"),
    [
        (b"1 day 02:03:04", False, b"2026-01-02 02:03:04"),
        (b"-1 days +02:00:00", False, b"2025-12-31 02:00:00"),
        (b"P1DT2H", False, b"2026-01-02 02:00:00"),
        (b"@ 1 day ago", False, b"2025-12-31 00:00:00"),
        (b"3 mons", False, b"2026-04-01 00:00:00"),
        (b"-1-2", False, b"2024-11-01 00:00:00"),
        (struct.pack("!qii", -1, -1, 0), True, b"2025-12-30 23:59:59.999999"),
        (struct.pack("!qii", 0, 0, 14), True, b"2027-03-01 00:00:00"),
    ],
)
def test_an_interval_parameter_moves_a_timestamp(
    pgconn: Any, value: bytes, binary: bool, moved: bytes
) -> None:
    result = pgconn.exec_params(MOVED, [value], [1186], [1 if binary else 0])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert result.get_value(0, 0) == moved


def test_psycopg_sends_a_timedelta(pgconn: Any) -> None:
    conn = psycopg.Connection(pgconn)
    delta = datetime.timedelta(days=2, seconds=5, microseconds=7)
    row = conn.execute(
        "SELECT CAST(TIMESTAMP '2026-01-01 00:00:00' + %s AS STRING) FROM t", [delta]
    ).fetchone()
    assert row == ("2026-01-03 00:00:05.000007",)


def test_the_widest_day_time_interval_binds(pgconn: Any) -> None:
    widest = struct.pack("!qii", 2**63 - 1, 0, 0)
    result = pgconn.exec_params(b"SELECT CAST($1 AS STRING) FROM t", [widest], [1186], [1])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message


CAST_BACK = "SELECT CAST(TIMESTAMP '2026-01-01 00:00:00' - %s::interval AS STRING) FROM t"


@pytest.mark.parametrize("value", [datetime.timedelta(days=3), "3 days"])
def test_a_parameter_cast_to_interval_moves_a_timestamp(pgconn: Any, value: Any) -> None:
    """psycopg's ``now() - %s::interval``: a timedelta binds a Spark day-time interval,
    which Spark does not cast to its ``INTERVAL`` (42K09); the cast is dropped. A ``str``
    (untyped) is read as an interval there, as PostgreSQL infers the parameter's type."""
    conn = psycopg.Connection(pgconn)
    try:
        assert conn.execute(CAST_BACK, [value]).fetchone() == ("2025-12-29 00:00:00",)
    finally:
        conn.rollback()


@pytest.mark.parametrize(
    ("value", "moved"),
    [(b"3 days", b"2025-12-29 00:00:00"), (b"1 year", b"2025-01-01 00:00:00"), (None, None)],
)
def test_an_interval_parameter_cast_to_interval_is_described_and_bound(
    pgconn: Any, value: bytes | None, moved: bytes | None
) -> None:
    sql = CAST_BACK.replace("%s", "$1").encode()
    result = pgconn.exec_params(sql, [value], [1186])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert result.get_value(0, 0) == moved
    prepared = pgconn.prepare(b"", sql, [1186])
    assert prepared.status == psycopg.pq.ExecStatus.COMMAND_OK, prepared.error_message


@pytest.mark.parametrize(
    ("sql", "params", "text"),
    [
        (b"SELECT $1 FROM t", [b"1 year 2 mons"], b"1 year 2 mons"),
        (b"SELECT $1 AS x, $1 AS x FROM t", [b"-3 mons"], b"-3 mons"),
        (b"SELECT INTERVAL '3' MONTH FROM t", [], b"3 mons"),
        (b"SELECT INTERVAL '2' YEAR FROM t", [], b"2 years"),
    ],
)
def test_a_year_month_interval_column_is_an_interval(
    pgconn: Any, sql: bytes, params: list[bytes], text: bytes
) -> None:
    """PySpark cannot collect a year-month interval (XX000, ``fromInternal`` is not
    implemented): the column is its months, written as PostgreSQL's interval (1186),
    by an Execute and a Describe alike."""
    oids = [1186] * len(params)
    result = pgconn.exec_params(sql, params, oids)
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    row = [result.get_value(0, i) for i in range(result.nfields)]
    assert (row, result.ftype(0)) == ([text] * result.nfields, 1186)
    assert pgconn.prepare(b"", sql, oids).status == psycopg.pq.ExecStatus.COMMAND_OK
    described = describe_prepared(pgconn)
    assert [described.ftype(i) for i in range(described.nfields)] == [1186] * result.nfields


@pytest.mark.parametrize(
    ("value", "binary", "text"),
    [
        (struct.pack("!qii", 0, 1, 0), True, b"1 day"),
        (struct.pack("!qii", 0, 0, 14), True, b"1 year 2 mons"),
        (b"1 day", False, b"1 day"),
    ],
)
def test_an_undeclared_parameter_cast_to_interval_takes_a_binary_interval(
    pgconn: Any, value: bytes, binary: bool, text: bytes
) -> None:
    """Describe answers interval (1186) for an undeclared ``$1::interval``, so a client
    sends a binary interval there, which PostgreSQL 15 reads as one (``1 day``): it was
    read as UTF-8 text (22021 or an interval of the wrong text)."""
    prepared = pgconn.prepare(b"", b"SELECT $1::interval AS x FROM t", None)
    assert prepared.status == psycopg.pq.ExecStatus.COMMAND_OK, prepared.error_message
    described = describe_prepared(pgconn)
    assert described.param_type(0) == 1186
    result = pgconn.exec_prepared(b"", [value], [1 if binary else 0])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert (result.ftype(0), result.get_value(0, 0)) == (1186, text)


# -- a statement typed as its Describe binds it resolves that text once ----------------------
# (a year-month interval bound where the Describe's placeholder is a day-time one: each
# Execute resolved both the query and the text it is typed as; counted, not timed)

DATE_MOVED = b"SELECT DATE '2020-01-01' + $1 AS d FROM t"


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
    prepared = pgconn.prepare(b"s", DATE_MOVED, [1186])
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
    prepared = pgconn.prepare(b"", DATE_MOVED, [1186])
    assert prepared.status == psycopg.pq.ExecStatus.COMMAND_OK, prepared.error_message
    assert describe_prepared(pgconn).ftype(0) == 1114
    before = len(resolved)
    result = pgconn.exec_prepared(b"", [b"1 day"])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    assert (result.get_value(0, 0), len(resolved) - before) == (b"2020-01-02 00:00:00", 1)


def test_the_resolved_text_goes_with_its_statement() -> None:
    """The memo is the prepared statement's: none outlives it."""
    prepared = pgwire._Prepared.of(DATE_MOVED.decode(), [1186])
    typed_as = prepared.typed_as()
    assert typed_as is not None and typed_as is prepared.typed_as()
    gone = weakref.ref(typed_as)
    del prepared, typed_as
    gc.collect()
    assert gone() is None
