"""The parts of an UPSERT tick's batch: one per partition, whatever attempts ran."""

from __future__ import annotations

from pathlib import Path

from timeshard.location import FileBlob
from timeshard.persist import PersistConfig
from timeshard.persist._internal.parts import PartMeta
from timeshard.storage.upsert_pass import PartsParam, written_parts

PREFIX = "out/w1/b1"


def part(blob: FileBlob, name: str) -> dict[str, object]:
    key = f"{PREFIX}/{name}.parquet"
    blob.set(key, b"x")
    return PartMeta(key, 1, 1, 0, 0).to_json()


def test_a_partition_written_twice_keeps_one_part_and_stray_files_go(tmp_path: Path) -> None:
    blob = FileBlob(tmp_path)
    first, again, other = part(blob, "p0-a"), part(blob, "p0-b"), part(blob, "p1")
    part(blob, "p2-failed-attempt")
    param = PartsParam()
    entries = param.zero([])
    for entry in [
        (PREFIX, 1, 0, other),
        (PREFIX, 0, 1, again),  # the partition's task ran again (a stage re-run)
        (PREFIX, 0, 0, first),
        (PREFIX, 3, 0, None),  # an empty partition
        ("out/w1/b0", 0, 0, None),  # another batch's entry
    ]:
        entries = param.addInPlace(entries, [entry])
    parts = written_parts(entries, blob, PREFIX, PersistConfig())
    assert [p.key for p in parts] == [first["key"], other["key"]]
    assert sorted(m.key for m in blob.list_keys(PREFIX + "/")) == [first["key"], other["key"]]
