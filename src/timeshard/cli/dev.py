"""``timeshard dev``: real servers on loopback to try the connectors with."""

from __future__ import annotations

import signal
import tempfile
import threading
from pathlib import Path
from typing import Annotated

import typer

from timeshard.dev.kafka import KAFKA_VERSION, KafkaBroker, KafkaUnavailable

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
    try:
        broker.start()
    except KafkaUnavailable as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(
        f"Kafka {version} on {broker.bootstrap} (bootstrap.servers), data in {workdir}; "
        "Ctrl-C stops it"
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        while not done.wait(1.0) and broker.running:
            pass
    except KeyboardInterrupt:
        pass
    finally:
        broker.stop()
