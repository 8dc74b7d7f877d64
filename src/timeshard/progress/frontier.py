"""Timestamps and frontiers.

A :data:`Timestamp` is an ``int`` of milliseconds in ``[0, 2**63)``; the
order is total. A :class:`Frontier` is an antichain of timestamps. Under a
total order an antichain holds at most one element, so a frontier is either a
single timestamp ``t`` -- every time ``>= t`` may still change -- or *empty*:
nothing will ever change again.

Frontiers are ordered the other way round from the sets they describe: the
empty frontier is the greatest one, and ``Frontier(3) <= Frontier(5)``.

Invariants:

1. It is an error to build a frontier from a negative time or one that does
   not fit in a signed 64-bit integer.
2. ``Frontier.empty()`` is greater than every other frontier.

>>> Frontier(3) < Frontier(5) < Frontier.empty()
True
>>> Frontier(5).less_equal(5), Frontier(5).less_than(5)
(True, False)
>>> Frontier.empty().less_equal(10**12)
False
>>> Frontier(3).join(Frontier(7)), Frontier(3).meet(Frontier.empty())
(Frontier(7), Frontier(3))
>>> advance_by(2, Frontier(5)), advance_by(9, Frontier(5))
(5, 9)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from timeshard.errors import InvalidUsage

Timestamp = int
"""A point in time: milliseconds, ``0 <= t < 2**63``."""

MIN_TIMESTAMP: Timestamp = 0
MAX_TIMESTAMP: Timestamp = 2**63 - 1


def check_timestamp(t: object, what: str = "timestamp") -> Timestamp:
    """Return ``t`` if it is a valid timestamp, else raise :class:`InvalidUsage`.

    >>> check_timestamp(5)
    5
    >>> check_timestamp(-1)
    Traceback (most recent call last):
    ...
    timeshard.errors.InvalidUsage: timestamp must be an int in [0, 2**63), got -1
    """
    if isinstance(t, bool) or not isinstance(t, int) or not MIN_TIMESTAMP <= t <= MAX_TIMESTAMP:
        raise InvalidUsage(f"{what} must be an int in [0, 2**63), got {t!r}")
    return t


@dataclass(frozen=True, slots=True, order=False)
class Frontier:
    """An antichain over a totally ordered time: one timestamp, or empty.

    ``Frontier(t)`` holds ``t``; ``Frontier.empty()`` holds nothing.
    """

    time: Timestamp | None

    def __post_init__(self) -> None:
        if self.time is not None:
            check_timestamp(self.time, "frontier element")

    @staticmethod
    def empty() -> Frontier:
        """The frontier that is beyond every time: the collection is closed."""
        return _EMPTY

    @staticmethod
    def minimum() -> Frontier:
        """The least frontier, ``{0}``: nothing is known yet."""
        return _MINIMUM

    def is_empty(self) -> bool:
        return self.time is None

    def less_equal(self, t: Timestamp) -> bool:
        """Whether some element of the frontier is ``<= t`` (``t`` may still change)."""
        return self.time is not None and self.time <= t

    def less_than(self, t: Timestamp) -> bool:
        """Whether some element of the frontier is ``< t``."""
        return self.time is not None and self.time < t

    def join(self, other: Frontier) -> Frontier:
        """The least frontier ``>=`` both (the later one)."""
        return self if self >= other else other

    def meet(self, other: Frontier) -> Frontier:
        """The greatest frontier ``<=`` both (the earlier one)."""
        return self if self <= other else other

    def _key(self) -> tuple[int, int]:
        return (1, 0) if self.time is None else (0, self.time)

    def __le__(self, other: Frontier) -> bool:
        return self._key() <= other._key()

    def __lt__(self, other: Frontier) -> bool:
        return self._key() < other._key()

    def __ge__(self, other: Frontier) -> bool:
        return self._key() >= other._key()

    def __gt__(self, other: Frontier) -> bool:
        return self._key() > other._key()

    def __repr__(self) -> str:
        return "Frontier.empty()" if self.time is None else f"Frontier({self.time})"

    def __str__(self) -> str:
        return "[]" if self.time is None else f"[{self.time}]"

    def to_json(self) -> int | None:
        return self.time

    @staticmethod
    def from_json(value: Any) -> Frontier:
        if value is None:
            return _EMPTY
        return Frontier(check_timestamp(value, "frontier element"))


_EMPTY = Frontier(None)
_MINIMUM = Frontier(MIN_TIMESTAMP)


def frontier(value: Frontier | Timestamp | None) -> Frontier:
    """Coerce ``value`` to a frontier: an int ``t`` is ``{t}``, ``None`` is empty.

    >>> frontier(4), frontier(None), frontier(Frontier(2))
    (Frontier(4), Frontier.empty(), Frontier(2))
    """
    if isinstance(value, Frontier):
        return value
    if value is None:
        return _EMPTY
    return Frontier(check_timestamp(value, "frontier element"))


def advance_by(t: Timestamp, since: Frontier) -> Timestamp:
    """Advance ``t`` to the least time ``>= t`` that is beyond ``since``.

    With an empty ``since`` every time is indistinguishable; ``t`` is returned
    unchanged, as nobody can read it any more.
    """
    if since.time is None or t >= since.time:
        return t
    return since.time


__all__ = [
    "MAX_TIMESTAMP",
    "MIN_TIMESTAMP",
    "Frontier",
    "Timestamp",
    "advance_by",
    "check_timestamp",
    "frontier",
]
