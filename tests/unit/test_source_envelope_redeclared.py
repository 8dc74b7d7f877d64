"""A source declared again with another envelope over its written output is refused.

The output shard of an UPSERT source holds one row per key, and the feedback upsert
derives its state from it; a NONE output holds every record. Declared again with the
other envelope (or, UPSERT, with other key columns), the shard would hold rows of both
kinds mixed: neither the upsert of the records nor their sum. No Spark: the UPSERT
declaration is recorded directly, and the refusal comes before any handle is opened.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from timeshard.catalog import check_redeclared, record_source, stored_entry
from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.ingest import Ingestion
from timeshard.storage.sources import KeyValueGenerator

SCHEMA = pa.schema([("key", pa.int64()), ("value", pa.string())])


@pytest.fixture
def client(tmp_path: Path) -> PersistClient:
    return PersistClient(Location.embedded(tmp_path / "loc"))


def kv() -> KeyValueGenerator:
    return KeyValueGenerator(name="x", keys=10)


def written(client: PersistClient, shard: str = "x") -> None:
    """Move the output shard's upper past 0, as a first tick does."""
    writer = client.open_writer(shard, SCHEMA)
    writer.compare_and_append_batch([], 0, 5)
    writer.expire()


def declared_upsert(client: PersistClient, keys: tuple[str, ...] = ("key",)) -> None:
    record_source(client, "x", kv(), {"": ("upsert", keys)}, {"": "x"})


def test_an_upsert_source_declared_again_with_none_is_refused(client: PersistClient) -> None:
    declared_upsert(client)
    written(client)
    with pytest.raises(InvalidUsage, match=r"'x'.*envelope 'upsert'.*envelope 'none'"):
        Ingestion(None, client, kv())
    assert stored_entry(client, "x", "export").definition["envelope"] == "upsert"  # type: ignore[union-attr]


def test_a_none_source_declared_again_with_upsert_is_refused(client: PersistClient) -> None:
    Ingestion(None, client, kv()).close()
    written(client)
    with pytest.raises(InvalidUsage, match=r"'x'.*envelope 'none'.*envelope 'upsert'"):
        check_redeclared(client, "x", kv(), {"": ("upsert", ["key"])})


def test_an_upsert_source_with_other_key_columns_is_refused(client: PersistClient) -> None:
    declared_upsert(client, ("key",))
    written(client)
    with pytest.raises(InvalidUsage, match=r"key_columns \['key'\].*key_columns \['value'\]"):
        check_redeclared(client, "x", kv(), {"": ("upsert", ["value"])})
    check_redeclared(client, "x", kv(), {"": ("upsert", ["key"])})  # the same: accepted


def test_an_unwritten_output_may_take_another_envelope(client: PersistClient) -> None:
    declared_upsert(client)
    Ingestion(None, client, kv()).close()  # nothing was written: nothing to mix
    assert stored_entry(client, "x", "export").definition["envelope"] == "none"  # type: ignore[union-attr]
