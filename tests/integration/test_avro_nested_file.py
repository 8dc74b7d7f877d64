"""A FILE source in format ``avro`` whose reader schema has arrays, maps and records.

Datums written by fastavro (an encoder independent of spark-avro), one base64
line each, with a null at every depth; a corrupt datum is an err row.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from tests.integration.one_step import rows_after_one_step

from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.file_source import AVRO_DECODE_ERROR, FileSource

pytestmark = pytest.mark.spark
POINT = {
    "type": "record",
    "name": "Point",
    "fields": [
        {"name": "x", "type": ["null", "double"]},
        {"name": "tags", "type": ["null", {"type": "array", "items": ["null", "string"]}]},
    ],
}
SCHEMA = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "at", "type": ["null", POINT]},
        {"name": "path", "type": {"type": "array", "items": ["null", {**POINT, "name": "P2"}]}},
        {"name": "attrs", "type": ["null", {"type": "map", "values": ["null", "long"]}]},
    ],
}
DATA: list[dict[str, Any]] = [
    {
        "id": 1,
        "at": {"x": 0.5, "tags": ["a", None]},
        "path": [None, {"x": None, "tags": None}, {"x": 2.0, "tags": []}],
        "attrs": {"k": 1, "n": None},
    },
    {"id": 2, "at": None, "path": [], "attrs": None},
    {"id": 3, "at": {"x": None, "tags": None}, "path": [], "attrs": {}},
]


def test_nested_avro_datums_in_files(spark: Any, tmp_path: Path) -> None:
    parsed = fastavro.parse_schema(SCHEMA)
    lines = []
    for datum in DATA:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, datum)
        lines.append(base64.b64encode(out.getvalue()))
    lines.append(base64.b64encode(b"\x02\x02\xff"))  # id 1, then a union branch that is none
    root = tmp_path / "in"
    root.mkdir()
    (root / "a.b64").write_bytes(b"\n".join(lines) + b"\n")
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    source = FileSource("nested", root, "avro", avro_schema=json.dumps(SCHEMA))
    point = pa.struct([("x", pa.float64()), ("tags", pa.list_(pa.string()))])
    assert source.schema.field("path").type == pa.list_(point)
    rows = rows_after_one_step(spark, client, source)
    ok = sorted((r for r in rows if r["_err"] is None), key=lambda r: r["id"])
    want = [
        {**d, "attrs": None if d["attrs"] is None else sorted(d["attrs"].items())} for d in DATA
    ]
    got = [{k: r[k] for k in ("id", "at", "path", "attrs")} for r in ok]
    for r in got:
        r["attrs"] = None if r["attrs"] is None else sorted(r["attrs"])
    assert got == want
    errs = [r["_err"] for r in rows if r["_err"] is not None]
    assert len(errs) == 1 and AVRO_DECODE_ERROR in errs[0], errs
