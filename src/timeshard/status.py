"""The rows of ``timeshard status``: every object of a location, its frontiers, health and path.

One row per shard (a dict, as ``timeshard status --json`` prints it and the
server's introspection relation returns it), then one per object that reports
health and has no shard of its own. A shard is a ``view`` when a view deploy
generation holds it (the sink's ``deploy`` critical reader). An object without
a shard is a ``source`` whose outputs are subsources (``auction`` writes
``auction.bids``, ...), when the catalog records it as one, or else an
``export`` (an export of a shard to another system, a sink of ``timeshard
serve``); its frontier columns are None. The columns:

* ``since`` / ``write_frontier``: the shard's frontiers; ``lag_ms`` is
  wall-clock now minus the write frontier, for shards whose timestamps are
  wall-clock milliseconds;
* ``retain_ms``: RETAIN HISTORY; ``generation``: a view's deploy generation;
* ``status`` / ``error``: the latest health the object reported (shard
  ``timeshard_status``), corrected by liveness: a source or view reported
  ``running`` or ``starting`` shows ``stopped`` once its shard has no writer,
  and ``unresponsive`` once no writer renewed its lease for three heartbeat
  intervals (for a source without a shard of its own, its remap shard's
  writers). A view whose ``deploy`` hold a drop marked is ``dropped``, its
  error saying that the drop did not finish (the drop records its health once
  it released the holds: a drop cut short after the mark recorded none). So is
  a view whose drop got past its release (its closed shard has no ``deploy``
  hold, and the catalog records a view of its name): it is a ``view`` though
  no hold says so, whatever health it last recorded (a drop that died before
  recording its health left the view's last, ``running`` say). Its error is
  None unless its statement of ``timeshard serve`` is still recorded: then the
  drop did not finish;
* ``path`` / ``path_reason``: how a view is maintained -- ``linear``,
  ``grouped`` or ``full`` (from snapshots) and why -- as its catalog entry
  recorded it when the view was installed (:mod:`timeshard.catalog`). A view
  whose entry predates the recording has no path (``-`` in the table).

Invariants:

1. The rows start no Spark: everything comes from shard states, the status
   shard and the catalog, read on the pyarrow path.
2. An object whose state (or, for the status and catalog shards, whose
   content) cannot be read is a row of kind ``unreadable`` holding the error;
   the others are shown all the same. So is each catalog row that does not
   decode (object ``timeshard_catalog row ('name', 'kind')``): it is never
   skipped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from timeshard.errors import TimeshardError
from timeshard.persist import PersistClient
from timeshard.persist._internal.state import ShardState
from timeshard.persist.holds import RETAIN_READER

if TYPE_CHECKING:
    from timeshard.catalog import CatalogEntry


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
    """The ``status`` row of every shard, then of every object with health and no shard,
    at ``client.config``'s clock."""
    states = shard_states(client)
    health = _health(client, states)
    entries = _catalog_entries(client, states)
    paths = _view_paths(entries)
    served = {e.name for e in entries if e.kind == "statement"}  # created by timeshard serve
    views = {e.name for e in entries if _is_view(e)}
    now = client.config.now_ms()
    rows = [
        _unreadable_row(shard_id, s)
        if isinstance(s, TimeshardError)
        else _status_row(client, shard_id, s, health.get(shard_id, {}), paths, (views, served), now)
        for shard_id, s in states.items()
    ]
    sources = {e.name for e in entries if e.kind == "source"}
    for obj in sorted(set(health) - set(states)):
        remap = states.get(f"{obj}.remap") if obj in sources else None
        rows.append(
            _shardless_row(
                client,
                obj,
                "source" if obj in sources else "export",
                health[obj],
                remap if isinstance(remap, ShardState) else None,
                now,
            )
        )
    return rows


def _health(
    client: PersistClient, states: dict[str, ShardState | TimeshardError]
) -> dict[str, dict[str, Any]]:
    """The latest health row of every object; a damaged status shard joins ``states``."""
    from timeshard.storage.health import STATUS_SHARD, latest_health

    if not isinstance(states.get(STATUS_SHARD), ShardState):
        return {}
    try:
        return latest_health(client)
    except TimeshardError as e:  # a damaged part: shown in the status shard's row
        states[STATUS_SHARD] = e
        return {}


def _catalog_entries(
    client: PersistClient, states: dict[str, ShardState | TimeshardError]
) -> list[CatalogEntry]:
    """The catalog's entries.

    A catalog row that does not decode joins ``states`` as ``timeshard_catalog row
    (name, kind)`` with its error (:func:`catalog_row_object`); a catalog shard whose
    content cannot be read joins ``states`` as itself.
    """
    from timeshard.catalog import CATALOG_SHARD, CatalogEntry, catalog_rows

    if not isinstance(states.get(CATALOG_SHARD), ShardState):
        return []
    try:
        rows = catalog_rows(client)
    except TimeshardError as e:  # a damaged part: shown in the catalog shard's row
        states[CATALOG_SHARD] = e
        return []
    out = []
    for row in rows:
        try:
            out.append(CatalogEntry.from_row(row))
        except TimeshardError as e:  # shown as its own row, as ``verify`` reports it
            states[catalog_row_object(row)] = e
    return out


def catalog_row_object(row: dict[str, Any]) -> str:
    """The ``object`` of the status row of a catalog row that does not decode."""
    from timeshard.catalog import CATALOG_SHARD

    return f"{CATALOG_SHARD} row ({row.get('name')!r}, {row.get('kind')!r})"


def _is_view(entry: CatalogEntry) -> bool:
    """Whether ``entry`` records a view: its own entry, or its ``timeshard serve`` statement."""
    return entry.kind == "view" or (
        entry.kind == "statement" and entry.definition.get("object") == "view"
    )


def _view_paths(entries: list[CatalogEntry]) -> dict[str, tuple[str | None, str | None]]:
    """Each cataloged view's recorded ``(path, reason)``, ``(None, None)`` if it has none."""
    out: dict[str, tuple[str | None, str | None]] = {}
    for entry in entries:
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
    cataloged: tuple[set[str], set[str]],
    now: int,
) -> dict[str, Any]:
    """The ``status`` row of the readable shard ``shard_id``; ``cataloged`` is the names
    the catalog records as views, and those ``timeshard serve`` created."""
    from timeshard.compute.mv_sink import DEPLOY_READER, DROPPED_OPAQUE

    views, served = cataloged
    deploy = s.critical_readers.get(DEPLOY_READER)
    retain = s.critical_readers.get(RETAIN_READER)
    upper = s.upper.time
    interval = client.config.heartbeat_interval_ms
    path, reason = paths.get(shard_id, (None, None))
    status, error = _liveness(s, health.get("status"), now, interval), health.get("error")
    again = (  # a view of timeshard serve is dropped there (`timeshard drop` refuses it)
        "DROP it again in timeshard serve, or restart the server, which finishes it"
        if shard_id in served
        else f"running it again finishes it (`timeshard drop {shard_id}`)"
    )
    released = deploy is None and s.upper.is_empty() and shard_id in views
    if deploy is not None and deploy.opaque == DROPPED_OPAQUE:
        status = "dropped"
        error = f"its drop began (its deploy hold is marked) and did not finish: {again}"
    elif released:  # the drop released the deploy hold: what is left is a closed shard
        status = "dropped"
        error = (
            f"its drop released its holds and did not finish: {again}"
            if shard_id in served
            else None
        )
    return {
        "object": shard_id,
        "kind": "view" if deploy or released else "shard",
        "since": s.since.to_json(),
        "write_frontier": upper,
        "lag_ms": now - upper if upper is not None and upper > 10**12 else None,
        "retain_ms": int(retain.opaque) if retain and retain.opaque.isdigit() else None,
        "generation": int(deploy.opaque) if deploy and deploy.opaque.isdigit() else None,
        "writers": len(s.writers),
        "readers": len(s.leased_readers),
        "status": status,
        "error": error,
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


def _shardless_row(
    client: PersistClient,
    obj: str,
    kind: str,
    health: dict[str, Any],
    remap: ShardState | None,
    now: int,
) -> dict[str, Any]:
    """The ``status`` row of an object with health and no shard: a source whose outputs
    are subsources (alive while its ``remap`` shard has live writers), or an export."""
    status = health.get("status")
    if remap is not None:
        status = _liveness(remap, status, now, client.config.heartbeat_interval_ms)
    return _row_without_state(obj, kind, status, health.get("error"))


def _unreadable_row(shard_id: str, error: TimeshardError) -> dict[str, Any]:
    """The ``status`` row of a shard whose state (or content) cannot be read."""
    return _row_without_state(shard_id, "unreadable", type(error).__name__, str(error))


def _row_without_state(obj: str, kind: str, status: Any, error: Any) -> dict[str, Any]:
    """A ``status`` row with no shard state to show: no frontiers, handles or path."""
    return {
        "object": obj,
        "kind": kind,
        "since": None,
        "write_frontier": None,
        "lag_ms": None,
        "retain_ms": None,
        "generation": None,
        "writers": None,
        "readers": None,
        "status": status,
        "error": error,
        "path": None,
        "path_reason": None,
    }


__all__ = ["shard_states", "status_rows"]
