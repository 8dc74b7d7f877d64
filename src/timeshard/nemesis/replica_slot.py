"""The runner's handle on a replica: its process, incarnation and fault windows.

A :class:`Replica` is one slot of a run: the runner starts its process
(:mod:`timeshard.nemesis.replica`), starts it again after a kill or a crash
as a new *incarnation*, signals it (SIGKILL, SIGSTOP, SIGCONT), writes its
control file (:class:`~timeshard.nemesis.control.Control`) and keeps its
fault windows. What the runner watches of the replicas is read here too:
each live, unpaused replica's heartbeat
(:class:`~timeshard.nemesis.liveness.Heartbeat`) and the CPU its processes
used (:func:`cpu_seconds`), for a phase's
:class:`~timeshard.nemesis.liveness.PhaseTicks` to observe
(:func:`watched`), and the replica that ticks, to take a fault
(:func:`ticking`).

Runs in the runner's process; each replica is an OS process of its own,
with its own Spark.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from timeshard.location.unreliable import FaultJournal
from timeshard.nemesis.control import JOURNAL, Control
from timeshard.nemesis.liveness import Heartbeat, Incarnation, PhaseTicks


class Replica:
    """One replica slot: its current process, incarnation and fault windows."""

    def __init__(self, index: int, run_dir: Path) -> None:
        self.index = index
        self.run_dir = run_dir
        self.control_file = run_dir / f"control-{index}.json"
        self.proc: subprocess.Popen[bytes] | None = None
        self.incarnation = -1
        self.exits = 0
        self.paused_until = 0.0
        self.restart_at = 0.0
        self.unreliable_until = 0.0
        self.unreliable_until_ms = 0
        self.rate = 0.0
        self.clock_until = 0.0
        self.clock_offset_ms = 0
        #: Clock jumps in the journal when this slot's window opened (-1: none open).
        self.clock_jumps_before = -1
        #: Failed calls and tasks in the journal when its unreliable window opened (-1: none).
        self.unreliable_before = -1
        self.control = Control()
        #: The CPU the current process's tree used (:meth:`cpu_seconds`): each process's
        #: last reading, their sum by increase, and the process they are of.
        self._cpu_seen: dict[Any, float] = {}
        self._cpu_used = 0.0
        self._cpu_of: subprocess.Popen[bytes] | None = None

    def start(self, seed: int, env: dict[str, str]) -> None:
        self.incarnation += 1
        log = (self.run_dir / f"replica-{self.index}-{self.incarnation}.log").open("wb")
        args = [str(self.run_dir), str(self.index), str(self.incarnation), str(seed)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "timeshard.nemesis.replica", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        log.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu_seconds(self) -> float | None:
        """The CPU-seconds (user and system) the current process and its descendants used
        so far, and the seconds their threads waited, runnable, for a CPU (a loaded
        machine's share of them: :func:`run_queue_seconds`), by the increase of each
        process since it was last seen (a new one from 0); None if the process is gone.

        Summed by process, not as the tree's total: PySpark's daemon ignores SIGCHLD,
        so a Python worker that exits takes its CPU out of the tree's total (no
        ``children_*`` time of a reaper records it). What a process used after its last
        sample is missed, and all of one that started and ended between two samples:
        both count towards *hung*, by little (Spark reuses its workers). A process is
        known by psutil's identity (its pid and start time, which on Linux does not
        move with the wall clock), so a reused pid is a new process.
        """
        import psutil

        assert self.proc is not None
        if self._cpu_of is not self.proc:  # a new incarnation: its own count
            self._cpu_seen, self._cpu_used, self._cpu_of = {}, 0.0, self.proc
        try:
            parent = psutil.Process(self.proc.pid)
            processes = [parent, *parent.children(recursive=True)]
        except psutil.Error:
            return None  # it exited after alive(): the next look restarts it
        seen: dict[Any, float] = {}
        for process in processes:
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                seen[process] = times.user + times.system + run_queue_seconds(process.pid)
                self._cpu_used += max(seen[process] - self._cpu_seen.get(process, 0.0), 0.0)
        self._cpu_seen = seen
        return self._cpu_used

    def signal(self, sig: signal.Signals) -> None:
        if self.alive():
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)

    def set_control(self, control: Control) -> None:
        if control != self.control:
            control.write(self.control_file)
            self.control = control

    def heartbeat(self) -> Heartbeat:
        """The current incarnation's last heartbeat (no ticks yet if it wrote none)."""
        beat = Heartbeat.read(Heartbeat.path(self.run_dir, self.index))
        if beat is None or beat.incarnation != self.incarnation:
            return Heartbeat(self.incarnation, 0)
        return beat

    def journal(self) -> FaultJournal:
        """The journal, labelled with this slot's current incarnation."""
        labels = (("replica", self.index), ("incarnation", self.incarnation))
        return FaultJournal(str(self.run_dir / JOURNAL), labels)


def _beats(replicas: list[Replica]) -> dict[Incarnation, Heartbeat]:
    """The current heartbeats of the live, unpaused ``replicas``, by incarnation."""
    return {
        (r.index, r.incarnation): r.heartbeat()
        for r in replicas
        if r.alive() and not r.paused_until
    }


def watched(
    replicas: list[Replica], phase_ticks: PhaseTicks
) -> tuple[dict[Incarnation, Heartbeat], dict[Incarnation, float] | None, float]:
    """What a phase's ``phase_ticks`` observes: the live, unpaused ``replicas``'
    heartbeats, the CPU-seconds their processes used so far if a sample is due (every
    :data:`~timeshard.nemesis.liveness.CPU_SAMPLE_S`: reading every process costs
    milliseconds, and the runner polls every 0.1-0.5 s), and the time now."""
    now = time.monotonic()
    cpu = cpu_seconds(replicas) if phase_ticks.cpu_due(now) else None
    return _beats(replicas), cpu, now


def cpu_seconds(replicas: list[Replica]) -> dict[Incarnation, float]:
    """The CPU-seconds (user and system) each live, unpaused replica's processes (its own,
    the Spark JVM's, the Python workers') used, or waited for, since its incarnation
    started, summed by process as it was seen (:meth:`Replica.cpu_seconds`)."""
    out: dict[Incarnation, float] = {}
    for r in replicas:
        if r.proc is not None and r.alive() and not r.paused_until:
            seconds = r.cpu_seconds()
            if seconds is not None:
                out[(r.index, r.incarnation)] = seconds
    return out


def run_queue_seconds(pid: int) -> float:
    """The seconds the live threads of process ``pid`` have waited, runnable, for a CPU:
    the second field of each thread's ``/proc/<pid>/task/<tid>/schedstat`` (Linux,
    nanoseconds). 0 where the kernel keeps no such count or the process is gone.

    A replica starved of CPU by a loaded machine waits there; a hung one, blocked
    on something that never comes, does not (it is not runnable). A thread's wait
    leaves the sum when the thread exits: that counts towards *hung*, by little.
    """
    total = 0
    with contextlib.suppress(OSError), os.scandir(f"/proc/{pid}/task") as tasks:
        for task in tasks:
            stat = os.path.join(task.path, "schedstat")
            with contextlib.suppress(OSError, ValueError, IndexError), open(stat) as f:
                total += int(f.read().split()[1])
    return total / 1e9


def ticking(replicas: list[Replica], first: int) -> Replica | None:
    """The first replica from index ``first`` on (cyclically) that is alive, not paused
    and has finished a tick in its current incarnation; None if none has."""
    for i in range(len(replicas)):
        r = replicas[(first + i) % len(replicas)]
        if r.alive() and not r.paused_until and r.heartbeat().ticks > 0:
            return r
    return None


__all__ = [
    "Replica",
    "cpu_seconds",
    "run_queue_seconds",
    "ticking",
    "watched",
]
