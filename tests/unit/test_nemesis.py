"""The nemesis's pure parts: the seeded plan, the control file, the faulty location, inputs,
the fault journal, the task-side fault injector and the stuck-or-slow classifier."""

from __future__ import annotations

import contextlib
import errno
import json
import multiprocessing
import os
import pickle
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from timeshard import Determinate, InvalidUsage
from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.location.unreliable import FaultJournal, KeyedFaults
from timeshard.nemesis import (
    KINDS,
    Control,
    FaultyLocation,
    NemesisConfig,
    NemesisRunner,
    RunResult,
    plan_faults,
)
from timeshard.nemesis.disk import BlobDisk
from timeshard.nemesis.liveness import Heartbeat, Liveness, Stuck
from timeshard.nemesis.pipeline import input_lines, pipeline_spec, unread_input


def test_the_same_seed_gives_the_same_plan_and_another_seed_another() -> None:
    plans = [plan_faults(7, run, replicas=3, seconds=120) for run in range(3)]
    assert plans == [plan_faults(7, run, replicas=3, seconds=120) for run in range(3)]
    assert plans[0] != plans[1]
    assert plans[0] != plan_faults(8, 0, replicas=3, seconds=120)


@pytest.mark.parametrize("seed", range(20))
def test_a_plan_has_every_kind_in_order_and_in_bounds(seed: int) -> None:
    plan = plan_faults(seed, 0, replicas=2, seconds=40)
    assert {f.kind for f in plan} == set(KINDS)
    assert [f.at_s for f in plan] == sorted(f.at_s for f in plan)
    assert all(0 <= f.at_s < 40 for f in plan)
    for f in plan:
        if f.kind in ("pg_restart", "disk_full"):
            assert f.replica is None
        else:
            assert f.replica in (0, 1)
        if f.kind == "unreliable":
            assert 0.05 <= f.rate <= 0.10
        if f.kind == "clock_jump":
            assert 2_000 <= abs(f.clock_jump_ms) < 20_000


def test_plan_kinds_can_be_restricted() -> None:
    plan = plan_faults(1, 0, replicas=2, seconds=60, kinds=("kill", "pause"))
    assert {f.kind for f in plan} == {"kill", "pause"}


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"kinds": ("kill", "flood")}, "flood"),
        ({"replicas": 0}, "0"),
        ({"seconds": 0}, "0"),
    ],
)
def test_bad_plan_arguments_are_invalid_usage(kwargs: dict[str, object], named: str) -> None:
    args: dict[str, object] = {"replicas": 2, "seconds": 10.0, **kwargs}
    with pytest.raises(InvalidUsage, match=named):
        plan_faults(0, 0, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"replicas": 9},
        {"consensus": "mysql"},
        {"runs": 2, "minutes": 3.0},
        {"runs": 0},
        {"runs": None, "minutes": -1.0},
        {"kinds": ("meteor",)},
        {"stuck_ticks": 0},
        {"advancing_bound_s": 0.0},
        {"run_bound_s": 400.0},  # no time left for the faults after stopping and verify
    ],
)
def test_bad_nemesis_config_is_invalid_usage(tmp_path: Path, kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidUsage):
        NemesisConfig(directory=tmp_path, **kwargs)  # type: ignore[arg-type]


def test_sqlite_runs_skip_the_postgres_restart(tmp_path: Path) -> None:
    config = NemesisConfig(directory=tmp_path, consensus="both", runs=2)
    assert config.consensus_of(0) == "sqlite" and config.consensus_of(1) == "postgres"
    assert "pg_restart" not in config.kinds_of(0)
    assert config.kinds_of(1) == KINDS


def test_control_round_trips_and_a_missing_file_means_no_faults(tmp_path: Path) -> None:
    path = tmp_path / "control-0.json"
    assert Control.read(path) == Control()
    control = Control(
        unreliable_rate=0.07, unreliable_until_ms=123, disk_full=True, clock_offset_ms=-5000
    )
    control.write(path)
    assert Control.read(path) == control
    path.write_text(json.dumps({"version": 99}))
    with pytest.raises(InvalidUsage, match="version"):
        Control.read(path)


def test_faulty_location_obeys_the_control(tmp_path: Path) -> None:
    journal = FaultJournal(str(tmp_path / "injected.jsonl"), (("replica", 0),))
    faulty = FaultyLocation(Location(MemoryBlob(), MemoryConsensus()), seed="s", journal=journal)
    blob = faulty.location.blob
    blob.set("a", b"1")  # no faults by default
    assert faulty.task_faults() is None
    faulty.apply(Control(disk_full=True))
    with pytest.raises(Determinate, match="No space left"):
        blob.set("b", b"2")
    assert blob.get("a") == b"1"  # reads still work on a full disk
    faulty.apply(Control(unreliable_rate=1.0))
    with pytest.raises(Determinate):
        faulty.location.consensus.head("x")
    faults = faulty.task_faults()
    assert faults is not None and faults.rate == 1.0 and faults.journal == journal
    faulty.apply(Control(clock_offset_ms=60_000))
    assert faulty.clock() - faulty.clock_offset_ms <= faulty.clock()
    assert faulty.clock_offset_ms == 60_000
    faulty.apply(Control())
    blob.set("c", b"3")
    assert faulty.clock() > 0
    assert sum(faulty.injected().values()) >= 1
    # Recorded where injected: one refused write, one failed call, one clock offset read
    # (however often the clock was read with it).
    assert FaultJournal.counts(journal.path) == {"disk_full": 1, "unreliable": 1, "clock_jump": 1}
    assert FaultJournal.counts(journal.path, by="how") == {
        "blob.enospc": 1,
        "consensus.determinate": 1,
        "+60000 ms": 1,
    }


def test_task_faults_are_seeded_per_job_and_end_with_their_window() -> None:
    def seeds(seed: str) -> list[int]:
        faulty = FaultyLocation(Location(MemoryBlob(), MemoryConsensus()), seed=seed)
        faulty.apply(Control(unreliable_rate=0.1))
        return [f.seed for f in (faulty.task_faults() for _ in range(5)) if f is not None]

    assert seeds("a") == seeds("a") and len(set(seeds("a"))) == 5
    assert seeds("a") != seeds("b")
    faulty = FaultyLocation(Location(MemoryBlob(), MemoryConsensus()), seed="a")
    faulty.apply(Control(unreliable_rate=1.0, unreliable_until_ms=1))  # a window long over
    faults = faulty.task_faults()
    assert faults is not None and faults.until_ms == 1
    assert {faults.draw(f"write:{i}:0") for i in range(50)} == {"ok"}


def test_keyed_faults_are_a_pure_function_of_seed_and_key() -> None:
    keys = [f"{op}:{p}:{a}" for op in ("write", "read") for p in range(200) for a in range(2)]
    draws = [KeyedFaults(7, 0.1).draw(k) for k in keys]
    assert draws == [KeyedFaults(7, 0.1).draw(k) for k in keys]
    assert draws != [KeyedFaults(8, 0.1).draw(k) for k in keys]
    counts = Counter(draws)
    assert 40 < counts["determinate"] + counts["indeterminate"] < 120, counts
    assert counts["determinate"] > 0 and counts["indeterminate"] > 0
    assert {KeyedFaults(7, 0.0).draw(k) for k in keys} == {"ok"}
    assert {KeyedFaults(7, 1.0).draw(k) for k in keys} == {"determinate", "indeterminate"}
    faults = KeyedFaults(7, 0.1, until_ms=10**15, journal=FaultJournal("/j", (("replica", 1),)))
    assert pickle.loads(pickle.dumps(faults)) == faults
    with pytest.raises(InvalidUsage, match="rate"):
        KeyedFaults(1, 1.5)


def test_a_keyed_fault_is_recorded_then_raised_as_an_io_error(tmp_path: Path) -> None:
    journal = FaultJournal(str(tmp_path / "j.jsonl"), (("replica", 2), ("incarnation", 5)))
    with pytest.raises(OSError, match=r"injected task_read\.determinate failure") as caught:
        KeyedFaults(1, 1.0, journal=journal).fail("task_read.determinate", "a read")
    assert caught.value.errno == errno.EIO
    assert FaultJournal.read(journal.path) == [
        {"kind": "unreliable", "how": "task_read.determinate", "replica": 2, "incarnation": 5}
    ]


def _task_key(faults: KeyedFaults, fault: str, op: str) -> KeyedFaults:
    """``faults`` with the first seed whose draw for task 0, attempt 0 of ``op`` is ``fault``."""
    for seed in range(1000):
        candidate = KeyedFaults(seed, faults.rate, faults.until_ms, faults.journal)
        if candidate.draw(f"{op}:0:0") == fault:
            return candidate
    raise AssertionError(f"no seed below 1000 draws {fault}")


def _batches() -> list[pa.RecordBatch]:
    table = pa.table({"_c0": [1, 2], "_c1": [10, 10], "_c2": [1, 1], "_c3": [None, None]})
    batches: list[pa.RecordBatch] = table.cast(
        pa.schema(
            [("_c0", pa.int64()), ("_c1", pa.int64()), ("_c2", pa.int64()), ("_c3", pa.string())]
        )
    ).to_batches()
    return batches


@pytest.mark.parametrize("fault", ["ok", "determinate", "indeterminate"])
def test_a_part_write_task_fails_before_or_after_writing_as_drawn(
    tmp_path: Path, fault: str
) -> None:
    from timeshard.spark.parts import PartWriter

    journal = FaultJournal(str(tmp_path / "j.jsonl"))
    faults = _task_key(KeyedFaults(0, 0.5, journal=journal), fault, "write")
    schema = pa.schema([("k", pa.int64())]).serialize().to_pybytes()
    root = tmp_path / "blob"
    writer = PartWriter(f"file://{root}", "s/w/b", schema, faults)
    assert pickle.loads(pickle.dumps(writer)) == writer
    if fault == "ok":
        [meta] = list(writer(iter(_batches())))
        assert meta.num_rows == 1
    else:
        with pytest.raises(OSError, match=f"task_write.{fault}"):
            list(writer(iter(_batches())))
    written = [p for p in root.rglob("*.parquet")] if root.exists() else []
    assert len(written) == (0 if fault == "determinate" else 1)
    assert not [p for p in root.rglob(".tmp-*")] if root.exists() else True
    expected = {} if fault == "ok" else {f"task_write.{fault}": 1}
    assert FaultJournal.counts(journal.path, by="how") == expected


@pytest.mark.parametrize("fault", ["ok", "determinate", "indeterminate"])
def test_a_part_read_task_fails_before_any_row_or_passes_rows_through(
    tmp_path: Path, fault: str
) -> None:
    from timeshard.spark.parts import PartReadFaults

    journal = FaultJournal(str(tmp_path / "j.jsonl"))
    reader = PartReadFaults(_task_key(KeyedFaults(0, 0.5, journal=journal), fault, "read"))
    if fault == "ok":
        assert list(reader(iter(_batches()))) == _batches()
    else:
        with pytest.raises(OSError, match=f"task_read.{fault}"):
            next(reader(iter(_batches())))
    assert FaultJournal.counts(journal.path) == ({} if fault == "ok" else {"unreliable": 1})


def _record_many(args: tuple[str, int]) -> None:
    path, incarnation = args
    journal = FaultJournal(path, (("replica", 0), ("incarnation", incarnation)))
    for i in range(200):
        journal.record("unreliable" if i % 2 else "kill", f"how{i % 3}")


def test_the_journal_sums_every_process_and_incarnation(tmp_path: Path) -> None:
    path = str(tmp_path / "injected.jsonl")
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        pool.map(_record_many, [(path, i) for i in range(4)])
    entries = FaultJournal.read(path)
    assert len(entries) == 800
    assert FaultJournal.counts(path) == {"unreliable": 400, "kill": 400}
    assert FaultJournal.counts(path, by="incarnation") == {str(i): 200 for i in range(4)}
    with open(path, "a") as f:
        f.write('{"kind": "kill", "ho')  # a writer killed mid-line is not counted
    assert len(FaultJournal.read(path)) == 800
    assert FaultJournal.read(tmp_path / "none.jsonl") == []


def test_a_planned_kind_never_injected_fails_the_run(tmp_path: Path) -> None:
    runner = NemesisRunner(NemesisConfig(directory=tmp_path))
    for incarnation in (0, 1):  # the first incarnation was killed: its lines still count
        journal = FaultJournal(str(tmp_path / "injected.jsonl"), (("incarnation", incarnation),))
        journal.record("unreliable", "blob.determinate")
        journal.record("unreliable", "task_write.indeterminate")
    FaultJournal(str(tmp_path / "injected.jsonl")).record("kill", "sigkill")
    result = RunResult(0, "sqlite", "tmpfs")
    runner._count_injected(tmp_path, {"kill", "unreliable", "pause"}, result)
    assert result.faults == {"unreliable": 4, "kill": 1}
    assert result.injected_calls == {"blob.determinate": 2, "task_write.indeterminate": 2}
    assert result.never_injected == ["pause"]
    assert "never injected: ['pause']" in result.error and not result.ok
    complete = RunResult(0, "sqlite", "tmpfs")
    runner._count_injected(tmp_path, {"kill", "unreliable"}, complete)
    assert complete.never_injected == [] and complete.error == ""


def test_heartbeat_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "heartbeat-0.json"
    assert Heartbeat.read(path) is None
    beat = Heartbeat(3, 17, 2, "OSError: injected")
    beat.write(path)
    assert Heartbeat.read(path) == beat


NOW = 10_000_000


def _watch(
    liveness: Liveness, history: Sequence[tuple[int | None, dict[tuple[int, int], int]]]
) -> list[Stuck]:
    """Feed ``(upper of "v", ticks)`` observations, one second apart; the first stuck found."""
    for i, (upper, ticks) in enumerate(history):
        stuck = liveness.observe({"v": upper}, ticks, NOW + 1000 * i)
        if stuck:
            return stuck
    return []


def test_an_object_that_keeps_advancing_slowly_is_never_stuck() -> None:
    liveness = Liveness(["v"], target=NOW + 100, stuck_ticks=5)
    # A tick every 2 observations, the upper moving every 4 ticks: slow, never stuck.
    history = [(NOW - 5000 + (i // 8) * 10, {(0, 0): i // 2}) for i in range(200)]
    assert _watch(liveness, history) == []
    assert liveness.verdicts == {"v": "advancing"} and not liveness.caught_up()
    assert liveness.observe({"v": NOW + 101}, {(0, 0): 100}, NOW) == []
    assert liveness.caught_up() and liveness.verdicts == {"v": "caught up"}
    assert liveness.observe({"v": 5}, {(0, 0): 1000}, NOW) == []  # caught up stays so


def test_an_object_still_for_n_ticks_of_a_live_replica_is_stuck() -> None:
    liveness = Liveness(["v"], target=NOW, stuck_ticks=5)
    history = [(NOW - 5000, {(0, 0): 10 + i, (1, 2): 3}) for i in range(10)]
    assert _watch(liveness, history) == [Stuck("v", NOW - 5000, (0, 0), 5)]
    assert liveness.verdicts == {"v": "stuck"}


def test_replicas_starting_slowly_are_waited_for() -> None:
    liveness = Liveness(["v"], target=0, stuck_ticks=3)
    # Nothing written and no replica has finished a tick, for a long time: starting.
    assert _watch(liveness, [(0, {(0, 0): 0, (1, 0): 0})] * 500) == []
    assert liveness.verdicts == {"v": "starting"}
    # Then one replica ticks, failing, with nothing written: stuck after 3 of its ticks.
    history = [(0, {(0, 0): i, (1, 0): 0}) for i in range(1, 5)]
    assert _watch(liveness, history) == [Stuck("v", 0, (0, 0), 3)]


def test_a_restarted_replica_counts_from_when_it_is_first_seen() -> None:
    liveness = Liveness(["v"], target=NOW, stuck_ticks=4)
    history: list[tuple[int | None, dict[tuple[int, int], int]]] = [(NOW - 9000, {(0, 0): 50})]
    history += [(NOW - 9000, {(0, 1): 100 + i}) for i in range(4)]  # new incarnation at 100
    assert _watch(liveness, history) == []
    assert _watch(liveness, [(NOW - 9000, {(0, 1): 104})]) == [Stuck("v", NOW - 9000, (0, 1), 4)]


def test_an_upper_ahead_of_the_clock_waits_and_an_unreadable_one_counts_again() -> None:
    liveness = Liveness(["v"], target=NOW + 60_000, stuck_ticks=3)
    ahead = NOW + 20_000  # a forward clock jump pushed it there
    history: list[tuple[int | None, dict[tuple[int, int], int]]]
    history = [(ahead, {(0, 0): i}) for i in range(20)]  # 20 ticks, 20 s: still ahead
    history += [(None, {(0, 0): 100 + i}) for i in range(10)]  # consensus down: no count
    assert _watch(liveness, history) == []
    assert liveness.verdicts == {"v": "waiting"}
    # Readable again and past the clock: it counts from there; 2 ticks are not stuck, 3 are.
    assert liveness.observe({"v": ahead}, {(0, 0): 110}, ahead + 1) == []
    assert liveness.observe({"v": ahead}, {(0, 0): 111}, ahead + 2) == []
    assert liveness.observe({"v": ahead}, {(0, 0): 112}, ahead + 3) == [
        Stuck("v", ahead, (0, 0), 3)
    ]


def test_a_value_unchanged_counts_the_ticks_since_it_last_changed() -> None:
    from timeshard.nemesis.liveness import Unchanged

    still = Unchanged()
    assert still.observe({"a": "0/9"}, {}) is None  # no live replica
    assert still.observe({"a": "0/9"}, {(0, 0): 7}) == ((0, 0), 0)  # first seen at 7
    assert still.observe({"a": "0/9"}, {(0, 0): 9, (1, 0): 2}) == ((0, 0), 2)
    assert still.observe({"a": "3/9"}, {(0, 0): 10, (1, 0): 3}) == ((0, 0), 0)  # read on
    assert still.observe({"a": "3/9"}, {(0, 0): 11, (1, 0): 6}) == ((1, 0), 3)


def test_phase_ticks_count_every_incarnation_from_when_it_was_first_seen() -> None:
    from timeshard.nemesis.liveness import PhaseTicks

    phase = PhaseTicks()
    assert phase.observe({(0, 0): Heartbeat(0, 5)}) == {(0, 0): 5}
    phase.observe({(0, 0): Heartbeat(0, 7), (1, 1): Heartbeat(1, 2)})
    phase.observe({(1, 1): Heartbeat(1, 3)})  # replica 0 died: it keeps its 2 ticks
    assert phase.done() == 3 and phase.slow(4) and not phase.slow(3) and phase.errors() == ""
    phase.observe({(1, 1): Heartbeat(1, 4, failing=1, last_error="boom")})
    assert not phase.slow(100) and phase.errors() == "replica 1 incarnation 1 failed: boom"


def test_phase_ticks_call_replicas_hung_that_used_almost_no_cpu_over_the_window() -> None:
    """Too few ticks cannot tell a loaded machine from a hang; the replicas' CPU can. Each
    replica used less than IDLE_CPU_S in the last IDLE_WINDOW_S: hung, not slow. Not
    before the samples span the window; not if one replica is busy; a process first seen
    inside the window counts from 0 (it is starting)."""
    from timeshard.nemesis.liveness import IDLE_WINDOW_S, PhaseTicks

    beats = {(0, 0): Heartbeat(0, 0), (1, 0): Heartbeat(0, 0)}
    phase = PhaseTicks()
    for now in range(0, int(IDLE_WINDOW_S), 10):  # both idle: 0.1 CPU-second per 10 s
        phase.observe(beats, {(0, 0): 20 + now / 100, (1, 0): 30 + now / 100}, float(now))
        assert phase.idle() is None and phase.slow(3)  # too soon to say
    phase.observe(beats, {(0, 0): 22.0, (1, 0): 32.0}, IDLE_WINDOW_S + 5)
    assert phase.idle() == {(0, 0): pytest.approx(2.0), (1, 0): pytest.approx(2.0)}
    assert not phase.slow(3) and "hung, not slow" in phase.errors()

    busy = PhaseTicks()  # replica 1 keeps using CPU: a loaded machine, slow
    for now in range(0, int(IDLE_WINDOW_S) + 20, 10):
        busy.observe(beats, {(0, 0): 20.0, (1, 0): 30 + now / 2}, float(now))
    assert busy.idle() is None and busy.slow(3) and busy.errors() == ""

    restarted = PhaseTicks()  # replica 1's new incarnation started inside the window
    for now in range(0, int(IDLE_WINDOW_S) + 20, 10):
        cpu = {(0, 0): 20.0, (1, 0): 30.0} if now < 100 else {(0, 0): 20.0, (1, 1): 4.0}
        restarted.observe(beats, cpu, float(now))
    assert restarted.idle() is None and restarted.slow(3)

    exited = PhaseTicks()  # replica 0's busy child exits: its CPU leaves the later samples
    for now in range(0, int(IDLE_WINDOW_S) + 20, 10):
        cpu = {(0, 0): 10.0 + now / 10 if now < 150 else 1.0, (1, 0): 30.0}
        exited.observe(beats, cpu, float(now))
    assert exited.idle() is None


def test_cpu_seconds_count_a_replica_process_and_its_children(tmp_path: Path) -> None:
    """A replica's CPU is its process's and its children's (the Spark JVM's, the Python
    workers'): a process whose child spins is busy, a shell whose child sleeps is not;
    what a child used stays counted after it exits (the busy parent ignores SIGCHLD, as
    PySpark's daemon does, so no ``children_*`` time of a reaper records it); a paused
    replica is not sampled (a SIGSTOPped process uses none, by the fault, not by a hang)."""
    from timeshard.nemesis.replica_slot import Replica, cpu_seconds

    spin = "import time\nwhile time.process_time() < 1.5: pass"  # 1.5 CPU-seconds, then exits
    daemon = (  # as PySpark's daemon: its workers are reaped by the kernel, unrecorded
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
        f"subprocess.Popen([sys.executable, '-c', {spin!r}])\n"
        "time.sleep(120)"
    )
    busy, idle, paused = Replica(0, tmp_path), Replica(1, tmp_path), Replica(2, tmp_path)
    busy.proc = subprocess.Popen([sys.executable, "-c", daemon])
    idle.proc = subprocess.Popen(["sh", "-c", "sleep 120; true"])
    paused.proc = subprocess.Popen(["sleep", "120"])
    paused.paused_until = 1.0
    for r in (busy, idle, paused):
        r.incarnation = 0
    try:
        first = cpu_seconds([busy, idle, paused])
        assert set(first) == {(0, 0), (1, 0)}
        deadline = time.monotonic() + 120
        spun = 0.0
        while spun < 0.5:  # the spinning child has used some CPU
            assert time.monotonic() < deadline, "the spinning child used no CPU in 120 s"
            time.sleep(0.1)
            spun = cpu_seconds([busy])[(0, 0)] - first[(0, 0)]
        while _children(busy.proc.pid):
            assert time.monotonic() < deadline, "the spinning child did not end in 120 s"
            time.sleep(0.1)  # until the spinner has exited
        last = cpu_seconds([busy, idle, paused])
        # The exited child's CPU stays, counted once: its 1.5 s and the parents' starts.
        assert spun <= last[(0, 0)] - first[(0, 0)] < 2.5
        assert last[(1, 0)] - first[(1, 0)] < 0.5
    finally:
        for r in (busy, idle, paused):
            assert r.proc is not None
            subprocess.run(["pkill", "-P", str(r.proc.pid)], check=False)  # the children
            r.proc.kill()
            r.proc.wait()


def test_a_replica_starved_of_cpu_counts_the_time_it_waited_for_it(tmp_path: Path) -> None:
    """A replica on a loaded machine waits, runnable, for a CPU: that wait counts with the
    CPU it used (a starved replica is slow, not hung). Here its spinning process shares
    one CPU with another spinner, so it waits while the other runs: what
    :func:`cpu_seconds` counts exceeds the CPU the process used."""
    import psutil

    from timeshard.nemesis.replica_slot import Replica, cpu_seconds, run_queue_seconds

    cpu = sorted(os.sched_getaffinity(0))[0]
    spin = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"
    starved = Replica(0, tmp_path)
    starved.incarnation = 0
    other = subprocess.Popen([sys.executable, "-c", spin])
    starved.proc = subprocess.Popen([sys.executable, "-c", spin])
    try:
        first = cpu_seconds([starved])[(0, 0)]
        process = psutil.Process(starved.proc.pid)
        deadline = time.monotonic() + 120
        used = 0.0
        while used < 0.5:  # the process has used some CPU, and waited while the other ran
            assert time.monotonic() < deadline, "the spinner used no CPU in 120 s"
            time.sleep(0.1)
            times = process.cpu_times()
            used = times.user + times.system
        waited = run_queue_seconds(starved.proc.pid)
        counted = cpu_seconds([starved])[(0, 0)] - first
        assert waited > 0.05
        assert counted >= used + waited - first - 0.05
        assert run_queue_seconds(-1) == 0.0  # no such process: nothing counted
    finally:
        for p in (other, starved.proc):
            p.kill()
            p.wait()


def _children(pid: int) -> list[Any]:
    """The processes whose parent is ``pid`` that run Python (the spinner)."""
    import psutil

    out = []
    for child in psutil.Process(pid).children():
        with contextlib.suppress(psutil.Error):
            if "python" in child.name():
                out.append(child)
    return out


def test_input_lines_are_seeded_and_hold_deletes_and_bad_lines() -> None:
    lines = input_lines(random.Random(3), 2000)
    assert lines == input_lines(random.Random(3), 2000)
    decoded = []
    bad = 0
    for line in lines:
        try:
            decoded.append(json.loads(line))
        except ValueError:
            bad += 1
    deletes = sum(set(d) == {"id"} for d in decoded)
    assert 20 < bad < 120 and 120 < deletes < 320


def test_pipeline_spec_is_a_valid_declaration(tmp_path: Path) -> None:
    from timeshard.controller import spec_shards
    from timeshard.spec import RunSpec

    spec = pipeline_spec("file:///tmp/b", "sqlite:///tmp/c.db", tmp_path)
    again = RunSpec.model_validate_json(spec.model_dump_json())
    assert again == spec
    assert spec_shards(spec) == ["kv", "events", "kv_by_prefix", "events_by_grp"]


def test_unread_input_names_the_files_the_last_binding_does_not_cover(tmp_path: Path) -> None:
    """Verify reads the input only up to the bindings: a source that stopped short of its
    files, or never listed one, passed it. The runner checks the last binding itself."""
    from timeshard.persist import PersistClient
    from timeshard.storage.reclock import Remap

    events = tmp_path / "events"
    events.mkdir()
    for name, text in [("part-00000.jsonl", "a\nb\n"), ("part-00001.jsonl", "c\n")]:
        (events / name).write_text(text)
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    remap = Remap(client, "events.remap")
    remap.mint(3, {"part-00000.jsonl": 2})
    assert unread_input(client, "events", events) == {
        "part-00000.jsonl": "2/4",
        "part-00001.jsonl": "0/2",
    }
    remap.mint(5, {"part-00000.jsonl": 4, "part-00001.jsonl": 2})
    assert unread_input(client, "events", events) == {}


def test_a_full_tmpfs_refuses_writes_until_drained(tmp_path: Path) -> None:
    disk = BlobDisk(tmp_path / "disk")
    if not disk.mount(4):
        pytest.skip(f"this machine cannot mount a tmpfs here: {disk.why_not}")
    try:
        assert disk.fill() > 0
        assert disk.fill() == 0  # a second fault while the disk is full
        with pytest.raises(OSError, match="No space left"):
            (disk.blob_root / "x").write_bytes(b"y" * 65536)
        disk.drain()
        (disk.blob_root / "x").write_bytes(b"y" * 65536)
        assert [p.name for p in disk.blob_root.iterdir()] == ["x"]
    finally:
        disk.unmount()
    assert not disk.mounted


def test_a_window_goes_to_a_ticking_replica_or_waits_for_one(tmp_path: Path) -> None:
    from timeshard.nemesis.plan import Fault
    from timeshard.nemesis.replica_slot import Replica

    replicas = [Replica(i, tmp_path) for i in range(3)]
    runner = NemesisRunner(NemesisConfig(directory=tmp_path), log=lambda line: None)
    jump = Fault(1.0, "clock_jump", 0, 5.0, clock_jump_ms=3000)
    window = Fault(1.0, "unreliable", 2, 5.0, rate=0.1)
    try:
        for r in replicas:
            r.incarnation = 0
            r.proc = subprocess.Popen(["sleep", "60"])
        assert runner._inject(jump, 1.0, replicas, BlobDisk(tmp_path)) == "waiting"  # no ticks
        Heartbeat(0, 1).write(Heartbeat.path(tmp_path, 1))
        Heartbeat(0, 1).write(Heartbeat.path(tmp_path, 2))
        assert runner._start_fault(jump, 2.0, replicas)
        assert [r.clock_offset_ms for r in replicas] == [0, 3000, 0]
        assert replicas[1].clock_until == 7.0
        assert runner._inject(window, 2.0, replicas, BlobDisk(tmp_path)) == "injected"
        assert [r.rate for r in replicas] == [0.0, 0.0, 0.1]  # its own replica ticks
        Heartbeat(1, 0).write(Heartbeat.path(tmp_path, 2))  # restarted, not ticking yet
        replicas[2].incarnation = 1
        assert runner._start_fault(window, 3.0, replicas)
        assert replicas[0].rate == 0.0 and replicas[1].rate == 0.1  # the next one that ticks
    finally:
        for r in replicas:
            assert r.proc is not None
            r.proc.kill()
            r.proc.wait()


def test_a_kill_or_pause_hits_a_ticking_replica_or_waits_for_one(tmp_path: Path) -> None:
    """A kill of a replica still starting (no lease held, nothing written) counted as the
    run's kill: a run could pass "kill injected" without interrupting a single write."""
    from timeshard.nemesis.control import JOURNAL
    from timeshard.nemesis.plan import Fault
    from timeshard.nemesis.replica_slot import Replica

    replicas = [Replica(i, tmp_path) for i in range(2)]
    runner = NemesisRunner(NemesisConfig(directory=tmp_path), log=lambda line: None)
    kill, pause = Fault(1.0, "kill", 0, 5.0), Fault(1.0, "pause", 0, 5.0)
    try:
        for r in replicas:
            r.incarnation = 0
            r.proc = subprocess.Popen(["sleep", "60"])
        assert runner._inject(kill, 1.0, replicas, BlobDisk(tmp_path)) == "waiting"
        assert all(r.alive() for r in replicas)
        Heartbeat(0, 1).write(Heartbeat.path(tmp_path, 1))  # replica 1 ticks; 0 starts
        assert runner._start_fault(kill, 2.0, replicas)
        assert replicas[0].alive() and not replicas[1].alive()
        assert replicas[1].restart_at == 7.0
        assert not runner._start_fault(pause, 2.0, replicas)  # none ticks now
        Heartbeat(0, 1).write(Heartbeat.path(tmp_path, 0))
        assert runner._start_fault(pause, 3.0, replicas)
        assert replicas[0].paused_until == 8.0
        assert FaultJournal.counts(tmp_path / JOURNAL) == Counter({"kill": 1, "pause": 1})
    finally:
        for r in replicas:
            if r.proc is not None:
                r.signal(signal.SIGCONT)
                r.proc.kill()
                r.proc.wait()


@contextlib.contextmanager
def one_ticking_replica(tmp_path: Path) -> Iterator[tuple[NemesisRunner, list[Any]]]:
    """A runner and one replica slot whose process lives and has ticked (a heartbeat)."""
    from timeshard.nemesis.replica_slot import Replica

    replica = Replica(0, tmp_path)
    replica.incarnation = 0
    replica.proc = subprocess.Popen(["sleep", "60"])
    try:
        Heartbeat(0, 1).write(Heartbeat.path(tmp_path, 0))
        yield NemesisRunner(NemesisConfig(directory=tmp_path), log=lambda line: None), [replica]
    finally:
        replica.proc.kill()
        replica.proc.wait()


def test_a_clock_jump_stays_on_until_its_replica_has_read_it(tmp_path: Path) -> None:
    from timeshard.nemesis.control import JOURNAL
    from timeshard.nemesis.plan import Fault

    with one_ticking_replica(tmp_path) as (runner, replicas):
        jump = Fault(1.0, "clock_jump", 0, 5.0, clock_jump_ms=-4000)
        assert runner._start_fault(jump, 1.0, replicas)
        runner._hold_windows(3.0, replicas)
        assert replicas[0].clock_until == 6.0  # still inside its planned window
        runner._hold_windows(6.5, replicas)  # a long tick never read the clock
        assert replicas[0].clock_until == 7.5
        other = FaultJournal(str(tmp_path / JOURNAL), (("replica", 1), ("incarnation", 0)))
        other.record("clock_jump", "-4000 ms")  # another replica's jump says nothing of this
        runner._hold_windows(7.6, replicas)
        assert replicas[0].clock_until == 8.6
        replicas[0].journal().record("clock_jump", "-4000 ms")
        runner._hold_windows(8.7, replicas)  # read: the window may close now
        assert replicas[0].clock_until == 8.6 and replicas[0].clock_jumps_before == -1


def test_an_unreliable_window_stays_on_until_it_has_failed_a_call(tmp_path: Path) -> None:
    """A slow replica may make no failing call in the planned window (one CI run
    planned ``unreliable`` and never injected it): the window holds until one fails."""
    from timeshard.nemesis.plan import Fault

    with one_ticking_replica(tmp_path) as (runner, replicas):
        journal = replicas[0].journal()
        journal.record("unreliable", "blob.get")  # an earlier window's
        window = Fault(1.0, "unreliable", 0, 5.0, rate=0.1)
        assert runner._start_fault(window, 1.0, replicas)
        assert replicas[0].unreliable_before == 1
        runner._hold_windows(3.0, replicas)
        assert replicas[0].unreliable_until == 6.0
        before_ms = time.time_ns() // 1_000_000
        runner._hold_windows(6.5, replicas)  # nothing failed yet: one more second
        assert replicas[0].unreliable_until == 7.5
        assert replicas[0].unreliable_until_ms >= before_ms + 1000
        journal.record("unreliable", "consensus.compare_and_set")
        runner._hold_windows(8.0, replicas)  # a call failed: the window may close now
        assert replicas[0].unreliable_until == 7.5 and replicas[0].unreliable_before == -1


def test_replicas_that_exit_by_themselves_are_reported() -> None:
    """They were restarted with no trace in the result: a JVM crashing on its own under the
    faults passed unseen."""
    from timeshard.nemesis.results import NemesisReport

    runs = [RunResult(0, "sqlite", "tmpfs", self_exits=2, replica_errors=1)]
    runs.append(RunResult(1, "sqlite", "tmpfs", self_exits=1))
    summary = NemesisReport(7, runs).to_json()
    assert (summary["self_exits"], summary["replica_errors"]) == (3, 1)
    assert summary["per_run"][0]["self_exits"] == 2


def test_the_recovery_target_waits_for_an_upper_it_cannot_read_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard's upper that could not be read (consensus restarting) counted as 0: the
    recovery target could fall below that shard's upper, and its recovery passed unmet."""
    from timeshard.errors import ExternalError
    from timeshard.nemesis import reads
    from timeshard.persist import PersistClient

    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    writer = client.open_writer("s", pa.schema([("v", pa.int64())]))
    ahead = time.time_ns() // 1_000_000 + 3_600_000  # an upper an hour ahead of the clock
    writer.append([], 0, ahead)
    state = client.state
    failures = [ExternalError("consensus is restarting")] * 2
    monkeypatch.setattr(reads.time, "sleep", lambda s: None)

    def flaky(shard: str) -> Any:
        if failures:
            raise failures.pop()
        return state(shard)

    monkeypatch.setattr(client, "state", flaky)
    assert reads.upper(client, "s") == ahead


class FakeTime:
    """The runner's clock: ``sleep`` moves it on and calls ``on_sleep`` with the time."""

    def __init__(self, on_sleep: Any) -> None:
        self.now = 0.0
        self.on_sleep = on_sleep

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.on_sleep(self.now)

    def time_ns(self) -> int:
        return time.time_ns()


def patch_clock(monkeypatch: pytest.MonkeyPatch, clock: FakeTime) -> None:
    """Make ``clock`` the time of the runner and of the modules it watches a run with (the
    replicas' CPU samples, the input's writes, the reads' retries)."""
    from timeshard.nemesis import pipeline, reads, replica_slot, runner

    for module in (runner, replica_slot, pipeline, reads):
        monkeypatch.setattr(module, "time", clock)


def test_a_disk_full_window_of_the_enospc_wrapper_stays_on_until_it_refused_a_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no tmpfs is mounted, only a replica's refused write journals ``disk_full``; its
    window closed on time and ended with the fault phase, so replicas in long ticks (a
    loaded machine) wrote nothing in it and the run failed "never injected: disk_full"."""
    from timeshard.nemesis.pipeline import InputWriter
    from timeshard.nemesis.plan import Fault

    events = tmp_path / "events"
    events.mkdir()
    inputs = InputWriter(events, random.Random(0))
    seen: list[tuple[float, bool]] = []

    with one_ticking_replica(tmp_path) as (runner, replicas):
        replica = replicas[0]

        def on_sleep(now: float) -> None:
            seen.append((now, Control.read(replica.control_file).disk_full))
            if now >= 4.0 and not FaultJournal.read(tmp_path / "injected.jsonl"):
                replica.journal().record("disk_full", "blob.enospc")  # a tick wrote at last
            assert now < 60.0, "the fault phase never ended"

        patch_clock(monkeypatch, FakeTime(on_sleep))
        runner.config = NemesisConfig(directory=tmp_path, fault_seconds=1.0)
        disk = BlobDisk(tmp_path / "disk")  # not mounted: the ENOSPC wrapper
        result = RunResult(0, "sqlite", "ENOSPC wrapper")
        plan = [Fault(0.5, "disk_full", None, 0.2)]
        runner._fault_phase(plan, replicas, disk, inputs, result)
    full = [now for now, disk_full in seen if disk_full]
    assert full and max(full) >= 4.0, f"the disk was full only at {full}"
    assert seen[-1][0] <= 5.5  # and the phase ended once a write was refused


def test_a_run_whose_verify_recomputed_an_object_at_one_time_fails_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run passed on ``verify`` exiting 0 alone: a view whose history verify could not
    read (its times compacted away, noted) was recomputed at one time or none, and the
    run reported ok, checked at nothing but its last time."""
    from timeshard.nemesis import runner as runner_module

    shards = ["kv", "events", "kv_by_prefix", "events_by_grp"]
    times = {"kv": ("upsert", 9), "events": ("upsert", 7), "kv_by_prefix": ("query", 10)}
    objects = [
        {"object": name, "kind": "?", "times": {check: list(range(n))}, "notes": []}
        for name, (check, n) in times.items()
    ]
    note = "inputs compacted away at 9 sampled times [1, 2, 3, 4, 5]: not recomputed there"
    objects.append(
        {"object": "events_by_grp", "kind": "view", "times": {"query": [41]}, "notes": [note]}
    )
    found = {"ok": True, "seed": 1, "samples": 8, "objects": objects, "findings": []}

    def verify(args: list[str], **kwargs: Any) -> Any:
        assert "verify" in args
        return subprocess.CompletedProcess(args, 0, json.dumps(found), "")

    monkeypatch.setattr(runner_module.subprocess, "run", verify)
    runner = NemesisRunner(NemesisConfig(directory=tmp_path), log=lambda line: None)
    result = RunResult(0, "sqlite", "tmpfs", recovery_s=3.0)
    runner._verify("file:///b", "sqlite:///c", tmp_path, 0, shards, result)
    assert result.verify_ok and result.differences == 0
    assert result.verified_times == {"kv": 9, "events": 7, "kv_by_prefix": 10, "events_by_grp": 1}
    assert not result.ok
    assert len(result.few_times) == 1 and "'events_by_grp' at 1 times [41]" in result.few_times[0]
    assert note in result.few_times[0]
    assert result.to_json()["few_times"] == result.few_times
    found["objects"][-1]["times"]["query"] = [41, 50]
    enough = RunResult(0, "sqlite", "tmpfs", recovery_s=3.0)
    runner._verify("file:///b", "sqlite:///c", tmp_path, 0, shards, enough)
    assert enough.ok and enough.few_times == []


@pytest.mark.parametrize(
    ("every", "failing", "slow"), [(1, 0, ""), (50, 0, "recovery"), (50, 1, "")]
)
def test_a_phase_past_its_bound_is_slow_only_if_its_replicas_barely_ticked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every: int, failing: int, slow: str
) -> None:
    """A phase that outlasts its bound with nothing stuck: if the replicas finished fewer
    than ``stuck_ticks`` ticks in it, a loaded machine cannot be told from a hang
    (``slow``: the nemesis test then skips a slow warm-up instead of failing on "no fault
    injected"); if they ticked more and did not catch up (here >100 ticks of 1 ms each),
    or a tick failed (a read at the start that is tried again for ever is one), that is
    a failure, with no ``slow``."""
    from timeshard.persist import PersistClient

    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    writer = client.open_writer("s", pa.schema([("v", pa.int64())]))
    now_ms = time.time_ns() // 1_000_000
    watches, ticks = [0], [1]

    def tick(now: float) -> None:  # a tick every `every` watches; the upper moves, slowly
        watches[0] += 1
        if watches[0] % every == 0:
            ticks[0] += 1
            Heartbeat(0, ticks[0], failing).write(Heartbeat.path(tmp_path, 0))
            upper = writer.upper.time
            writer.append([], upper, upper + 1)

    patch_clock(monkeypatch, FakeTime(tick))
    with one_ticking_replica(tmp_path) as (_runner, replicas):
        config = NemesisConfig(directory=tmp_path, advancing_bound_s=60.0, stuck_ticks=3)
        runner = NemesisRunner(config, log=lambda line: None)
        result = RunResult(0, "sqlite", "tmpfs")
        got = runner._await(client, ["s"], now_ms, replicas, None, "recovery", result)
    assert got is None and result.stuck == [] and "never stuck" in result.error
    assert result.slow == slow and result.to_json()["slow"] == slow and not result.ok


@pytest.mark.parametrize(("cpu_per_sample", "slow"), [(1.0, "warm-up"), (0.0, "")])
def test_a_warm_up_with_no_tick_is_slow_only_if_its_replicas_used_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpu_per_sample: float, slow: str
) -> None:
    """A replica that hangs before its first tick finished none, as one on a machine too
    loaded to start does: the warm-up reached its bound "slow", and the nemesis test
    skipped a hang. The replicas' CPU over the last window tells them apart: a busy one
    is slow; one that used (almost) none is hung, a failure with no ``slow``."""
    from timeshard.nemesis import replica_slot
    from timeshard.nemesis.liveness import CPU_SAMPLE_S, IDLE_WINDOW_S
    from timeshard.persist import PersistClient

    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    client.open_writer("s", pa.schema([("v", pa.int64())]))  # never written: no tick
    used, samples = [0.0], [0]

    def cpu_seconds(replicas: list[Any]) -> dict[tuple[int, int], float]:
        samples[0] += 1
        used[0] += cpu_per_sample
        return {(0, 0): used[0]}

    patch_clock(monkeypatch, FakeTime(lambda now: None))
    monkeypatch.setattr(replica_slot, "cpu_seconds", cpu_seconds)
    with one_ticking_replica(tmp_path) as (_runner, replicas):
        Heartbeat(0, 0).write(Heartbeat.path(tmp_path, 0))  # started, no tick finished
        bound = IDLE_WINDOW_S + 120
        config = NemesisConfig(directory=tmp_path, advancing_bound_s=bound, stuck_ticks=3)
        runner = NemesisRunner(config, log=lambda line: None)
        result = RunResult(0, "sqlite", "tmpfs")
        got = runner._await(client, ["s"], 0, replicas, None, "warm-up", result)
    assert got is None and result.stuck == [] and "finished 0 ticks" in result.error
    assert result.slow == slow and not result.ok
    assert ("hung, not slow" in result.error) == (slow == ""), result.error
    assert samples[0] <= bound / CPU_SAMPLE_S + 2  # sampled every CPU_SAMPLE_S, not each watch


def test_a_phase_the_runs_bound_cuts_short_fails_the_run_naming_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The phases' bounds added up to more than the nemesis test's pytest timeout (900 s
    for each of warm-up, faults, recovery and input, verify's 900 s), so a run slow in
    every phase was killed by pytest with no report. With ``run_bound_s`` the phases end
    by it, less what stopping and verify need, and the one it cuts fails the run."""
    from timeshard.nemesis import runner as runner_module
    from timeshard.nemesis.config import FINISH_S
    from timeshard.nemesis.pipeline import InputWriter
    from timeshard.nemesis.plan import Fault
    from timeshard.persist import PersistClient

    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    writer = client.open_writer("s", pa.schema([("v", pa.int64())]))
    now_ms = time.time_ns() // 1_000_000
    ticks = [1]

    def tick(now: float) -> None:  # a tick per watch, the upper moving: slow, not stuck
        ticks[0] += 1
        Heartbeat(0, ticks[0]).write(Heartbeat.path(tmp_path, 0))
        upper = writer.upper.time
        writer.append([], upper, upper + 1)

    clock = FakeTime(tick)
    patch_clock(monkeypatch, clock)
    config = NemesisConfig(
        directory=tmp_path, fault_seconds=1.0, advancing_bound_s=900.0, run_bound_s=FINISH_S + 100
    )
    with one_ticking_replica(tmp_path) as (_runner, replicas):
        runner = NemesisRunner(config, log=lambda line: None)
        runner._deadline = config.phases_deadline(clock.monotonic())
        result = RunResult(0, "sqlite", "tmpfs")
        got = runner._await(client, ["s"], now_ms, replicas, None, "recovery", result)
        assert got is None and result.error.startswith(
            f"recovery: the run's bound of {FINISH_S + 100:.0f} s ran out"
        ), result.error
        assert 100.0 < clock.now < 110.0  # not the phase's own 900 s
    events = tmp_path / "events"
    events.mkdir()
    with one_ticking_replica(tmp_path) as (_runner, replicas):
        Heartbeat(0, 0).write(Heartbeat.path(tmp_path, 0))  # started, never ticks
        patch_clock(monkeypatch, FakeTime(lambda now: None))
        runner = NemesisRunner(config, log=lambda line: None)
        runner._deadline = config.phases_deadline(0.0)
        result = RunResult(0, "sqlite", "tmpfs")
        inputs = InputWriter(events, random.Random(0))
        kill = Fault(0.5, "kill", 0, 1.0)  # waits for a ticking replica
        assert not runner._fault_phase([kill], replicas, BlobDisk(tmp_path), inputs, result)
        assert result.error.startswith("faults: the run's bound"), result.error
        assert result.skipped == Counter({"kill": 1})
        assert runner_module.time.monotonic() < 110.0


def test_a_loaded_but_healthy_run_recovers_inside_the_ci_bound_and_verify_gets_what_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run kept verify's whole 900 s (and the stop's 60 s) of ``run_bound_s`` for
    every run, so in the CI test (a bound of 2,100 s) the phases ended by 1,140 s: a
    loaded machine's run (a 700 s warm-up, 20 s of faults, a recovery of 520 s with a
    tick every 40 s) that passed before was cut at 420 s into its recovery and failed
    as ``slow``. The run now keeps the stop and a verify floor; verify gets what is left
    of the bound, at least the floor and at most its own timeout."""
    from timeshard.nemesis import runner as runner_module
    from timeshard.nemesis.config import VERIFY_TIMEOUT_S
    from timeshard.persist import PersistClient

    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    writer = client.open_writer("s", pa.schema([("v", pa.int64())]))
    target = time.time_ns() // 1_000_000
    recovery_starts, watches, ticks = 720.0, [0], [1]

    def tick(now: float) -> None:  # a tick every 40 s, the upper moving; done after 520 s
        watches[0] += 1
        if watches[0] % 80 == 0:
            ticks[0] += 1
            Heartbeat(0, ticks[0]).write(Heartbeat.path(tmp_path, 0))
            upper = writer.upper.time
            done = now - recovery_starts >= 520.0
            writer.append([], upper, target + 10 if done else upper + 1)

    clock = FakeTime(tick)
    patch_clock(monkeypatch, clock)
    config = NemesisConfig(
        directory=tmp_path, fault_seconds=20.0, advancing_bound_s=900.0, run_bound_s=2100.0
    )
    with one_ticking_replica(tmp_path) as (_runner, replicas):
        runner = NemesisRunner(config, log=lambda line: None)
        runner._deadline = config.phases_deadline(0.0)
        runner._run_end = 2100.0  # the run started at 0
        clock.now = recovery_starts
        result = RunResult(0, "postgres", "tmpfs")
        got = runner._await(client, ["s"], target, replicas, None, "recovery", result)
    assert got is not None and 520.0 <= got < 560.0, result.error
    assert result.error == "" and result.slow == ""
    timeouts: list[float] = []

    def verify(args: list[str], **kwargs: Any) -> Any:
        timeouts.append(kwargs["timeout"])
        return subprocess.CompletedProcess(args, 1, "not json", "")

    monkeypatch.setattr(runner_module.subprocess, "run", verify)
    for now in (1300.0, 1900.0, 100.0):  # 800 s left; 200 s left; 2,000 s left
        clock.now = now
        runner._verify("file:///b", "sqlite:///c", tmp_path, 0, ["s"], RunResult(0, "s", "t"))
    assert timeouts == [800.0, 300.0, VERIFY_TIMEOUT_S]  # 300 s: the floor


@pytest.mark.parametrize("drain_fails", [False, True])
def test_a_fault_phase_the_runs_bound_cuts_leaves_no_full_disk_to_the_stop_and_verify(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, drain_fails: bool
) -> None:
    """A fault phase cut by the run's bound skipped the heal, the only drain of the tmpfs
    but the window's close and the unmount: the ballast stayed through the replicas' stop
    (a closing write could crash on ENOSPC) and verify. The run's cleanup drains the
    disk before it stops the replicas, whatever ended the phase. A drain that fails is
    the run's error: the replicas still stop and verify still runs (it escaped the run,
    which lost its report)."""
    from timeshard.nemesis import runner as runner_module
    from timeshard.nemesis.plan import Fault
    from timeshard.nemesis.replica_slot import Replica

    full, seen, procs = [False], {}, []

    def mount(self: BlobDisk, size_mb: int) -> bool:
        self.mounted = True
        self.blob_root.mkdir(parents=True)
        return True

    def start(self: Any, seed: int, env: dict[str, str]) -> None:
        self.incarnation += 1
        self.proc = subprocess.Popen(["sleep", "600"])
        procs.append(self.proc)
        Heartbeat(self.incarnation, 5).write(Heartbeat.path(self.run_dir, self.index))

    def warm_up(*args: Any) -> float:  # a loaded machine: 1,700 s of the phases' 1,740 s
        clock.now += 1700.0
        return 1700.0

    def stop(self: Any, replicas: list[Any], result: RunResult) -> None:
        seen["stop"] = full[0]
        for p in procs:
            p.kill()
            p.wait()

    clock = FakeTime(lambda now: None)
    patch_clock(monkeypatch, clock)
    monkeypatch.setattr(BlobDisk, "mount", mount)
    monkeypatch.setattr(BlobDisk, "fill", lambda self: full.__setitem__(0, True) or 1)

    def drain(self: BlobDisk) -> None:
        if drain_fails:
            raise PermissionError("ballast")
        full[0] = False

    monkeypatch.setattr(BlobDisk, "drain", drain)
    monkeypatch.setattr(BlobDisk, "unmount", lambda self: setattr(self, "mounted", False))
    monkeypatch.setattr(runner_module.shutil, "copytree", lambda *args: None)
    monkeypatch.setattr(
        runner_module, "plan_faults", lambda *a, **k: [Fault(0.5, "disk_full", None, 300.0)]
    )
    monkeypatch.setattr(Replica, "start", start)
    monkeypatch.setattr(NemesisRunner, "_await", warm_up)
    monkeypatch.setattr(NemesisRunner, "_stop", stop)
    monkeypatch.setattr(NemesisRunner, "_count_injected", lambda *args: None)
    monkeypatch.setattr(NemesisRunner, "_verify", lambda *args: seen.setdefault("verify", full[0]))
    config = NemesisConfig(
        directory=tmp_path,
        replicas=1,
        fault_seconds=20.0,
        advancing_bound_s=900.0,
        run_bound_s=2100.0,
        kinds=("kill", "disk_full"),
    )
    result = NemesisRunner(config, log=lambda line: None).run_once(0)
    if drain_fails:  # after the bound's error, which it hides not
        assert result.error.startswith("faults: the run's bound of 2100 s ran out"), result.error
        assert "; the disk's ballast was not drained: PermissionError" in result.error
        assert seen == {"stop": True, "verify": True}
        return
    assert result.error.startswith("faults: the run's bound of 2100 s ran out"), result.error
    assert seen == {"stop": False, "verify": False}


@pytest.mark.parametrize(("ticking", "slow"), [(False, "faults"), (True, "")])
def test_a_fault_never_injected_for_want_of_ticks_is_slow_only_if_the_replicas_barely_ticked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ticking: bool, slow: str
) -> None:
    """A kill that waited the whole fault phase for a replica to tick (none finished a
    tick: a loaded machine) failed the run as "never injected" with no ``slow``, as a
    defect would. Past the phase's bound with a kind not injected, the run fails; it is
    slow if the replicas finished fewer than ``stuck_ticks`` ticks in the phase, none
    failing, and not if they ticked more (here an unreliable window that no call
    failed in over 100 ticks)."""
    from timeshard.nemesis.pipeline import InputWriter
    from timeshard.nemesis.plan import Fault

    events = tmp_path / "events"
    events.mkdir()
    ticks = [1 if ticking else 0]

    def tick(now: float) -> None:
        if ticking:
            ticks[0] += 1
        Heartbeat(0, ticks[0]).write(Heartbeat.path(tmp_path, 0))

    patch_clock(monkeypatch, FakeTime(tick))
    with one_ticking_replica(tmp_path) as (_runner, replicas):
        tick(0.0)
        config = NemesisConfig(
            directory=tmp_path, fault_seconds=1.0, advancing_bound_s=30.0, stuck_ticks=5
        )
        runner = NemesisRunner(config, log=lambda line: None)
        result = RunResult(0, "sqlite", "tmpfs")
        inputs = InputWriter(events, random.Random(0))
        fault = (
            Fault(0.5, "unreliable", 0, 1.0, rate=0.1) if ticking else Fault(0.5, "kill", 0, 1.0)
        )
        assert runner._fault_phase([fault], replicas, BlobDisk(tmp_path), inputs, result)
        assert replicas[0].alive()
    assert result.slow == slow, result.error
    assert result.error.startswith(f"faults: ['{fault.kind}'] not injected"), result.error
    assert result.skipped == (Counter() if ticking else Counter({"kill": 1}))


def test_a_slow_fault_phase_is_not_named_slow_beside_a_later_phase_that_is_stuck(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault phase that reached its own bound with a kind not injected and too few ticks
    set ``slow="faults"``, and the run went on; a recovery that then found an object stuck
    replaced the run's error but left the label: ``slow='faults'`` beside "recovery:
    stuck", a hang reported as a loaded machine. ``slow`` names the phase whose error is
    the run's, or is empty."""
    from timeshard.nemesis.pipeline import InputWriter
    from timeshard.nemesis.plan import Fault
    from timeshard.persist import PersistClient

    events = tmp_path / "events"
    events.mkdir()
    ticking, ticks = [False], [0]

    def tick(now: float) -> None:
        if ticking[0]:
            ticks[0] += 1
        Heartbeat(0, ticks[0]).write(Heartbeat.path(tmp_path, 0))

    patch_clock(monkeypatch, FakeTime(tick))
    with one_ticking_replica(tmp_path) as (_runner, replicas):
        tick(0.0)  # started, never ticks in the fault phase
        config = NemesisConfig(
            directory=tmp_path, fault_seconds=1.0, advancing_bound_s=30.0, stuck_ticks=5
        )
        runner = NemesisRunner(config, log=lambda line: None)
        result = RunResult(0, "sqlite", "tmpfs")
        inputs = InputWriter(events, random.Random(0))
        kill = Fault(0.5, "kill", 0, 1.0)
        assert runner._fault_phase([kill], replicas, BlobDisk(tmp_path), inputs, result)
        assert result.slow == "faults", result.error
        client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
        writer = client.open_writer("s", pa.schema([("v", pa.int64())]))
        writer.append([], 0, 5)  # an upper that never moves again
        ticking[0] = True
        target = time.time_ns() // 1_000_000
        assert runner._await(client, ["s"], target, replicas, None, "recovery", result) is None
    assert result.error.startswith("recovery: stuck: s: upper 5"), result.error
    assert result.slow == "", result.slow


def test_a_replica_that_exits_by_itself_while_the_input_is_awaited_is_restarted_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait for the input, unlike the other phases, neither restarted a replica that
    exited by itself (a JVM crash after the recovery) nor counted it: no tick came, the
    phase waited ``advancing_bound_s`` and failed as ``slow="input"``, a crash reported
    as a loaded machine."""
    from timeshard.nemesis import runner as runner_module
    from timeshard.nemesis.replica_slot import Replica

    procs: list[subprocess.Popen[bytes]] = []
    replica = Replica(0, tmp_path)

    def start(self: Any, seed: int, env: dict[str, str]) -> None:
        self.incarnation += 1
        self.proc = subprocess.Popen(["sleep", "600"])
        procs.append(self.proc)
        Heartbeat(self.incarnation, 0).write(Heartbeat.path(tmp_path, self.index))

    def tick(now: float) -> None:  # the live incarnation finishes a tick per watch
        beat = replica.heartbeat()
        if replica.alive():
            Heartbeat(beat.incarnation, beat.ticks + 1).write(Heartbeat.path(tmp_path, 0))

    def unread(client: Any, source: str, directory: Path) -> dict[str, str]:
        restarted = replica.incarnation == 1 and replica.heartbeat().ticks >= 2
        return {} if restarted else {"part-00001.jsonl": "0/9"}

    patch_clock(monkeypatch, FakeTime(tick))
    monkeypatch.setattr(runner_module, "unread_input", unread)
    monkeypatch.setattr(Replica, "start", start)
    try:
        replica.start(0, {})
        Heartbeat(0, 3).write(Heartbeat.path(tmp_path, 0))
        procs[0].kill()  # crashed right after the recovery
        procs[0].wait()
        config = NemesisConfig(directory=tmp_path, advancing_bound_s=900.0, stuck_ticks=5)
        runner = NemesisRunner(config, log=lambda line: None)
        result = RunResult(0, "sqlite", "tmpfs", recovery_s=3.0)
        read = runner._await_input(None, tmp_path, [replica], result)  # type: ignore[arg-type]
        assert read and result.error == "" and result.slow == "", result.error
        assert result.self_exits == 1 and replica.exits == 1
        assert runner_module.time.monotonic() < 10.0
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.mark.parametrize(("every", "read_at"), [(80, 3), (1, None)])
def test_input_unread_after_the_recovery_is_judged_by_ticks_not_by_the_wall_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every: int, read_at: int | None
) -> None:
    """After the heal, "recovered, but the FILE source never read ..." failed a run
    once ``advancing_bound_s`` of wall clock passed: on a loaded machine (here a tick
    every 40 s, the bound 60 s) a source that reads the rest at its second tick failed.
    Judged as an upper is: the input may stay unread until a live replica finished
    ``stuck_ticks`` ticks without reading it (here 3 ticks of 0.5 s, well inside 60 s)."""
    from timeshard.nemesis import runner as runner_module
    from timeshard.nemesis.replica_slot import Replica

    ticks, watches, procs = [1], [0], []

    def tick(now: float) -> None:  # the replica's heartbeat: a tick every `every` watches
        watches[0] += 1
        if watches[0] % every == 0:
            ticks[0] += 1
            Heartbeat(0, ticks[0]).write(Heartbeat.path(run_dir, 0))

    def unread(client: Any, source: str, directory: Path) -> dict[str, str]:
        return {} if read_at is not None and ticks[0] >= read_at else {"part-00001.jsonl": "0/9"}

    def start(self: Any, seed: int, env: dict[str, str]) -> None:
        self.incarnation += 1
        self.proc = subprocess.Popen(["sleep", "600"])
        procs.append(self.proc)
        Heartbeat(self.incarnation, ticks[0]).write(Heartbeat.path(run_dir, self.index))

    def stop(self: Any, replicas: list[Any], result: RunResult) -> None:
        for p in procs:
            p.kill()
            p.wait()

    caught_up = lambda *args: 1.0  # noqa: E731 -- the warm-up and the recovery: at once
    patch_clock(monkeypatch, FakeTime(tick))
    monkeypatch.setattr(runner_module, "unread_input", unread)
    monkeypatch.setattr(BlobDisk, "mount", lambda self, size_mb: False)
    monkeypatch.setattr(Replica, "start", start)
    for name, stand_in in [
        ("_await", caught_up),
        ("_fault_phase", lambda *args: True),
        ("_heal", lambda *args: 0),
        ("_stop", stop),
        ("_count_injected", lambda *args: None),
        ("_verify", lambda *args: None),
    ]:
        monkeypatch.setattr(NemesisRunner, name, stand_in)
    config = NemesisConfig(directory=tmp_path, replicas=1, advancing_bound_s=60.0, stuck_ticks=3)
    run_dir = (tmp_path / "run-000").resolve()
    result = NemesisRunner(config, log=lambda line: None).run_once(0)
    if read_at is not None:
        assert result.error == "" and result.slow == ""
    else:
        assert result.error.startswith(
            "input: recovered, but the FILE source never read {'part-00001.jsonl': '0/9'} "
            "in 3 ticks of replica 0"
        ), result.error
