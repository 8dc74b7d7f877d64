"""A JSON number too large for a double decodes to the same err row on every path.

Arrow's JSON reader reads ``2e308`` or a 310-digit integer in a double column
as infinity, while :func:`~timeshard.storage.file_source.decode_payload`
refuses it. The fast path must give way to the line-by-line one, so that a
record decodes alike whatever batch (Kafka) or chunk (COPY) it falls in.
"""

from __future__ import annotations

import io

import pyarrow as pa
import pytest

from timeshard.storage.copy_task import _chunks, _LineSpec, _Tally
from timeshard.storage.file_source import DECODE_ERRORS, arrow_json, decode_payload
from timeshard.storage.kafka_source import arrow_decoded

SCHEMA = pa.schema([("x", pa.float64())])
TOO_LARGE = [b"2e308", b"-2e308", b"1.8e308", b"1" + b"0" * 309, b"-1" + b"0" * 309]


@pytest.mark.parametrize("number", TOO_LARGE)
def test_arrow_gives_way_on_a_number_too_large_for_a_double(number: bytes) -> None:
    line = b'{"x": ' + number + b"}"
    with pytest.raises(DECODE_ERRORS, match="out of range"):
        decode_payload(line, "json", SCHEMA)
    assert arrow_json(line, 1, SCHEMA, unknown="error") is None
    assert arrow_json(b'{"x": 1}\n' + line, 2, SCHEMA, unknown="ignore") is None


def test_infinity_literal_and_largest_double_still_decode() -> None:
    for line, value in [
        (b'{"x": Infinity}', float("inf")),
        (b'{"x": -Infinity}', float("-inf")),
        (b'{"x": 1.7976931348623157e308}', 1.7976931348623157e308),
    ]:
        assert decode_payload(line, "json", SCHEMA) == {"x": value}
        table = arrow_json(line, 1, SCHEMA, unknown="error")
        assert table is None or table.to_pylist() == [{"x": value}]


@pytest.mark.parametrize("neighbour", [b"", b'{"x": "bad"}\n'])
def test_copy_json_chunk_decodes_an_overflow_as_a_bad_row(neighbour: bytes) -> None:
    spec = _LineSpec("json", False, SCHEMA, (), "c")
    tally = _Tally(fail=False)
    data = b'{"x": 2e308}\n' + neighbour
    rows = [
        r
        for t in spec.json_tables(_chunks(io.BytesIO(data).read), "f.json", tally)
        for r in t.to_pylist()
    ]
    assert rows[0]["x"] is None and "out of range" in rows[0]["_err"]
    assert tally.bad == 1 + bool(neighbour)


def test_kafka_fast_path_gives_way_on_an_overflow() -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "partition": pa.array([0, 0], pa.int32()),
            "offset": pa.array([0, 1], pa.int64()),
            "key": pa.array([None, None], pa.binary()),
            "value": pa.array([b'{"x": 1.5}', b'{"x": -2e308}'], pa.binary()),
        }
    )
    assert arrow_decoded(batch, None, "json", pa.schema([]), SCHEMA) is None
