"""Reading shards at one time: what a shard is readable at, and a time several are.

Driver-side checks of frontiers only (no Spark, no blob reads): the CLI's
``query``, ``subscribe`` and ``shard`` commands and ``timeshard serve``
use them to choose an ``as_of`` and to say, when one is not readable, what is.
"""

from __future__ import annotations

from collections.abc import Iterable

from timeshard.errors import InvalidUsage
from timeshard.persist._internal.state import ShardState
from timeshard.persist.read import ReadHandle
from timeshard.progress import Frontier


def readable_times(since: Frontier, upper: Frontier) -> str:
    """What a shard with these frontiers can be read at: ``readable at [since, upper - 1]``."""
    if upper.time == 0:
        return "empty, so nothing is readable yet"
    if since.time is None or (upper.time is not None and upper.time <= since.time):
        return f"not readable at any time (since {since}, upper {upper})"
    if upper.time is None:
        return f"readable from {since.time} on"
    return f"readable at [{since.time}, {upper.time - 1}]"


def not_readable(reader: ReadHandle, as_of: int) -> InvalidUsage:
    """The error for reading ``reader``'s shard at ``as_of``, naming what is readable."""
    ranges = readable_times(reader.since, reader.fetch_recent_upper())
    return InvalidUsage(
        f"as_of {as_of} is not readable in shard {reader.shard_id!r}: it is {ranges}"
    )


def common_as_of(readers: dict[str, ReadHandle], as_of: int | None) -> int | None:
    """``as_of`` if every reader can read at it, else the greatest time all can read at.

    A closed shard is readable at every time from its since on; when every shard is
    closed, that is the last time any of them has an update (never earlier than the
    greatest since), so that each is read with all of its updates."""
    if as_of is not None:
        for reader in readers.values():
            upper = reader.fetch_recent_upper()
            if not reader.since.less_equal(as_of) or upper.less_equal(as_of):
                raise not_readable(reader, as_of)
        return as_of
    states = {s: r.fetch_recent_state() for s, r in readers.items()}
    ranges = {s: (readers[s].since, state.upper) for s, state in states.items()}
    if not ranges:
        return None
    lows = [since.time for since, _ in ranges.values()]
    highs = [upper.time - 1 for _, upper in ranges.values() if upper.time is not None]
    if None not in lows:
        low = max(t for t in lows if t is not None)
        high = min(highs) if highs else max([low, *_last_times(states.values())])
        if low <= high:
            return high
    described = "; ".join(f"{s!r} is {readable_times(*r)}" for s, r in ranges.items())
    raise InvalidUsage(f"no time is readable in every shard the query names: {described}")


def _last_times(states: Iterable[ShardState]) -> list[int]:
    """The last time of each closed shard that holds one: read at it or later, it has
    every update it will ever have."""
    closed = [state.closed_at() for state in states]
    return [c.time - 1 for c in closed if c is not None and c.time]


__all__ = ["common_as_of", "not_readable", "readable_times"]
