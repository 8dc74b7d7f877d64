"""An ingestion output's envelope is checked before any shard is opened."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.ingest import Export

PAYLOAD = pa.schema([("k", pa.int64()), ("_offset", pa.int64())])


@pytest.mark.parametrize(
    ("key_columns", "metadata"),
    [(["k", "_offset"], ()), (["k"], ("_offset",))],
)
def test_an_upsert_output_with_only_key_and_metadata_columns_is_refused(
    tmp_path: Path, key_columns: list[str], metadata: tuple[str, ...]
) -> None:
    """Its every command had all its (no) value columns null: each was a delete."""
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    with pytest.raises(InvalidUsage, match=r"UPSERT output 'out' has no value columns"):
        Export(None, client, "out", PAYLOAD, "upsert", key_columns, metadata=metadata)
    assert client.list_shards() == []
