"""What a FILE source refuses when it is declared: columns it could not keep apart
from the ones ingestion adds, and NOT NULL columns that a missing field or an err
row would leave null."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from timeshard.errors import InvalidUsage
from timeshard.storage.file_source import FileSource


@pytest.mark.parametrize("column", ["_diff", "_ts", "_err", "_partition", "_offset", "_note"])
@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_a_column_starting_with_underscore_is_refused(
    tmp_path: Path, fmt: str, column: str
) -> None:
    schema = pa.schema([("k", pa.int64()), (column, pa.int64())])
    with pytest.raises(
        InvalidUsage, match=rf"FILE source 'f': columns \['{column}'\] start with '_'"
    ):
        FileSource("f", tmp_path, fmt, schema)


def test_an_avro_field_starting_with_underscore_is_refused(tmp_path: Path) -> None:
    avro = json.dumps(
        {"type": "record", "name": "r", "fields": [{"name": "_note", "type": "string"}]}
    )
    with pytest.raises(InvalidUsage, match=r"columns \['_note'\] start with '_'"):
        FileSource("f", tmp_path, "avro", avro_schema=avro)


def test_a_not_null_column_is_refused(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.string())])
    with pytest.raises(InvalidUsage, match=r"FILE source 'f': columns \['k'\] are NOT NULL"):
        FileSource("f", tmp_path, "json", schema)


def test_a_not_null_field_inside_a_column_is_refused(tmp_path: Path) -> None:
    inner = pa.struct([pa.field("a", pa.int64(), nullable=False), ("b", pa.string())])
    schema = pa.schema([("s", inner), ("m", pa.map_(pa.string(), pa.int64()))])
    with pytest.raises(InvalidUsage, match=r"columns \['s.a'\] are NOT NULL"):
        FileSource("f", tmp_path, "json", schema)
    elements = pa.list_(pa.field("element", pa.int64(), nullable=False))
    with pytest.raises(InvalidUsage, match=r"columns \['l.element'\] are NOT NULL"):
        FileSource("f", tmp_path, "json", pa.schema([("l", elements)]))


def test_a_map_column_is_accepted(tmp_path: Path) -> None:
    schema = pa.schema([("m", pa.map_(pa.string(), pa.struct([("a", pa.int64())])))])
    assert FileSource("f", tmp_path, "json", schema).schema == schema
