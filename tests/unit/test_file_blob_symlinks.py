"""A file blob never follows a symbolic link out of its root, nor through a directory.

A link under the root that points outside it (to a file or to a directory,
also one the listed prefix passes through) is no key of this blob: ``get``
refuses it, so listing it would name data the blob does not hold, and
skipping it would hide it. A listing whose prefix reaches such a link raises
CorruptState naming the key and the target, and so do ``get``, ``set`` and
``delete``: the key is a valid argument, the link is state found on disk.
Links to files inside the root are keys (``delete`` removes the link, not its
target); a link to a directory inside the root is not descended, and a key or
prefix through it is refused, so every listed key is gettable and every key
``get`` serves is listed. Loops of links are refused, never followed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from timeshard.errors import CorruptState
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


def test_a_link_no_key_spells_is_not_listed_nor_checked(tmp_path: Path, outside: Path) -> None:
    """A file no key spells is not listed; neither is a link of such a name, even one out
    of the root: it is not a key of this blob, and GC's listing must not fail on it."""
    blob = blob_with(tmp_path, "s/w/bad name", outside / "f")
    assert [m.key for m in blob.list_keys("s/")] == ["s/w/b/part-0"]
    assert [m.key for m in blob.list_keys()] == ["s/w/b/part-0", "t/w/b/part-0"]


def test_a_prefix_through_a_link_out_of_the_root_is_refused(tmp_path: Path, outside: Path) -> None:
    blob = blob_with(tmp_path, "s/dlink", outside / "d")
    for prefix in ("s/dlink/", "s/dlink/g"):
        with pytest.raises(CorruptState, match="'s/dlink'"):
            list(blob.list_keys(prefix))
    for call in (blob.get, blob.delete, lambda k: blob.set(k, b"x")):
        with pytest.raises(CorruptState) as e:
            call("s/dlink/g")
        assert "'s/dlink/g'" in str(e.value) and str((outside / "d").resolve()) in str(e.value)
    assert (outside / "d" / "g").read_bytes() == b"secret too"
    assert sorted(p.name for p in (outside / "d").iterdir()) == ["g"]


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


def test_a_link_out_of_the_root_at_the_key_is_refused_by_every_operation(
    tmp_path: Path, outside: Path
) -> None:
    blob = blob_with(tmp_path, "s/w/b/part-1", outside / "f")
    for call in (blob.get, blob.delete, lambda k: blob.set(k, b"x")):
        with pytest.raises(CorruptState) as e:
            call("s/w/b/part-1")
        assert "'s/w/b/part-1'" in str(e.value) and str(outside / "f") in str(e.value)
    assert (outside / "f").read_bytes() == b"secret"


def _listed_and_served(blob: FileBlob, keys: list[str]) -> list[tuple[str, object]]:
    """What ``get`` answers for each of ``keys``: bytes, None or the error's class."""
    served: list[tuple[str, object]] = []
    for key in keys:
        try:
            served.append((key, blob.get(key)))
        except CorruptState:
            served.append((key, CorruptState))
    return served


def test_a_link_to_a_directory_inside_the_root_agrees_with_get(tmp_path: Path) -> None:
    blob = blob_with(tmp_path, "s/dir", tmp_path / "root" / "t")
    listed = [m.key for m in blob.list_keys("")]
    assert sorted(listed) == ["s/w/b/part-0", "t/w/b/part-0"]  # each file once
    assert all(blob.get(key) is not None for key in listed)
    # A key below the link is refused, not served unlisted, nor written or deleted there.
    assert _listed_and_served(blob, ["s/dir/w/b/part-0", "s/dir/new"]) == [
        ("s/dir/w/b/part-0", CorruptState),
        ("s/dir/new", CorruptState),
    ]
    for call in (blob.delete, lambda k: blob.set(k, b"x")):
        with pytest.raises(CorruptState, match="passes through the symbolic link 's/dir'"):
            call("s/dir/w/b/part-0")
    with pytest.raises(CorruptState, match="'s/dir'"):
        blob.set("s/dir/new", b"x")
    for prefix in ("s/dir/", "s/dir/w/"):
        with pytest.raises(CorruptState, match="'s/dir'"):
            list(blob.list_keys(prefix))
    assert blob.get("t/w/b/part-0") == b"q"
    assert sorted(p.name for p in (tmp_path / "root" / "t").iterdir()) == ["w"]


def test_a_link_to_a_file_inside_the_root_is_its_own_key(tmp_path: Path) -> None:
    blob = blob_with(tmp_path, "s/w/b/part-1", Path("part-0"))
    assert blob.get("s/w/b/part-1") == b"p"
    blob.set("s/w/b/part-1", b"p")  # a retry of the same bytes
    assert blob.delete("s/w/b/part-1") == 1
    assert blob.get("s/w/b/part-0") == b"p"  # the target is another key: kept
    assert [m.key for m in blob.list_keys("s/")] == ["s/w/b/part-0"]


def test_a_dangling_link_is_not_written_through(tmp_path: Path) -> None:
    blob = blob_with(tmp_path, "s/gone", tmp_path / "root" / "elsewhere")
    assert blob.get("s/gone") is None
    assert [m.key for m in blob.list_keys("s/g")] == []
    with pytest.raises(CorruptState, match="'s/gone' is a symbolic link to"):
        blob.set("s/gone", b"v")
    assert not (tmp_path / "root" / "elsewhere").exists()


@pytest.mark.parametrize("key", ["s/la", "s/la/x", "s/self/w/b/part-0"])
def test_loops_of_links_are_refused_never_followed(tmp_path: Path, key: str) -> None:
    blob = blob_with(tmp_path, "s/la", tmp_path / "root" / "s" / "lb")
    (tmp_path / "root" / "s" / "lb").symlink_to(tmp_path / "root" / "s" / "la")
    (tmp_path / "root" / "s" / "self").symlink_to(tmp_path / "root" / "s")
    for call in (blob.get, blob.delete, lambda k: blob.set(k, b"x")):
        with pytest.raises(CorruptState, match=r"'s/(la|self)'"):
            call(key)
    with pytest.raises(CorruptState, match="does not resolve"):
        list(blob.list_keys("s/"))
    assert [m.key for m in blob.list_keys("t/")] == ["t/w/b/part-0"]
