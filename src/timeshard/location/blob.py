"""Blob: a key -> bytes store whose keys are written once.

Keys are relative, ``/``-separated paths made of safe components (see
:func:`check_blob_key`). A blob rooted at a filesystem URI (:attr:`Blob.root_uri`
is not ``None``) is also where Spark tasks and pyarrow write Parquet parts
directly: the key of such a part is its path under the root.

Invariants:

1. ``set`` is atomic: a reader sees either no value or the whole value.
2. A key is written once: ``set`` of an existing key with the same bytes is
   harmless (a retry after an indeterminate failure); with other bytes it is a
   caller bug and raises InvalidUsage, leaving the stored value as it was.
3. ``delete`` of a missing key is not an error.
4. It is an error to pass a key that is absolute, empty, has an empty, ``.``
   or ``..`` component, or characters outside ``[A-Za-z0-9_.=-]``.
5. It is an error to ``set`` a value that is not ``bytes``, ``bytearray`` or
   ``memoryview`` (see :func:`check_blob_value`): an ``int`` is not its count of
   zero bytes, nor a list of ints its bytes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from timeshard.errors import InvalidUsage

_COMPONENT = re.compile(r"[A-Za-z0-9_=-][A-Za-z0-9_.=-]*")


def check_blob_key(key: object) -> str:
    """Return ``key`` if it is a safe relative blob key, else raise InvalidUsage.

    >>> check_blob_key("s1/w1/b1/part-0.parquet")
    's1/w1/b1/part-0.parquet'
    >>> check_blob_key("../etc/passwd")
    Traceback (most recent call last):
    ...
    timeshard.errors.InvalidUsage: invalid blob key '../etc/passwd': component '..' is not allowed
    """
    if not isinstance(key, str) or not key:
        raise InvalidUsage(f"invalid blob key {key!r}: must be a non-empty string")
    if len(key) > 1024:
        raise InvalidUsage(f"invalid blob key {key[:64]!r}...: longer than 1024 characters")
    if key.startswith("/"):
        raise InvalidUsage(f"invalid blob key {key!r}: must be relative")
    for component in key.split("/"):
        if component in ("", ".", ".."):
            raise InvalidUsage(f"invalid blob key {key!r}: component {component!r} is not allowed")
        if not _COMPONENT.fullmatch(component):
            raise InvalidUsage(
                f"invalid blob key {key!r}: component {component!r} has characters "
                "outside [A-Za-z0-9_.=-]"
            )
    return key


def check_blob_prefix(prefix: object) -> str:
    """Return ``prefix`` if it can only match safe keys, else raise InvalidUsage.

    Every component but the last must be a safe key component; the last may be
    empty or partial (``"s1/"``, ``"s1/w"``, ``""``).

    >>> check_blob_prefix("s1/w")
    's1/w'
    >>> check_blob_prefix("../")  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ...
    timeshard.errors.InvalidUsage: invalid blob prefix '../': ...
    """
    if not isinstance(prefix, str):
        raise InvalidUsage(f"invalid blob prefix {prefix!r}: must be a string")
    directory, _, _ = prefix.rpartition("/")
    if directory or prefix.startswith("/"):
        try:
            check_blob_key(directory)
        except InvalidUsage as e:
            raise InvalidUsage(f"invalid blob prefix {prefix!r}: {e}") from None
    return prefix


def check_blob_value(value: object) -> bytes:
    """Return ``value`` as ``bytes`` if it is ``bytes``, ``bytearray`` or ``memoryview``
    (``bytes`` itself is returned as is, not copied), else raise InvalidUsage.

    >>> check_blob_value(memoryview(b"ab"))
    b'ab'
    >>> check_blob_value(3)
    Traceback (most recent call last):
    ...
    timeshard.errors.InvalidUsage: a blob value must be bytes, bytearray or memoryview, got int
    """
    if type(value) is bytes:
        return value
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidUsage(
            f"a blob value must be bytes, bytearray or memoryview, got {type(value).__name__}"
        )
    return bytes(value)


@dataclass(frozen=True, slots=True)
class BlobMetadata:
    """A key and the size of its value in bytes."""

    key: str
    size_in_bytes: int


@runtime_checkable
class Blob(Protocol):
    """A durable key -> bytes store. Failures raise Determinate or Indeterminate."""

    @property
    def root_uri(self) -> str | None:
        """The filesystem URI parts live under (``file:///...``, ``hdfs://...``), or None."""
        ...

    def get(self, key: str) -> bytes | None:
        """The value of ``key``, or None if it does not exist."""
        ...

    def set(self, key: str, value: bytes) -> None:
        """Store ``value`` at ``key`` atomically; InvalidUsage if it holds other bytes."""
        ...

    def delete(self, key: str) -> int | None:
        """Delete ``key``; return the size it had, or None if it did not exist."""
        ...

    def list_keys(self, prefix: str = "") -> Iterator[BlobMetadata]:
        """Every key that starts with ``prefix``, with its size, in no given order."""
        ...


@runtime_checkable
class Temporaries(Protocol):
    """A blob whose writes go through temporary files (``<directory>/.tmp-<hex>``) that a
    write killed before moving one into place leaves behind; GC deletes them."""

    def list_temporaries(self, prefix: str = "") -> Iterator[BlobMetadata]:
        """Every temporary whose key (``<directory>/.tmp-<hex>``) starts with ``prefix``."""
        ...

    def delete_temporary(self, key: str) -> int | None:
        """Delete the temporary ``key``; its size, or None if it did not exist."""
        ...


__all__ = [
    "Blob",
    "BlobMetadata",
    "Temporaries",
    "check_blob_key",
    "check_blob_prefix",
    "check_blob_value",
]
