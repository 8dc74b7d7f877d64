"""An ingestion output's envelope is checked before any shard is opened, and a failed
construction leaves no handle registered."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.ingest import Export
from timeshard.storage.upsert_spark import SparkFeedbackUpsert

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


def handles(client: PersistClient, shard: str) -> tuple[list[str], list[str]]:
    """The writers and leased readers registered on ``shard``."""
    state = client.state(shard)
    return list(state.writers), list(state.leased_readers)


def test_an_upsert_output_with_an_unknown_key_column_leaves_no_writer(tmp_path: Path) -> None:
    """The export's writer was opened before the upsert refused the key: it stayed registered
    (holding the shard's GC back) until its lease ran out. Now no shard is opened."""
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    payload = pa.schema([("k", pa.string()), ("v", pa.int64())])
    with pytest.raises(InvalidUsage, match=r"upsert key columns \['nope'\]"):
        Export(None, client, "out", payload, "upsert", ["nope"])
    assert client.list_shards() == []


def test_a_spark_upsert_that_cannot_start_leaves_no_handle(tmp_path: Path) -> None:
    """Whatever fails in the constructor (here: no SparkSession), its writer and its
    reader, which holds the since back, are expired, and so is the export's writer."""
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    with pytest.raises(AttributeError):
        SparkFeedbackUpsert(None, client, "out", PAYLOAD, ["k"])
    assert handles(client, "out") == ([], [])
    with pytest.raises(AttributeError):
        Export(None, client, "export", PAYLOAD, "upsert", ["k"])
    assert handles(client, "export") == ([], [])


@pytest.mark.parametrize(
    ("value_type", "refusal"),
    [
        (pa.uint64(), r"column 'v' has Arrow type uint64, which Spark cannot hold"),
        (pa.map_(pa.string(), pa.int64()), r"column 'v' of type map<string,bigint>"),
        (pa.struct([("m", pa.map_(pa.string(), pa.int64()))]), r"column 'v' of type struct<m"),
    ],
)
def test_a_spark_upsert_refuses_a_column_it_cannot_compare(
    tmp_path: Path, value_type: pa.DataType, refusal: str
) -> None:
    """A map (at any depth) has no equality in Spark: every tick failed with an
    AnalysisException on ``<=>``. An unsupported type left the writer and reader behind.
    Both are refused before any shard is opened."""
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    schema = pa.schema([("k", pa.string()), ("v", value_type)])
    with pytest.raises(InvalidUsage, match=refusal):
        SparkFeedbackUpsert(None, client, "out", schema, ["k"])
    assert client.list_shards() == []


def test_an_upsert_over_records_that_carry_diff_is_refused(tmp_path: Path) -> None:
    """A source whose records are changes (TPCH orders, a CDC table) carries ``_diff``;
    the UPSERT dropped it, so a retraction upserted the row it retracted (a replaced
    order was never deleted)."""
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    payload = pa.schema([("k", pa.int64()), ("v", pa.string()), ("_diff", pa.int64())])
    with pytest.raises(InvalidUsage, match=r"UPSERT output 'out': its source's records carry"):
        Export(None, client, "out", payload, "upsert", ["k"])
    assert client.list_shards() == []


@pytest.mark.parametrize("key_columns", ["id", b"id", ["id", 1]])
def test_an_export_whose_key_columns_are_not_a_list_of_names_is_refused(
    key_columns: object,
) -> None:
    """A string was split into its characters: ``"id"`` became the keys ``i`` and ``d``,
    taken silently on a shard that has such columns."""
    from timeshard.storage.delta_export import DeltaExport

    with pytest.raises(InvalidUsage, match=r"key_columns must be a list of column names"):
        DeltaExport.check_declared(
            envelope="upsert",
            key_columns=key_columns,  # type: ignore[arg-type]
            export_id="x",
            version=1,
        )
