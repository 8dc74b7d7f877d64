"""``timeshard status``: the table (or JSON) of every object of a location.

The rows and what their columns mean are :mod:`timeshard.status`'s. The
table shows wall-clock times as readable UTC, drops its optional columns on
a narrow terminal, and names below it each view on the full path and why.
The exit code is 1 when some object is ``unreadable``.
"""

from __future__ import annotations

from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from timeshard.cli.options import (
    DEFAULT_LOCATION,
    TIME_COLUMNS,
    BlobOpt,
    ConsensusOpt,
    JsonOpt,
    LocationOpt,
    Times,
    TimesOpt,
    cell,
    console,
    fit,
    location_from,
    print_errors,
    print_json,
    time_cell,
)
from timeshard.persist import PersistClient
from timeshard.spec import format_duration
from timeshard.status import status_rows

#: The path cell of a view whose catalog entry records no path.
UNKNOWN_PATH = "-"


def status(
    location: LocationOpt = DEFAULT_LOCATION,
    blob: BlobOpt = None,
    consensus: ConsensusOpt = None,
    as_json: JsonOpt = False,
    times: TimesOpt = Times.utc,
) -> None:
    """Every shard's frontiers, lag, retained history and health; views show their
    deploy generation and their path (linear, grouped or full). Then the health of
    every object without a shard: exports, and sources whose outputs are subsources.

    Wall-clock times show as readable UTC above their epoch ms (``--times ms``:
    epoch ms alone). On a narrow terminal the table drops readers, writers,
    generation, retain and since, in that order, until it fits.

    The lag is wall-clock now minus the write frontier, for shards whose
    timestamps are wall-clock milliseconds. A source reported ``running`` or
    ``starting`` shows ``stopped`` once its shard has no writer, and
    ``unresponsive`` once no writer renewed its lease for three heartbeat
    intervals. A view's path is the one recorded when it was installed (``-``
    if its catalog entry predates that); below the table, each view on the
    full path says why (``timeshard explain VIEW`` shows more). A shard whose
    state (or, for the status and catalog shards, whose content) cannot be
    read is shown with kind ``unreadable`` and the error, and so is each
    catalog row that does not decode (``timeshard_catalog row ('name',
    'kind')``); the exit code is then 1.
    """
    rows = status_rows(PersistClient(location_from(location, blob, consensus)))
    if as_json:
        print_json(rows)
    else:
        _print_status(rows, times)
    if any(r["kind"] == "unreadable" for r in rows):
        raise typer.Exit(1)


def path_cell(row: dict[str, Any]) -> str:
    """The table's path: the recorded path, ``-`` for a view without one, else empty."""
    if row["path"] is not None:
        return str(row["path"])
    return UNKNOWN_PATH if row["kind"] == "view" else ""


#: The status table's columns a narrow terminal drops, least useful first.
STATUS_OPTIONAL = ("readers", "writers", "generation", "retain", "since")


def _print_status(rows: list[dict[str, Any]], times: Times) -> None:
    table = Table(
        "object",
        "kind",
        "path",
        "since",
        "write frontier",
        "lag",
        "retain",
        "generation",
        "writers",
        "readers",
        "status",
        title="timeshard status",
    )
    for r in rows:
        lag_ms = r["lag_ms"]
        known = r["kind"] != "unreadable"
        shard = r["kind"] in ("shard", "view")  # the others have no frontiers to show
        status_text = (r["status"] or "") + (f": {r['error']}" if r["error"] else "")
        table.add_row(
            escape(str(r["object"])),
            str(r["kind"]),
            escape(path_cell(r)),
            time_cell(r["since"], times, none="empty") if shard else "",
            time_cell(r["write_frontier"], times, none="closed") if shard else "",
            "" if lag_ms is None else f"{int(lag_ms) / 1000:.1f} s",
            "" if r["retain_ms"] is None else format_duration(r["retain_ms"]),
            str(r["generation"] or ""),
            cell(r["writers"]),
            cell(r["readers"]),
            escape(status_text if known else "(below)"),
        )
    console.print(fit(table, STATUS_OPTIONAL, whole=TIME_COLUMNS))
    for r in rows:
        if r["path"] == "full":
            why = r["path_reason"] or "no reason recorded"
            console.print(
                f"[bold]{escape(str(r['object']))}[/bold] is maintained from snapshots "
                f"(full path): {escape(why)}",
                soft_wrap=True,
            )
    print_errors(
        {r["object"]: f"{r['status']}: {r['error']}" for r in rows if r["kind"] == "unreadable"}
    )


__all__ = ["STATUS_OPTIONAL", "UNKNOWN_PATH", "path_cell", "status"]
