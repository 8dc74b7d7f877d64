"""COPY skips only empty lines: a line of spaces or tabs is a record, as the FILE
source reads it (a value of a one-column string collection, or a bad row)."""

from __future__ import annotations

import io
from typing import Any

import pyarrow as pa
import pytest

from timeshard.storage.copy_task import _chunks, _LineSpec, _Tally
from timeshard.storage.file_source import decode_payload

STRING = pa.schema([("s", pa.string())])


def rows(fmt: str, schema: pa.Schema, data: bytes, fast: bool) -> tuple[list[Any], _Tally]:
    spec = _LineSpec(fmt, False, schema, (), "c")
    tally = _Tally(fail=False)
    tables = getattr(spec, f"{fmt}_tables")(_chunks(io.BytesIO(data).read), "f", tally, fast=fast)
    return [r for t in tables for r in t.to_pylist()], tally


@pytest.mark.parametrize("fast", [True, False])
def test_a_csv_line_of_spaces_is_a_value_and_an_empty_line_is_skipped(fast: bool) -> None:
    data = b"a\n  \n\t\n\nb\r\n\r\n \r\n"
    got, tally = rows("csv", STRING, data, fast)
    assert [r["s"] for r in got] == ["a", "  ", "\t", "b", " "] and tally.bad == 0
    assert decode_payload(b"  ", "csv", STRING) == {"s": "  "}  # as the FILE source reads it


@pytest.mark.parametrize("fast", [True, False])
def test_a_csv_line_of_spaces_is_a_bad_row_where_it_has_too_few_fields(fast: bool) -> None:
    schema = pa.schema([("k", pa.string()), ("v", pa.int64())])
    got, tally = rows("csv", schema, b"a,1\n \n\nb,2\n", fast)
    assert [r["_err"] is None for r in got] == [True, False, True]
    assert [b.line for b in tally.first_bad] == [2]


@pytest.mark.parametrize("fast", [True, False])
def test_a_json_line_of_spaces_is_a_bad_row(fast: bool) -> None:
    got, tally = rows("json", STRING, b'{"s": "a"}\n  \n\n{"s": "b"}\n', fast)
    assert [r["s"] for r in got] == ["a", None, "b"]
    assert [b.line for b in tally.first_bad] == [2]
