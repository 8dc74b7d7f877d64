"""``timeshard``: inspect and read shards, explain views, and run the demo.

A location is named either by ``--location DIR`` (the embedded default: a
blob directory ``DIR/blob`` and SQLite consensus ``DIR/consensus.sqlite``) or
by ``--blob URI --consensus URI`` (for example ``file:///shared/blob`` and
``postgresql://user@host/db``). Tables are rendered with rich; ``--json``
prints machine-readable output instead.

Every command but ``demo``, ``run``, ``nemesis`` and ``serve`` without
``--read-only`` reads an existing location: a ``--location`` directory that
does not exist, or holds no ``consensus.sqlite``, is an error (nothing is
created). The default location, ``.timeshard``, is the one ``demo`` and
``run`` write.

Errors. A timeshard error (a bad argument, an unknown or invalid shard id, a
time a shard cannot be read at, a query Spark rejects, a state that does not
decode, a damaged part) is printed on stderr as one line ``error: <message>``
and the exit code is 2; no traceback. ``status`` and ``shard list`` report a
shard whose state cannot be read in its row (the ``error`` field) and go on
with the others; they then exit with code 1.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from timeshard.cli.copy_from import copy
from timeshard.cli.dev import dev_app
from timeshard.cli.drop import drop
from timeshard.cli.explain import explain
from timeshard.cli.nemesis import nemesis
from timeshard.cli.options import DEFAULT_LOCATION, LocationOpt, console, err_console
from timeshard.cli.query import query, shards_named_in
from timeshard.cli.run import run
from timeshard.cli.serve import serve
from timeshard.cli.shard import shard_app
from timeshard.cli.status import status
from timeshard.cli.subscribe import subscribe
from timeshard.cli.verify import verify
from timeshard.errors import TimeshardError

# The module doc above is what ``timeshard --help`` prints. Each command lives in a
# module named after it (``query`` in cli/query.py, the ``shard`` group in cli/shard.py,
# ...), the options they share in cli/options.py; this module registers them, in the
# order ``--help`` lists them, and holds ``demo`` (cli/demo.py is loaded only when it runs).
app = typer.Typer(help=__doc__, no_args_is_help=True, add_completion=False)
app.add_typer(shard_app, name="shard")
app.add_typer(dev_app, name="dev")
app.command("status")(status)
app.command("explain")(explain)
app.command("serve")(serve)
app.command("query")(query)
app.command("copy")(copy)
app.command("subscribe")(subscribe)
app.command("verify")(verify)
app.command("run")(run)
app.command("drop")(drop)
app.command("nemesis")(nemesis)


@app.command("demo")
def demo(
    location: LocationOpt = DEFAULT_LOCATION,
    seconds: Annotated[float, typer.Option(help="How long to run the sources.")] = 20.0,
) -> None:
    """AUCTION and KEY VALUE sources with two views, live, then a consistency check.

    The demo starts afresh: it deletes what an earlier demo left at the
    location, and refuses a location it did not create.
    """
    from timeshard.cli.demo import run_demo

    raise typer.Exit(run_demo(location, seconds, console))


def main() -> None:
    try:
        app()
    except TimeshardError as e:
        message = " ".join(line.strip() for line in str(e).splitlines() if line.strip())
        err_console.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
        raise SystemExit(2) from e


__all__ = ["DEFAULT_LOCATION", "app", "main", "shards_named_in"]
