"""``timeshard drop``: drop a view or an export that no running declaration declares any more.

The semantics are :func:`timeshard.controller.drop_object`'s, which ``DROP`` in
``timeshard serve`` shares: the object's holds on its inputs go, so they
compact again, and a view's shard is closed. Prints each object dropped and
the shards it released (or ``--json``).

Runs in this process: no Spark.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from timeshard.cli.options import (
    DEFAULT_LOCATION,
    BlobOpt,
    ConsensusOpt,
    JsonOpt,
    LocationOpt,
    console,
    location_from,
    print_json,
)
from timeshard.persist import PersistClient


def drop(
    name: Annotated[str, typer.Argument(help="The view or export to drop.")],
    cascade: Annotated[
        bool, typer.Option("--cascade", help="Drop the views and exports that hold it too.")
    ] = False,
    location: LocationOpt = DEFAULT_LOCATION,
    blob: BlobOpt = None,
    consensus: ConsensusOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Drop a view or an export that no running declaration declares any more.

    Its holds on its inputs go, so they compact again (``timeshard run`` names
    such objects on its ``undeclared:`` lines, and ``status`` shows them
    ``stalled``); a view's shard is closed, and its name is not used again. As
    ``DROP`` in ``timeshard serve``: an object others hold is refused unless
    ``--cascade``; an object ``timeshard serve`` created is dropped there; a
    view a process still runs or follows (a subscribe) is refused. Nothing is
    dropped if any is refused. A read-only deployment of the view (a standby
    not promoted) writes nothing, so it is not seen: it is fenced, as the
    view's shard is closed first, and can never be promoted over the view.
    """
    from timeshard.controller import drop_object

    client = PersistClient(location_from(location, blob, consensus))
    dropped = drop_object(client, name, cascade=cascade)
    if as_json:
        print_json([{"name": d.name, "kind": d.kind, "released": sorted(d.holds)} for d in dropped])
        return
    for d in dropped:
        released = ", ".join(map(repr, sorted(d.holds))) or "nothing"
        console.print(f"dropped {d.kind} {escape(repr(d.name))} (released {escape(released)})")


__all__ = ["drop"]
