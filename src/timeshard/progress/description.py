"""Batch descriptions.

A :class:`Description` ``(lower, upper, since)`` says that a batch holds every
update of a shard at times in ``[lower, upper)``, with times below ``since``
possibly advanced to ``since`` by compaction.

Invariants:

1. It is an error to describe a batch whose ``lower`` is beyond its ``upper``.
2. A batch is empty in time when ``lower == upper``; it holds no updates.

>>> d = Description(Frontier(0), Frontier(5), Frontier(0))
>>> d.contains(4), d.contains(5)
(True, False)
>>> Description(Frontier(5), Frontier(3))
Traceback (most recent call last):
...
timeshard.errors.InvalidUsage: invalid bounds: lower [5] is beyond upper [3]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from timeshard.errors import InvalidUsage
from timeshard.progress.frontier import Frontier, Timestamp


@dataclass(frozen=True, slots=True)
class Description:
    """The time interval ``[lower, upper)`` a batch covers, and its ``since``."""

    lower: Frontier
    upper: Frontier
    since: Frontier = field(default_factory=Frontier.minimum)

    def __post_init__(self) -> None:
        if not self.lower <= self.upper:
            raise InvalidUsage(f"invalid bounds: lower {self.lower} is beyond upper {self.upper}")

    def contains(self, t: Timestamp) -> bool:
        """Whether ``t`` lies in ``[lower, upper)``."""
        return self.lower.less_equal(t) and not self.upper.less_equal(t)

    def is_empty_interval(self) -> bool:
        return self.lower == self.upper

    def to_json(self) -> dict[str, Any]:
        return {
            "lower": self.lower.to_json(),
            "upper": self.upper.to_json(),
            "since": self.since.to_json(),
        }

    @staticmethod
    def from_json(value: Any) -> Description:
        return Description(
            Frontier.from_json(value["lower"]),
            Frontier.from_json(value["upper"]),
            Frontier.from_json(value["since"]),
        )


__all__ = ["Description"]
