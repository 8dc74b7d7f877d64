"""A blob value must be bytes-like: anything else is InvalidUsage naming its type.

Every backend called ``bytes(value)``: ``set("k", 3)`` stored three zero bytes,
``set("k", [1, 2])`` stored ``b"\\x01\\x02"`` and ``set("k", "x")`` raised a bare
TypeError. The unreliable wrapper refuses such a value before it draws a fault.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from timeshard.errors import InvalidUsage
from timeshard.location import Blob, FileBlob, MemoryBlob, UnreliableBlob, open_blob

BAD_VALUES = [(3, "int"), ([1, 2], "list"), ("x", "str"), (None, "NoneType"), (2.0, "float")]


@pytest.fixture(params=["memory", "file", "arrowfs", "arrowfs-mock", "unreliable"])
def blob(request: pytest.FixtureRequest, tmp_path: Path) -> Blob:
    if request.param == "memory":
        return MemoryBlob()
    if request.param == "file":
        return FileBlob(tmp_path / "blob")
    if request.param == "arrowfs-mock":
        return open_blob(f"arrowfs+mock://{tmp_path}/afs")
    if request.param == "unreliable":  # every valid call fails: the check must come first
        return UnreliableBlob(MemoryBlob(), seed=1, fail_rate=1.0, timeout_rate=0.0)
    (tmp_path / "afs").mkdir()
    return open_blob(f"arrowfs+file://{tmp_path / 'afs'}")


@pytest.mark.parametrize(("value", "type_name"), BAD_VALUES)
def test_a_value_that_is_not_bytes_is_invalid_usage(
    blob: Blob, value: object, type_name: str
) -> None:
    with pytest.raises(InvalidUsage, match=rf"blob value must be bytes.*got {type_name}$"):
        blob.set("s/w/b/part", value)  # type: ignore[arg-type]
    if isinstance(blob, UnreliableBlob):
        assert blob.calls == 0 and not blob.injected
        blob = blob.inner
    assert blob.get("s/w/b/part") is None


@pytest.mark.parametrize("value", [b"ab", bytearray(b"ab"), memoryview(b"xaby")[1:3]])
def test_bytes_like_values_are_stored_as_bytes(blob: Blob, value: bytes) -> None:
    if isinstance(blob, UnreliableBlob):
        blob.enabled = False
    blob.set("s/w/b/part", value)
    got = blob.get("s/w/b/part")
    assert got == b"ab" and type(got) is bytes
    blob.set("s/w/b/part", b"ab")  # the same bytes again: a retry
    with pytest.raises(InvalidUsage, match="already holds 2 other bytes"):
        blob.set("s/w/b/part", bytearray(b"cd"))
