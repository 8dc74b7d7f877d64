"""``timeshard nemesis``: the command line of :mod:`timeshard.nemesis`.

Runs a pipeline as ``--replicas`` replica processes under the seeded faults of
``--kinds``, heals, and verifies each run, for ``--runs`` runs or
``--minutes``. The seed (random unless given) is printed first, so a run can
be repeated; the report is printed and written to ``nemesis.json`` in
``--dir``. The exit code is 0 if every run recovered and verify found no
difference.

Nothing here imports PySpark: the replicas and verify are other processes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from timeshard.cli.options import console


def nemesis(
    directory: Annotated[
        Path, typer.Option("--dir", help="Where the runs live (a failed run's directory is kept).")
    ] = Path(".timeshard/nemesis"),
    seed: Annotated[
        int | None, typer.Option(help="Seed of the whole run (default: random, then printed).")
    ] = None,
    replicas: Annotated[int, typer.Option(help="Replica processes per run.")] = 3,
    runs: Annotated[int | None, typer.Option(help="Number of runs (default 1).")] = None,
    minutes: Annotated[
        float | None,
        typer.Option(help="Instead of --runs: start runs until this many minutes have passed."),
    ] = None,
    fault_seconds: Annotated[float, typer.Option(help="Length of each run's fault phase.")] = 60.0,
    consensus_kind: Annotated[
        str,
        typer.Option("--consensus", help="sqlite, postgres, or both (alternating by run)."),
    ] = "sqlite",
    kinds: Annotated[
        str, typer.Option(help="Comma-separated fault kinds to inject.")
    ] = "kill,pause,unreliable,pg_restart,disk_full,clock_jump",
) -> None:
    """Run a pipeline as replica processes under seeded faults, heal, and verify each run.
    Exit code 0 if every run recovered and verify found no difference."""
    import random

    from timeshard.nemesis import NemesisConfig, NemesisRunner
    from timeshard.nemesis.report import render_nemesis

    seed = random.randrange(1 << 31) if seed is None else seed
    config = NemesisConfig(
        directory=directory,
        seed=seed,
        replicas=replicas,
        runs=runs if runs is not None or minutes is not None else 1,
        minutes=minutes,
        fault_seconds=fault_seconds,
        consensus=consensus_kind,
        kinds=tuple(k.strip() for k in kinds.split(",") if k.strip()),
    )
    console.print(f"nemesis seed {seed} (repeat the run with --seed {seed})")
    report = NemesisRunner(config, log=lambda line: console.print(escape(line))).run()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "nemesis.json").write_text(json.dumps(report.to_json(), indent=1))
    render_nemesis(report, console)
    console.print(f"results: {directory / 'nemesis.json'}")
    raise typer.Exit(0 if report.ok else 1)


__all__ = ["nemesis"]
