"""GC collects abandoned temporaries through every blob wrapper.

The unreliable blob and the nemesis's blobs wrap a file blob; GC lists and
deletes temporaries only on a blob that has ``list_temporaries`` and
``delete_temporary``, so each wrapper passes them on (the unreliable one with
the faults of its ``list_keys`` and ``delete``). A wrapper over a blob without
temporaries (the memory blob) lists none.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from timeshard.errors import Determinate, Indeterminate
from timeshard.location import (
    Location,
    MemoryBlob,
    MemoryConsensus,
    SqliteConsensus,
    UnreliableBlob,
)
from timeshard.location.blob import Blob, Temporaries
from timeshard.location.file import FileBlob
from timeshard.nemesis.control import FaultyLocation, FullDiskBlob
from timeshard.persist import PersistClient, PersistConfig

SCHEMA = pa.schema([("k", pa.int64())])
TMP = ".tmp-0123456789abcdef0123456789abcdef"

WRAPPERS: dict[str, Callable[[Blob], Blob]] = {
    "unreliable": lambda inner: UnreliableBlob(inner, seed=0, fail_rate=0.0, timeout_rate=0.0),
    "full_disk": FullDiskBlob,
    "faulty_location": lambda inner: (
        FaultyLocation(Location(inner, MemoryConsensus()), seed="s").blob
    ),
}


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
def test_gc_deletes_temporaries_through_a_wrapper(tmp_path: Path, wrapper: str) -> None:
    blob = WRAPPERS[wrapper](FileBlob(tmp_path / "blob"))
    client = PersistClient(
        Location(blob, SqliteConsensus(tmp_path / "consensus.sqlite")), PersistConfig()
    )
    writer, _ = client.open("s", SCHEMA)
    writer.append([((1,), 0, 1)], 0, 1)
    [appended] = client.state("s").referenced_keys()
    left = tmp_path / "blob" / appended.rpartition("/")[0] / TMP  # its write returned
    left.write_bytes(b"PAR1 half a part")

    report = client.gc("s")

    assert not left.exists()
    assert report.deleted_temporaries == 1


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
def test_a_wrapper_over_a_blob_without_temporaries_lists_none(wrapper: str) -> None:
    blob = WRAPPERS[wrapper](MemoryBlob())
    blob.set("s/w/b/part-0.parquet", b"x")
    assert isinstance(blob, Temporaries)
    assert list(blob.list_temporaries("s/")) == []
    assert blob.delete_temporary(f"s/w/b/{TMP}") is None


def test_the_unreliable_blob_injects_faults_into_temporaries(tmp_path: Path) -> None:
    inner = FileBlob(tmp_path)
    (tmp_path / "s" / "w" / "b").mkdir(parents=True)
    (tmp_path / "s" / "w" / "b" / TMP).write_bytes(b"x")
    key = f"s/w/b/{TMP}"
    failing = UnreliableBlob(inner, seed=0, fail_rate=1.0, timeout_rate=0.0)
    with pytest.raises(Determinate, match="list"):
        failing.list_temporaries("s/")
    with pytest.raises(Determinate, match="delete"):
        failing.delete_temporary(key)
    assert (tmp_path / key).exists()  # a determinate failure never reached the blob
    timing_out = UnreliableBlob(inner, seed=0, fail_rate=0.0, timeout_rate=1.0)
    with pytest.raises(Indeterminate, match="list"):
        timing_out.list_temporaries("s/")
    with pytest.raises(Indeterminate, match="delete"):
        timing_out.delete_temporary(key)
    assert not (tmp_path / key).exists()  # a timed-out delete was applied
    assert failing.injected["determinate"] == 2
    assert timing_out.injected["indeterminate"] == 2
