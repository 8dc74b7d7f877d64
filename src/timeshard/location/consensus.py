"""Consensus: a linearizable compare-and-set log keyed by shard.

Each key holds a sequence of versions ``VersionedData(seqno, data)`` with
strictly increasing sequence numbers. ``compare_and_set`` appends a version if
the latest one still has the expected seqno; ``truncate`` deletes the versions
below a seqno; ``head`` returns the latest.

Invariants:

1. ``compare_and_set(key, expected, new)`` commits only if the head's seqno is
   ``expected`` (``None``: no version exists) and ``new.seqno > expected``;
   otherwise it returns ``ExpectationMismatch`` and changes nothing.
2. It is an error to ``truncate`` above the head's seqno.
3. After ``truncate(key, s)``, ``scan(key, 0, ...)`` starts at ``s``; the
   head is never deleted.
4. Failures raise Determinate (surely not applied) or Indeterminate (maybe).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from timeshard.errors import InvalidUsage

SeqNo = int

_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.=-]{0,199}")


def check_consensus_key(key: object) -> str:
    """Return ``key`` if it is a valid consensus key (a shard id), else raise.

    >>> check_consensus_key("s-orders")
    's-orders'
    """
    if not isinstance(key, str) or not _KEY.fullmatch(key) or ".." in key:
        raise InvalidUsage(
            f"invalid consensus key {key!r}: use 1-200 characters of [A-Za-z0-9_.=-], "
            "not starting with '.', '=' or '-'"
        )
    return key


@dataclass(frozen=True, slots=True)
class VersionedData:
    """One version of a key's value."""

    seqno: SeqNo
    data: bytes


class CaSResult(enum.Enum):
    COMMITTED = "committed"
    EXPECTATION_MISMATCH = "expectation_mismatch"


@runtime_checkable
class Consensus(Protocol):
    """A linearizable compare-and-set log per key."""

    def head(self, key: str) -> VersionedData | None:
        """The latest version of ``key``, or None."""
        ...

    def compare_and_set(self, key: str, expected: SeqNo | None, new: VersionedData) -> CaSResult:
        """Append ``new`` if the head's seqno is ``expected``."""
        ...

    def scan(self, key: str, from_seqno: SeqNo, limit: int) -> list[VersionedData]:
        """Up to ``limit`` versions with seqno ``>= from_seqno``, ascending."""
        ...

    def truncate(self, key: str, seqno: SeqNo) -> int:
        """Delete versions below ``seqno``; return how many were deleted."""
        ...

    def list_keys(self) -> list[str]:
        """Every key that has at least one version, sorted."""
        ...


def check_new_version(expected: SeqNo | None, new: VersionedData) -> None:
    """Raise InvalidUsage unless ``new.seqno`` is beyond ``expected``."""
    if expected is not None and new.seqno <= expected:
        raise InvalidUsage(f"new seqno {new.seqno} must be greater than expected seqno {expected}")
    if expected is None and new.seqno < 0:
        raise InvalidUsage(f"seqno must be non-negative, got {new.seqno}")


__all__ = [
    "CaSResult",
    "Consensus",
    "SeqNo",
    "VersionedData",
    "check_consensus_key",
    "check_new_version",
]
