"""A Delta export's task through delta-rs, without Spark: the task is called with the tick's
consolidated changes as the Spark job would give them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.persist._internal.parts import DIFF, ERR, TS
from timeshard.storage.delta_export import DeltaExport
from timeshard.storage.export import Progress

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])


def export(
    tmp_path: Path, schema: pa.Schema = SCHEMA, *, key_columns: tuple[str, ...] = ("k",), **kw: Any
) -> DeltaExport:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    client.open_writer("s", schema).expire()
    return DeltaExport(
        None, client, "s", str(tmp_path / "delta"), key_columns=list(key_columns), **kw
    )


def tick(export: DeltaExport, upper: int, rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    """Run the task from the table's progress to ``upper`` on ``rows`` (data columns, time,
    diff[, err]), sorted as the Spark job sorts them (by key, then time)."""
    progress = export.progress()
    lower = 0 if progress is None else progress.frontier
    data = list(export.reader.schema)
    names = [f.name for f in data] + [TS, DIFF, ERR]
    keyed = [names.index(k) for k in export.key_columns] + [len(data)]
    rows = sorted(rows, key=lambda r: tuple((r[i] is not None, r[i]) for i in keyed))
    batch = pa.RecordBatch.from_pylist(
        [dict(zip(names, (*r, None)[: len(names)], strict=True)) for r in rows],
        schema=pa.schema([*data, (TS, pa.int64()), (DIFF, pa.int64()), (ERR, pa.string())]),
    )
    [out] = [b.to_pylist()[0] for b in export._task(lower, upper)([batch])]
    return out


def table(export: DeltaExport) -> list[dict[str, Any]]:
    rows = DeltaTable(export.table_uri).to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda r: tuple((v is not None, v) for v in r.values()))


def test_a_key_of_several_columns_merges(tmp_path: Path) -> None:
    """The MERGE predicate joined the columns' comparisons with AND unparenthesised, which
    DataFusion parses as ``t.k IS NOT DISTINCT FROM (s.k AND t.j) ...``: every tick of a
    key of two columns failed planning (a fault, retried for ever)."""
    schema = pa.schema([("k", pa.string()), ("j", pa.int32()), ("v", pa.int64())])
    e = export(tmp_path, schema, key_columns=("k", "j"))
    assert (
        tick(e, 1, [("a", 1, 10, 0, 1), ("a", 2, 20, 0, 1), (None, None, 5, 0, 1)])["status"]
        == "committed"
    )
    done = tick(e, 2, [("a", 1, 10, 1, -1), ("a", 1, 11, 1, 1), ("a", 2, 20, 1, -1)])
    assert done["status"] == "committed"
    assert table(e) == [
        {"k": None, "j": None, "v": 5},
        {"k": "a", "j": 1, "v": 11},
    ]


def test_a_second_row_of_a_key_in_a_later_tick_is_an_error(tmp_path: Path) -> None:
    """The MERGE saw only the tick's changes: a key's second row in a later tick replaced the
    first in the table (the shard holds both), and retracting either deleted the key."""
    e = export(tmp_path)
    assert tick(e, 1, [("a", 1, 0, 1), ("b", 1, 0, 1), (None, 3, 0, 1)])["status"] == "committed"
    for rows in ([("a", 2, 1, 1)], [(None, 4, 1, 1)]):
        second = tick(e, 2, rows)
        assert second["status"] == "error", second
        assert "already has a row" in second["detail"]
        assert "two rows of that key" in second["detail"]
    assert e.progress().frontier == 1  # type: ignore[union-attr]
    assert table(e) == [{"k": None, "v": 3}, {"k": "a", "v": 1}, {"k": "b", "v": 1}]
    # The shard retracts the second row: the tick goes on.
    assert tick(e, 3, [("a", 2, 1, 1), ("a", 2, 2, -1), ("c", 1, 2, 1)])["status"] == "committed"
    assert table(e) == [
        {"k": None, "v": 3},
        {"k": "a", "v": 1},
        {"k": "b", "v": 1},
        {"k": "c", "v": 1},
    ]


def test_a_change_of_a_row_the_table_lacks_is_an_error(tmp_path: Path) -> None:
    """A key deleted from the table outside the export: its update or delete hit nothing."""
    e = export(tmp_path)
    assert tick(e, 1, [("a", 1, 0, 1), ("b", 1, 0, 1)])["status"] == "committed"
    DeltaTable(e.table_uri).delete("k = 'a'")
    for rows in ([("a", 1, 1, -1)], [("a", 1, 1, -1), ("a", 2, 1, 1)]):
        out = tick(e, 2, rows)
        assert out["status"] == "error" and "has 0 rows of it" in out["detail"], out
    assert tick(e, 2, [("b", 1, 1, -1)])["status"] == "committed"
    assert table(e) == []


def test_keys_of_many_types_are_found_in_the_table(tmp_path: Path) -> None:
    """The table's rows of the changed keys are looked up by a filter where the key's type
    allows one, and compared as Spark compares them (a NaN is one key)."""
    import datetime
    import decimal

    schema = pa.schema(
        [
            ("f", pa.float64()),
            ("d", pa.decimal128(10, 2)),
            ("t", pa.timestamp("us", tz="UTC")),
            ("v", pa.int64()),
        ]
    )
    e = export(tmp_path, schema, key_columns=("f", "d", "t"))
    at = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    one = decimal.Decimal("1.50")
    first = [(float("nan"), one, at, 1), (0.0, None, None, 2), (2.5, one, at, 3)]
    assert tick(e, 1, [(*r, 0, 1) for r in first])["status"] == "committed"
    again = tick(e, 2, [(float("nan"), one, at, 9, 1, 1)])
    assert again["status"] == "error" and "already has a row" in again["detail"]
    update = [(float("nan"), one, at, 1, 1, -1), (float("nan"), one, at, 4, 1, 1)]
    delete = [(-0.0, None, None, 2, 1, -1)]
    assert tick(e, 2, update + delete)["status"] == "committed"
    assert sorted(r["v"] for r in table(e)) == [3, 4]


def test_a_table_with_not_null_columns_deletes_and_refuses_a_null(tmp_path: Path) -> None:
    """A delete's MERGE source row has nulls in the columns it does not compare, which a
    NOT NULL table takes (they are never written). A null the table cannot hold follows from
    the data: it raised delta-rs' DeltaError, retried as a fault for ever."""
    strict = pa.schema([pa.field(f.name, f.type, nullable=False) for f in SCHEMA])
    DeltaTable.create(str(tmp_path / "delta"), schema=strict)
    e = export(tmp_path)
    assert tick(e, 1, [("a", 1, 0, 1), ("b", 2, 0, 1)])["status"] == "committed"
    assert tick(e, 2, [("a", 1, 1, -1), ("b", 2, 1, -1), ("b", 3, 1, 1)])["status"] == "committed"
    assert table(e) == [{"k": "b", "v": 3}]
    out = tick(e, 3, [("c", None, 2, 1)])
    assert out["status"] == "error", out
    assert "refused a row" in out["detail"] and "Invalid data found" in out["detail"]
    assert e.progress().frontier == 2  # type: ignore[union-attr]
    DeltaTable.create(
        str(tmp_path / "log"),
        schema=pa.schema([*strict, pa.field(TS, pa.int64(), False), pa.field(DIFF, pa.int64())]),
    )
    appended = DeltaExport(
        None, e.client, "s", str(tmp_path / "log"), envelope="append", export_id="history"
    )
    out = tick(appended, 1, [(None, 1, 0, 1)])
    assert out["status"] == "error" and "refused a row" in out["detail"], out


def test_an_export_declared_again_otherwise_does_not_go_on_from_its_progress(
    tmp_path: Path,
) -> None:
    """The table's progress said only how far, not how the rows were written: an upsert
    declared over an append's table (or with other key columns) went on from its progress,
    MERGEing into a history of changes."""
    history = export(tmp_path, envelope="append", key_columns=(), export_id="x")
    history.hold  # noqa: B018 (registers the export's hold, as its first step does)
    assert tick(history, 1, [("a", 1, 0, 1)])["status"] == "committed"
    with pytest.raises(InvalidUsage) as refused:
        DeltaExport(
            None, history.client, "s", history.table_uri, key_columns=["k"], export_id="x"
        ).step()
    assert "written with envelope 'append', key columns []" in str(refused.value)
    assert "not with envelope 'upsert', key columns ['k']" in str(refused.value)
    assert history.progress() == Progress(1, 1, None, "envelope 'append', key columns []")
    assert history.step().status == "idle"  # declared as before: it goes on


def test_an_upsert_declared_with_other_keys_does_not_go_on(tmp_path: Path) -> None:
    e = export(tmp_path, export_id="x")
    e.hold  # noqa: B018
    assert tick(e, 1, [("a", 1, 0, 1)])["status"] == "committed"
    other = DeltaExport(None, e.client, "s", e.table_uri, key_columns=["k", "v"], export_id="x")
    with pytest.raises(InvalidUsage, match=r"key columns \['k'\], not with .* \['k', 'v'\]"):
        other.step()


def test_a_table_whose_column_types_differ_is_refused(tmp_path: Path) -> None:
    """The MERGE cast the shard's values to the table's types: an int64 column written into
    a string one became text, silently."""
    DeltaTable.create(
        str(tmp_path / "delta"), schema=pa.schema([("k", pa.string()), ("v", pa.string())])
    )
    with pytest.raises(InvalidUsage, match=r"other types .*'v': \('PrimitiveType\(\"string\"\)'"):
        export(tmp_path)
    strict = pa.schema([pa.field(f.name, f.type, nullable=False) for f in SCHEMA])
    DeltaTable.create(str(tmp_path / "same"), schema=strict)
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    DeltaExport(None, client, "s", str(tmp_path / "same"), key_columns=["k"]).close()


@pytest.mark.parametrize(
    ("kind", "keys"),
    [
        (pa.struct([("a", pa.int64()), ("b", pa.string())]), [{"a": 1, "b": "x"}, None]),
        (pa.list_(pa.int64()), [[1, 2], [3]]),
    ],
    ids=["struct", "list"],
)
def test_a_key_of_a_nested_type_is_looked_up(tmp_path: Path, kind: pa.DataType, keys: Any) -> None:
    """The lookup of the changed keys' rows put every key column's values in a set to prune
    the table's files: a struct or list key raised TypeError (unhashable) in every tick, a
    fault retried for ever."""
    e = export(tmp_path, pa.schema([("k", kind), ("v", pa.int64())]))

    def tick_unsorted(upper: int, rows: list[tuple[Any, ...]]) -> dict[str, Any]:
        progress = e.progress()
        lower = 0 if progress is None else progress.frontier
        names = ["k", "v", TS, DIFF, ERR]
        schema = pa.schema(
            [*e.reader.schema, (TS, pa.int64()), (DIFF, pa.int64()), (ERR, pa.string())]
        )
        batch = pa.RecordBatch.from_pylist(
            [dict(zip(names, (*r, None), strict=True)) for r in rows], schema=schema
        )
        [out] = [b.to_pylist()[0] for b in e._task(lower, upper)([batch])]
        return out

    first, second = keys
    assert tick_unsorted(1, [(first, 1, 0, 1), (second, 2, 0, 1)])["status"] == "committed"
    assert tick_unsorted(2, [(first, 1, 1, -1), (first, 10, 1, 1)])["status"] == "committed"
    again = tick_unsorted(3, [(first, 11, 2, 1)])
    assert again["status"] == "error" and "already has a row" in again["detail"], again
    assert sorted(r["v"] for r in table(e)) == [2, 10]


def test_the_same_key_columns_in_another_order_are_the_same_declaration(
    tmp_path: Path,
) -> None:
    """A table's rows keyed by (k, j) are keyed by (j, k): declaring them in the other
    order was refused as another declaration (the text compared them in order)."""
    schema = pa.schema([("k", pa.string()), ("j", pa.int32()), ("v", pa.int64())])
    first = export(tmp_path, schema, key_columns=("k", "j"))
    assert tick(first, 1, [("a", 1, 10, 0, 1)])["status"] == "committed"
    progress = first.progress()
    assert progress is not None and progress.declared is not None
    again = DeltaExport(
        None, first.client, "s", first.table_uri, key_columns=["j", "k"], export_id=first.export_id
    )
    again._check_declaration(progress)  # no InvalidUsage
    other = DeltaExport(
        None, first.client, "s", first.table_uri, key_columns=["k"], export_id=first.export_id
    )
    with pytest.raises(InvalidUsage, match="key columns"):
        other._check_declaration(progress)


def test_an_idle_tick_records_the_progress_without_spark(tmp_path: Path) -> None:
    """An input whose upper moves with no update (an idle source appends empty batches)
    ran one Spark job a tick to record the new progress: an idle pipeline's export cost a
    job a second. The tick has no change to write; its task runs on the driver."""
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("s", SCHEMA)
    e = DeltaExport(None, client, "s", str(tmp_path / "delta"), key_columns=["k"])
    writer.append([], 0, 3)
    step = e.step()  # Spark is None here: a Spark job would fail
    assert (step.lower, step.upper, step.records, step.status) == (0, 3, 0, "committed")
    assert e.progress() == Progress(3, 1, declared=e.declaration)
    writer.append([], 3, 5)
    assert e.step().status == "committed"
    assert e.progress().frontier == 5  # type: ignore[union-attr]
    assert client.state("s").critical_readers[f"export.{e.export_id}"].since.time == 4
    assert table(e) == []
    e.close()
    writer.expire()


def test_a_column_named_as_the_merge_delete_flag_is_exported(tmp_path: Path) -> None:
    """The MERGE source added its delete flag ``__timeshard_delete`` beside the shard's
    columns: a shard with a column of that name (a plain identifier, accepted) gave the
    source two columns of one name, and every tick failed (a fault, retried for ever)."""
    schema = pa.schema([("k", pa.string()), ("__timeshard_delete", pa.bool_())])
    e = export(tmp_path, schema)
    done = tick(e, 1, [("a", True, 0, 1), ("b", False, 0, 1)])
    assert done["status"] == "committed", done
    assert (
        tick(e, 2, [("a", True, 1, -1), ("b", False, 1, -1), ("b", True, 1, 1)])["status"]
        == "committed"
    )
    assert table(e) == [{"k": "b", "__timeshard_delete": True}]
