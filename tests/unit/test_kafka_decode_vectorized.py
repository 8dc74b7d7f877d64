"""A batch of Kafka records decoded by Arrow equals the same batch decoded record by record.

The KAFKA source's task decodes a batch with Arrow's JSON reader when it can
read every record exactly as :func:`decode_record` would
(:func:`arrow_decoded`), and record by record otherwise. Hypothesis draws
batches of keys and values from pieces chosen to hit the differences between
the two readers (wrong types, out-of-range numbers, NaN, duplicate keys, a
byte order mark, lone surrogates, line breaks inside a record, trailing data,
a top-level ``null`` (which pyarrow 26 reads as a row of nulls, or crashes on),
tombstones, invalid UTF-8), and the outputs must be equal row for row.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import event, given, settings

from timeshard.storage import kafka_decode
from timeshard.storage.kafka_source import KafkaSource, _decoder

VALUE = pa.schema(
    [
        *(("n", pa.int64()), ("small", pa.int32()), ("x", pa.float64())),
        *(("ok", pa.bool_()), ("s", pa.string())),
    ]
)
KEY = pa.schema([("id", pa.int64())])
FIELD_VALUES = st.sampled_from(
    [
        *("1", "-3", "3000000000", "99999999999999999999", "1.0", "1e2", "2.5", "1e400", "2e308"),
        *("NaN", "Infinity", "true", "false", "null", '"1"', '"é"', '"\\ud800"'),
        *('"\\ud83d\\ude00"', '"a\\nb"', "[1]", '{"a": 1}'),
    ]
)


@st.composite
def values(draw: st.DrawFn) -> bytes | None:
    kind = draw(st.sampled_from(["object"] * 6 + ["tombstone", "raw"]))
    if kind == "tombstone":
        return None
    if kind == "raw":
        return draw(
            st.sampled_from(
                [
                    *(b"", b"[1]", b"1", b"{", b'{"n": 1} x', b'{"n": 1} {"n": 2}', b"\xff{}"),
                    *(b'\xef\xbb\xbf{"n": 1}', b'{"n":\n1}', b'{"n": 1}\r', b' {"n": 1} '),
                    *(b"null", b" null", b'{"n": 1} null', b"true", b"{}"),
                    # invalid UTF-8 in a string, declared or not: an err row either way
                    *(b'{"s": "caf\xe9"}', b'{"n": 1, "other": "\xff"}'),
                ]
            )
        )
    names = draw(st.lists(st.sampled_from([*VALUE.names, "other", "n"]), max_size=6))
    fields = [f'"{name}": {draw(FIELD_VALUES)}' for name in names]
    return ("{" + ", ".join(fields) + "}").encode()


@st.composite
def keys(draw: st.DrawFn) -> bytes | None:
    return draw(st.sampled_from([None, b'{"id": 1}', b'{"id": "1"}', b"{}", b"x", b'{"id": 2}']))


def decode(records: list[tuple[bytes | None, bytes | None]], key_format: str | None) -> Any:
    source = KafkaSource(
        "k",
        "127.0.0.1:9",
        "t",
        value_schema=VALUE,
        key_format=key_format,
        key_schema=KEY if key_format == "json" else None,
        metadata=["partition", "timestamp"],
    )
    key_schema = KEY if key_format == "json" else source.key_schema
    run = _decoder(
        "t",
        key_format,
        "json",
        key_schema.serialize().to_pybytes(),
        VALUE.serialize().to_pybytes(),
        ("partition", "timestamp"),
        source._row_schema().serialize().to_pybytes(),
    )
    n = len(records)
    batch = pa.RecordBatch.from_pydict(
        {
            "partition": pa.array([i % 3 for i in range(n)], pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
            "key": pa.array([k for k, _ in records], pa.binary()),
            "value": pa.array([v for _, v in records], pa.binary()),
            "timestamp": pa.array(
                [dt.datetime(2026, 11, 26, tzinfo=dt.UTC)] * n, pa.timestamp("us", tz="UTC")
            ),
        }
    )
    rows = []
    for out in run(iter([batch])):
        rows += out.to_pylist()
    return [{k: repr(v) if isinstance(v, float) else v for k, v in r.items()} for r in rows]


@settings(max_examples=400, deadline=None)
@given(
    records=st.lists(st.tuples(keys(), values()), min_size=1, max_size=8),
    key_format=st.sampled_from([None, "json", "text"]),
)
def test_arrow_and_record_by_record_agree(
    records: list[tuple[bytes | None, bytes | None]], key_format: str | None
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        real = kafka_decode.arrow_decoded

        def counted(*args: Any) -> Any:
            found = real(*args)
            event(f"decoded by Arrow: {found is not None}")
            return found

        mp.setattr(kafka_decode, "arrow_decoded", counted)
        fast = decode(records, key_format)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kafka_decode, "arrow_decoded", lambda *args: None)
        slow = decode(records, key_format)
    assert fast == slow


def test_a_clean_batch_is_decoded_by_arrow(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any) -> Any:
        raise AssertionError("decoded record by record")

    monkeypatch.setattr(kafka_decode, "decode_record", refuse)
    records = [
        (json.dumps({"id": i}).encode(), json.dumps({"n": i, "s": f"v{i}", "x": i / 4}).encode())
        for i in range(5000)
    ]
    records[7] = (b'{"id": 7}', None)  # a tombstone
    rows = decode(records, "json")
    assert len(rows) == 5000 and all(r["_err"] is None for r in rows)
    assert rows[3] == {
        "_partition": "0",
        "_offset": 3,
        "id": 3,
        "n": 3,
        "small": None,
        "x": "0.75",
        "ok": None,
        "s": "v3",
        "partition": 0,
        "timestamp": dt.datetime(2026, 11, 26, tzinfo=dt.UTC),
        "_err": None,
    }
    assert rows[7]["id"] == 7 and rows[7]["n"] is None and rows[7]["s"] is None


def test_a_lone_surrogate_is_an_err_row_not_a_failed_task() -> None:
    [row] = decode([(None, b'{"s": "\\ud800"}')], None)
    assert row["s"] is None and "lone surrogate" in row["_err"]


def test_a_value_that_does_not_decode_keeps_its_key() -> None:
    """Every data column was nulled: the UPSERT envelope then took the error for no key's,
    so the key kept its old value beside an err row that no later value retracted."""
    bad_value, bad_key = decode([(b'{"id": 7}', b'{"n": oops'), (b'{"id": ', b'{"n": 1}')], "json")
    assert bad_value["id"] == 7 and bad_value["n"] is None and "@0: " in bad_value["_err"]
    assert bad_key["id"] is None and bad_key["n"] is None and "@1: " in bad_key["_err"]


@pytest.mark.parametrize("side", ["key", "value"])
@pytest.mark.parametrize("fault", [MemoryError, TypeError])
def test_a_fault_while_decoding_fails_the_task_not_a_row(
    monkeypatch: pytest.MonkeyPatch, side: str, fault: type[Exception]
) -> None:
    """A MemoryError (or a bug's TypeError) decoding one record was a durable err row."""
    from timeshard.storage import file_decode

    real = json.loads

    def failing(text: str, **kwargs: Any) -> Any:
        if '"boom"' in text:
            raise fault("while decoding")
        return real(text, **kwargs)

    monkeypatch.setattr(file_decode.json, "loads", failing)
    record = (b'{"id": 1, "boom": 1}', b'{"n": 1}')
    if side == "value":
        record = (b'{"id": 1}', b'{"n": 1, "boom": 1}')
    # the duplicate key sends the batch record by record
    with pytest.raises(fault, match="while decoding"):
        decode([(b'{"id": 2, "id": 3}', b'{"n": 2}'), record], "json")
