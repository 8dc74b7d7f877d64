"""The fault plan of one nemesis run: which fault, when, where, for how long.

A plan is a pure function of ``(seed, run, replicas, seconds, kinds)``: the
same arguments give the same list of :class:`Fault`, in any process (the
generator is ``random.Random`` seeded with a string, which does not depend on
``PYTHONHASHSEED``). So a run is reproduced by its seed: the same faults hit
the same replicas at the same offsets into the fault phase. (The processes'
own interleaving, and so exactly which operation a fault interrupts, is
timing; what it must never change is the verdict.)

The kinds:

============ ====================================================================
kind         what the runner does
============ ====================================================================
kill         ``kill -9`` a replica; start a new incarnation after ``duration_s``
pause        ``SIGSTOP`` a replica; ``SIGCONT`` it after ``duration_s``
unreliable   a replica's blob and consensus fail or time out at ``rate``
             (half failures, half timeouts) for ``duration_s``
pg_restart   stop the PostgreSQL consensus server abruptly and start it again
             (only where consensus is PostgreSQL)
disk_full    the blob's disk is full for ``duration_s``
clock_jump   a replica's tick clock is off by ``clock_jump_ms`` (forward or
             backward) for ``duration_s``
============ ====================================================================

Invariants:

1. Faults are sorted by ``at_s``; every ``at_s`` is in ``[0, seconds)``.
2. Each kind asked for occurs at least once, at a uniformly drawn time; more
   faults of seeded kinds follow at exponential gaps (mean ``MEAN_GAP_S``).
3. ``replica`` is None exactly for the location-wide kinds (``pg_restart``,
   ``disk_full``) and otherwise in ``range(replicas)``.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

from timeshard.errors import InvalidUsage

KINDS = ("kill", "pause", "unreliable", "pg_restart", "disk_full", "clock_jump")
LOCATION_WIDE = ("pg_restart", "disk_full")
MEAN_GAP_S = 5.0


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected fault."""

    at_s: float
    kind: str
    replica: int | None
    duration_s: float
    rate: float = 0.0
    clock_jump_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        where = "location" if self.replica is None else f"replica {self.replica}"
        extra = f" rate {self.rate:.2f}" if self.kind == "unreliable" else ""
        extra += f" {self.clock_jump_ms:+d} ms" if self.kind == "clock_jump" else ""
        return f"{self.at_s:6.1f} s  {self.kind:<10} {where} for {self.duration_s:.1f} s{extra}"


def plan_faults(
    seed: int, run: int, *, replicas: int, seconds: float, kinds: tuple[str, ...] = KINDS
) -> list[Fault]:
    """The faults of run ``run`` of a nemesis seeded with ``seed`` (see the module doc)."""
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise InvalidUsage(f"unknown fault kinds {unknown or list(kinds)}; use some of {KINDS}")
    if not isinstance(replicas, int) or replicas < 1:
        raise InvalidUsage(f"replicas must be a positive int, got {replicas!r}")
    if not seconds > 0:
        raise InvalidUsage(f"the fault phase must last a positive time, got {seconds!r} s")
    rng = random.Random(f"timeshard-nemesis:{seed}:{run}")
    faults = [_fault(rng, kind, rng.uniform(0, seconds), replicas) for kind in kinds]
    at = rng.expovariate(1 / MEAN_GAP_S)
    while at < seconds:
        faults.append(_fault(rng, rng.choice(kinds), at, replicas))
        at += rng.expovariate(1 / MEAN_GAP_S)
    return sorted(faults, key=lambda f: f.at_s)


def _fault(rng: random.Random, kind: str, at: float, replicas: int) -> Fault:
    replica = None if kind in LOCATION_WIDE else rng.randrange(replicas)
    if kind == "kill":
        return Fault(at, kind, replica, round(rng.uniform(0.5, 5.0), 2))
    if kind == "pause":
        return Fault(at, kind, replica, round(rng.uniform(1.0, 8.0), 2))
    if kind == "unreliable":
        duration = round(rng.uniform(5.0, 15.0), 2)
        return Fault(at, kind, replica, duration, rate=round(rng.uniform(0.05, 0.10), 3))
    if kind == "pg_restart":
        return Fault(at, kind, replica, 0.0)
    if kind == "disk_full":
        return Fault(at, kind, replica, round(rng.uniform(2.0, 8.0), 2))
    jump = rng.choice((-1, 1)) * rng.randrange(2_000, 20_000)
    return Fault(at, kind, replica, round(rng.uniform(3.0, 12.0), 2), clock_jump_ms=jump)


__all__ = ["KINDS", "LOCATION_WIDE", "Fault", "plan_faults"]
