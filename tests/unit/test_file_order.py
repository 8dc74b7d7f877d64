"""The order of a FILE source's records, without Spark.

Records are ordered by (reclocked time, file name as UTF-8 bytes, offset):
verify's own model (:func:`timeshard.verify.replay.last_values`) and
reclocking (:func:`timeshard.verify.replay.bound_time`), and the pyarrow
upsert given ``(file, offset)`` orders, all follow it; the pyarrow upsert is
compared with verify's model on random files and bindings.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

from timeshard.errors import InvalidUsage
from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient, PersistConfig
from timeshard.storage import FeedbackUpsert, UpsertCommand
from timeshard.storage.file_read import _split_lines
from timeshard.storage.file_source import FileSource, file_offsets
from timeshard.verify.replay import (
    AMBIGUOUS,
    binding_intervals,
    bound_time,
    framed_lines,
    last_values,
)

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])


def rec(
    partition: str, offset: int, bt: int, v: Any = None, err: str | None = None
) -> dict[str, Any]:
    return {"_partition": partition, "_offset": offset, "_bt": bt, "v": v, "_err": err}


def test_at_one_time_the_later_file_wins_whatever_the_offset() -> None:
    records = [rec("b.jsonl", 0, 5, 2), rec("a.jsonl", 90, 5, 1)]
    assert last_values(records, ["v"], [4, 5, 6], collapsed=0) == [
        (4, None),
        (5, (2, None)),
        (6, (2, None)),
    ]


def test_equal_offsets_compare_file_names_as_utf8_bytes() -> None:
    names = ["a-b.jsonl", "a/b.jsonl", "a.jsonl", "Z.jsonl", "é.jsonl", "z.jsonl"]
    assert sorted(names, key=lambda n: n.encode()) == [
        "Z.jsonl",
        "a-b.jsonl",
        "a.jsonl",
        "a/b.jsonl",
        "z.jsonl",
        "é.jsonl",
    ]
    for perm in ([0, 1, 2], [2, 1, 0], [1, 0, 2]):
        trio = [names[i] for i in perm]
        records = [rec(n, 7, 3, i) for i, n in enumerate(trio)]
        [(_, state)] = last_values(records, ["v"], [3], collapsed=0)
        assert isinstance(state, tuple) and trio[state[0]] == "a/b.jsonl"
    records = [rec(n, 0, 1, i) for i, n in enumerate(names)]
    assert last_values(records, ["v"], [1], collapsed=0) == [(1, (names.index("é.jsonl"), None))]


def test_time_comes_first_then_deletes_and_errors() -> None:
    records = [
        rec("z", 50, 1, 1),
        rec("a", 0, 2, 2),  # a later time beats a later file and offset
        rec("a", 10, 3, None),  # all values null: a delete
        rec("b", 0, 4, None, err="b@0: ValueError: bad"),
        rec("a", 20, 5, 5),
    ]
    assert last_values(records, ["v"], [0, 1, 2, 3, 4, 5], collapsed=0) == [
        (0, None),
        (1, (1, None)),
        (2, (2, None)),
        (3, None),
        (4, (None, "b@0: ValueError: bad")),
        (5, (5, None)),
    ]


def test_at_the_collapsed_time_each_files_last_record_competes() -> None:
    differ = [rec("a", 0, 5, 1), rec("a", 10, 5, 2), rec("b", 0, 5, 3), rec("b", 9, 7, 4)]
    assert last_values(differ, ["v"], [5, 7], collapsed=5) == [(5, AMBIGUOUS), (7, (4, None))]
    agree = [rec("a", 0, 5, 1), rec("a", 10, 5, 3), rec("b", 0, 5, 3)]
    assert last_values(agree, ["v"], [5], collapsed=5) == [(5, (3, None))]


def test_a_null_value_deletes_whatever_the_metadata_columns_hold() -> None:
    put = {**rec("p", 0, 1, v=5), "offset": 0}
    tombstone = {**rec("p", 1, 2), "offset": 1}
    states = last_values([put, tombstone], ["v", "offset"], [1, 2], None, metadata=["offset"])
    assert states == [(1, (5, 0, None)), (2, None)]


def test_bound_time_is_the_first_binding_beyond_the_record() -> None:
    bindings = [(5, {"a": 10}), (7, {"a": 10, "b": 4}), (9, {"a": 30, "b": 4})]
    spans = binding_intervals(bindings)
    assert [bound_time(spans, "a", o) for o in (0, 9, 10, 29, 30)] == [5, 5, 9, 9, None]
    assert [bound_time(spans, "b", o) for o in (0, 3, 4)] == [7, 7, None]
    assert bound_time(spans, "c", 0) is None


def test_verify_frames_lines_itself() -> None:
    data = b"ab\n" + b"x" * 5 + b"\n" + b"y" * 6 + b"\n\nz"
    lines = [(0, b"ab", 2), (3, b"xxxxx", 5), (9, None, 6), (16, b"", 0), (17, b"z", 1)]
    assert list(framed_lines(io.BytesIO(data), len(data), max_line_bytes=5)) == lines
    assert list(framed_lines(io.BytesIO(data), 17, max_line_bytes=5)) == lines[:-1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 12), max_size=12), st.integers(1, 8))
def test_verify_framing_agrees_with_the_sources(lengths: list[int], limit: int) -> None:
    data = b"".join(bytes([97 + i % 26]) * n + b"\n" for i, n in enumerate(lengths))
    mine = list(framed_lines(io.BytesIO(data), len(data), limit))
    theirs = list(_split_lines(io.BytesIO(data), "f", 0, len(data), limit))
    assert mine == theirs


def test_directory_listing_is_in_file_order(tmp_path: Path) -> None:
    for name in ["a/b.jsonl", "a.jsonl", "a-b.jsonl"]:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"x\n")
    source = FileSource("f", tmp_path, "text")
    assert list(file_offsets(source.upper())) == ["a-b.jsonl", "a.jsonl", "a/b.jsonl"]


def test_a_range_that_does_not_start_after_a_line_end_is_refused() -> None:
    """The bytes bound earlier ended at a line's end: a file rewritten under them is
    told, not read from inside a line (here 20 bytes were bound before the rewrite)."""
    rewritten = b'{"id": 9}\n{"id": 10, "x": 1}\n{"id": 11}\n'
    with pytest.raises(InvalidUsage, match="no line end at byte 19"):
        list(_split_lines(io.BytesIO(rewritten), "a.json", 20, len(rewritten), 1 << 20))
    appended = b'{"id": 1}\n{"id": 2}\n{"id": 3}\n'
    assert [o for o, _, _ in _split_lines(io.BytesIO(appended), "a.json", 20, 30, 99)] == [20]


def test_hidden_names_are_not_read_and_a_name_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    for name in ["x.jsonl", ".part.jsonl", "_SUCCESS", "_temporary/0/part-0.jsonl", ".d/y"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x\n")
    source = FileSource("f", tmp_path, "text")
    assert list(file_offsets(source.upper())) == ["x.jsonl"]
    (tmp_path / os.fsdecode(b"bad-\xff.txt")).write_bytes(b"x\n")
    with pytest.raises(InvalidUsage, match=r"bad-.*is not UTF-8"):
        source.upper()


def test_a_directory_that_cannot_be_listed_fails_the_listing_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a source without that directory's files (``Path.rglob`` swallowed the error).

    The tests run as root, whom chmod does not stop: ``os.scandir`` is made to
    refuse the directory as it refuses another user.
    """
    for name in ["sub_ok/a.json", "sub_locked/b.json", "_hidden_locked/c.json"]:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"{}\n")
    scandir = os.scandir

    def refusing(path: Any) -> Any:
        if os.path.basename(path).endswith("_locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)
    source = FileSource("f", tmp_path, "text")
    with pytest.raises(PermissionError, match=r"sub_locked"):
        source.upper()
    (tmp_path / "sub_locked" / "b.json").unlink()
    (tmp_path / "sub_locked").rmdir()
    assert file_offsets(source.upper()) == {"sub_ok/a.json": 3}  # a hidden directory is not listed


def test_a_file_or_directory_removed_after_the_listing_is_not_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Removed between the listing and its stat (a cleanup job): the upper is the one
    a listing after the removal gives, and the tick does not fail."""
    for name in ["a.json", "b.json", "d/c.json", "e/f.json"]:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"{}\n")
    source = FileSource("f", tmp_path, "text")
    listed = FileSource._files

    def removing(self: FileSource) -> list[Path]:
        files = listed(self)
        (tmp_path / "a.json").unlink()
        return files

    monkeypatch.setattr(FileSource, "_files", removing)
    assert file_offsets(source.upper()) == {"b.json": 3, "d/c.json": 3, "e/f.json": 3}
    monkeypatch.undo()
    scandir = os.scandir

    def removing_d(path: Any) -> Any:
        with scandir(path) as listing:
            entries = list(listing)
        if Path(path) == tmp_path:
            (tmp_path / "d" / "c.json").unlink()
            (tmp_path / "d").rmdir()
        return contextlib.nullcontext(entries)

    monkeypatch.setattr(os, "scandir", removing_d)
    assert file_offsets(source.upper()) == {"b.json": 3, "e/f.json": 3}


def test_a_path_that_does_not_exist_is_an_error_not_a_source_without_data(
    tmp_path: Path,
) -> None:
    source = FileSource("f", tmp_path / "nonexistent", "text")  # a spec is checked before
    with pytest.raises(InvalidUsage, match="nonexistent"):
        source.upper()
    (tmp_path / "nonexistent").mkdir()
    assert file_offsets(source.upper()) == {}


def client() -> PersistClient:
    return PersistClient(Location(MemoryBlob(), MemoryConsensus()), PersistConfig(backoff_ms=0.0))


def test_pyarrow_upsert_equal_offsets_in_two_files_any_command_order() -> None:
    for flip in (False, True):
        c = client()
        hold = c.open_leased_reader("out", SCHEMA)
        cmds = [
            UpsertCommand(("k",), (1,), 3, ("b.jsonl", 0)),
            UpsertCommand(("k",), (2,), 3, ("a.jsonl", 0)),
            UpsertCommand(("k",), (3,), 3, ("a.jsonl", 40)),
        ]
        FeedbackUpsert(c, "out", SCHEMA, ["k"]).apply(cmds[::-1] if flip else cmds, 4)
        assert [(r["k"], r["v"]) for r in hold.snapshot(3).to_pylist()] == [("k", 1)]


def test_pyarrow_upsert_rejects_two_commands_at_one_position() -> None:
    upsert = FeedbackUpsert(client(), "out", SCHEMA, ["k"])
    same = UpsertCommand(("k",), (1,), 3, ("a.jsonl", 0))
    upsert.apply([same, same], 4)  # the same command twice is one command
    other = UpsertCommand(("k",), (2,), 4, ("a.jsonl", 0))
    with pytest.raises(InvalidUsage, match="two different upsert commands at one position"):
        upsert.apply([UpsertCommand(("k",), (1,), 4, ("a.jsonl", 0)), other], 5)


files = st.lists(
    st.tuples(
        st.sampled_from(["a.jsonl", "b.jsonl", "a/c.jsonl"]),
        st.sampled_from(["x", "y"]),
        st.one_of(st.none(), st.integers(0, 5)),
    ),
    max_size=25,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files, st.lists(st.integers(0, 6), min_size=1, max_size=6), st.randoms())
def test_pyarrow_upsert_agrees_with_verifys_model(
    lines: list[tuple[str, str, int | None]], ticks: list[int], rnd: random.Random
) -> None:
    """Records of three files (equal offsets across files), bound by random ticks."""
    offsets: dict[str, int] = {}
    records: list[dict[str, Any]] = []
    for name, key, v in lines:  # 8-byte lines: offsets collide across files
        offset = offsets.get(name, 0)
        offsets[name] = offset + 8
        records.append({"_partition": name, "_offset": offset, "k": key, "v": v, "_err": None})
    rnd.shuffle(records)
    bindings: list[tuple[int, dict[str, int]]] = []
    bound: dict[str, int] = {}
    t = 0
    for i, n in enumerate([*ticks, len(records)]):
        t += 1
        for r in records[i * 3 : i * 3 + n]:  # each tick binds a few more lines of some files
            bound[r["_partition"]] = max(bound.get(r["_partition"], 0), r["_offset"] + 8)
        bindings.append((t, dict(bound)))
    bindings.append((t + 1, dict(offsets)))
    spans = binding_intervals(bindings)
    for r in records:
        r["_bt"] = bound_time(spans, r["_partition"], r["_offset"])
    c = client()
    hold = c.open_leased_reader("out", SCHEMA)
    cmds = [
        UpsertCommand(
            (r["k"],),
            None if r["v"] is None else (r["v"],),
            r["_bt"],
            (r["_partition"], r["_offset"]),
        )
        for r in records
    ]
    upper = t + 2
    FeedbackUpsert(c, "out", SCHEMA, ["k"]).apply(cmds, upper)
    times = list(range(upper))
    for key in ["x", "y"]:
        mine = [r for r in records if r["k"] == key]
        want = last_values(mine, ["v"], times, collapsed=0)
        for at, state in want:
            got = [(r["v"], r["_err"]) for r in hold.snapshot(at).to_pylist() if r["k"] == key]
            assert got == ([] if state is None else [state]), (key, at)
