"""``timeshard demo`` starts afresh on the default location, and never deletes
a location it did not create."""

from __future__ import annotations

import io
import socket
from pathlib import Path

import pyarrow as pa
import pytest
from rich.console import Console
from rich.table import Table

from timeshard import InvalidUsage
from timeshard.cli.demo import fresh_location, live
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.server.discovery import announce, withdraw

SCHEMA = pa.schema([("k", pa.string())])


def test_a_new_directory_becomes_a_demo_location(tmp_path: Path) -> None:
    location = fresh_location(tmp_path / "new")
    PersistClient(location).open_writer("kv", SCHEMA).expire()
    assert PersistClient(Location.embedded(tmp_path / "new")).list_shards() == ["kv"]


def test_an_earlier_demo_is_deleted_and_nothing_else(tmp_path: Path) -> None:
    PersistClient(fresh_location(tmp_path)).open_writer("kv", SCHEMA).expire()
    other = tmp_path / "run"  # another location inside the directory
    PersistClient(Location.embedded(other)).open_writer("mine", SCHEMA).expire()
    assert PersistClient(fresh_location(tmp_path)).list_shards() == []
    assert PersistClient(Location.embedded(other)).list_shards() == ["mine"]


def test_a_location_the_demo_did_not_create_is_refused(tmp_path: Path) -> None:
    PersistClient(Location.embedded(tmp_path)).open_writer("mine", SCHEMA).expire()
    with pytest.raises(InvalidUsage, match="did not create") as e:
        fresh_location(tmp_path)
    assert str(tmp_path) in str(e.value)
    assert PersistClient(Location.embedded(tmp_path)).list_shards() == ["mine"]


def test_a_demo_location_a_server_runs_on_is_refused(tmp_path: Path) -> None:
    """A second demo deleted the blobs and consensus under a running `timeshard serve`."""
    PersistClient(fresh_location(tmp_path)).open_writer("kv", SCHEMA).expire()
    with socket.create_server(("127.0.0.1", 0)) as listening:
        port = listening.getsockname()[1]
        announce(tmp_path, "127.0.0.1", port)
        with pytest.raises(InvalidUsage, match=f"timeshard serve runs on .* 127.0.0.1:{port}"):
            fresh_location(tmp_path)
    assert PersistClient(Location.embedded(tmp_path)).list_shards() == ["kv"]
    withdraw(tmp_path)
    assert PersistClient(fresh_location(tmp_path)).list_shards() == []


def test_the_live_board_ends_its_line_on_a_file() -> None:
    # Written to a pipe (the demo's output captured), the board's last frame ends with
    # a newline: what the demo prints next starts on a line of its own.
    out = io.StringIO()
    console = Console(file=out, width=40)
    table = Table("object")
    table.add_row("kv")
    with live(table, console):
        pass
    console.print("after")
    lines = out.getvalue().splitlines()
    assert lines[-1] == "after", lines
    assert lines[-2].startswith("└") and lines[-2].endswith("┘"), lines
