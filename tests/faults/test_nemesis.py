"""The nemesis in CI: one seeded run of at most about five minutes, every fault kind.

Two replica processes run the nemesis pipeline (KEY VALUE and FILE sources with
the UPSERT envelope, a view over each) on PostgreSQL consensus and a blob on a
small tmpfs (or the ENOSPC wrapper where none can be mounted). The run injects
kill -9, SIGSTOP/SIGCONT, unreliable blob and consensus, a PostgreSQL restart,
a full disk and clock jumps, heals, must catch up, and ``timeshard verify``
must find no difference. The long run is ``timeshard nemesis --minutes 30``
(README).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.pg_server import PostgresServer

from timeshard.nemesis import KINDS, NemesisConfig, NemesisRunner


@pytest.mark.faults
@pytest.mark.spark
@pytest.mark.postgres
def test_nemesis_run_recovers_and_verifies(tmp_path: Path, postgres_server: PostgresServer) -> None:
    config = NemesisConfig(
        directory=tmp_path / "nemesis",
        seed=20261123,
        replicas=2,
        runs=1,
        fault_seconds=45.0,
        consensus="postgres",
        recovery_timeout_s=240.0,
    )
    lines: list[str] = []

    def log(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    report = NemesisRunner(config, log=log, postgres=postgres_server).run()
    [run] = report.runs
    assert set(run.faults) == set(KINDS), (run.faults, run.skipped)
    # How many storage calls fall into the unreliable windows depends on how fast the
    # replicas tick (and a killed incarnation's counts die with it): printed, not asserted.
    print(f"storage calls failed by injection: {dict(run.injected_calls)}")
    assert run.recovery_s is not None, "the pipeline did not catch up after the faults"
    assert not run.error, run.error
    assert run.differences == 0 and run.verify_ok, (run.verify_error, lines[-10:])
    assert report.ok
