"""Values through the pgwire front end of ``timeshard serve``, without Spark.

Parameters as the client types them, and result values as PostgreSQL's
clients read them back (psycopg's loaders), through stand-in engines that
record the statements they get and answer fixed rows.
"""

from __future__ import annotations

import contextlib
import datetime
import re
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from timeshard.server.engine import Result
from timeshard.server.pgwire import PgServer
from timeshard.server.statements import Query, Statement


class Answers:
    """Records each statement; a query answers ``rows`` of ``columns``."""

    def __init__(self, columns: list[tuple[str, str]], rows: list[tuple[Any, ...]]) -> None:
        self.columns = columns
        self.rows = rows
        self.statements: list[Statement] = []

    def execute(self, statement: Statement) -> Result:
        self.statements.append(statement)
        return Result(self.columns, self.rows, f"SELECT {len(self.rows)}")

    @contextlib.contextmanager
    def cancellable(self, tag: str) -> Iterator[None]:
        """Its queries answer at once: no job to tag."""
        yield

    def cancel(self, tag: str) -> None:
        """Nothing runs long enough to cancel."""


@pytest.fixture
def answering() -> Iterator[tuple[PgServer, Answers]]:
    engine = Answers([("n", "long")], [(1,)])
    server = PgServer(engine, "127.0.0.1", 0)  # type: ignore[arg-type]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, engine
    server.shutdown()
    server.server_close()


def connect(server: PgServer) -> psycopg.Connection[Any]:
    return psycopg.connect(
        host="127.0.0.1",
        port=server.port,
        user="me",
        dbname="x",
        connect_timeout=10,
        autocommit=True,
    )


def test_a_str_parameter_stays_a_string(answering: tuple[PgServer, Answers]) -> None:
    """psycopg sends a ``str`` untyped (OID 0): PostgreSQL reads it as a string literal,
    so ``'007'`` is not compared as the number 7; an ``int`` is sent typed (int2 for a
    small one), a number of its type."""
    server, engine = answering
    with connect(server) as conn:
        conn.execute("SELECT * FROM kv WHERE k = %s AND j = %s AND n = %s", ("007", "1e3", 7))
    assert engine.statements == [
        Query("SELECT * FROM kv WHERE k = '007' AND j = '1e3' AND n = CAST(7 AS SMALLINT)")
    ]


@pytest.fixture
def new_york(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local time zone is New York's (PySpark's collect gives local time)."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def serve_rows(columns: list[tuple[str, str]], rows: list[tuple[Any, ...]]) -> PgServer:
    server = PgServer(Answers(columns, rows), "127.0.0.1", 0)  # type: ignore[arg-type]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_timestamp_is_an_instant_and_a_timestamp_ntz_a_wall_clock(new_york: None) -> None:
    """On a host outside UTC, epoch 0 collected from a TIMESTAMP column (a naive local
    datetime, 1969-12-31 19:00 in New York) is sent as timestamptz ``1970-01-01
    00:00:00+00``; a TIMESTAMP_NTZ's value (1970-01-01 00:00) as timestamp, as it is."""
    from pyspark.sql.types import TimestampNTZType, TimestampType

    micros = 1_500_000  # 1.5 s after the epoch
    row = (TimestampType().fromInternal(micros), TimestampNTZType().fromInternal(micros), None)
    assert row[0] == datetime.datetime(1969, 12, 31, 19, 0, 1, 500_000)  # naive, local
    columns = [("at", "timestamp"), ("wall", "timestamp_ntz"), ("none", "timestamp")]
    server = serve_rows(columns, [row])
    try:
        with connect(server) as conn:
            cur = conn.execute("SELECT at, wall, none FROM t")
            assert [d.type_code for d in cur.description or []] == [1184, 1114, 1184]
            ((at, wall, none),) = cur.fetchall()
        utc = datetime.UTC
        assert at.tzinfo is not None and at == datetime.datetime(1970, 1, 1, 0, 0, 1, 500_000, utc)
        assert wall == datetime.datetime(1970, 1, 1, 0, 0, 1, 500_000) and wall.tzinfo is None
        assert none is None
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    "number",
    [
        "1234567890123456789012345678901234.5678",  # 38 digits: Decimal's context keeps 28
        "-0.000001",
        "100",
        "0",
        "0.50",
    ],
)
def test_a_binary_numeric_parameter_is_exact(
    answering: tuple[PgServer, Answers], number: str
) -> None:
    """``%b`` makes psycopg send a Decimal in PostgreSQL's binary numeric."""
    server, engine = answering
    with connect(server) as conn:
        conn.execute("SELECT * FROM t WHERE d = %b", (Decimal(number),))
    (statement,) = engine.statements
    assert isinstance(statement, Query)
    bound = statement.query.removeprefix("SELECT * FROM t WHERE d = ")
    # Its exact digits, as the DECIMAL they need.
    digits = re.fullmatch(r"CAST\((\S+) AS DECIMAL\(\d+, \d+\)\)", bound)
    assert digits is not None, bound
    assert digits.group(1) == number


@pytest.mark.parametrize(
    "number",
    [
        "-98765432109876543210987654321098765432109876543210",
        "0.00000000000000000000000000000000012345678901234567890123",
    ],
)
def test_a_numeric_parameter_no_spark_type_holds_is_refused(
    answering: tuple[PgServer, Answers], number: str
) -> None:
    """Past 38 digits with more significant digits than a DOUBLE keeps, it was written out
    as digits Spark refuses as a literal; rounding it would change it: 22003."""
    server, _ = answering
    with connect(server) as conn, pytest.raises(psycopg.errors.NumericValueOutOfRange):
        conn.execute("SELECT * FROM t WHERE d = %b", (Decimal(number),))


def test_arrays_structs_and_maps_are_postgresql_arrays_and_json() -> None:
    """An array of a scalar type is PostgreSQL's array of it (psycopg reads a list, text
    elements quoted as PostgreSQL quotes them); a struct, a map and an array of structs
    or of arrays are ``json`` (an object, keys in order; an exact decimal), not Python's
    repr of the collected value."""
    from pyspark.sql import Row
    from pyspark.sql.types import (
        ArrayType,
        DecimalType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    from timeshard.server.pgtypes import column_type

    point = StructType(
        [
            StructField("x", LongType()),
            StructField("tag", StringType()),
            StructField("price", DecimalType(38, 2)),
        ]
    )
    types = {
        "longs": ArrayType(LongType()),
        "texts": ArrayType(StringType()),
        "at": ArrayType(TimestampType()),
        "point": point,
        "points": ArrayType(point),
        "grid": ArrayType(ArrayType(LongType())),
        "attrs": MapType(StringType(), LongType()),
    }
    row = (
        [1, None, -3],
        ["a b", 'say "hi"', "NULL", "", "back\\slash", "{x,y}", None],
        [datetime.datetime(1970, 1, 1, 0, 0, 1)],
        Row(x=1, tag="t", price=Decimal("12345678901234567890.25")),
        [Row(x=2, tag=None, price=None)],
        [[1, 2], [3]],
        {"k": 7, "j": None},
    )
    server = serve_rows([(n, column_type(t)) for n, t in types.items()], [row])
    try:
        with connect(server) as conn:
            cur = conn.execute("SELECT * FROM t")
            codes = [d.type_code for d in cur.description or []]
            assert codes == [1016, 1009, 1185, 114, 114, 114, 114]
            ((longs, texts, at, point_, points, grid, attrs),) = cur.fetchall()
    finally:
        server.shutdown()
        server.server_close()
    assert longs == [1, None, -3]
    assert texts == ["a b", 'say "hi"', "NULL", "", "back\\slash", "{x,y}", None]
    local = datetime.datetime(1970, 1, 1, 0, 0, 1).astimezone(datetime.UTC)
    assert at == [local]
    assert point_ == {"x": 1, "tag": "t", "price": 12345678901234567890.25}
    assert list(point_) == ["x", "tag", "price"]
    assert points == [{"x": 2, "tag": None, "price": None}]
    assert grid == [[1, 2], [3]]
    assert attrs == {"k": 7, "j": None}


def test_a_json_value_keeps_a_decimal_exact() -> None:
    """The JSON text itself: a decimal's digits as they are (no float rounding)."""
    from pyspark.sql import Row
    from pyspark.sql.types import DecimalType, StructField, StructType

    from timeshard.server.pgtypes import column_type, encode_value

    kind = column_type(StructType([StructField("d", DecimalType(38, 18))]))
    value = Row(d=Decimal("12345678901234567890.123456789012345678"))
    assert encode_value(value, kind) == b'{"d":12345678901234567890.123456789012345678}'
