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
    upper: int | None = None
    base: dict[Incarnation, int] = field(default_factory=dict)


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
                watch.base = dict(ticks)
                continue
            if upper > self.target:
                self._caught_up.add(shard)
                self.verdicts[shard] = "caught up"
                continue
            if upper != watch.upper or upper >= now_ms:
                moved = watch.upper is not None
                watch.upper, watch.base = upper, dict(ticks)
                if upper >= now_ms:
                    self.verdicts[shard] = "waiting"
                elif moved:
                    self.verdicts[shard] = "advancing"
                continue
            for replica, n in ticks.items():
                watch.base.setdefault(replica, n)
            behind = {r: n - watch.base[r] for r, n in ticks.items()}
            worst = max(behind, key=lambda r: behind[r], default=None)
            if worst is None or behind[worst] == 0:
                self.verdicts[shard] = "starting"
            elif behind[worst] < self.stuck_ticks:
                self.verdicts[shard] = "advancing"
            else:
                self.verdicts[shard] = "stuck"
                stuck.append(Stuck(shard, upper, worst, behind[worst]))
        return stuck

    def caught_up(self) -> bool:
        return len(self._caught_up) == len(self._watches)


__all__ = ["HEARTBEAT_VERSION", "Heartbeat", "Incarnation", "Liveness", "Stuck"]
