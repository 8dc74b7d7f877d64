"""What a nemesis invocation runs: :class:`NemesisConfig`, and the bounds of one run.

A config names the runs (``runs`` of them, or as many as start within
``minutes``), the replicas of each, its fault phase's length and kinds, its
consensus, and how long a run may take: each phase up to
``advancing_bound_s``, and, given ``run_bound_s``, the whole run from its
start to the end of verify, of which the last :data:`FINISH_S` are kept to
stop the replicas (:data:`STOP_TIMEOUT_S`) and verify (at least
:data:`VERIFY_FLOOR_S`, at most :data:`VERIFY_TIMEOUT_S`).
:mod:`timeshard.nemesis.runner`'s module doc says how the phases end by it.

A config is checked when it is made (a caller's mistake raises
``InvalidUsage``) and is frozen: the runner and ``timeshard nemesis`` only
read it.

Runs in the runner's process; nothing here starts a process or Spark.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from timeshard.errors import InvalidUsage
from timeshard.nemesis.plan import KINDS, plan_faults

STOP_TIMEOUT_S = 60.0
#: The longest verify may take (less, if less is left of the run's bound).
VERIFY_TIMEOUT_S = 900.0
#: The least verify is given, whatever is left of the run's bound.
VERIFY_FLOOR_S = 300.0
#: What a run keeps of its ``run_bound_s`` after its phases: stopping the replicas and
#: verify's floor. (Keeping verify's whole timeout cut loaded but healthy runs short.)
FINISH_S = STOP_TIMEOUT_S + VERIFY_FLOOR_S


@dataclass(frozen=True, slots=True)
class NemesisConfig:
    """What to run: ``runs`` runs, or runs until ``minutes`` have passed (the last one
    started before then, so the whole takes at least ``minutes``).

    ``run_bound_s``: the longest one run may take, its start to the end of verify
    (None: only each phase's bound); it must leave more than ``fault_seconds`` after
    :data:`FINISH_S`.
    """

    directory: Path
    seed: int = 0
    replicas: int = 3
    runs: int | None = 1
    minutes: float | None = None
    fault_seconds: float = 60.0
    consensus: str = "sqlite"
    kinds: tuple[str, ...] = KINDS
    advancing_bound_s: float = 1200.0
    stuck_ticks: int = 20
    run_bound_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.replicas, int) or not 1 <= self.replicas <= 5:
            raise InvalidUsage(f"replicas must be an int in [1, 5], got {self.replicas!r}")
        if self.consensus not in ("sqlite", "postgres", "both"):
            raise InvalidUsage(
                f"consensus must be sqlite, postgres or both, got {self.consensus!r}"
            )
        if (self.runs is None) == (self.minutes is None):
            raise InvalidUsage(f"give runs or minutes, not {self.runs!r} and {self.minutes!r}")
        if self.runs is not None and self.runs < 1:
            raise InvalidUsage(f"runs must be at least 1, got {self.runs!r}")
        if self.minutes is not None and not self.minutes > 0:
            raise InvalidUsage(f"minutes must be positive, got {self.minutes!r}")
        if not self.advancing_bound_s > 0:
            raise InvalidUsage(
                f"advancing_bound_s must be positive, got {self.advancing_bound_s!r}"
            )
        if not isinstance(self.stuck_ticks, int) or self.stuck_ticks < 1:
            raise InvalidUsage(f"stuck_ticks must be a positive int, got {self.stuck_ticks!r}")
        if self.run_bound_s is not None and not (self.run_bound_s > FINISH_S + self.fault_seconds):
            raise InvalidUsage(
                f"run_bound_s must exceed {FINISH_S:.0f} s (to stop and verify) plus "
                f"fault_seconds {self.fault_seconds!r}, got {self.run_bound_s!r}"
            )
        plan_faults(self.seed, 0, replicas=self.replicas, seconds=1.0, kinds=self.kinds)

    def phases_deadline(self, start: float) -> float:
        """When the phases of a run started at ``start`` (``time.monotonic()``) must end
        (infinity without a ``run_bound_s``)."""
        return self.run_end(start) - FINISH_S

    def run_end(self, start: float) -> float:
        """When a run started at ``start`` (``time.monotonic()``) must have verified
        (infinity without a ``run_bound_s``)."""
        return math.inf if self.run_bound_s is None else start + self.run_bound_s

    def consensus_of(self, run: int) -> str:
        if self.consensus == "both":
            return "sqlite" if run % 2 == 0 else "postgres"
        return self.consensus

    def kinds_of(self, run: int) -> tuple[str, ...]:
        """The kinds for ``run``: no PostgreSQL restart where consensus is SQLite."""
        if self.consensus_of(run) == "sqlite":
            return tuple(k for k in self.kinds if k != "pg_restart") or ("kill",)
        return self.kinds


__all__ = [
    "FINISH_S",
    "STOP_TIMEOUT_S",
    "VERIFY_FLOOR_S",
    "VERIFY_TIMEOUT_S",
    "NemesisConfig",
]
