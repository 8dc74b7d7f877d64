"""A bytea parameter is a BINARY of its bytes; json, jsonb and varchar ones are strings.

A bytea parameter was bound as the string of its hex text: ``SELECT $1`` answered
a text column (25) holding ``\\x00ff``, where PostgreSQL answers bytea (17) of
those bytes, and a comparison with a binary column compared a string. Spark has
no JSON type, so json and jsonb parameters are strings, as varchar ones are; a
column that is such a parameter itself is described with its declared type (114,
3802, 1043), as PostgreSQL describes it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from tests.integration.test_serve_time_params_spark import served_pgconn

pytestmark = pytest.mark.spark


@pytest.fixture
def pgconn(spark: SparkSession, tmp_path: Path) -> Iterator[Any]:
    with served_pgconn(spark, tmp_path, pa.schema([("b", pa.binary())]), (b"\x00\xff",)) as conn:
        yield conn


@pytest.mark.parametrize(
    ("oid", "value", "fmt", "want_oid", "want"),
    [
        (17, b"\\x00ff", 0, 17, b"\\x00ff"),
        (17, b"\x00\xff", 1, 17, b"\\x00ff"),
        (17, None, 0, 17, None),
        (114, b'{"a": 1}', 0, 114, b'{"a": 1}'),
        (3802, b'\x01{"a": 1}', 1, 3802, b'{"a": 1}'),
        (1043, b"vc", 0, 1043, b"vc"),
    ],
)
def test_a_parameter_keeps_its_declared_type(
    pgconn: Any, oid: int, value: bytes | None, fmt: int, want_oid: int, want: bytes | None
) -> None:
    result = pgconn.exec_params(b"SELECT $1 AS x FROM t", [value], [oid], [fmt])
    assert result.error_message == b""
    assert (result.ftype(0), result.get_value(0, 0)) == (want_oid, want)


def test_a_bytea_parameter_compares_with_a_binary_column(pgconn: Any) -> None:
    result = pgconn.exec_params(b"SELECT count(*) FROM t WHERE b = $1", [b"\x00\xff"], [17], [1])
    assert result.error_message == b""
    assert result.get_value(0, 0) == b"1"
