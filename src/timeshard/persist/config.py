"""Tunables of persist, with the defaults of the embedded deployment."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class PersistConfig:
    """Settings shared by every handle of a client.

    ``clock`` returns wall-clock milliseconds; tests replace it to expire
    leases without waiting.
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

    def now_ms(self) -> int:
        return self.clock()

    def backoff(self, failures: int, rng: random.Random) -> None:
        """Sleep before retry ``failures``: exponential, capped, with jitter."""
        delay = min(self.backoff_ms * 2 ** min(failures, 8), self.max_backoff_ms) / 1000.0
        time.sleep(delay * (0.5 + rng.random() / 2))


__all__ = ["PersistConfig", "wall_clock_ms"]
