"""Printing a :class:`~timeshard.nemesis.results.NemesisReport`: one row per run, then totals.

The fault counts are what the run's journal recorded as injected, not what
the plan asked for.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from timeshard.nemesis.plan import KINDS
from timeshard.nemesis.results import NemesisReport


def render_nemesis(report: NemesisReport, console: Any) -> None:
    """Per run: consensus, disk, injected faults by kind, recovery, the fewest times verify
    recomputed an object at, differences; then totals."""
    table = Table(
        "run",
        "consensus",
        "disk",
        *KINDS,
        "unreliable calls+tasks",
        "recovery s",
        "times verified",
        "differences",
        "verdict",
    )
    for r in report.runs:
        injected = sum(r.injected_calls.values())
        table.add_row(
            str(r.run),
            r.consensus,
            r.disk.split(" (")[0],
            *(str(r.faults.get(k, 0)) for k in KINDS),
            str(injected),
            "-" if r.recovery_s is None else f"{r.recovery_s:.1f}",
            str(min(r.verified_times.values())) if r.verified_times else "-",
            str(r.differences) if r.verify_ok or r.differences else "verify failed",
            "[green]ok[/green]" if r.ok else "[red]FAILED[/red]",
        )
    console.print(table)
    summary = report.to_json()
    faults = ", ".join(f"{k} {n}" for k, n in sorted(summary["faults"].items())) or "none"
    rec = (
        "-"
        if summary["recovery_p50_s"] is None
        else f"p50 {summary['recovery_p50_s']:.1f} s, max {summary['recovery_max_s']:.1f} s"
    )
    ready = "-"
    if summary["replica_ready_p50_s"] is not None:
        ready = f"p50 {summary['replica_ready_p50_s']:.1f} s"
        ready += f", max {summary['replica_ready_max_s']:.1f} s"
    console.print(f"runs: {summary['runs']} (failed: {summary['failed_runs']})")
    console.print(f"faults injected: {faults}")
    console.print(
        "storage calls and Spark tasks failed by injection: "
        f"{summary['unreliable_injected'] or 'none'}"
    )
    for r in report.runs:
        if r.never_injected:
            console.print(f"run {r.run}: planned but never injected: {r.never_injected}")
        for stuck in r.stuck:
            console.print(f"run {r.run}: stuck: {stuck}")
        for few in r.few_times:
            console.print(f"run {r.run}: {few}")
    console.print(f"differences found by verify: {summary['differences']}")
    console.print(f"recovery time (heal to every object caught up): {rec}")
    console.print(f"replica start to first tick: {ready}")


__all__ = ["render_nemesis"]
