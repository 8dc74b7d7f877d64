"""What every ``timeshard`` command shares: the location options and how output is printed.

A location is named either by ``--location DIR`` (an embedded location: blob
directory ``DIR/blob`` and SQLite consensus ``DIR/consensus.sqlite``) or by
``--blob URI --consensus URI``. Tables go to :data:`console` (rich), ``--json``
output to stdout as indented JSON.

Times. A time from 2001-09-09 on (:data:`WALL_CLOCK_MS`) is wall-clock epoch
milliseconds, and tables show it as readable UTC above its epoch ms
(:func:`time_cell`; ``--times ms`` shows the epoch ms alone); a smaller time is
a logical one and is shown as it is. JSON output always holds the integers.

Width. :func:`fit` makes a table fit the terminal (80 columns included): it
drops the columns a command marks optional, least useful first, until the
table fits, and wraps what still does not -- an id is wrapped, never cut.

Invariants:

1. A command that reads a location never creates one: :func:`location_from`
   without ``create`` raises InvalidUsage for a directory that does not exist
   or holds no ``consensus.sqlite``.
2. ``--blob`` and ``--consensus`` go together; it is an error to give one.
3. A ``--limit`` is 1 or more (:func:`check_limit`), a ``--seconds`` a finite
   duration of 0 s or more (:func:`check_seconds`); anything else is
   InvalidUsage naming it.

Runs on the driver; nothing here imports PySpark.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

from timeshard.errors import InvalidUsage
from timeshard.location import Location, open_location
from timeshard.progress.wallclock import WALL_CLOCK_MS, readable_utc
from timeshard.spec import DEFAULT_DIR

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


class Times(StrEnum):
    """How tables show wall-clock times."""

    utc = "utc"  # readable UTC above the epoch ms
    ms = "ms"  # the epoch ms alone


TimesOpt = Annotated[
    Times,
    typer.Option(
        "--times",
        case_sensitive=False,
        help="Show wall-clock times as readable UTC beside their epoch ms (utc), or as "
        "epoch ms alone (ms).",
    ),
]


def time_cell(t: int | None, times: Times = Times.utc, *, none: str = "") -> str:
    """A time for a table cell: readable UTC above the epoch ms, or the integer alone."""
    if t is None:
        return none
    readable = readable_utc(t) if times is Times.utc else None
    return str(t) if readable is None else f"{readable}\n{t}"


def time_text(t: int | None, times: Times = Times.utc, *, none: str = "") -> str:
    """A time in a line of text: ``1795803651644 (2026-11-27 18:20:51.644 UTC)``."""
    if t is None:
        return none
    readable = readable_utc(t) if times is Times.utc else None
    return str(t) if readable is None else f"{t} ({readable} UTC)"


def fit(
    table: Table,
    optional: Sequence[str] = (),
    width: int | None = None,
    whole: Sequence[str] = (),
) -> Table:
    """``table``, made to fit ``width`` (the console's by default) columns.

    The columns headed ``optional`` are dropped, in that order, while the
    table is wider than ``width``. The columns headed ``whole`` (times, say)
    keep each line of their cells on one line; every other column wraps its
    cells (``fold``: an id longer than its column is wrapped, never cut).
    """
    width = console.width if width is None else width
    wide = console.options.update_width(10**6)
    for column in table.columns:
        column.overflow = "fold"
        if str(column.header) in whole:
            column.min_width = _natural_width(column)
    for header in optional:
        if console.measure(table, options=wide).maximum <= width:
            break
        table.columns[:] = [c for c in table.columns if str(c.header) != header]
    # Still too wide: narrow the widest wrapping column by the excess, then the next.
    for _ in range(len(table.columns)):
        excess = console.measure(table, options=wide).maximum - width
        narrowable = [
            c for c in table.columns if str(c.header) not in whole and _width(c) > _NARROWEST
        ]
        if excess <= 0 or not narrowable:
            break
        widest = max(narrowable, key=_width)
        widest.max_width = max(_NARROWEST, _width(widest) - excess)
    return table


#: A wrapping column is never made narrower than this by :func:`fit`.
_NARROWEST = 8


def _natural_width(column: Column) -> int:
    """The width ``column`` takes without wrapping: its widest line, header included."""
    return max(len(line) for c in (column.header, *column.cells) for line in str(c).splitlines())


def _width(column: Column) -> int:
    return column.max_width or _natural_width(column)


#: The headers of time columns, for :func:`fit`'s ``whole``.
TIME_COLUMNS = ("since", "upper", "lower", "write frontier", "lag")


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
    """InvalidUsage naming ``directory`` unless it holds an embedded location.

    An empty ``consensus.sqlite`` is none: opening it would create the location's
    tables and blob directory, which a command that only reads must not do.
    """
    if not directory.is_dir():
        raise InvalidUsage(
            f"location {str(directory)!r} does not exist: give --location DIR, or create "
            "one with `timeshard demo` or `timeshard run`"
        )
    consensus = directory / "consensus.sqlite"
    if not consensus.is_file():
        raise InvalidUsage(
            f"{str(directory)!r} is not a timeshard location: it holds no consensus.sqlite"
        )
    if consensus.stat().st_size == 0:
        raise InvalidUsage(
            f"{str(directory)!r} is not a timeshard location: its consensus.sqlite is an "
            "empty file (no location was ever made there)"
        )


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")


def print_errors(errors: dict[str, str]) -> None:
    """One line per object that could not be read, below a table."""
    for name, error in errors.items():
        console.print(f"[red]{escape(name)}:[/red] {escape(error)}", soft_wrap=True)


def cell(value: object) -> str:
    return "" if value is None else str(value)


def check_limit(limit: int) -> None:
    """InvalidUsage naming ``limit`` unless it is a number of rows to print (1 or more)."""
    if limit < 1:
        raise InvalidUsage(f"--limit must be at least 1, got {limit}")


def check_seconds(seconds: float) -> None:
    """InvalidUsage naming ``seconds`` unless it is a finite duration of 0 s or more."""
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidUsage(f"--seconds must be a finite number, 0 or more, got {seconds}")


__all__ = [
    "DEFAULT_LOCATION",
    "TIME_COLUMNS",
    "WALL_CLOCK_MS",
    "Times",
    "TimesOpt",
    "BlobOpt",
    "ConsensusOpt",
    "JsonOpt",
    "LocationOpt",
    "cell",
    "check_limit",
    "check_location",
    "check_seconds",
    "console",
    "err_console",
    "fit",
    "location_from",
    "print_errors",
    "print_json",
    "readable_utc",
    "time_cell",
    "time_text",
]
