"""What the nemesis found: a :class:`RunResult` per run, a :class:`NemesisReport` of all.

The runner fills a run's result as the run goes on: the faults its journal
records as injected, the objects stuck or the phase that was slow, the
recovery time, the replicas' exits by themselves and failed ticks, and
verify's findings, with the times at which verify recomputed each object of
the pipeline (:func:`count_verified`; fewer than :data:`MIN_VERIFIED_TIMES`
fail the run). A run is ok if it has no error, recovered, and verify ran
clean at enough times. Both serialize to JSON (``to_json``):
``timeshard nemesis`` writes the report to ``nemesis.json``, and
:mod:`timeshard.nemesis.report` prints it.

Runs in the runner's process.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

#: The fewest times verify must recompute each object of the pipeline at (against its
#: query or its source's records) for a run to pass: at one time, no history is checked.
MIN_VERIFIED_TIMES = 2


@dataclass
class RunResult:
    """What one run did and found.

    ``faults``: injected faults by kind, from the journal; ``skipped``: faults
    of the plan that found no replica ticking until the phase's bound;
    ``injected_calls``: the ``unreliable`` faults by what failed
    (``blob.determinate``, ``task_write.indeterminate``, ...);
    ``self_exits``: replica processes that ended with no fault killing them
    (a JVM crash, say), restarted and reported, not a failure by themselves;
    ``replica_errors``: ticks that raised (retried; also reported);
    ``slow``: the phase that outlasted ``advancing_bound_s`` (or the run's bound) with
    some object not caught up and none stuck, or the fault phase that did with a kind
    of the plan not injected yet, in which the replica processes (those that died in it
    too) finished fewer than ``stuck_ticks`` ticks in all, none failing, and kept using
    CPU: too few ticks to tell a loaded machine from a hang (the run fails; a phase whose
    replicas ticked more, or failed a tick, or used almost no CPU over the last minutes
    (hung: :meth:`~timeshard.nemesis.liveness.PhaseTicks.idle`), is a failure with no
    ``slow``: a read at a replica's start that fails and is tried again is a failing
    tick too); it is always the phase the run's
    ``error`` names (:meth:`fail`), never an earlier one's; ``verified_times``: the times at
    which verify recomputed each object of the pipeline; ``few_times``: the
    objects recomputed at fewer than :data:`MIN_VERIFIED_TIMES`, with verify's
    notes on them (the run fails: a clean verify of them would say little).
    """

    run: int
    consensus: str
    disk: str
    faults: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    injected_calls: Counter[str] = field(default_factory=Counter)
    never_injected: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    slow: str = ""
    replica_ready_s: list[float] = field(default_factory=list)
    replica_errors: int = 0
    self_exits: int = 0
    recovery_s: float | None = None
    differences: int = 0
    verify_ok: bool = False
    verified_times: dict[str, int] = field(default_factory=dict)
    few_times: list[str] = field(default_factory=list)
    verify_error: str = ""
    error: str = ""
    seconds: float = 0.0
    directory: str = ""

    def fail(self, error: str, slow: str = "") -> None:
        """Make ``error`` the run's error (it replaces an earlier phase's) and ``slow`` the
        phase it names if that phase was slow, else empty: a label an earlier phase left
        would call a later failure (a stuck object, say) a loaded machine."""
        self.error, self.slow = error, slow

    @property
    def ok(self) -> bool:
        return (
            not self.error
            and self.recovery_s is not None
            and self.verify_ok
            and self.differences == 0
            and not self.few_times
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "consensus": self.consensus,
            "disk": self.disk,
            "faults": dict(self.faults),
            "skipped": dict(self.skipped),
            "unreliable_injected": dict(self.injected_calls),
            "never_injected": self.never_injected,
            "stuck": self.stuck,
            "slow": self.slow,
            "replica_ready_s": self.replica_ready_s,
            "replica_errors": self.replica_errors,
            "self_exits": self.self_exits,
            "recovery_s": self.recovery_s,
            "differences": self.differences,
            "verify_ok": self.verify_ok,
            "verified_times": self.verified_times,
            "few_times": self.few_times,
            "verify_error": self.verify_error,
            "error": self.error,
            "seconds": self.seconds,
            "directory": self.directory,
            "ok": self.ok,
        }


@dataclass
class NemesisReport:
    """All runs of one nemesis invocation."""

    seed: int
    runs: list[RunResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.runs) and all(r.ok for r in self.runs)

    def faults(self) -> Counter[str]:
        return sum((r.faults for r in self.runs), Counter())

    def recovery(self) -> list[float]:
        return [r.recovery_s for r in self.runs if r.recovery_s is not None]

    def to_json(self) -> dict[str, Any]:
        rec = self.recovery()
        ready = [s for r in self.runs for s in r.replica_ready_s]
        return {
            "seed": self.seed,
            "runs": len(self.runs),
            "ok": self.ok,
            "faults": dict(self.faults()),
            "unreliable_injected": dict(sum((r.injected_calls for r in self.runs), Counter())),
            "differences": sum(r.differences for r in self.runs),
            "self_exits": sum(r.self_exits for r in self.runs),
            "replica_errors": sum(r.replica_errors for r in self.runs),
            "failed_runs": sum(not r.ok for r in self.runs),
            "recovery_p50_s": statistics.median(rec) if rec else None,
            "recovery_max_s": max(rec) if rec else None,
            "replica_ready_p50_s": statistics.median(ready) if ready else None,
            "replica_ready_max_s": max(ready) if ready else None,
            "per_run": [r.to_json() for r in self.runs],
        }


def count_verified(found: dict[str, Any], shards: list[str], result: RunResult) -> None:
    """The times verify's report ``found`` recomputed each of ``shards`` at (a view against
    its query, an export against its source's records), into ``result``."""
    objects = {o["object"]: o for o in found.get("objects", [])}
    for shard in shards:
        entry = objects.get(shard, {})
        times: set[int] = set()
        for check in ("query", "upsert", "records"):
            times.update(entry.get("times", {}).get(check, []))
        result.verified_times[shard] = len(times)
        if len(times) < MIN_VERIFIED_TIMES:
            notes = "; ".join(entry.get("notes", [])) or "no note"
            result.few_times.append(
                f"verify recomputed {shard!r} at {len(times)} times {sorted(times)}, fewer "
                f"than {MIN_VERIFIED_TIMES} ({notes})"
            )


__all__ = [
    "MIN_VERIFIED_TIMES",
    "NemesisReport",
    "RunResult",
    "count_verified",
]
