"""The report of ``timeshard verify``: findings, what was checked, and its rendering.

A :class:`Finding` is one violated invariant: the object, the check, the
time, and the rows at fault -- at most :data:`ROW_LIMIT` of each kind, and
how many there are. An :class:`ObjectReport` records which checks ran on one
object at which times, and notes on what could not be checked; a
:class:`VerifyReport` gathers both for a whole location and is ``ok`` if it
holds no finding. :func:`render_report` prints it with rich.

Everything here runs on the driver: the rows a finding holds are plain dicts,
already computed with pyarrow or collected from Spark.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from timeshard.persist._internal.parts import DIFF, ERR, TS
from timeshard.progress import Timestamp

ROW_LIMIT = 10


@dataclass(frozen=True, slots=True)
class Finding:
    """One violated invariant: where, when, and the rows at fault."""

    object: str
    check: str
    message: str
    time: Timestamp | None = None
    rows: tuple[dict[str, Any], ...] = ()
    rows_total: int = 0
    missing: tuple[dict[str, Any], ...] = ()
    missing_total: int = 0
    extra: tuple[dict[str, Any], ...] = ()
    extra_total: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """The finding as text: a headline, then the rows (truncated, with the count)."""
        when = "" if self.time is None else f" at time {self.time}"
        lines = [f"{self.object} [{self.check}]{when}: {self.message}"]
        for label, rows, total in (
            ("row", self.rows, self.rows_total),
            ("missing", self.missing, self.missing_total),
            ("extra", self.extra, self.extra_total),
        ):
            for r in rows:
                lines.append(f"  {label:<7} {_row_text(r)}")
            if total > len(rows):
                lines.append(f"  ... and {total - len(rows)} more {label} rows")
        return "\n".join(lines)


@dataclass
class ObjectReport:
    """What was checked of one object."""

    object: str
    kind: str
    checks: list[str] = field(default_factory=list)
    times: dict[str, set[Timestamp]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    findings: int = 0

    def checked(self, check: str, t: Timestamp) -> None:
        """Record that ``check`` ran at ``t``."""
        self.times.setdefault(check, set()).add(t)

    def all_times(self) -> list[Timestamp]:
        return sorted(set().union(*self.times.values()))

    def to_json(self) -> dict[str, Any]:
        return {
            "object": self.object,
            "kind": self.kind,
            "checks": self.checks,
            "times": {check: sorted(ts) for check, ts in self.times.items()},
            "notes": self.notes,
            "findings": self.findings,
        }


@dataclass
class VerifyReport:
    """Everything ``verify_location`` found; ``ok`` if there is no finding."""

    seed: int
    samples: int
    objects: dict[str, ObjectReport] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    def object(self, name: str, kind: str) -> ObjectReport:
        if name not in self.objects:
            self.objects[name] = ObjectReport(name, kind)
        return self.objects[name]

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)
        self.object(finding.object, "?").findings += 1

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "seed": self.seed,
            "samples": self.samples,
            "objects": [o.to_json() for o in self.objects.values()],
            "findings": [f.to_json() for f in self.findings],
        }


def _row_text(row: Mapping[str, Any]) -> str:
    """``{"col": value, ...} x n`` (``_err`` shown only when set)."""
    data = {k: v for k, v in row.items() if k not in (DIFF, TS) and (k != ERR or v is not None)}
    return json.dumps(data, default=str) + f" x {row.get(DIFF, 1)}"


def _row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != TS}


# -- rendering -----------------------------------------------------------------------------


def render_report(report: VerifyReport, console: Any) -> None:
    """A summary table (rich), then every finding in full, then the verdict."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(
        "object",
        "kind",
        "times",
        "recomputed",
        "result",
        title=f"timeshard verify (seed {report.seed}, {report.samples} samples)",
    )
    for o in report.objects.values():
        times = o.all_times()
        span = "" if not times else f"{len(times)}: {times[0]}..{times[-1]}"
        recomputed = ", ".join(c for c in o.checks if c in ("query", "upsert"))
        result = "[green]ok[/green]" if not o.findings else f"[red]{o.findings} findings[/red]"
        if o.notes:
            result += " " + escape("; ".join(o.notes))
        table.add_row(escape(o.object), o.kind, span, recomputed, result)
    console.print(table)
    for f in report.findings:
        console.print(f.describe(), markup=False, highlight=False, soft_wrap=True)
    if report.ok:
        console.print(f"[green]verified[/green]: {len(report.objects)} objects, no findings")
    else:
        console.print(
            f"[red]{len(report.findings)} findings[/red] in {len(report.objects)} objects"
        )
