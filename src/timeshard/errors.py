"""Typed errors of timeshard.

Errors fall in three families:

* caller mistakes raise :class:`InvalidUsage` (a ``ValueError``) and name the
  offending values; nothing has been written when one is raised;
* read and write outcomes that are part of the protocol: :class:`SinceError`
  (the time asked for is no longer readable), :class:`UpperMismatch` (another
  writer moved the shard upper first; returned as a value by
  ``compare_and_append`` and raised by ``append``), :class:`Fenced` and
  :class:`LeaseExpired`;
* storage failures, split like Materialize's persist into
  :class:`Determinate` (the operation surely did not happen) and
  :class:`Indeterminate` (it may have happened), and data failures
  :class:`PartError` (a part is missing or corrupt) and :class:`CorruptState`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from timeshard.progress import Frontier


class TimeshardError(Exception):
    """Base class of every error raised by timeshard."""


class InvalidUsage(TimeshardError, ValueError):
    """A caller mistake: an argument out of range, of the wrong shape or kind."""


class SinceError(TimeshardError):
    """``as_of`` is not readable: it is not beyond the shard's ``since``.

    With ``shard_id`` and ``upper`` the message names the times that are
    readable: ``[since, upper - 1]``, every time from ``since`` on for a closed
    shard, or none (an empty shard, or a since past ``upper - 1``).
    """

    def __init__(
        self,
        as_of: int,
        since: Frontier,
        *,
        shard_id: str | None = None,
        upper: Frontier | None = None,
    ) -> None:
        message = f"as_of {as_of} is not readable: since is {since}"
        if shard_id is not None and upper is not None:
            if since.time is None:
                readable = "keeps no readable time"
            elif upper.time is None:
                readable = f"keeps the times from {since.time} on"
            elif upper.time == 0 and since.time == 0:
                readable = "is empty: nothing is readable yet"
            elif since.time > upper.time - 1:
                readable = "keeps no readable time"
            else:
                readable = f"keeps the times [{since.time}, {upper.time - 1}]"
            message = (
                f"as_of {as_of} is not readable in shard {shard_id!r}: it {readable} "
                f"(since {since}, upper {upper})"
            )
        super().__init__(message)
        self.as_of = as_of
        self.since = since
        self.shard_id = shard_id
        self.upper = upper


class UpperMismatch(TimeshardError):
    """The shard upper was not ``expected`` but ``current``.

    ``compare_and_append`` returns this as a value; ``append`` raises it.
    """

    def __init__(self, expected: Frontier, current: Frontier) -> None:
        super().__init__(f"expected upper {expected} but the shard upper is {current}")
        self.expected = expected
        self.current = current

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, UpperMismatch)
            and other.expected == self.expected
            and other.current == self.current
        )

    def __hash__(self) -> int:
        return hash((self.expected, self.current))


class Fenced(TimeshardError):
    """A newer holder (deploy generation, opaque token) fenced this handle out."""


class LeaseExpired(TimeshardError):
    """A reader or writer lease expired; the handle must be opened anew."""


class ExternalError(TimeshardError):
    """A blob or consensus operation failed."""


class Determinate(ExternalError):
    """The operation surely did not happen."""


class Indeterminate(ExternalError):
    """The operation may or may not have happened."""


class SourceUnavailable(TimeshardError):
    """An upstream system cannot be read now (unreachable, a topic gone, data lost).

    Not data: the ingestion does not tick, its health reads ``stalled`` with
    this message, and the next step tries again. ``definite`` says that
    retrying cannot help (the records were deleted before they were read):
    the source stays stalled until an operator acts, and nothing is skipped.
    """

    def __init__(self, message: str, *, definite: bool = False) -> None:
        super().__init__(message)
        self.definite = definite


class PartError(TimeshardError):
    """A part referenced by a shard is missing or cannot be decoded."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"part {key!r} is {reason}")
        self.key = key
        self.reason = reason


class CorruptState(TimeshardError):
    """The state stored in consensus for a shard cannot be decoded."""


__all__ = [
    "CorruptState",
    "Determinate",
    "ExternalError",
    "Fenced",
    "Indeterminate",
    "InvalidUsage",
    "LeaseExpired",
    "PartError",
    "SinceError",
    "TimeshardError",
    "UpperMismatch",
]
