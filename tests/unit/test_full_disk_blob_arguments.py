"""The nemesis's full-disk blob refuses a key, prefix or value no blob takes with InvalidUsage,
as the blob it wraps would, whether or not the disk is full (not an injected ENOSPC)."""

from __future__ import annotations

from pathlib import Path

import pytest

from timeshard.errors import InvalidUsage
from timeshard.location.file import FileBlob
from timeshard.location.memory import MemoryBlob
from timeshard.nemesis.control import FullDiskBlob


@pytest.mark.parametrize("full", [False, True])
def test_a_bad_key_is_invalid_usage_full_or_not(full: bool) -> None:
    blob = FullDiskBlob(MemoryBlob())
    blob.full = full
    with pytest.raises(InvalidUsage):
        blob.set("../x", b"v")


@pytest.mark.parametrize("full", [False, True])
def test_a_value_that_is_not_bytes_is_invalid_usage_full_or_not(full: bool) -> None:
    blob = FullDiskBlob(MemoryBlob())
    blob.full = full
    with pytest.raises(InvalidUsage, match="got int"):
        blob.set("k", 3)  # type: ignore[arg-type]


@pytest.mark.parametrize("inner", ["memory", "file"])
def test_a_bad_prefix_of_temporaries_is_invalid_usage(inner: str, tmp_path: Path) -> None:
    blob = FullDiskBlob(MemoryBlob() if inner == "memory" else FileBlob(tmp_path))
    with pytest.raises(InvalidUsage):
        list(blob.list_temporaries("../"))
    with pytest.raises(InvalidUsage):
        blob.delete_temporary("../.tmp-0")
