"""The nemesis in CI: one seeded run of a few minutes, every fault kind injected.

Two replica processes run the nemesis pipeline (KEY VALUE and FILE sources with
the UPSERT envelope, a view over each) on PostgreSQL consensus and a blob on a
small tmpfs (or the ENOSPC wrapper where none can be mounted). The run injects
kill -9, SIGSTOP/SIGCONT, unreliable blob and consensus and Spark task part
reads and writes, a PostgreSQL restart, a full disk and clock jumps; each kind
must be journalled as injected at least once. Then it heals; no object may be
stuck (its upper still for ``stuck_ticks`` ticks of a live replica), every one
must catch up, and ``timeshard verify`` must find no difference. A loaded
machine makes the run slower, not failed: objects that keep advancing are
waited for up to ``advancing_bound_s``. A warm-up that outlasts it with
nothing stuck and fewer than ``stuck_ticks`` ticks finished in it, none
failing, and replicas that kept using CPU or waiting for it
(``RunResult.slow``: no fault injected yet, and too few ticks to tell a
loaded machine from a hang; replicas that neither used nor waited for CPU
are hung, which fails) cannot conclude: the test checks that verify ran
and found no difference in what was written, then skips, saying so, rather
than failing on the faults the warm-up never got to inject. Any other phase
past its bound fails (after the faults, a hang is what the run looks for).
The phases' bounds add up to more than the test's timeout, so the run has a
bound of its own, ``RUN_BOUND_S``, well inside it: a run slow in every phase
fails with the runner's error naming the phase it reached, not pytest's
timeout with no report.

The seed's plan in a fault phase of ``FAULT_SECONDS`` (20 s) holds eleven
faults, every kind at least once (the plan draws one of each kind first):
a backward and a forward clock jump and an unreliable window, then the full
disk, a pause and a kill of each replica and three PostgreSQL restarts.
Its windows end before the first replica goes down, so none waits for a
killed replica to start again (a JVM start and a pipeline rebuilt: minutes
on a loaded machine); windows that wait for a ticking replica are tested in
``tests/unit/test_nemesis.py``.
``TIMESHARD_NEMESIS_SEED`` and ``TIMESHARD_NEMESIS_FAULT_SECONDS`` set
another run by hand; the long run is
``timeshard nemesis --minutes 30 --replicas 3`` (README).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.pg_server import PostgresServer

from timeshard.nemesis import KINDS, NemesisConfig, NemesisRunner

SEED = int(os.environ.get("TIMESHARD_NEMESIS_SEED", "7892"))
FAULT_SECONDS = float(os.environ.get("TIMESHARD_NEMESIS_FAULT_SECONDS", "20"))
TIMEOUT_S = 2400
#: The run's bound: the test's timeout less 300 s for the PostgreSQL server, the runner's
#: copies of a failed run's files and pytest itself.
RUN_BOUND_S = TIMEOUT_S - 300.0


@pytest.mark.faults
@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.timeout(TIMEOUT_S)
def test_nemesis_run_recovers_and_verifies(tmp_path: Path, postgres_server: PostgresServer) -> None:
    config = NemesisConfig(
        directory=tmp_path / "nemesis",
        seed=SEED,
        replicas=2,
        runs=1,
        fault_seconds=FAULT_SECONDS,
        consensus="postgres",
        advancing_bound_s=900.0,
        run_bound_s=RUN_BOUND_S,
    )
    lines: list[str] = []

    def log(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    report = NemesisRunner(config, log=log, postgres=postgres_server).run()
    [run] = report.runs
    print(f"faults injected by kind: {dict(run.faults)}; skipped: {dict(run.skipped)}")
    print(f"unreliable storage calls and Spark tasks failed: {dict(run.injected_calls)}")
    print(f"replica start to first tick: {run.replica_ready_s}; recovery: {run.recovery_s}")
    assert not run.stuck, run.stuck
    if run.slow == "warm-up":
        assert run.verify_ok and run.differences == 0, (run.verify_error, lines[-10:])
        pytest.skip(f"the machine was too slow to warm up, nothing stuck: {run.error}")
    assert run.never_injected == [] and set(run.faults) >= set(KINDS), (run.faults, run.skipped)
    assert run.recovery_s is not None, run.error
    assert not run.error, run.error
    assert run.differences == 0 and run.verify_ok, (run.verify_error, lines[-10:])
    assert report.ok
