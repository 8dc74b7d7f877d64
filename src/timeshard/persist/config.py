"""Tunables of persist, with the defaults of the embedded deployment."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields

from timeshard.errors import InvalidUsage


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class PersistConfig:
    """Settings shared by every handle of a client.

    ``clock`` returns wall-clock milliseconds as an ``int``; tests replace it
    to expire leases without waiting.

    Every field is checked on construction: a lease, count or interval that
    is not a non-negative ``int`` (``max_attempts`` and
    ``blob_target_part_rows`` at least 1), a backoff that is not a
    non-negative number, or a clock that is not callable raises
    :class:`InvalidUsage` naming it. Leases and clock readings are stored in
    shard states, and a float there would leave the state undecodable.
    """

    reader_lease_ms: int = 15 * 60 * 1000
    writer_lease_ms: int = 15 * 60 * 1000
    max_attempts: int = 60
    #: How long an apply whose compare-and-set may have committed keeps trying to
    #: learn the outcome before it raises Indeterminate.
    indeterminate_timeout_ms: int = 10 * 60 * 1000
    backoff_ms: float = 2.0
    max_backoff_ms: float = 500.0
    blob_target_part_rows: int = 1_000_000
    compaction_min_batches: int = 2
    compaction_max_rows: int = 20_000_000
    compaction_enabled: bool = True
    #: A background compactor also collects garbage (deletes unreferenced parts,
    #: truncates consensus) once the shard's state advanced this many versions
    #: since its last collection.
    gc_interval_versions: int = 64
    #: Every writer and leased reader renews its lease in the background at least
    #: this often (a live process is seen as alive by its heartbeats); 0 turns the
    #: background heartbeats off (tests that drive the clock by hand).
    heartbeat_interval_ms: int = 10_000
    clock: Callable[[], int] = field(default=wall_clock_ms)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "clock":
                ok = callable(value)
            elif f.name == "compaction_enabled":
                ok = isinstance(value, bool)
            elif f.name in ("backoff_ms", "max_backoff_ms"):
                ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
            else:
                least = 1 if f.name in ("max_attempts", "blob_target_part_rows") else 0
                ok = isinstance(value, int) and not isinstance(value, bool) and value >= least
            if not ok:
                raise InvalidUsage(f"invalid PersistConfig: {f.name} {value!r} ({f.type})")

    def now_ms(self) -> int:
        """The clock's reading; InvalidUsage if it is not integer milliseconds."""
        now = self.clock()
        if not isinstance(now, int) or isinstance(now, bool):
            raise InvalidUsage(
                f"PersistConfig.clock returned {now!r}: it must return int milliseconds "
                "(time.time_ns() // 1_000_000, not time.time() * 1000)"
            )
        return now

    def backoff(self, failures: int, rng: random.Random) -> None:
        """Sleep before retry ``failures``: exponential, capped, with jitter."""
        delay = min(self.backoff_ms * 2 ** min(failures, 8), self.max_backoff_ms) / 1000.0
        time.sleep(delay * (0.5 + rng.random() / 2))


__all__ = ["PersistConfig", "wall_clock_ms"]
