"""Tables show wall-clock times as readable UTC beside their epoch ms (``--times ms``:
the integers alone), fit an 80-column terminal without cutting an id, and the demo's
live table is drawn before anything has run; no Spark."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from rich.console import Console
from rich.table import Table
from typer.testing import CliRunner

from timeshard.cli.demo import DemoBoard
from timeshard.cli.main import app
from timeshard.cli.options import (
    WALL_CLOCK_MS,
    Times,
    fit,
    readable_utc,
    time_cell,
    time_text,
)
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark.quiet import JvmOutput

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])
T = 1_795_803_651_644  # 2026-11-27 18:20:51.644 UTC
LONG_IDS = [
    "auction.auctions_by_region_and_category_v2",
    "warehouse.inventory_levels_per_store_and_day",
    "kv",
]
runner = CliRunner()


def test_wall_clock_times_read_as_utc_beside_their_epoch_ms() -> None:
    assert readable_utc(T) == "2026-11-27 18:20:51.644"
    assert readable_utc(WALL_CLOCK_MS) == "2001-09-09 01:46:40.000"
    assert readable_utc(WALL_CLOCK_MS - 1) is None and readable_utc(0) is None
    assert time_cell(T) == f"2026-11-27 18:20:51.644\n{T}"
    assert time_cell(T, Times.ms) == str(T)
    assert time_text(T) == f"{T} (2026-11-27 18:20:51.644 UTC)"
    assert time_text(T, Times.ms) == str(T)
    # Logical times (a counter, a test's 0, 1, 2) are shown as they are.
    assert time_cell(7) == "7" and time_text(7) == "7"
    assert time_cell(None, none="closed") == "closed"


def _location(root: Path) -> PersistClient:
    client = PersistClient(Location.embedded(root))
    for i, shard in enumerate(LONG_IDS):
        client.open_writer(shard, SCHEMA).append([(("a", i), T + i, 1)], 0, T + i + 1)
    return client


def _column(lines: list[str], index: int) -> list[str]:
    """The text of column ``index`` of a rich table, one entry per table line."""
    return [line.split("│")[index].strip() for line in lines if line.count("│") > index]


@pytest.mark.parametrize("command", [["status"], ["shard", "list"]])
def test_a_table_fits_80_columns_and_wraps_no_id_away(tmp_path: Path, command: list[str]) -> None:
    _location(tmp_path)
    out = runner.invoke(app, [*command, "-l", str(tmp_path)], env={"COLUMNS": "80"})
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert max(len(line) for line in lines) <= 80, out.output
    assert "…" not in out.output
    ids = "".join(_column(lines, 1))
    for shard in LONG_IDS:  # whole, if wrapped over lines
        assert shard in ids, (shard, out.output)
    # The upper is readable UTC above its epoch ms.
    assert "2026-11-27 18:20:51.645" in out.output and str(T + 1) in out.output

    raw = runner.invoke(app, [*command, "-l", str(tmp_path), "--times", "ms"])
    assert raw.exit_code == 0, raw.output
    assert str(T + 1) in raw.output and "2026-11-27" not in raw.output


def test_a_wide_terminal_shows_every_status_column(tmp_path: Path) -> None:
    _location(tmp_path)
    wide = runner.invoke(app, ["status", "-l", str(tmp_path)], env={"COLUMNS": "250"})
    narrow = runner.invoke(app, ["status", "-l", str(tmp_path)], env={"COLUMNS": "80"})
    assert wide.exit_code == narrow.exit_code == 0
    for header in ("object", "kind", "write frontier", "status"):
        assert header in narrow.output
    for header in ("readers", "writers", "generation", "retain"):
        assert header in wide.output and header not in narrow.output
    # JSON output holds the integers, whatever --times says.
    js = runner.invoke(app, ["status", "-l", str(tmp_path), "--json"])
    rows = {r["object"]: r for r in json.loads(js.output)}
    assert rows["kv"]["write_frontier"] == T + 3


def test_fit_drops_the_optional_columns_in_order_and_keeps_the_rest() -> None:
    table = Table("id", "a", "b", "c")
    table.add_row("x" * 30, "a" * 30, "b" * 30, "c" * 30)
    fit(table, ("c", "b", "a"), width=80)
    assert [str(c.header) for c in table.columns] == ["id", "a"]
    small = Table("id", "a")
    small.add_row("x", "y")
    assert [str(c.header) for c in fit(small, ("a",), width=80).columns] == ["id", "a"]


def test_the_demo_board_is_drawn_before_anything_runs_and_after_each_step(
    tmp_path: Path,
) -> None:
    client = _location(tmp_path)
    board = DemoBoard(LONG_IDS, seconds=20)
    console = Console(width=80, record=True, color_system=None)
    console.print(board)
    first = console.export_text()
    assert "starting Spark" in first and first.count("waiting") == len(LONG_IDS)
    board.observe(client, *LONG_IDS)
    board.phase = "running"
    board.start()
    console.print(board)
    drawn = console.export_text()
    assert "running, 0 of 20 s" in drawn and "waiting" not in drawn
    assert "2026-11-27 18:20:51.645" in drawn and max(map(len, drawn.splitlines())) <= 80
    assert not board.done()


def test_jvm_output_is_held_while_spark_starts_then_forwarded(
    capfd: pytest.CaptureFixture[str],
) -> None:
    out = JvmOutput()
    os.write(out.writers[2], b"WARNING: Using incubator modules: jdk.incubator.vector\n")
    os.write(out.writers[1], b":: loading settings :: url = jar:file:ivy\n")
    deadline = time.monotonic() + 60
    while len(out.held()) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(out.held()) == 2
    out.started()
    os.write(out.writers[2], b"ERROR an error of the running session\n")
    out.close_writers()
    out.join(60)
    captured = capfd.readouterr()
    assert "incubator" not in captured.err and "loading settings" not in captured.out
    assert captured.err == "ERROR an error of the running session\n"


def test_jvm_output_of_a_start_that_failed_is_printed(capfd: pytest.CaptureFixture[str]) -> None:
    out = JvmOutput()
    os.write(out.writers[2], b"JAVA_HOME is not set\n")
    out.close_writers()
    out.failed()
    assert "JAVA_HOME is not set\n" in capfd.readouterr().err


def test_a_spark_log_level_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from timeshard import InvalidUsage
    from timeshard.spark.quiet import LOG_LEVEL_ENV, log_level, quiet

    monkeypatch.delenv(LOG_LEVEL_ENV, raising=False)
    assert quiet() and log_level() == "ERROR"
    monkeypatch.setenv(LOG_LEVEL_ENV, "warn")
    assert not quiet() and log_level() == "WARN"
    monkeypatch.setenv(LOG_LEVEL_ENV, "loud")
    with pytest.raises(InvalidUsage, match="'loud'"):
        log_level()
