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
5. A seqno is an ``int`` (not a ``bool``) in ``[0, 2**63 - 1]`` (a PostgreSQL
   ``BIGINT``, a SQLite ``INTEGER``), data is ``bytes``, a scan limit is a
   positive ``int``; anything else raises InvalidUsage naming the value in
   every backend before anything is read or written (``scan`` and
   ``truncate`` take any ``int`` up to that: one below 0 is below every version).
6. A stored version read back whose seqno is not such an ``int`` or whose data
   is not bytes (a row something else wrote, a table of other column types)
   raises CorruptState naming the key (see :func:`stored_version`); so does a
   stored key that is not a valid key, in ``list_keys`` (:func:`stored_key`).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from timeshard.errors import CorruptState, InvalidUsage

SeqNo = int

MAX_SEQNO = 2**63 - 1

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


def check_seqno(seqno: object, what: str = "seqno") -> SeqNo:
    """Return ``seqno`` if it is an ``int`` in ``[0, MAX_SEQNO]``, else raise InvalidUsage.

    >>> check_seqno(1.5)
    Traceback (most recent call last):
    ...
    timeshard.errors.InvalidUsage: seqno must be a whole number in [0, 9223372036854775807], got 1.5
    """
    if not _is_int(seqno) or not 0 <= seqno <= MAX_SEQNO:  # type: ignore[operator]
        raise InvalidUsage(f"{what} must be a whole number in [0, {MAX_SEQNO}], got {seqno!r}")
    return seqno  # type: ignore[return-value]


def check_scan(from_seqno: object, limit: object) -> None:
    """Raise InvalidUsage unless ``from_seqno`` is an ``int`` at most ``MAX_SEQNO`` and
    ``limit`` an ``int`` in ``[1, MAX_SEQNO]``."""
    check_seqno_bound(from_seqno, "scan start")
    if not _is_int(limit) or not 0 < limit <= MAX_SEQNO:  # type: ignore[operator]
        raise InvalidUsage(f"scan limit must be positive, got {limit!r}")


def check_seqno_bound(seqno: object, what: str) -> SeqNo:
    """Return ``seqno`` if it is an ``int`` at most ``MAX_SEQNO`` (a scan start or a
    truncation point: one below 0 is below every version), else raise InvalidUsage."""
    if not _is_int(seqno) or seqno > MAX_SEQNO:  # type: ignore[operator]
        raise InvalidUsage(f"{what} must be a whole number at most {MAX_SEQNO}, got {seqno!r}")
    return seqno  # type: ignore[return-value]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def stored_seqno(key: str, seqno: object) -> SeqNo:
    """Return the seqno ``seqno`` a backend read for ``key`` if it is an ``int`` in
    ``[0, MAX_SEQNO]``, else raise CorruptState naming the key (invariant 6)."""
    if not _is_int(seqno) or not 0 <= seqno <= MAX_SEQNO:  # type: ignore[operator]
        raise CorruptState(
            f"consensus key {key!r} holds a version whose seqno {seqno!r} "
            f"({type(seqno).__name__}) is not a whole number in [0, {MAX_SEQNO}]"
        )
    return seqno  # type: ignore[return-value]


def stored_key(key: object) -> str:
    """Return the key ``key`` a backend listed if it is a valid consensus key, else raise
    CorruptState naming it (invariant 6): no call could take it (``head`` would refuse it
    as InvalidUsage, a mistake of a caller that only passed on what was stored).

    >>> stored_key(b"s1")  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ...
    timeshard.errors.CorruptState: consensus holds a key b's1' (bytes) ...
    """
    try:
        return check_consensus_key(key)
    except InvalidUsage:
        raise CorruptState(
            f"consensus holds a key {key!r} ({type(key).__name__}) that is not a valid "
            "consensus key: something other than timeshard wrote it"
        ) from None


def stored_version(key: str, seqno: object, data: object) -> VersionedData:
    """The version a backend read for ``key``; CorruptState naming the key unless its
    seqno is valid and its data bytes (invariant 6).

    >>> stored_version("s1", "abc", b"")  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ...
    timeshard.errors.CorruptState: consensus key 's1' holds a version whose seqno 'abc' ...
    """
    checked = stored_seqno(key, seqno)
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CorruptState(
            f"consensus key {key!r} holds version {checked} whose data is "
            f"{type(data).__name__}, not bytes"
        )
    return VersionedData(checked, bytes(data))


def check_new_version(expected: SeqNo | None, new: VersionedData) -> None:
    """Raise InvalidUsage unless ``new`` is a valid version beyond ``expected``."""
    if expected is not None:
        check_seqno(expected, "expected seqno")
    check_seqno(new.seqno, "new seqno")
    if not isinstance(new.data, bytes | bytearray | memoryview):
        raise InvalidUsage(f"version data must be bytes, got {type(new.data).__name__}")
    if expected is not None and new.seqno <= expected:
        raise InvalidUsage(f"new seqno {new.seqno} must be greater than expected seqno {expected}")


__all__ = [
    "CaSResult",
    "Consensus",
    "SeqNo",
    "MAX_SEQNO",
    "VersionedData",
    "check_consensus_key",
    "check_new_version",
    "check_scan",
    "check_seqno",
    "check_seqno_bound",
    "stored_key",
    "stored_seqno",
    "stored_version",
]
