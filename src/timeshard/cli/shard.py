"""``timeshard shard``: list a location's shards, inspect one, read one, compact it, collect it.

``list`` shows every shard's frontiers and sizes; a shard whose state cannot
be read is listed with its ``error``, and the exit code is then 1. ``inspect``
shows one shard's state: its schema, frontiers, batches, and the readers and
writers that hold it. ``snapshot`` prints a shard's rows at one time: by
default the latest readable one (``upper - 1``), or, for a closed shard (a
dropped view's), its last time, where it has all its updates; a time the
shard cannot be read at is an error naming the times it can be read at.
``compact`` runs the shard's compaction to completion; ``gc`` expires stale
leases, deletes unreferenced blobs and truncates consensus.

Runs in this process, with pyarrow: no command here starts Spark.
"""

from __future__ import annotations

from typing import Annotated, Any

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
    check_limit,
    console,
    fit,
    location_from,
    print_errors,
    print_json,
    time_cell,
    time_text,
)
from timeshard.errors import SinceError, TimeshardError
from timeshard.persist import PersistClient
from timeshard.persist.as_of import common_as_of, not_readable
from timeshard.status import shard_states

shard_app = typer.Typer(help="Inspect and read shards.", no_args_is_help=True)


@shard_app.command("list")
def shard_list(
    location: LocationOpt = DEFAULT_LOCATION,
    blob: BlobOpt = None,
    consensus: ConsensusOpt = None,
    as_json: JsonOpt = False,
    times: TimesOpt = Times.utc,
) -> None:
    """List the shards of a location with their frontiers and sizes.

    A shard whose state cannot be read is listed with its ``error``; the exit
    code is then 1.
    """
    client = PersistClient(location_from(location, blob, consensus))
    rows: list[dict[str, Any]] = []
    for shard_id, s in shard_states(client).items():
        if isinstance(s, TimeshardError):
            rows.append({"shard": shard_id, "error": str(s)})
            continue
        rows.append(
            {
                "shard": shard_id,
                "since": s.since.to_json(),
                "upper": s.upper.to_json(),
                "batches": len(s.batches),
                "rows": s.num_rows(),
                "bytes": s.size_in_bytes(),
                "seqno": s.seqno,
                "error": None,
            }
        )
    failed = any(r["error"] for r in rows)
    if as_json:
        print_json(rows)
    else:
        table = Table("shard", "since", "upper", "batches", "rows", "bytes", "seqno")
        for r in rows:
            if r["error"]:
                table.add_row(escape(r["shard"]), "unreadable (below)")
                continue
            table.add_row(
                escape(r["shard"]),
                time_cell(r["since"], times, none="empty"),
                time_cell(r["upper"], times, none="closed"),
                *(cell(r[c]) for c in ("batches", "rows", "bytes", "seqno")),
            )
        console.print(fit(table, ("seqno", "bytes", "batches", "since"), whole=TIME_COLUMNS))
        print_errors({r["shard"]: r["error"] for r in rows if r["error"]})
    if failed:
        raise typer.Exit(1)


@shard_app.command("inspect")
def shard_inspect(
    shard: str,
    location: LocationOpt = DEFAULT_LOCATION,
    blob: BlobOpt = None,
    consensus: ConsensusOpt = None,
    as_json: JsonOpt = False,
    times: TimesOpt = Times.utc,
) -> None:
    """Show a shard's state: schema, frontiers, batches, readers and writers."""
    state = PersistClient(location_from(location, blob, consensus)).state(shard)
    if as_json:
        doc = state.to_json()
        doc["schema"] = str(state.data_schema)
        print_json(doc)
        return
    console.print(
        f"[bold]{escape(shard)}[/bold] seqno {state.seqno}  "
        f"since {time_text(state.since.time, times, none='empty')}  "
        f"upper {time_text(state.upper.time, times, none='closed')}",
        soft_wrap=True,
    )
    console.print(escape(f"schema: {', '.join(f'{f.name} {f.type}' for f in state.data_schema)}"))
    batches = Table("lower", "upper", "since", "parts", "rows", "bytes", title="batches")
    for b in state.batches:
        batches.add_row(
            time_cell(b.desc.lower.time, times, none="empty"),
            time_cell(b.desc.upper.time, times, none="closed"),
            time_cell(b.desc.since.time, times, none="empty"),
            str(len(b.parts)),
            str(b.num_rows),
            str(b.size_in_bytes),
        )
    console.print(fit(batches, ("bytes", "parts"), whole=TIME_COLUMNS))
    holders = Table("kind", "id", "since / lease", title="readers and writers")
    for rid, r in state.leased_readers.items():
        since = time_text(r.since.time, times, none="empty")
        holders.add_row("leased reader", rid, f"since {since}, seqno {r.seqno}")
    for rid, c in state.critical_readers.items():
        since = time_text(c.since.time, times, none="empty")
        holders.add_row(
            "critical reader", escape(rid), escape(f"since {since}, opaque {c.opaque!r}")
        )
    for wid, w in state.writers.items():
        holders.add_row("writer", wid, f"lease {w.lease_duration_ms} ms")
    console.print(fit(holders))


@shard_app.command("snapshot")
def shard_snapshot(
    shard: str,
    as_of: Annotated[
        int | None, typer.Option("--as-of", help="Time to read at (default: the latest readable).")
    ] = None,
    limit: Annotated[int, typer.Option(help="Rows to print at most.")] = 50,
    location: LocationOpt = DEFAULT_LOCATION,
    blob: BlobOpt = None,
    consensus: ConsensusOpt = None,
    as_json: JsonOpt = False,
    times: TimesOpt = Times.utc,
) -> None:
    """Print a shard's contents at a time (pyarrow path, no Spark); by default a closed
    shard (a dropped view's) at its last time, where it has all its updates."""
    check_limit(limit)
    client = PersistClient(location_from(location, blob, consensus))
    reader = client.open_leased_reader(shard)
    try:
        upper = reader.fetch_recent_upper()
        if as_of is None and upper.is_empty():  # closed: at its last time
            as_of = common_as_of({shard: reader}, None)
        if as_of is None:
            as_of = (upper.time - 1) if upper.time else 0
        if upper.less_equal(as_of):
            raise not_readable(reader, as_of)
        try:
            rows = reader.snapshot(as_of).to_pylist()
        except SinceError as e:
            raise not_readable(reader, as_of) from e
    finally:
        reader.expire()
    if as_json:
        print_json({"shard": shard, "as_of": as_of, "rows": rows[:limit], "total_rows": len(rows)})
        return
    if not rows:
        console.print(f"{escape(shard)} is empty at {time_text(as_of, times)}")
        return
    title = f"{shard} AS OF {time_text(as_of, times)} ({len(rows)} rows)"
    table = Table(*(escape(c) for c in rows[0]), title=escape(title))
    for r in rows[:limit]:
        table.add_row(*(escape(str(v)) for v in r.values()))
    console.print(fit(table))


@shard_app.command("compact")
def shard_compact(
    shard: str,
    location: LocationOpt = DEFAULT_LOCATION,
    blob: BlobOpt = None,
    consensus: ConsensusOpt = None,
) -> None:
    """Run compaction of a shard to completion."""
    merges = PersistClient(location_from(location, blob, consensus)).compact(shard)
    console.print(f"{shard}: {merges} merges applied")


@shard_app.command("gc")
def shard_gc(
    shard: str,
    location: LocationOpt = DEFAULT_LOCATION,
    blob: BlobOpt = None,
    consensus: ConsensusOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Expire stale leases, delete unreferenced blobs and truncate consensus."""
    report = PersistClient(location_from(location, blob, consensus)).gc(shard)
    doc = {
        "deleted_blobs": report.deleted_blobs,
        "kept_blobs": report.kept_blobs,
        "truncated_versions": report.truncated_versions,
        "expired": list(report.expired),
        "unrecognized_keys": list(report.unrecognized_keys),
    }
    if as_json:
        print_json(doc)
    else:
        console.print(doc)


__all__ = [
    "shard_app",
    "shard_compact",
    "shard_gc",
    "shard_inspect",
    "shard_list",
    "shard_snapshot",
]
