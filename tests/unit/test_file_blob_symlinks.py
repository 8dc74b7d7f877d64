"""A file blob's listing never follows a symbolic link out of its root.

A link under the root that points outside it (to a file or to a directory,
also one the listed prefix passes through) is no key of this blob: ``get``
refuses it, so listing it would name data the blob does not hold, and
skipping it would hide it. A listing whose prefix reaches such a link raises
CorruptState naming the key and the target. Links that stay inside the root
are listed as before; a listing that does not reach the link is unaffected.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from timeshard.errors import CorruptState, InvalidUsage
from timeshard.location import FileBlob

TMP = ".tmp-0123456789abcdef"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    (out / "d").mkdir(parents=True)
    (out / "f").write_bytes(b"secret")
    (out / "d" / "g").write_bytes(b"secret too")
    return out


def blob_with(tmp_path: Path, link: str, target: Path) -> FileBlob:
    blob = FileBlob(tmp_path / "root")
    blob.set("s/w/b/part-0", b"p")
    blob.set("t/w/b/part-0", b"q")
    (tmp_path / "root" / link).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "root" / link).symlink_to(target)
    return blob


@pytest.mark.parametrize("prefix", ["", "s", "s/", "s/w/", "s/w/l"])
@pytest.mark.parametrize("to", ["f", "d"])
def test_a_link_out_of_the_root_is_refused_by_listing(
    tmp_path: Path, outside: Path, prefix: str, to: str
) -> None:
    blob = blob_with(tmp_path, "s/w/link", outside / to)
    with pytest.raises(CorruptState) as e:
        list(blob.list_keys(prefix))
    assert "'s/w/link'" in str(e.value) and str((outside / to).resolve()) in str(e.value)
    assert [m.key for m in blob.list_keys("t/")] == ["t/w/b/part-0"]  # not reached
    assert [m.key for m in blob.list_keys("s/w/b")] == ["s/w/b/part-0"]


def test_a_prefix_through_a_link_out_of_the_root_is_refused(tmp_path: Path, outside: Path) -> None:
    blob = blob_with(tmp_path, "s/dlink", outside / "d")
    for prefix in ("s/dlink/", "s/dlink/g"):
        with pytest.raises(CorruptState, match="'s/dlink'"):
            list(blob.list_keys(prefix))
    with pytest.raises(InvalidUsage, match="escapes the blob root"):
        blob.get("s/dlink/g")


def test_a_temporary_linked_out_of_the_root_is_refused(tmp_path: Path, outside: Path) -> None:
    blob = blob_with(tmp_path, f"s/w/b/{TMP}", outside / "f")
    with pytest.raises(CorruptState, match=TMP):
        list(blob.list_temporaries("s/"))
    assert (outside / "f").read_bytes() == b"secret"


def test_links_inside_the_root_are_listed_as_before(tmp_path: Path) -> None:
    blob = blob_with(tmp_path, "s/w/b/part-1", Path("part-0"))
    (tmp_path / "root" / "s" / "gone").symlink_to(tmp_path / "root" / "nothing")
    (tmp_path / "root" / "s" / "dir").symlink_to(tmp_path / "root" / "t")
    listed = sorted((m.key, m.size_in_bytes) for m in blob.list_keys("s/"))
    assert listed == [("s/w/b/part-0", 1), ("s/w/b/part-1", 1)]
    assert blob.get("s/w/b/part-1") == b"p"
