"""A blob listing names only keys its ``get`` and ``delete`` accept.

A file something else put under the root with a name no key can have (``a b``),
or in a hidden directory (``s/.d/k``: hidden on a file blob, listed by the
pyarrow path), was listed as a key; ``get``/``delete`` of it then raised
InvalidUsage, so GC, which deletes the listed keys no state names, failed on
the shard. Likewise a temporary in such a directory: ``delete_temporary`` refused
the key ``list_temporaries`` gave.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from timeshard.location import FileBlob, open_blob
from timeshard.location.arrowfs import ArrowFsBlob

FOREIGN = ["s/w/b/a b", "s/w/.d/k", "s/.d/w/b/k", ".h/k", "s/w/c d/.tmp-00"]


def _put(blob: FileBlob | ArrowFsBlob, tmp_path: Path, path: str) -> None:
    """Write ``path`` under the blob's root as another program would."""
    if isinstance(blob, ArrowFsBlob) and blob.uri.startswith("mock:"):  # in memory
        blob.fs.create_dir(f"{blob.base}/{path.rpartition('/')[0]}", recursive=True)
        with blob.fs.open_output_stream(f"{blob.base}/{path}") as f:
            f.write(b"foreign")
        return
    (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / path).write_bytes(b"foreign")


@pytest.fixture(params=["file", "arrowfs+file", "arrowfs+mock"])
def blob(request: pytest.FixtureRequest, tmp_path: Path) -> FileBlob | ArrowFsBlob:
    if request.param == "file":
        return FileBlob(tmp_path)
    opened = open_blob(f"{request.param}://{tmp_path}")
    assert isinstance(opened, ArrowFsBlob)
    return opened


def test_only_keys_are_listed(blob: FileBlob | ArrowFsBlob, tmp_path: Path) -> None:
    blob.set("s/w/b/part-0", b"p")
    for path in FOREIGN:
        _put(blob, tmp_path, path)
    listed = [m.key for m in blob.list_keys("")]
    assert listed == ["s/w/b/part-0"]
    for key in listed:
        assert blob.get(key) == b"p"
    assert [m.key for m in blob.list_temporaries("")] == []
    assert blob.delete("s/w/b/part-0") == 1
