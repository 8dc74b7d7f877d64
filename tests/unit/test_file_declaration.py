"""What a FILE source refuses when it is declared: columns it could not keep apart
from the ones ingestion adds."""

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
