"""The nemesis runner: replicas of a pipeline as OS processes, faults, recovery, verify.

One *run*:

```
 fresh location ──> start N replica processes ──> all objects written once (warm-up)
      │
      ├─ fault phase (``fault_seconds``): the plan's faults, while the runner
      │  appends a new input file to the FILE source every ``INPUT_EVERY_S``
      │
      ├─ heal: faults off, paused replicas continued, dead ones restarted,
      │  the disk drained; target = max(now, every shard's upper) -- a
      │  forward clock jump may have pushed uppers past the wall clock
      │
      ├─ recovery: until every shard of the pipeline has an upper beyond the
      │  target (so it holds everything the sources had at the heal); the
      │  time this takes is the run's *recovery time*
      │
      ├─ input: until the FILE source's last binding covers every input file
      │  (verify reads only what the bindings name); never read once a live
      │  replica finished ``stuck_ticks`` ticks with it unread
      │
      ├─ drain the disk and stop the replicas (whatever ended the phases: no
      │  fault outlives them), then ``timeshard verify`` the location (a fresh
      │  process): every shard's invariants, every view against its query
      │  recomputed from scratch, the FILE upsert against last-value-per-key
      │
      └─ sum the fault journal: every kind in the plan was injected at least once
```

Stuck or slow. The warm-up and the recovery wait while every object is
*starting* or *advancing* (:mod:`timeshard.nemesis.liveness`), up to the
generous ``advancing_bound_s``; an object whose upper stands still, below
the wall clock, for ``stuck_ticks`` ticks of a live replica is *stuck*, and
fails the run at once, naming the object, its health status and error (from
``timeshard_status``) and the replicas' last errors. A machine under load
makes replicas slow to start and to tick; within ``advancing_bound_s`` that
is never a failure by itself. Past it, a phase fails; it is *slow*
(``RunResult.slow``) if the replicas finished too few ticks in it to tell a
loaded machine from a hang, none of them failing, and they kept using CPU
(a replica whose processes used almost none over the last minutes is hung,
not slow: :class:`~timeshard.nemesis.liveness.PhaseTicks`). So is the fault phase that
reaches its bound (``fault_seconds + advancing_bound_s``) with a kind of the
plan not injected yet, a fault still waiting for a replica that ticks.

The run's bound. The phases' bounds alone add up to hours (each phase waits
up to ``advancing_bound_s``, verify up to ``VERIFY_TIMEOUT_S``); a caller
with a deadline of its own (a CI test's timeout) gives ``run_bound_s``, the
longest one run may take from its start to the end of verify. The warm-up,
the fault phase, the recovery and the wait for the input then end by
``run_bound_s - FINISH_S`` (``FINISH_S``: the stop's ``STOP_TIMEOUT_S`` and
verify's floor ``VERIFY_FLOOR_S``); the phase that reaches it fails the run,
naming itself, and the run stops its replicas and verifies what is there, as
after any failure. Verify gets what is left of ``run_bound_s`` when it
starts, at least ``VERIFY_FLOOR_S`` and at most ``VERIFY_TIMEOUT_S``: a run
whose phases took long leaves verify less, not the phases less.

Injected, not just planned. Every fault is recorded where it is injected,
one line in the run's journal (``injected.jsonl``,
:class:`~timeshard.location.unreliable.FaultJournal`): the runner records
the kills, pauses, PostgreSQL restarts and the filling of the tmpfs; each
replica records the storage calls and the Spark task part reads and writes
it failed, the writes its ENOSPC wrapper refused and the first tick read of
each clock offset. A killed incarnation's lines survive it. A kind of the
plan with no line fails the run. So that a fault acts, a kill, a pause, an
unreliable window or a clock jump planned for a replica that does not tick --
killed, paused or still starting, which holds no lease and writes nothing --
goes to the next replica that does, or waits for one; and the fault phase
lasts until every fault has started and every window ended.

The pipeline (:func:`~timeshard.nemesis.pipeline.pipeline_spec`): a KEY
VALUE source and a FILE source of JSON lines, both with the UPSERT envelope,
and a view over each. (It is small on purpose: every replica runs all of it
on one core, and a tick costs a few Spark jobs per object whatever the
data.) The input files hold upserts, deletes (``{"id": k}``: every value
column null) and a few undecodable lines (err rows).

A run with a stuck object, or not caught up after ``advancing_bound_s``, or
with a planned kind never injected, or whose verify finds differences or
cannot run, or recomputes an object of the pipeline at fewer than
``MIN_VERIFIED_TIMES`` times (its notes say why), fails; the runner keeps
its directory (the blob copied out of the tmpfs, the journal, the replicas'
logs and heartbeats) and goes on with the next run.

Everything seeded is a function of ``(seed, run)``: the fault plan
(:mod:`timeshard.nemesis.plan`), the input files, each replica
incarnation's storage fault stream and its Spark tasks' fault seeds, and
verify's sampling.

Runs on the driver of nothing: the runner starts no Spark itself.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from timeshard.location import open_location
from timeshard.location.unreliable import FaultJournal
from timeshard.nemesis.config import (
    FINISH_S,
    STOP_TIMEOUT_S,
    VERIFY_FLOOR_S,
    VERIFY_TIMEOUT_S,
    NemesisConfig,
)
from timeshard.nemesis.control import JOURNAL, Control
from timeshard.nemesis.disk import BlobDisk
from timeshard.nemesis.liveness import Liveness, PhaseTicks, Stuck, Unchanged
from timeshard.nemesis.pipeline import InputWriter, pipeline_spec, unread_input
from timeshard.nemesis.plan import Fault, plan_faults
from timeshard.nemesis.reads import events, health, journaled, list_shards, upper, upper_or_none
from timeshard.nemesis.replica_slot import Replica, ticking, watched
from timeshard.nemesis.results import NemesisReport, RunResult, count_verified
from timeshard.persist import PersistClient

POLL_S = 0.1
WATCH_S = 0.5
MAX_EXITS = 5
TMPFS_MB = 256


class NemesisRunner:
    """Runs the runs of a :class:`NemesisConfig` (see the module doc)."""

    def __init__(self, config: NemesisConfig, log: Any = print, postgres: Any = None) -> None:
        """``postgres``: a started PostgresServer to use (default: start one when needed)."""
        self.config = config
        self.log = log
        self.postgres: Any = postgres
        self._own_postgres = postgres is None
        self.env = {
            **os.environ,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }
        #: When the current run's phases must end (``NemesisConfig.phases_deadline``).
        self._deadline = math.inf
        #: When the current run must have verified (``NemesisConfig.run_end``).
        self._run_end = math.inf

    def run(self) -> NemesisReport:
        config = self.config
        report = NemesisReport(config.seed)
        started = time.monotonic()
        try:
            run = 0
            while True:
                if config.runs is not None and run >= config.runs:
                    break
                budget = None if config.minutes is None else config.minutes * 60
                if budget is not None and time.monotonic() - started >= budget:
                    break
                report.runs.append(self.run_once(run))
                run += 1
        finally:
            if self.postgres is not None and self._own_postgres:
                self.postgres.cleanup()
        return report

    def _consensus_uri(self, run: int, run_dir: Path) -> str:
        if self.config.consensus_of(run) == "sqlite":
            return f"sqlite:///{run_dir / 'consensus.sqlite'}"
        if self.postgres is None:
            from timeshard.nemesis.postgres_server import PostgresServer

            self.postgres = PostgresServer()
            self.postgres.start()
        return str(self.postgres.isolated_dsn(prefix=f"nemesis{run}"))

    def run_once(self, run: int) -> RunResult:
        config = self.config
        t0 = time.monotonic()
        self._deadline = config.phases_deadline(t0)
        self._run_end = config.run_end(t0)
        run_dir = (config.directory / f"run-{run:03d}").resolve()
        if run_dir.exists():
            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True)
        disk = BlobDisk(run_dir / "disk")
        tmpfs = disk.mount(TMPFS_MB)
        if not tmpfs:
            disk.blob_root.mkdir(parents=True)
        result = RunResult(
            run,
            config.consensus_of(run),
            "tmpfs" if tmpfs else f"ENOSPC wrapper ({disk.why_not})",
            directory=str(run_dir),
        )
        events_dir = run_dir / "events"
        events_dir.mkdir()
        consensus_uri = self._consensus_uri(run, run_dir)
        blob_uri = f"file://{disk.blob_root}"
        spec = pipeline_spec(blob_uri, consensus_uri, events_dir)
        (run_dir / "pipeline.json").write_text(spec.model_dump_json(indent=1))
        plan = plan_faults(
            config.seed,
            run,
            replicas=config.replicas,
            seconds=config.fault_seconds,
            kinds=config.kinds_of(run),
        )
        (run_dir / "plan.json").write_text(json.dumps([f.to_json() for f in plan], indent=1))
        self.log(
            f"run {run}: {result.consensus} consensus, blob on {result.disk}, "
            f"{config.replicas} replicas, {len(plan)} faults in {config.fault_seconds:.0f} s"
        )
        rng = random.Random(f"timeshard-nemesis:{config.seed}:{run}:input")
        inputs = InputWriter(events_dir, rng)
        inputs.write()
        client = PersistClient(open_location(blob_uri, consensus_uri))
        from timeshard.controller import spec_shards

        shards = spec_shards(spec)
        replicas = [Replica(i, run_dir) for i in range(config.replicas)]
        planned: set[str] = set()  # the kinds to check for in the journal, once injected
        try:
            for r in replicas:
                r.set_control(Control())
                r.start(config.seed, self.env)
            warm_up = self._await(client, shards, 0, replicas, inputs, "warm-up", result)
            if warm_up is not None:
                self.log(f"run {run}: every object written after {warm_up:.1f} s")
                planned = {f.kind for f in plan}
                if self._fault_phase(plan, replicas, disk, inputs, result):
                    target = self._heal(client, replicas, disk)
                    result.recovery_s = self._await(
                        client, shards, target, replicas, None, "recovery", result
                    )
            if result.recovery_s is not None and self._await_input(
                client, events_dir, replicas, result
            ):
                self.log(f"run {run}: recovered in {result.recovery_s:.1f} s; verifying")
        except Exception as e:  # the run failed; say why, verify what is there, go on
            result.fail(f"{type(e).__name__}: {e}")
        finally:
            # Whatever ended the phases (the heal, the run's bound, an error), no fault
            # outlives them: the disk is drained before the replicas' closing writes and
            # verify; the stop's control carries no window and continues paused replicas.
            try:
                disk.drain()
            except OSError as e:  # the run's error too; the replicas stop and verify runs
                drained = f"the disk's ballast was not drained: {type(e).__name__}: {e}"
                result.fail(f"{result.error}; {drained}" if result.error else drained, result.slow)
            finally:  # a drain that fails leaves no replica running
                self._stop(replicas, result)
        self._count_injected(run_dir, planned, result)
        if result.error:
            self.log(f"run {run}: {result.error}")
        try:
            self._verify(blob_uri, consensus_uri, run_dir, run, shards, result)
        finally:
            if disk.mounted:
                if not result.ok:
                    shutil.copytree(disk.blob_root, run_dir / "blob-copy")
                disk.unmount()
        if result.ok:
            shutil.rmtree(run_dir, ignore_errors=True)
        result.seconds = time.monotonic() - t0
        self.log(
            f"run {run}: {'ok' if result.ok else 'FAILED'} in {result.seconds:.0f} s; "
            f"faults injected {dict(result.faults)}; unreliable calls and tasks failed "
            f"{dict(result.injected_calls)}; differences {result.differences}"
        )
        return result

    def _await(
        self,
        client: PersistClient,
        shards: list[str],
        target: int,
        replicas: list[Replica],
        inputs: InputWriter | None,
        phase: str,
        result: RunResult,
    ) -> float | None:
        """Seconds until every shard's upper is beyond ``target``; None (and the run's
        error set) if one is stuck, or if they are still advancing after the bound."""
        config = self.config
        started = time.monotonic()
        liveness = Liveness(shards, target, config.stuck_ticks)
        exits = {r.index: r.exits for r in replicas}
        logged = 0.0
        phase_ticks = PhaseTicks()
        while True:
            uppers = {s: upper_or_none(client, s) for s in shards}
            ticks = phase_ticks.observe(*watched(replicas, phase_ticks))
            stuck = liveness.observe(uppers, ticks, time.time_ns() // 1_000_000)
            if stuck:
                result.stuck = [self._describe(client, s, replicas) for s in stuck]
                result.fail(f"{phase}: stuck: " + " | ".join(result.stuck))
                return None
            if liveness.caught_up():
                return time.monotonic() - started
            waited = time.monotonic() - started
            if waited > config.advancing_bound_s or time.monotonic() > self._deadline:
                done, errors = phase_ticks.done(), phase_ticks.errors()
                why = (
                    f"still not caught up after {config.advancing_bound_s:.0f} s"
                    if waited > config.advancing_bound_s
                    else self._out_of_time(phase, started).removeprefix(f"{phase}: ")
                )
                result.fail(
                    f"{phase}: {why}, "
                    f"in which the replicas finished {done} ticks (never stuck): "
                    f"{liveness.verdicts}; uppers {uppers}, target {target}"
                    + (f"; {errors}" if errors else ""),
                    # too few ticks to tell from a hang
                    phase if phase_ticks.slow(config.stuck_ticks) else "",
                )
                return None
            if waited - logged >= 30:
                logged = waited
                self.log(f"  {phase} after {waited:.0f} s: {liveness.verdicts}")
            if not self._restart_exited(replicas, exits, phase, result):
                return None
            if inputs is not None:
                inputs.maybe_write()
            time.sleep(WATCH_S)

    def _restart_exited(
        self, replicas: list[Replica], exits: dict[int, int], phase: str, result: RunResult
    ) -> bool:
        """Restart the ``replicas`` whose process exited with no fault killing it (a JVM
        crash, say), counted in ``result.self_exits``; False (and the run's error set) if
        one exited more than ``MAX_EXITS`` times in ``phase`` (``exits``: each replica's
        exits when the phase began)."""
        for r in replicas:
            if r.proc is not None and not r.alive():
                r.exits += 1
                result.self_exits += 1
                if r.exits - exits[r.index] > MAX_EXITS:
                    result.fail(
                        f"{phase}: replica {r.index} exited {MAX_EXITS + 1} times by "
                        f"itself; see {r.run_dir}/replica-{r.index}-*.log"
                    )
                    return False
                self.log(f"  replica {r.index} exited by itself; restarting it")
                r.start(self.config.seed, self.env)
        return True

    def _await_input(
        self, client: PersistClient, directory: Path, replicas: list[Replica], result: RunResult
    ) -> bool:
        """Wait until the FILE source's last binding covers every file of ``directory``;
        False (and the run's error set) if it does not.

        Verify reads only what the bindings name: it would not see input never
        read. A tick that listed the files before the heal may be what
        recovered, so the next ones read the rest. Judged by ticks, as an upper
        is (:class:`~timeshard.nemesis.liveness.Unchanged`): the input is never
        read (a defect) once a live replica finished ``stuck_ticks`` ticks since
        the unread input last changed; a machine under load makes ticks rarer,
        not the verdict. It waits while the replicas tick: if none finishes a
        tick for ``advancing_bound_s``, or the run's bound comes, the phase
        (``input``) fails, slow by the rule of the others. A replica that exits by
        itself is restarted and counted, as in the other phases.
        """
        config = self.config
        started = last_tick_at = time.monotonic()
        exits = {r.index: r.exits for r in replicas}
        phase_ticks, still = PhaseTicks(), Unchanged()
        last_done = 0
        while True:
            # Before the read: the ticks preceded it.
            ticks = phase_ticks.observe(*watched(replicas, phase_ticks))
            unread = unread_input(client, "events", directory)
            if not unread:
                return True
            worst = still.observe(unread, ticks)  # read on: ticks count from there
            never = f"input: recovered, but the FILE source never read {unread}"
            if worst is not None and worst[1] >= config.stuck_ticks:
                (replica, incarnation), n = worst
                result.fail(
                    f"{never} in {n} ticks of replica {replica} (incarnation {incarnation})"
                )
                return False
            now = time.monotonic()
            if phase_ticks.done() != last_done:
                last_done, last_tick_at = phase_ticks.done(), now
            if now - last_tick_at > config.advancing_bound_s or now > self._deadline:
                why = (
                    self._out_of_time("input", started).removeprefix("input: ")
                    if now > self._deadline
                    else f"no replica finished a tick in {config.advancing_bound_s:.0f} s"
                )
                errors = phase_ticks.errors()
                result.fail(
                    f"{never}: {why}, the replicas finished {last_done} ticks in the phase"
                    + (f"; {errors}" if errors else ""),
                    "input" if phase_ticks.slow(config.stuck_ticks) else "",
                )
                return False
            if not self._restart_exited(replicas, exits, "input", result):
                return False
            time.sleep(WATCH_S)

    def _out_of_time(self, phase: str, started: float) -> str:
        """The error of ``phase`` (started at ``started``) cut short by the run's bound."""
        return (
            f"{phase}: the run's bound of {self.config.run_bound_s:.0f} s ran out "
            f"{time.monotonic() - started:.0f} s into the phase (its last {FINISH_S:.0f} s "
            "at least are kept to stop the replicas and verify)"
        )

    def _describe(self, client: PersistClient, stuck: Stuck, replicas: list[Replica]) -> str:
        """A stuck object, its health and the replicas' last errors, in one line."""
        replica, incarnation = stuck.replica
        text = (
            f"{stuck.shard}: upper {stuck.upper} did not move in {stuck.ticks} ticks of "
            f"replica {replica} (incarnation {incarnation})"
        )
        row = health(client).get(stuck.shard)
        if row is not None:
            text += f"; status {row.get('status')!r}: {row.get('error')}"
        for r in replicas:
            beat = r.heartbeat()
            if beat.last_error:
                text += (
                    f"; replica {r.index} last error ({beat.failing} failing ticks in a row): "
                    f"{beat.last_error}"
                )
        return text

    def _fault_phase(
        self,
        plan: list[Fault],
        replicas: list[Replica],
        disk: BlobDisk,
        inputs: InputWriter,
        result: RunResult,
    ) -> bool:
        """Inject ``plan``; last ``fault_seconds``, and on until every window started and ended.

        A fault of a replica (kill, pause, unreliable, clock jump) that no
        replica could take when it was due waits for one that ticks; the phase
        goes on while one waits or a window (the full disk's too) is open, up to
        ``advancing_bound_s`` more (then what still waits is skipped). False
        (and the run's error set) if the run's bound cut it short.

        A phase that ends at either bound with a kind of the plan not injected
        yet fails the run (that kind is never injected); it is *slow*
        (``RunResult.slow`` = ``"faults"``) by the rule the other phases use: the
        replicas finished fewer than ``stuck_ticks`` ticks in it, none failing, and
        kept using CPU (:meth:`~timeshard.nemesis.liveness.PhaseTicks.slow`).
        """
        config = self.config
        start = time.monotonic()
        pending = list(plan)
        waiting: list[Fault] = []
        full = _DiskWindow()
        phase_ticks = PhaseTicks()
        while True:
            phase_ticks.observe(*watched(replicas, phase_ticks))
            now = time.monotonic() - start
            self._hold_windows(now, replicas)
            full.hold(now, replicas[0].run_dir, disk)
            is_open = any(now < max(r.unreliable_until, r.clock_until) for r in replicas)
            is_open = is_open or full.until > 0
            if now >= config.fault_seconds and not pending and not waiting and not is_open:
                break
            if now >= config.fault_seconds + config.advancing_bound_s:
                result.skipped.update(f.kind for f in waiting)
                self._undone_faults(plan, replicas[0].run_dir, phase_ticks, result)
                break
            if time.monotonic() > self._deadline:
                result.skipped.update(f.kind for f in waiting)
                self._undone_faults(plan, replicas[0].run_dir, phase_ticks, result)
                cut = self._out_of_time("faults", start)
                result.fail(f"{cut}; {result.error}" if result.error else cut, result.slow)
                return False
            still_waiting = []
            for fault in waiting:
                if not self._start_fault(fault, now, replicas):
                    still_waiting.append(fault)
            waiting = still_waiting
            while pending and pending[0].at_s <= now:
                fault = pending.pop(0)
                outcome = self._inject(fault, now, replicas, disk)
                if outcome == "waiting":
                    self.log("    (no replica ticks now: it waits for one)")
                    waiting.append(fault)
                elif fault.kind == "disk_full":
                    full.open(now, fault.duration_s, replicas[0].run_dir, disk)
            for r in replicas:
                if r.paused_until and now >= r.paused_until:
                    r.paused_until = 0.0
                    r.signal(signal.SIGCONT)
                if r.proc is not None and not r.alive():
                    self.log(f"  replica {r.index} exited by itself; restarting it")
                    result.self_exits += 1  # no fault kills it: a crash, reported
                    r.proc, r.restart_at = None, now
                if r.proc is None and now >= r.restart_at:
                    r.start(config.seed, self.env)
                unreliable = now < r.unreliable_until
                r.set_control(
                    Control(
                        unreliable_rate=r.rate if unreliable else 0.0,
                        unreliable_until_ms=r.unreliable_until_ms if unreliable else 0,
                        disk_full=full.until > 0 and not disk.mounted,
                        clock_offset_ms=r.clock_offset_ms if now < r.clock_until else 0,
                    )
                )
            inputs.maybe_write()
            time.sleep(POLL_S)
        return True

    def _undone_faults(
        self, plan: list[Fault], run_dir: Path, phase_ticks: PhaseTicks, result: RunResult
    ) -> None:
        """At the end of a fault phase cut short: the kinds of ``plan`` the journal has no
        line of yet into the run's error, and the phase ``slow`` if its replicas barely
        ticked (too few ticks to tell a loaded machine from a hang, none failing) and
        kept using CPU (:meth:`~timeshard.nemesis.liveness.PhaseTicks.slow`)."""
        injected = FaultJournal.counts(run_dir / JOURNAL) if (run_dir / JOURNAL).exists() else {}
        missing = sorted({f.kind for f in plan} - set(injected))
        if not missing:
            return
        errors = phase_ticks.errors()
        result.fail(
            f"faults: {missing} not injected when the phase ended, waiting for a ticking "
            f"replica or for one to act on its window, in which the replicas finished "
            f"{phase_ticks.done()} ticks" + (f"; {errors}" if errors else ""),
            "faults" if phase_ticks.slow(self.config.stuck_ticks) else "",
        )

    def _inject(self, fault: Fault, now: float, replicas: list[Replica], disk: BlobDisk) -> str:
        """Start ``fault``: ``"injected"``, or ``"waiting"`` (a kill, pause or window that
        no replica can take now).

        Records in the journal what the runner itself injects (module doc). A
        kill or pause, like a window, hits a replica that ticks: one still
        starting holds no lease and writes nothing, so killing it would count
        as a kill and interrupt no write.
        """
        self.log(f"  fault {fault.describe()}")
        run_journal = FaultJournal(str(replicas[0].run_dir / JOURNAL))
        if fault.kind == "pg_restart":
            assert self.postgres is not None, "pg_restart needs PostgreSQL consensus"
            self.postgres.restart()
            run_journal.record("pg_restart", "restart")
            return "injected"
        if fault.kind == "disk_full":
            if disk.mounted:
                taken = disk.fill()
                run_journal.record("disk_full", f"tmpfs ballast of {taken} bytes")
            return "injected"
        return "injected" if self._start_fault(fault, now, replicas) else "waiting"

    def _start_fault(self, fault: Fault, now: float, replicas: list[Replica]) -> bool:
        """Kill or pause a replica, or open an unreliable window or a clock jump for
        ``duration_s`` from ``now``; False if no replica ticks now.

        Where the fault's replica does not tick (killed, paused, still
        starting), it goes to the next one that does: a window acts only on a
        replica that ticks (the replica records it when it does), and a kill
        or pause interrupts one's writes.
        """
        assert fault.replica is not None, fault
        r = ticking(replicas, fault.replica)
        if r is None:
            return False
        if r.index != fault.replica or now > fault.at_s + 1.0:
            self.log(f"    ({fault.kind} starts at {now:.1f} s on replica {r.index})")
        if fault.kind == "kill":
            assert r.proc is not None
            r.signal(signal.SIGKILL)
            r.proc.wait()
            r.journal().record("kill", "sigkill")
            r.proc, r.paused_until = None, 0.0
            r.restart_at = now + fault.duration_s
        elif fault.kind == "pause":
            r.signal(signal.SIGSTOP)
            r.journal().record("pause", "sigstop")
            r.paused_until = now + fault.duration_s
        elif fault.kind == "unreliable":
            r.rate, r.unreliable_until = fault.rate, now + fault.duration_s
            r.unreliable_until_ms = time.time_ns() // 1_000_000 + int(fault.duration_s * 1000)
            r.unreliable_before = journaled(r.run_dir, "unreliable", r.index)
        else:
            r.clock_offset_ms, r.clock_until = fault.clock_jump_ms, now + fault.duration_s
            r.clock_jumps_before = journaled(r.run_dir, "clock_jump", r.index)
        return True

    def _hold_windows(self, now: float, replicas: list[Replica]) -> None:
        """Keep a window on until its replica has acted on it.

        A replica reads its clock once per tick, and a tick under load can
        outlast a clock jump's window: then the jump would never act. Likewise
        a replica that ticks slowly makes few storage calls in an unreliable
        window, and at a rate of 0.1 none of them may fail. Either window stays
        open (second by second) until the journal shows the jump, or a call or
        task it failed.
        """
        for r in replicas:
            if r.clock_jumps_before >= 0 and now >= r.clock_until:
                if journaled(r.run_dir, "clock_jump", r.index) > r.clock_jumps_before:
                    r.clock_jumps_before = -1
                else:
                    r.clock_until = now + 1.0
            if r.unreliable_before >= 0 and now >= r.unreliable_until:
                if journaled(r.run_dir, "unreliable", r.index) > r.unreliable_before:
                    r.unreliable_before = -1
                else:
                    r.unreliable_until = now + 1.0
                    r.unreliable_until_ms = time.time_ns() // 1_000_000 + 1000

    def _heal(self, client: PersistClient, replicas: list[Replica], disk: BlobDisk) -> int:
        """Stop every fault; the time every shard's upper must pass to count as recovered."""
        disk.drain()
        for r in replicas:
            if r.paused_until:
                r.paused_until = 0.0
                r.signal(signal.SIGCONT)
            r.set_control(Control())
            if not r.alive():
                r.proc = None
                r.start(self.config.seed, self.env)
        target = time.time_ns() // 1_000_000
        for shard in list_shards(client):
            target = max(target, upper(client, shard))
        return target

    def _stop(self, replicas: list[Replica], result: RunResult) -> None:
        """Stop every replica: continued if paused, its control's windows off and its stop
        flag set, killed if it has not exited within ``STOP_TIMEOUT_S``; the replicas'
        start times and failed ticks from their logs into ``result``."""
        for r in replicas:
            r.signal(signal.SIGCONT)
            r.set_control(Control(stop=True))
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for r in replicas:
            if r.proc is None:
                continue
            try:
                r.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                r.proc.kill()
                r.proc.wait()
        for log in sorted(replicas[0].run_dir.glob("replica-*.log")):
            for event in events(log):
                if event["event"] == "ready":
                    result.replica_ready_s.append(float(event["after_s"]))
                elif event["event"] == "error":
                    result.replica_errors += 1

    def _count_injected(self, run_dir: Path, planned: set[str], result: RunResult) -> None:
        """Sum the journal into ``result``; a planned kind never injected is an error."""
        entries = FaultJournal.read(run_dir / JOURNAL)
        result.faults = Counter(e["kind"] for e in entries)
        result.injected_calls = Counter(e["how"] for e in entries if e["kind"] == "unreliable")
        result.never_injected = sorted(k for k in planned if not result.faults[k])
        if result.never_injected:
            missing = f"planned but never injected: {result.never_injected}"
            result.error = f"{result.error}; {missing}" if result.error else missing

    def _verify(
        self,
        blob_uri: str,
        consensus_uri: str,
        run_dir: Path,
        run: int,
        shards: list[str],
        result: RunResult,
    ) -> None:
        """Run ``timeshard verify`` on the location; its findings, and at how many times it
        recomputed each of the pipeline's ``shards``, into ``result``.

        Its timeout is what is left of the run's bound, at least :data:`VERIFY_FLOOR_S`
        and at most :data:`VERIFY_TIMEOUT_S` (module doc)."""
        seed = self.config.seed * 1000 + run
        args = [sys.executable, "-m", "timeshard", "verify", "--blob", blob_uri]
        args += ["--consensus", consensus_uri, "--json", "--seed", str(seed)]
        left = self._run_end - time.monotonic()
        timeout = min(VERIFY_TIMEOUT_S, max(VERIFY_FLOOR_S, left))
        try:
            done = subprocess.run(
                args, capture_output=True, text=True, env=self.env, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            result.verify_error = f"verify did not finish in {timeout:.0f} s"
            self.log(f"run {run}: {result.verify_error}")
            return
        (run_dir / "verify.json").write_text(done.stdout)
        (run_dir / "verify.log").write_text(done.stderr)
        try:
            found = json.loads(done.stdout)
        except ValueError:
            result.verify_error = f"verify exited {done.returncode}: {done.stderr[-1500:]}"
            self.log(f"run {run}: {result.verify_error}")
            return
        result.differences = len(found["findings"])
        result.verify_ok = done.returncode == 0 and bool(found["ok"])
        count_verified(found, shards, result)
        for few in result.few_times:
            self.log(f"run {run}: {few}")
        for finding in found["findings"][:5]:
            self.log(f"  difference: {json.dumps(finding)[:600]}")


@dataclass
class _DiskWindow:
    """The full disk's window: open (``until`` > 0) from a ``disk_full`` fault until
    ``until``, then drained.

    A full tmpfs is journalled by the runner when it fills it. The ENOSPC
    wrapper is journalled by a replica when it refuses a write, which a replica
    in a long tick (a loaded machine) may not attempt in the planned window:
    then the window stays open, second by second, until the journal shows one
    (as :meth:`NemesisRunner._hold_windows` holds the others).
    """

    until: float = 0.0
    #: ``disk_full`` lines in the journal when the wrapper's window opened (-1: none open).
    before: int = -1

    def open(self, now: float, duration_s: float, run_dir: Path, disk: BlobDisk) -> None:
        self.until = max(self.until, now + duration_s)
        if not disk.mounted and self.before < 0:
            self.before = journaled(run_dir, "disk_full")

    def hold(self, now: float, run_dir: Path, disk: BlobDisk) -> None:
        """Close the window if it is over (and acted on), draining the disk."""
        if not self.until or now < self.until:
            return
        if self.before >= 0 and journaled(run_dir, "disk_full") <= self.before:
            self.until = now + 1.0
            return
        self.until, self.before = 0.0, -1
        disk.drain()


__all__ = ["NemesisRunner"]
