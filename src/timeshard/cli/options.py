"""What every ``timeshard`` command shares: the location options and how output is printed.

A location is named either by ``--location DIR`` (an embedded location: blob
directory ``DIR/blob`` and SQLite consensus ``DIR/consensus.sqlite``) or by
``--blob URI --consensus URI``. Tables go to :data:`console` (rich), ``--json``
output to stdout as indented JSON.

Invariants:

1. A command that reads a location never creates one: :func:`location_from`
   without ``create`` raises InvalidUsage for a directory that does not exist
   or holds no ``consensus.sqlite``.
2. ``--blob`` and ``--consensus`` go together; it is an error to give one.

Runs on the driver; nothing here imports PySpark.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from timeshard.cli.spec import DEFAULT_DIR
from timeshard.errors import InvalidUsage
from timeshard.location import Location, open_location

console = Console()
err_console = Console(stderr=True)

LocationOpt = Annotated[
    Path,
    typer.Option(
        "--location",
        "-l",
        envvar="TIMESHARD_LOCATION",
        help="Embedded location directory (blob/ + consensus.sqlite).",
    ),
]
BlobOpt = Annotated[str | None, typer.Option("--blob", help="Blob URI (with --consensus).")]
ConsensusOpt = Annotated[
    str | None, typer.Option("--consensus", help="Consensus URI (with --blob).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
DEFAULT_LOCATION = Path(DEFAULT_DIR)


def location_from(
    location: Path, blob: str | None, consensus: str | None, *, create: bool = False
) -> Location:
    """The location named by the options; an embedded one must exist unless ``create``."""
    if (blob is None) != (consensus is None):
        raise InvalidUsage("--blob and --consensus go together: give both or neither")
    if blob is not None and consensus is not None:
        return open_location(blob, consensus)
    if not create:
        check_location(location)
    return Location.embedded(location)


def check_location(directory: Path) -> None:
    """InvalidUsage naming ``directory`` unless it holds an embedded location."""
    if not directory.is_dir():
        raise InvalidUsage(
            f"location {str(directory)!r} does not exist: give --location DIR, or create "
            "one with `timeshard demo` or `timeshard run`"
        )
    if not (directory / "consensus.sqlite").is_file():
        raise InvalidUsage(
            f"{str(directory)!r} is not a timeshard location: it holds no consensus.sqlite"
        )


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")


def print_errors(errors: dict[str, str]) -> None:
    """One line per object that could not be read, below a table."""
    for name, error in errors.items():
        console.print(f"[red]{escape(name)}:[/red] {escape(error)}", soft_wrap=True)


def cell(value: object) -> str:
    return "" if value is None else str(value)


def table_columns(table: Table) -> list[str]:
    return [str(c.header) for c in table.columns]


__all__ = [
    "DEFAULT_LOCATION",
    "BlobOpt",
    "ConsensusOpt",
    "JsonOpt",
    "LocationOpt",
    "cell",
    "check_location",
    "console",
    "err_console",
    "location_from",
    "print_errors",
    "print_json",
    "table_columns",
]
