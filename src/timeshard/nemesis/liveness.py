"""Stuck or slow: whether each object of a nemesis run still makes progress.

A replica process writes a :class:`Heartbeat` after every tick, failed or
not, and after each failed read of its start that it tries again (a failing
tick too): its incarnation, how many ticks it has finished, how many of the last
ones failed in a row, and the last error. The runner reads the heartbeats of
the replicas that are alive (not paused) and the upper of every object, and
feeds both to a :class:`Liveness`, which classifies each object:

``caught up``
    its upper is beyond the target (``target`` = 0 in the warm-up: the object
    was written once; after the heal, every shard's upper then);
``waiting``
    its upper is at or beyond the wall clock (a forward clock jump pushed it
    there): it cannot move until the clock passes it;
``starting``
    no live replica has finished a tick since the object's upper last moved
    or since the first look (replicas starting slowly under load, building
    their pipeline, or in a long tick);
``advancing``
    its upper moved less than ``stuck_ticks`` ticks ago of every live replica;
``stuck``
    its upper has not moved while some live replica finished ``stuck_ticks``
    ticks, the upper below the wall clock all along.

A tick is one pass of a replica's loop (or a start read tried again),
whatever it took; so a slow tick counts once, and a machine under load slows
the count, not the verdict. The
runner fails a run on the first stuck object (with the object and its last
error), and waits for objects that are starting or advancing up to a
generous bound.

The same count judges any other value the replicas should change: the
runner's wait for the input a source has not read yet is an
:class:`Unchanged` (unread for ``stuck_ticks`` ticks of a live replica: never
read). :class:`PhaseTicks` counts the ticks the replicas finished in a
phase, and whether one failed: a phase past its bound with too few ticks
cannot tell a loaded machine from a hang by ticks alone. The CPU the
replicas' processes used, or waited for, tells them apart there: a loaded
machine slows a replica, which keeps using CPU (each of its processes gets its
share) and, the more loaded the machine, waits the longer for it, runnable; but
a replica that waits on something that never comes (a hang before its first
tick) neither uses any nor is runnable (an idle Spark driver: about 0.3
CPU-seconds a minute). Such a phase is *hung*, not slow.

Invariants:

1. The classification is a pure function of the observations so far: no
   clock is read here (``now_ms`` is passed in).
2. A replica incarnation's ticks count from its first observation after the
   object last moved, was ahead of the clock or could not be read; one first
   seen later (restarted) starts at its count then.
3. An object, once caught up, stays caught up (uppers never go back).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HEARTBEAT_VERSION = 1
#: A phase's replicas are hung if each of them used, or waited for, less than ``IDLE_CPU_S``
#: of CPU in the last ``IDLE_WINDOW_S`` seconds (an idle Spark driver uses about 1 in that
#: time; a replica starting or ticking on a loaded machine, tens).
IDLE_WINDOW_S = 180.0
IDLE_CPU_S = 3.0
#: The replicas' CPU is sampled this often (seconds).
CPU_SAMPLE_S = 5.0

Incarnation = tuple[int, int]
"""A replica process: ``(replica, incarnation)``."""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """What one replica incarnation writes after each tick."""

    incarnation: int
    ticks: int
    failing: int = 0
    last_error: str = ""

    @staticmethod
    def path(run_dir: Path, replica: int) -> Path:
        """Where replica ``replica`` of a run writes its heartbeat."""
        return run_dir / f"heartbeat-{replica}.json"

    def write(self, path: Path) -> None:
        """Replace ``path`` atomically with this heartbeat."""
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"version": HEARTBEAT_VERSION, **asdict(self)}))
        os.replace(tmp, path)

    @staticmethod
    def read(path: Path) -> Heartbeat | None:
        """The heartbeat in ``path``; None if there is none yet (or another version)."""
        try:
            raw: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if raw.pop("version", None) != HEARTBEAT_VERSION:
            return None
        return Heartbeat(**raw)


@dataclass(frozen=True, slots=True)
class Stuck:
    """An object whose upper stood still for ``ticks`` ticks of a live replica process."""

    shard: str
    upper: int
    replica: Incarnation
    ticks: int


@dataclass
class _Watch:
    """A watched value and each replica process's ticks when it last changed (or when
    the process was first seen since)."""

    value: Any = None
    base: dict[Incarnation, int] = field(default_factory=dict)

    def changed(self, value: Any, ticks: Mapping[Incarnation, int]) -> None:
        """The value is ``value`` now: count every process's ticks from ``ticks``."""
        self.value, self.base = value, dict(ticks)

    def most_behind(self, ticks: Mapping[Incarnation, int]) -> tuple[Incarnation, int] | None:
        """The live process that finished the most ticks since the value last changed,
        with that count; None if no process is live."""
        for replica, n in ticks.items():
            self.base.setdefault(replica, n)
        behind = {r: n - self.base[r] for r, n in ticks.items()}
        worst = max(behind, key=lambda r: behind[r], default=None)
        return None if worst is None else (worst, behind[worst])


class Liveness:
    """The progress of ``shards`` towards an upper beyond ``target`` (see the module doc)."""

    def __init__(self, shards: list[str], target: int, stuck_ticks: int) -> None:
        if stuck_ticks < 1:
            raise ValueError(f"stuck_ticks must be positive, got {stuck_ticks}")
        self.target = target
        self.stuck_ticks = stuck_ticks
        self._watches = {s: _Watch() for s in shards}
        self._caught_up: set[str] = set()
        self.verdicts: dict[str, str] = {s: "starting" for s in shards}

    def observe(
        self, uppers: Mapping[str, int | None], ticks: Mapping[Incarnation, int], now_ms: int
    ) -> list[Stuck]:
        """Take one observation; the objects now stuck.

        ``uppers``: each shard's upper (None if it could not be read now: that
        shard's count of ticks starts again); ``ticks``: the finished ticks of every
        live replica process, by ``(replica, incarnation)``.
        """
        stuck = []
        for shard, watch in self._watches.items():
            upper = uppers.get(shard)
            if shard in self._caught_up:
                continue
            if upper is None:  # unknown now: count its ticks from the next reading
                watch.changed(watch.value, ticks)
                continue
            if upper > self.target:
                self._caught_up.add(shard)
                self.verdicts[shard] = "caught up"
                continue
            if upper != watch.value or upper >= now_ms:
                moved = watch.value is not None
                watch.changed(upper, ticks)
                if upper >= now_ms:
                    self.verdicts[shard] = "waiting"
                elif moved:
                    self.verdicts[shard] = "advancing"
                continue
            worst = watch.most_behind(ticks)
            if worst is None or worst[1] == 0:
                self.verdicts[shard] = "starting"
            elif worst[1] < self.stuck_ticks:
                self.verdicts[shard] = "advancing"
            else:
                self.verdicts[shard] = "stuck"
                stuck.append(Stuck(shard, upper, *worst))
        return stuck

    def caught_up(self) -> bool:
        return len(self._caught_up) == len(self._watches)


class Unchanged:
    """A value the replicas should change (the input a source has not read yet), judged
    by ticks as an upper is: :meth:`observe` gives the live process that finished the most
    ticks since the value last changed, with that count."""

    def __init__(self) -> None:
        self._watch = _Watch()
        self._seen = False

    def observe(
        self, value: Any, ticks: Mapping[Incarnation, int]
    ) -> tuple[Incarnation, int] | None:
        """Take one observation of ``value`` (compared with ``!=``) and of the finished
        ticks of every live replica process; None if no process is live."""
        if not self._seen or value != self._watch.value:
            self._seen = True
            self._watch.changed(value, ticks)
        return self._watch.most_behind(ticks)


class PhaseTicks:
    """The ticks the replica processes finished in one phase, from their heartbeats, and
    the CPU their processes used.

    Per replica incarnation: its ticks when first seen in the phase, the most
    seen since (one that dies in the phase keeps its count), and whether a tick
    of it failed in the phase (a heartbeat past the first one seen says its last
    ticks failed), with the error. Its CPU-seconds (its process and their
    children: the Spark JVM), each sample with the time (``time.monotonic``'s)
    it was taken at, kept for the last ``IDLE_WINDOW_S``.
    """

    def __init__(self) -> None:
        self._first: dict[Incarnation, int] = {}
        self._last: dict[Incarnation, int] = {}
        self._failed: dict[Incarnation, str] = {}
        self._cpu: dict[Incarnation, list[tuple[float, float]]] = {}
        self._raw: dict[Incarnation, float] = {}  # the last CPU-seconds read of each
        self._since: float | None = None  # the first CPU sample's time
        self._now = 0.0  # the last one's

    def observe(
        self,
        beats: Mapping[Incarnation, Heartbeat],
        cpu: Mapping[Incarnation, float] | None = None,
        now: float | None = None,
    ) -> dict[Incarnation, int]:
        """Take the heartbeats of the live, unpaused replica processes (and, if given, the
        CPU-seconds their processes used so far, sampled at ``now``: a time, as
        ``time.monotonic`` gives); their ticks now."""
        for incarnation, beat in beats.items():
            self._first.setdefault(incarnation, beat.ticks)
            self._last[incarnation] = max(self._last.get(incarnation, beat.ticks), beat.ticks)
            if beat.failing and beat.ticks > self._first[incarnation]:
                self._failed[incarnation] = beat.last_error
        if cpu is not None:
            assert now is not None, "a CPU sample needs its time"
            self._since = now if self._since is None else self._since
            self._now = now
            for incarnation, seconds in cpu.items():
                # Summed by increase: a sample lower than the last (a process that
                # exited) is no time going back.
                samples = self._cpu.setdefault(incarnation, [])
                raw = self._raw.get(incarnation, seconds)
                used = samples[-1][1] + max(seconds - raw, 0.0) if samples else seconds
                self._raw[incarnation] = seconds
                samples.append((now, used))
                # The last sample at or before the window's start stays: it is the base.
                while len(samples) > 1 and samples[1][0] <= now - IDLE_WINDOW_S:
                    samples.pop(0)
        return {incarnation: beat.ticks for incarnation, beat in beats.items()}

    def cpu_due(self, now: float) -> bool:
        """Whether a CPU sample is due at ``now`` (every :data:`CPU_SAMPLE_S`)."""
        return self._since is None or now - self._now >= CPU_SAMPLE_S

    def done(self) -> int:
        """The ticks all replica processes finished in the phase so far."""
        return sum(n - self._first[i] for i, n in self._last.items())

    def idle(self) -> dict[Incarnation, float] | None:
        """The CPU-seconds each replica process sampled in the last ``IDLE_WINDOW_S`` used
        in it, if every one used less than ``IDLE_CPU_S`` (the replicas are hung); else
        None, and None while the samples span less than the window (too soon to say).
        A replica first sampled inside the window counts all it used (from 0
        CPU-seconds): it started there, or was paused or unreadable before. Either
        way the doubt goes to *slow*."""
        if self._since is None or self._now - self._since < IDLE_WINDOW_S:
            return None
        start = self._now - IDLE_WINDOW_S
        used: dict[Incarnation, float] = {}
        for incarnation, samples in self._cpu.items():
            if samples[-1][0] < start:
                continue  # not seen in the window (exited or paused before it)
            base = samples[0][1] if samples[0][0] <= start else 0.0
            used[incarnation] = samples[-1][1] - base
        if not used or any(seconds >= IDLE_CPU_S for seconds in used.values()):
            return None
        return used

    def slow(self, stuck_ticks: int) -> bool:
        """Whether the phase saw too few ticks to tell a loaded machine from a hang: fewer
        than ``stuck_ticks`` in all, none failing, and the replicas not :meth:`idle`."""
        return self.done() < stuck_ticks and not self._failed and self.idle() is None

    def errors(self) -> str:
        """The failed ticks' last errors, one per replica incarnation, and the replicas'
        CPU if they are :meth:`idle` (hung)."""
        failed = [f"replica {i} incarnation {n} failed: {e}" for (i, n), e in self._failed.items()]
        idle = self.idle()
        if idle is not None:
            used = ", ".join(
                f"replica {i} incarnation {n} {seconds:.1f} s" for (i, n), seconds in idle.items()
            )
            failed.append(
                f"hung, not slow: in the last {IDLE_WINDOW_S:.0f} s the replicas' processes "
                f"used or waited for {used} of CPU (less than {IDLE_CPU_S:.0f} s each)"
            )
        return "; ".join(failed)


__all__ = [
    "HEARTBEAT_VERSION",
    "Heartbeat",
    "Incarnation",
    "Liveness",
    "PhaseTicks",
    "Stuck",
    "Unchanged",
]
