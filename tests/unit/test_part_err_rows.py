"""Err row counts in part metadata: every writer records them, the state keeps them.

A part's ``err_rows`` is compared with its decoded rows; states from before
the count existed decode as "not recorded", and a malformed count is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient, PersistConfig
from timeshard.persist._internal import parts as parts_module
from timeshard.persist._internal.parts import PartMeta, updates_schema
from timeshard.spark.parts import part_from_row, part_meta_batch, write_part_file

SCHEMA = pa.schema([("k", pa.string())])


def make_client() -> PersistClient:
    config = PersistConfig(backoff_ms=0.0, heartbeat_interval_ms=0)
    return PersistClient(Location(MemoryBlob(), MemoryConsensus()), config)


def table(rows: list[tuple[str | None, int, int, str | None]]) -> pa.Table:
    """``(k, _ts, _diff, _err)`` rows as a part's table."""
    return pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.string()),
            "_ts": pa.array([r[1] for r in rows], pa.int64()),
            "_diff": pa.array([r[2] for r in rows], pa.int64()),
            "_err": pa.array([r[3] for r in rows], pa.string()),
        }
    )


def decoded_errs(client: PersistClient, part: PartMeta) -> int:
    data = client.location.blob.get(part.key)
    assert data is not None
    decoded = parts_module.decode_part(part.key, data, SCHEMA)
    return sum(e is not None for e in decoded.column("_err").to_pylist())


def test_driver_writes_and_compaction_record_err_rows() -> None:
    client = make_client()
    writer = client.open_writer("s", SCHEMA)
    writer.append(table([("a", 0, 1, None), ("b", 0, 1, None)]), 0, 1)
    bad = [(None, 1, 1, "cannot decode record 7"), ("c", 1, 1, None), (None, 1, 1, "again")]
    writer.append(table(bad), 1, 2)
    writer.append(table([(None, 2, -1, "again")]), 2, 3)  # the second err row retracted
    parts = [p for b in client.state("s").batches for p in b.parts]
    assert [p.err_rows for p in parts] == [0, 2, 1]
    assert [p.may_hold_errors for p in parts] == [False, True, True]
    for part in parts:
        assert part.err_rows == decoded_errs(client, part)
    # The parts compaction writes record theirs too.
    reader = client.open_leased_reader("s")
    reader.downgrade_since(2)
    assert writer.compact() > 0
    compacted = [p for b in client.state("s").batches for p in b.parts]
    assert {p.key for p in compacted} - {p.key for p in parts}
    assert [p.err_rows for p in compacted] == [decoded_errs(client, p) for p in compacted]


def test_a_part_without_rows_or_errors_holds_none_and_an_unrecorded_one_may() -> None:
    assert not PartMeta("p", 10, 0).may_hold_errors  # no row at all
    assert not PartMeta("p", 10, 5, err_rows=0).may_hold_errors
    assert PartMeta("p", 10, 5, err_rows=1).may_hold_errors
    assert PartMeta("p", 10, 5).may_hold_errors  # not recorded: it may


def test_err_rows_round_trip_and_older_states_decode_as_not_recorded() -> None:
    part = PartMeta("b/p.parquet", 10, 5, 0, 3, times=(0, 3), err_rows=2)
    doc = part.to_json()
    assert doc["err_rows"] == 2
    assert PartMeta.from_json(json.loads(json.dumps(doc))) == part
    del doc["err_rows"]  # as a writer from before the count existed stored it
    older = PartMeta.from_json(doc)
    assert older.err_rows is None and older.may_hold_errors
    assert "err_rows" not in older.to_json()


@pytest.mark.parametrize("value", [-1, 6, True, "2", 1.0])
def test_a_malformed_err_row_count_is_refused_naming_the_part(value: object) -> None:
    doc = PartMeta("b/p.parquet", 10, 5, 0, 3).to_json() | {"err_rows": value}
    with pytest.raises((ValueError, TypeError), match=r"b/p\.parquet"):
        PartMeta.from_json(doc)


def test_a_task_part_records_its_err_rows_and_the_driver_gets_them_back(tmp_path: Path) -> None:
    schema = updates_schema(SCHEMA)
    first = table([("a", 0, 1, None), (None, 0, 1, "bad")]).cast(schema)
    second = table([(None, 1, 1, "worse"), (None, 1, -1, "bad")]).cast(schema)
    part = write_part_file(tmp_path.as_uri(), "b/part-0.parquet", schema, [first, second])
    assert part is not None
    assert (part.num_rows, part.err_rows) == (4, 3)
    errs = pq.read_table(tmp_path / "b/part-0.parquet").column("_err").null_count
    assert part.num_rows - errs == part.err_rows
    [row] = part_meta_batch([part]).to_pylist()
    assert part_from_row(row) == part
