"""``timeshard serve``: one long-running process, every object ticking, SQL over pgwire.

The process starts one SparkSession, restores every object the location's
catalog records (:mod:`timeshard.server.engine`), and listens for
PostgreSQL clients (:mod:`timeshard.server.pgwire`) on 127.0.0.1:6875 by
default. It serves a dashboard (:mod:`timeshard.server.dashboard`) on
http://127.0.0.1:6876, always on loopback: it has no authentication. It
prints when it is ready, with the command line for ``psql`` and the
dashboard's address, and runs until SIGINT or SIGTERM (or ``--seconds``),
when it closes every object and stops Spark. If its Spark JVM exits (killed,
crashed, out of memory) it stops at once with exit code 3 and says why:
no Spark call can succeed any more, and a server that answered while its
objects stalled would hide that. Restarted, every object resumes where its
shards end, as after ``kill -9``.

On an embedded location (a directory) it writes ``serve.json`` there
(:mod:`timeshard.server.discovery`), unless a live server announced itself
first (it takes over, within seconds, when that one stops): ``timeshard
query`` on that location then runs its query on the server and starts no
Spark of its own.

Without ``--read-only`` it creates an embedded location that does not exist
yet (objects are then created with SQL), once its arguments are checked.
``--read-only`` starts a replica that runs no object and writes nothing to the
location's shards or consensus (it announces itself in ``serve.json`` as a writer
does; a location that does not exist is an error, as for ``status``): it
lists the objects the catalog records, follows the CREATEs and DROPs of the
servers that write, and answers queries and SUBSCRIBEs from the shards.
``ALTER SYSTEM PROMOTE`` makes it a writer, as if it had started without
``--read-only``.

A bind address that is not loopback needs a password, taken from the
environment variable ``TIMESHARD_SERVE_PASSWORD`` (never from the command
line, where other users could read it); clients then authenticate with
SCRAM-SHA-256.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from timeshard.cli.options import (
    DEFAULT_LOCATION,
    BlobOpt,
    ConsensusOpt,
    LocationOpt,
    err_console,
    location_from,
)
from timeshard.errors import InvalidUsage
from timeshard.persist import PersistClient

console = Console(highlight=False)
PASSWORD_ENV = "TIMESHARD_SERVE_PASSWORD"
#: The exit code of a server whose Spark JVM exited under it.
JVM_EXITED = 3


def serve(
    location: LocationOpt = DEFAULT_LOCATION,
    blob: BlobOpt = None,
    consensus: ConsensusOpt = None,
    host: Annotated[str, typer.Option(help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="The port to listen on (0: any free one).")] = 6875,
    dashboard_port: Annotated[
        int, typer.Option(help="The dashboard's HTTP port, on 127.0.0.1 (0: any free one).")
    ] = 6876,
    master: Annotated[str, typer.Option(help="The Spark master URL.")] = "local[2]",
    tick: Annotated[float, typer.Option(help="Seconds between two ticks of every object.")] = 1.0,
    seconds: Annotated[
        float | None, typer.Option(help="Stop after this long (default: run until stopped).")
    ] = None,
    read_only: Annotated[
        bool,
        typer.Option(
            "--read-only",
            help="Run no object and write nothing: answer reads, follow the catalog; "
            "ALTER SYSTEM PROMOTE makes it a writer.",
        ),
    ] = False,
    packages: Annotated[
        str | None,
        typer.Option(
            help="Spark packages to load, comma-separated: kafka (KAFKA sources), avro (Avro "
            "formats). Those the location's recorded sources need load by themselves."
        ),
    ] = None,
) -> None:
    """Run every source and view of the location and answer SQL over the PostgreSQL protocol.

    Objects are created with SQL (CREATE SOURCE, CREATE MATERIALIZED VIEW) and
    kept in the location's catalog: a restarted server restores and resumes
    them. Connect with: psql -h 127.0.0.1 -p 6875 -U timeshard timeshard
    """
    from timeshard.server.dashboard import Dashboard
    from timeshard.server.discovery import announce, running_server, withdraw
    from timeshard.server.engine import Engine
    from timeshard.server.packages import named, session_packages
    from timeshard.server.pgwire import PgServer, check_access
    from timeshard.spark import spark_session

    if tick <= 0:
        raise InvalidUsage(f"--tick must be positive, got {tick}")
    if not 0 <= port <= 65535:
        raise InvalidUsage(f"--port must be in [0, 65535], got {port}")
    if not 0 <= dashboard_port <= 65535:
        raise InvalidUsage(f"--dashboard-port must be in [0, 65535], got {dashboard_port}")
    password = os.environ.get(PASSWORD_ENV) or None
    check_access(host, password)
    named(packages)
    # Everything checked: a writer creates a location that does not exist, a replica never.
    client = PersistClient(location_from(location, blob, consensus, create=not read_only))
    spark = spark_session(
        master=master,
        app_name="timeshard-serve",
        packages=session_packages(client, packages),
        blob_uri=client.location.blob_uri,
    )
    engine = Engine(spark, client, tick_s=tick, read_only=read_only)
    try:
        server = PgServer(engine, host, port, password)
    except OSError as e:
        spark.stop()
        raise InvalidUsage(f"cannot listen on {host}:{port}: {e.strerror or e}") from e
    try:
        dashboard = Dashboard(engine, "127.0.0.1", dashboard_port)
    except OSError as e:
        server.server_close()
        spark.stop()
        raise InvalidUsage(f"cannot listen on 127.0.0.1:{dashboard_port}: {e.strerror or e}") from e
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    failures = engine.start()
    for failure in failures:
        console.print(f"[red]not restored:[/red] {escape(failure)}", soft_wrap=True)
    listener = threading.Thread(target=server.serve_forever, name="pgwire", daemon=True)
    listener.start()
    dashboard.start()
    embedded = blob is None and consensus is None

    def take_over_announcement() -> None:
        if embedded and running_server(location) is None:  # `timeshard query` then runs here
            announce(location, host, server.port)

    take_over_announcement()
    objects = ", ".join(sorted(engine.objects)) or "none yet"
    mode = " (read-only: ALTER SYSTEM PROMOTE makes it a writer)" if read_only else ""
    console.print(
        f"timeshard serve{mode}: listening on {host}:{server.port}; objects: {escape(objects)}\n"
        f"  psql -h {host} -p {server.port} -U timeshard timeshard\n"
        f"  dashboard: {dashboard.url}",
        soft_wrap=True,
    )
    deadline = None if seconds is None else time.monotonic() + seconds
    checked = time.monotonic()
    gone = False
    while not stop.wait(0.2):
        if deadline is not None and time.monotonic() >= deadline:
            break
        gone = jvm_gone("serve")
        if gone:
            break
        if time.monotonic() - checked >= 5:  # the announced server may have stopped
            take_over_announcement()
            checked = time.monotonic()
    if embedded:
        withdraw(location)
    server.shutdown()
    server.server_close()
    dashboard.close()
    if gone:  # closing would call Spark: the objects stay as a kill -9 leaves them
        raise typer.Exit(JVM_EXITED)
    engine.close()
    spark.stop()


def jvm_gone(command: str) -> bool:
    """Whether this process's Spark JVM has exited -- said on stderr, as why ``command``
    stops (every Spark call would fail; started again, every object resumes where its
    shards end). The command then exits with :data:`JVM_EXITED`."""
    from timeshard.spark.session import jvm_exit

    gone = jvm_exit()
    if gone is not None:
        err_console.print(
            f"[red]timeshard {command} stops:[/red] {escape(gone)}; every Spark call would "
            "fail. Start it again: every object resumes where its shards end.",
            soft_wrap=True,
        )
    return gone is not None


__all__ = ["JVM_EXITED", "PASSWORD_ENV", "jvm_gone", "serve"]
