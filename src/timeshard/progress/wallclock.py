"""Wall-clock times: which timestamps are epoch milliseconds, and how they read in UTC.

A timestamp is an ``int`` (:mod:`timeshard.progress.frontier`); sources
stamp updates with the wall clock's epoch milliseconds, tests and counters
with small logical times. Only the former have a readable form.
"""

from __future__ import annotations

from datetime import UTC, datetime

#: Times from 2001-09-09 01:46:40 UTC on are wall-clock epoch milliseconds; a
#: smaller time is a logical one (a counter, a test's 0, 1, 2, ...).
WALL_CLOCK_MS = 10**12
#: 10000-01-01: beyond what ``datetime`` shows.
_LAST_READABLE_MS = 253_402_300_800_000


def readable_utc(t: int) -> str | None:
    """``2026-11-27 18:20:51.644`` for a wall-clock time, None for a logical one."""
    if not WALL_CLOCK_MS <= t < _LAST_READABLE_MS:
        return None
    return f"{datetime.fromtimestamp(t // 1000, tz=UTC):%Y-%m-%d %H:%M:%S}.{t % 1000:03d}"


__all__ = ["WALL_CLOCK_MS", "readable_utc"]
