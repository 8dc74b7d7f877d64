"""``timeshard status``: every object of a location, its frontiers, health and view path.

One row per shard. A shard is a ``view`` when a view deploy generation holds
it (the sink's ``deploy`` critical reader). The columns:

* ``since`` / ``write_frontier``: the shard's frontiers; ``lag_ms`` is
  wall-clock now minus the write frontier, for shards whose timestamps are
  wall-clock milliseconds;
* ``retain_ms``: RETAIN HISTORY; ``generation``: a view's deploy generation;
* ``status`` / ``error``: the latest health the object reported (shard
  ``timeshard_status``), corrected by liveness: a source or view reported
  ``running`` or ``starting`` shows ``stopped`` once its shard has no writer,
  and ``unresponsive`` once no writer renewed its lease for three heartbeat
  intervals;
* ``path`` / ``path_reason``: how a view is maintained -- ``linear``,
  ``grouped`` or ``full`` (from snapshots) and why -- as its catalog entry
  recorded it when the view was installed (:mod:`timeshard.catalog`). A view
  whose entry predates the recording has no path (``-`` in the table).

Invariants:

1. Status starts no Spark: everything comes from shard states, the status
   shard and the catalog, read on the pyarrow path.
2. An object whose state (or, for the status and catalog shards, whose
   content) cannot be read is a row of kind ``unreadable`` holding the error;
   the others are shown all the same, and the exit code is 1.
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
from timeshard.cli.spec import format_duration
from timeshard.errors import TimeshardError
from timeshard.persist import PersistClient
from timeshard.persist._internal.state import ShardState
from timeshard.persist.holds import RETAIN_READER

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
    deploy generation and their path (linear, grouped or full).

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
    read is shown with kind ``unreadable`` and the error; the exit code is
    then 1.
    """
    rows = status_rows(PersistClient(location_from(location, blob, consensus)))
    if as_json:
        print_json(rows)
    else:
        _print_status(rows, times)
    if any(r["kind"] == "unreadable" for r in rows):
        raise typer.Exit(1)


def shard_states(client: PersistClient) -> dict[str, ShardState | TimeshardError]:
    """Every shard's state, or the error that reading it raised (CorruptState, ...)."""
    out: dict[str, ShardState | TimeshardError] = {}
    for shard_id in client.list_shards():
        try:
            out[shard_id] = client.state(shard_id)
        except TimeshardError as e:
            out[shard_id] = e
    return out


def status_rows(client: PersistClient) -> list[dict[str, Any]]:
    """The ``status`` row of every shard, at ``client.config``'s clock."""
    states = shard_states(client)
    health = _health(client, states)
    paths = _view_paths(client, states)
    now = client.config.now_ms()
    return [
        _unreadable_row(shard_id, s)
        if isinstance(s, TimeshardError)
        else _status_row(client, shard_id, s, health.get(shard_id, {}), paths, now)
        for shard_id, s in states.items()
    ]


def _health(
    client: PersistClient, states: dict[str, ShardState | TimeshardError]
) -> dict[str, dict[str, Any]]:
    """The latest health row of every object; a damaged status shard joins ``states``."""
    from timeshard.storage.health import STATUS_SHARD

    if not isinstance(states.get(STATUS_SHARD), ShardState):
        return {}
    try:
        reader = client.open_unleased_reader(STATUS_SHARD)
        upper = reader.upper().time
        if not upper:
            return {}
        return {r["object"]: r for r in reader.snapshot(upper - 1).to_pylist()}
    except TimeshardError as e:  # a damaged part: shown in the status shard's row
        states[STATUS_SHARD] = e
        return {}


def _view_paths(
    client: PersistClient, states: dict[str, ShardState | TimeshardError]
) -> dict[str, tuple[str | None, str | None]]:
    """Each cataloged view's recorded ``(path, reason)``, ``(None, None)`` if it has none.

    A catalog row that does not decode is skipped (``verify`` reports it); a
    catalog shard whose content cannot be read joins ``states``.
    """
    from timeshard.catalog import CATALOG_SHARD, CatalogEntry, catalog_rows

    if not isinstance(states.get(CATALOG_SHARD), ShardState):
        return {}
    try:
        rows = catalog_rows(client)
    except TimeshardError as e:  # a damaged part: shown in the catalog shard's row
        states[CATALOG_SHARD] = e
        return {}
    out: dict[str, tuple[str | None, str | None]] = {}
    for row in rows:
        try:
            entry = CatalogEntry.from_row(row)
        except TimeshardError:
            continue
        if entry.kind == "view":
            path, reason = entry.definition.get("path"), entry.definition.get("path_reason")
            out[entry.name] = (
                path if isinstance(path, str) else None,
                reason if isinstance(reason, str) else None,
            )
    return out


def _status_row(
    client: PersistClient,
    shard_id: str,
    s: ShardState,
    health: dict[str, Any],
    paths: dict[str, tuple[str | None, str | None]],
    now: int,
) -> dict[str, Any]:
    from timeshard.compute.mv_sink import DEPLOY_READER

    deploy = s.critical_readers.get(DEPLOY_READER)
    retain = s.critical_readers.get(RETAIN_READER)
    upper = s.upper.time
    interval = client.config.heartbeat_interval_ms
    path, reason = paths.get(shard_id, (None, None))
    return {
        "object": shard_id,
        "kind": "view" if deploy else "shard",
        "since": s.since.to_json(),
        "write_frontier": upper,
        "lag_ms": now - upper if upper is not None and upper > 10**12 else None,
        "retain_ms": int(retain.opaque) if retain and retain.opaque.isdigit() else None,
        "generation": int(deploy.opaque) if deploy and deploy.opaque.isdigit() else None,
        "writers": len(s.writers),
        "readers": len(s.leased_readers),
        "status": _liveness(s, health.get("status"), now, interval),
        "error": health.get("error"),
        "path": path,
        "path_reason": reason,
    }


def _liveness(state: ShardState, status: str | None, now: int, interval_ms: int) -> str | None:
    """The reported health, unless the process that reported it is gone.

    A live process renews its writers' leases at least every ``interval_ms``.
    """
    if status not in ("running", "starting"):
        return status
    if not state.writers:
        return "stopped"
    silent_ms = now - max(w.last_heartbeat_ms for w in state.writers.values())
    if interval_ms > 0 and silent_ms > 3 * interval_ms:
        return f"unresponsive (no heartbeat for {silent_ms // 1000} s)"
    return status


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
        status_text = (r["status"] or "") + (f": {r['error']}" if r["error"] else "")
        table.add_row(
            escape(str(r["object"])),
            str(r["kind"]),
            escape(path_cell(r)),
            time_cell(r["since"], times, none="empty") if known else "",
            time_cell(r["write_frontier"], times, none="closed") if known else "",
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


def _unreadable_row(shard_id: str, error: TimeshardError) -> dict[str, Any]:
    """The ``status`` row of a shard whose state (or content) cannot be read."""
    return {
        "object": shard_id,
        "kind": "unreadable",
        "since": None,
        "write_frontier": None,
        "lag_ms": None,
        "retain_ms": None,
        "generation": None,
        "writers": None,
        "readers": None,
        "status": type(error).__name__,
        "error": str(error),
        "path": None,
        "path_reason": None,
    }


__all__ = ["STATUS_OPTIONAL", "UNKNOWN_PATH", "path_cell", "shard_states", "status", "status_rows"]
