"""COPY's CSV and JSON chunks decoded by Arrow equal the same chunks decoded line by line.

A COPY task decodes a CSV chunk with Arrow when nothing in it needs Python's
CSV reader, and line by line otherwise (:meth:`_LineSpec.csv_tables`); a
JSON-lines chunk likewise (:meth:`_LineSpec.json_tables`). The two must
agree on every file: rows, err rows and their reasons, line numbers, and the
tally. Hypothesis writes files from pieces chosen to hit
every special case (quotes, well-formed or not, carriage returns, NUL, blank lines, bad UTF-8,
wrong field counts, values that do not cast, empty fields, NOT NULL), and
reads them in small chunks so that chunk boundaries fall everywhere.
"""

from __future__ import annotations

import csv
import io
from typing import Any

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import given, settings

from timeshard.storage import copy_task
from timeshard.storage.copy_task import _chunks, _LineSpec, _Tally

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64()), ("ok", pa.bool_()), ("d", pa.date32())])
FIELDS = {
    "k": st.sampled_from(
        [
            *("a", "b c", "", " x ", "é", "a\x00b", "\udcff", "\t"),
            *('"q"', '"a,b"', '"a""b"', '""', '""""', 'a"b', '"ab"c', '"ab', '"', '"a" ', ' "a"'),
        ]
    ),
    "v": st.sampled_from(["1", "-7", "", "x", "1.5", "99999999999999999999", " 2", '"3"', '""']),
    "ok": st.sampled_from(["true", "false", "1", "0", "", "yes", "TRUE"]),
    "d": st.sampled_from(["2026-11-26", "", "2026-13-01", "26/11/2026"]),
}


@st.composite
def csv_files(draw: st.DrawFn) -> bytes:
    lines = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["row", "row", "row", "row", "blank", "short", "long", "cr"]))
        fields = [draw(FIELDS[name]) for name in SCHEMA.names]
        if kind == "blank":
            fields = [draw(st.sampled_from(["", " ", "\t "]))]
        elif kind == "short":
            fields = fields[:2]
        elif kind == "long":
            fields = [*fields, "extra"]
        line = ",".join(fields).encode("utf-8", "surrogateescape")
        if kind == "cr":
            line += b"\r"
        lines.append(line)
    data = b"\n".join(lines)
    if lines and draw(st.booleans()):
        data += b"\n"
    return data


def decode(
    data: bytes, fast: bool, not_null: tuple[str, ...], fail: bool, header: bool
) -> tuple[list[dict[str, Any]], _Tally]:
    spec = _LineSpec("csv", header, SCHEMA, not_null, "orders")
    tally = _Tally(fail=fail)
    rows = []
    for table in spec.csv_tables(_chunks(io.BytesIO(data).read), "in.csv", tally, fast=fast):
        rows += table.to_pylist()
    return rows, tally


@settings(max_examples=500, deadline=None)
@given(
    data=csv_files(),
    chunk=st.sampled_from([5, 16, 64, 1 << 20]),
    not_null=st.sampled_from([(), ("v",), ("k", "d")]),
    header=st.booleans(),
    bom=st.booleans(),
)
def test_arrow_and_line_by_line_agree(
    data: bytes, chunk: int, not_null: tuple[str, ...], header: bool, bom: bool
) -> None:
    if header:
        data = b"k,v,ok,d\n" + data
    if bom:
        data = b"\xef\xbb\xbf" + data
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(copy_task, "_READ_CHUNK", chunk)
        for fail in (False, True):
            fast_rows, fast = decode(data, True, not_null, fail, header)
            slow_rows, slow = decode(data, False, not_null, fail, header)
            assert fast.first_bad == slow.first_bad
            assert fast.full == slow.full
            if not fail:  # a failing COPY stops reading at its fifth bad row, a chunk later
                assert fast_rows == slow_rows
                assert fast.bad == slow.bad == sum(r["_err"] is not None for r in slow_rows)


def test_a_clean_chunk_is_decoded_by_arrow_not_line_by_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: Any) -> Any:
        raise AssertionError("decoded line by line")

    monkeypatch.setattr(_LineSpec, "_row", refuse)
    lines = [f"k{i},{i},{'true' if i % 2 else ''},2026-11-{1 + i % 28:02d}" for i in range(5000)]
    data = ("\r\n".join(lines) + "\r\n").encode()
    rows, tally = decode(data, True, ("v",), False, False)
    assert len(rows) == 5000 and tally.bad == 0
    assert rows[3] == {"k": "k3", "v": 3, "ok": True, "d": rows[3]["d"], "_err": None}
    assert rows[2]["ok"] is None and str(rows[3]["d"]) == "2026-11-04"


def test_one_bad_value_sends_only_its_chunk_line_by_line(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    row = _LineSpec._row

    def counting(self: _LineSpec, line: bytes, columns: Any, file: str, n: int, t: Any) -> Any:
        seen.append(n)
        return row(self, line, columns, file, n, t)

    monkeypatch.setattr(_LineSpec, "_row", counting)
    monkeypatch.setattr(copy_task, "_READ_CHUNK", 100)
    lines = [f"k{i},{i},true,2026-11-26" for i in range(40)]
    lines[25] = "k25,x,true,2026-11-26"
    rows, tally = decode(("\n".join(lines) + "\n").encode(), True, (), False, False)
    assert len(rows) == 40 and tally.bad == 1 and [b.line for b in tally.first_bad] == [26]
    assert 26 in seen and len(seen) < 10  # the chunk around line 26, not the file


def test_quoted_fields_are_decoded_by_arrow(monkeypatch: pytest.MonkeyPatch) -> None:
    """What CSV writers make (strings quoted, quotes doubled) stays on the Arrow path."""

    def refuse(*args: Any) -> Any:
        raise AssertionError("decoded line by line")

    monkeypatch.setattr(_LineSpec, "_row", refuse)
    lines = [f'"k{i}, ""{i}""","{i}",true,""' for i in range(1000)]
    rows, tally = decode("\n".join(lines).encode(), True, (), False, False)
    assert len(rows) == 1000 and tally.bad == 0
    assert rows[7] == {"k": 'k7, "7"', "v": 7, "ok": True, "d": None, "_err": None}


def test_a_field_longer_than_pythons_csv_field_limit_decodes() -> None:
    """Python's csv reader refuses a field longer than its process-wide limit (131072
    characters by default): by Arrow or line by line, the row decodes whatever it is."""
    long = "x" * 200_000
    data = f"{long},1,true,2026-11-26\nshort,2,,\n".encode()
    limit = csv.field_size_limit(131072)
    try:
        for fast in (True, False):
            rows, tally = decode(data, fast, (), False, False)
            assert [r["_err"] for r in rows] == [None, None] and tally.bad == 0
            assert [(r["k"], r["v"]) for r in rows] == [(long, 1), ("short", 2)]
    finally:
        csv.field_size_limit(limit)


@pytest.mark.parametrize(
    ("text", "plain"),
    [
        (b'"a,b",1\n"c""d",""', True),
        (b'x,"1"\n"""",2', True),
        (b'a"b,1', False),  # a quote inside an unquoted field
        (b'"ab"c,1', False),  # text after a closing quote (Python refuses, Arrow reads "abc")
        (b'"a" ,1', False),
        (b'"a,"b",1', False),
        (b'"ab,1', False),  # never closed
        (b'ok,1\n"ab,1', False),
    ],
)
def test_plainly_quoted(text: bytes, plain: bool) -> None:
    assert copy_task.plainly_quoted(text) is plain


JSON = pa.schema([("k", pa.string()), ("v", pa.int64()), ("x", pa.float64()), ("ok", pa.bool_())])
JSON_VALUES = st.sampled_from(
    [
        *(
            "1",
            "-3",
            "99999999999999999999",
            "1.0",
            "2.5",
            "1e400",
            "2e308",
            "-2e308",
            "NaN",
            "Infinity",
            "true",
            "null",
        ),
        *('"1"', '"é"', '"\\ud800"', "[1]", '{"a": 1}'),
    ]
)


@st.composite
def json_files(draw: st.DrawFn) -> bytes:
    lines = []
    for _ in range(draw(st.integers(0, 10))):
        kind = draw(st.sampled_from(["object"] * 5 + ["raw"]))
        if kind == "raw":
            lines.append(
                draw(
                    st.sampled_from(
                        [
                            *(b"", b"  ", b"[1]", b"null", b"{", b'{"v": 1} {"v": 2}'),
                            *(b"\xff{}", b'{"v": 1}\r', b'\xef\xbb\xbf{"v": 1}'),
                            *(b'{"v": 1, "v": 2}', b" null", b'{"v": 1} null', b"true"),
                            *(b'{"k": "caf\xe9"}', b'{"v": 1, "other": "\xff"}'),
                        ]
                    )
                )
            )
            continue
        names = draw(st.lists(st.sampled_from([*JSON.names, "other"]), max_size=5))
        body = ", ".join(f'"{n}": {draw(JSON_VALUES)}' for n in names)
        lines.append(("{" + body + "}").encode())
    data = b"\n".join(lines)
    if lines and draw(st.booleans()):
        data += b"\n"
    return data


def decode_json(
    data: bytes, fast: bool, not_null: tuple[str, ...], fail: bool
) -> tuple[list[dict[str, Any]], _Tally]:
    spec = _LineSpec("json", False, JSON, not_null, "orders")
    tally = _Tally(fail=fail)
    rows = []
    for table in spec.json_tables(_chunks(io.BytesIO(data).read), "in.json", tally, fast=fast):
        rows += table.to_pylist()
    return [{k: repr(v) if isinstance(v, float) else v for k, v in r.items()} for r in rows], tally


@settings(max_examples=400, deadline=None)
@given(
    data=json_files(),
    chunk=st.sampled_from([5, 32, 1 << 20]),
    not_null=st.sampled_from([(), ("v",)]),
)
def test_json_arrow_and_line_by_line_agree(
    data: bytes, chunk: int, not_null: tuple[str, ...]
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(copy_task, "_READ_CHUNK", chunk)
        for fail in (False, True):
            fast_rows, fast = decode_json(data, True, not_null, fail)
            slow_rows, slow = decode_json(data, False, not_null, fail)
            assert fast.first_bad == slow.first_bad
            assert fast.full == slow.full
            if not fail:
                assert fast_rows == slow_rows
                assert fast.bad == slow.bad


def test_clean_json_lines_are_decoded_by_arrow(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any) -> Any:
        raise AssertionError("decoded line by line")

    monkeypatch.setattr(_LineSpec, "_row", refuse)
    lines = [f'{{"k": "k{i}", "v": {i}, "x": {i / 2}}}' for i in range(3000)]
    rows, tally = decode_json(("\n".join(lines) + "\n").encode(), True, ("v",), False)
    assert len(rows) == 3000 and tally.bad == 0
    assert rows[5] == {"k": "k5", "v": 5, "x": "2.5", "ok": None, "_err": None}


def test_a_line_that_is_not_utf8_is_a_bad_row_whatever_its_neighbours() -> None:
    """Arrow's JSON reader keeps invalid UTF-8 in a string: it must not decide the row."""
    latin1 = b'{"k": "caf\xe9", "v": 1}'
    for data in (latin1, latin1 + b'\n{"k": "ok", "v": 2}', b'{"v": 3, "other": "\xff"}'):
        rows, tally = decode_json(data, True, (), False)
        assert tally.bad == 1
        assert [r["_err"] is not None for r in rows][:1] == [True]
