"""A Spark task's part write under a local root refuses a path the file blob refuses.

``write_part_file`` (run by every part-writing task: views, UPSERT, COPY)
created its directories and renamed its part into place following symbolic
links: under a shard directory linked out of the blob root, the part landed
outside the root, the write returned it, the state referenced it, and every
later read refused it (CorruptState), while ``FileBlob.set`` of a key there
refuses before writing anything. The task now raises CorruptState naming the
key before it writes, and the driver (``typed_errors``) re-raises it as such.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from timeshard.errors import CorruptState, InvalidUsage
from timeshard.location import FileBlob
from timeshard.persist._internal.parts import updates_schema
from timeshard.spark.parts import typed_error, write_part_file

SCHEMA = updates_schema(pa.schema([("k", pa.int64())]))
KEY = "s/w1/b1/part-00000-0123456789ab.parquet"


def _table() -> pa.Table:
    return pa.table(
        {"k": [1], "_ts": [0], "_diff": [1], "_err": pa.array([None], pa.string())}
    ).cast(SCHEMA)


@pytest.mark.parametrize(("link", "to"), [("s", "../outside"), ("s/w1", "../elsewhere")])
def test_a_part_written_through_a_link_is_refused(tmp_path: Path, link: str, to: str) -> None:
    """A link out of the root, or a directory link inside it: neither is a directory of
    this blob's keys (FileBlob invariant 1)."""
    blob = FileBlob(tmp_path / "root")
    target = (blob.root / link).parent / to
    target.mkdir(parents=True)
    (blob.root / link).parent.mkdir(parents=True, exist_ok=True)
    (blob.root / link).symlink_to(target)
    with pytest.raises(CorruptState, match=f"'{KEY}' passes through (the symbolic link )?'{link}'"):
        write_part_file(blob.root_uri or "", KEY, SCHEMA, [_table()])
    assert list(target.rglob("*")) == []
    with pytest.raises(CorruptState, match=f"'{KEY}'"):
        blob.set(KEY, b"x")


@pytest.mark.parametrize(
    ("to", "exists"),
    [("gone", False), ("../d", True), ("part-1", True)],
    ids=["dangling", "to a directory", "to a file"],
)
def test_a_link_at_the_part_key_is_refused(tmp_path: Path, to: str, exists: bool) -> None:
    """A link at the key itself inside the root: ``set`` writes nothing there (a link
    that holds no value is CorruptState; one to a file holds other bytes), and the
    task's rename would replace the link, so the write refuses every link at its key."""
    blob = FileBlob(tmp_path / "root")
    blob.set("s/w1/d/x", b"d")
    blob.set("s/w1/b1/part-1", b"p")
    (blob.root / KEY).symlink_to(to)
    with pytest.raises(CorruptState, match=f"'{KEY}' is a symbolic link to '{blob.root}/s/w1/"):
        write_part_file(blob.root_uri or "", KEY, SCHEMA, [_table()])
    assert (blob.root / KEY).is_symlink() and (blob.root / KEY).exists() == exists
    with pytest.raises(CorruptState if not exists or to == "../d" else InvalidUsage):
        blob.set(KEY, b"x")
    assert blob.get("s/w1/d/x") == b"d" and blob.get("s/w1/b1/part-1") == b"p"


def test_a_part_written_under_a_plain_directory_is_written(tmp_path: Path) -> None:
    blob = FileBlob(tmp_path / "root")
    part = write_part_file(blob.root_uri or "", KEY, SCHEMA, [_table()])
    assert part is not None and part.num_rows == 1
    assert blob.get(KEY) is not None


def test_corrupt_state_raised_in_a_task_keeps_its_type() -> None:
    text = (
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        '  File "/x/timeshard/spark/parts.py", line 1, in write_part_file\n'
        f"timeshard.errors.CorruptState: blob key '{KEY}' passes through the symbolic link "
        "'s' to '/elsewhere': a link is not a directory of this blob's keys\n"
    )
    error = typed_error(Exception(text))
    assert isinstance(error, CorruptState), error
    assert str(error).startswith(f"blob key '{KEY}' passes through the symbolic link 's'")
