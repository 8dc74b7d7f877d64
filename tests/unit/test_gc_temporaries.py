"""GC collects the hidden temporaries (``.tmp-...``) of part writes that never finished.

A Spark task (or a ``FileBlob.set``) killed between creating its temporary file and
moving it into place leaves the temporary behind; no blob listing names it. GC deletes
one that is surely abandoned: its writer is gone, or the write it belonged to has
returned (a part under its batch prefix is named by a state). One under a live writer's
batch prefix that no state names yet may still be filling: it stays.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.location.arrowfs import ArrowFsBlob
from timeshard.location.file import FileBlob
from timeshard.persist import PersistClient, PersistConfig
from timeshard.persist.config import wall_clock_ms

SCHEMA = pa.schema([("k", pa.int64())])


def _temporary(root: Path, prefix: str) -> Path:
    path = root / prefix / ".tmp-0123456789abcdef0123456789abcdef"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"PAR1 half a part")
    return path


def test_gc_deletes_the_temporaries_of_writers_that_are_gone(tmp_path: Path) -> None:
    now = {"ms": wall_clock_ms()}
    config = PersistConfig(clock=lambda: now["ms"], heartbeat_interval_ms=0)
    location = Location.embedded(tmp_path)
    client = PersistClient(location, config)
    writer, _ = client.open("s", SCHEMA)
    writer.append([((1,), 0, 1)], 0, 1)
    dead = client.open_writer("s")
    root = tmp_path / "blob"
    left_by_dead = _temporary(root, f"s/{dead.writer_id}/b0")
    filling = _temporary(root, f"s/{writer.writer_id}/b1")  # a live write, not returned yet
    [appended] = client.state("s").referenced_keys()
    after_return = _temporary(root, appended.rpartition("/")[0])  # the write returned

    client.gc("s")  # nobody expired yet: only the temporary of the returned write goes
    assert left_by_dead.exists() and filling.exists()
    assert not after_return.exists()

    now["ms"] += 10 * config.writer_lease_ms
    writer.heartbeat()  # the live writer renews its lease; the dead one cannot
    report = client.gc("s")
    assert dead.writer_id in report.expired
    assert not left_by_dead.exists()
    assert filling.exists()
    assert report.deleted_temporaries == 1


@pytest.mark.parametrize("kind", ["file", "arrowfs"])
def test_blobs_list_and_delete_their_temporaries(tmp_path: Path, kind: str) -> None:
    blob = FileBlob(tmp_path) if kind == "file" else ArrowFsBlob(tmp_path.as_uri())
    blob.set("s/w/b/part-0.parquet", b"x")
    tmp = _temporary(tmp_path, "s/w/b")
    _temporary(tmp_path, "t/w/b")
    key = f"s/w/b/{tmp.name}"
    assert [(m.key, m.size_in_bytes) for m in blob.list_temporaries("s/")] == [(key, 16)]
    assert [m.key for m in blob.list_keys("s/")] == ["s/w/b/part-0.parquet"]
    assert blob.delete_temporary(key) == 16
    assert blob.delete_temporary(key) is None
    assert not tmp.exists()
    for bad in ["s/w/b/part-0.parquet", "../x/.tmp-00", "s/w/b/.tmp-../../x", ".tmp-00"]:
        with pytest.raises(InvalidUsage, match="temporary"):
            blob.delete_temporary(bad)
    assert blob.get("s/w/b/part-0.parquet") == b"x"
