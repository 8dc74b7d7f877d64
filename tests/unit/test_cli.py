"""The ``timeshard shard`` commands against an embedded location."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from timeshard.cli.main import DEFAULT_LOCATION, app, main
from timeshard.location import Location
from timeshard.persist import PersistClient, PersistConfig
from timeshard.status import status_rows
from timeshard.storage.health import Health

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])
runner = CliRunner()


def make_shard(root: Path) -> None:
    client = PersistClient(Location.embedded(root))
    writer = client.open_writer("orders", SCHEMA)
    writer.append([(("a", 1), 0, 1), (("b", 2), 1, 1)], 0, 2)
    writer.append([(("a", 1), 2, -1)], 2, 3)
    writer.expire()


def test_list_inspect_snapshot_json(tmp_path: Path) -> None:
    make_shard(tmp_path)
    out = runner.invoke(app, ["shard", "list", "--location", str(tmp_path), "--json"])
    assert out.exit_code == 0, out.output
    listed = json.loads(out.output)
    assert [(s["shard"], s["upper"], s["rows"]) for s in listed] == [("orders", 3, 3)]

    out = runner.invoke(app, ["shard", "inspect", "orders", "-l", str(tmp_path), "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["upper"] == 3 and len(doc["batches"]) == 2 and "k: string" in doc["schema"]

    out = runner.invoke(
        app, ["shard", "snapshot", "orders", "--as-of", "1", "-l", str(tmp_path), "--json"]
    )
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)["rows"]
    assert sorted((r["k"], r["_diff"]) for r in rows) == [("a", 1), ("b", 1)]

    out = runner.invoke(app, ["shard", "snapshot", "orders", "-l", str(tmp_path), "--json"])
    assert [r["k"] for r in json.loads(out.output)["rows"]] == ["b"]


def test_tables_render(tmp_path: Path) -> None:
    make_shard(tmp_path)
    for args in (
        ["shard", "list"],
        ["shard", "inspect", "orders"],
        ["shard", "snapshot", "orders", "--as-of", "2"],
        ["shard", "compact", "orders"],
        ["shard", "gc", "orders"],
    ):
        out = runner.invoke(app, [*args, "--location", str(tmp_path)])
        assert out.exit_code == 0, (args, out.output)
    assert "orders" in runner.invoke(app, ["shard", "list", "-l", str(tmp_path)]).output


def test_errors_are_reported(tmp_path: Path) -> None:
    make_shard(tmp_path)
    out = runner.invoke(app, ["shard", "inspect", "../etc", "-l", str(tmp_path)])
    assert out.exit_code != 0
    assert "invalid shard id" in str(out.exception) + out.output
    out = runner.invoke(app, ["shard", "snapshot", "orders", "--as-of", "99", "-l", str(tmp_path)])
    assert out.exit_code != 0
    assert "readable at [0, 2]" in str(out.exception) + out.output
    out = runner.invoke(app, ["shard", "list", "--blob", "file:///tmp/x"])
    assert out.exit_code != 0


def test_status_shows_views_and_frontiers(tmp_path: Path) -> None:
    make_shard(tmp_path)
    client = PersistClient(Location.embedded(tmp_path))
    client.open_critical_since("orders", "deploy", "000000000003")
    out = runner.invoke(app, ["status", "-l", str(tmp_path), "--json"])
    assert out.exit_code == 0, out.output
    [row] = json.loads(out.output)
    assert row["kind"] == "view" and row["generation"] == 3 and row["write_frontier"] == 3
    assert runner.invoke(app, ["status", "-l", str(tmp_path)]).exit_code == 0


def run_main(
    args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[int, str, str]:
    """Run the ``timeshard`` entry point in this process: (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["timeshard", *args])
    with pytest.raises(SystemExit) as e:
        main()
    out = capsys.readouterr()
    code = e.value.code
    return (code if isinstance(code, int) else 0), out.out, out.err


@pytest.mark.parametrize(
    "args",
    [
        ["status"],
        ["shard", "list"],
        ["shard", "inspect", "orders"],
        ["shard", "snapshot", "orders"],
        ["subscribe", "orders", "--seconds", "0"],
        ["query", "SELECT 1"],
        ["verify"],
    ],
)
def test_read_only_commands_refuse_a_missing_location(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
) -> None:
    missing = tmp_path / "nowhere"
    location = ["--location", str(missing)] if args[0] != "verify" else [str(missing)]
    code, _, err = run_main([*args, *location], capsys, monkeypatch)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert str(missing) in err
    assert not missing.exists()


def test_status_and_demo_default_to_one_location() -> None:
    import typer

    command = typer.main.get_command(app)
    defaults = {
        name: {p.name: p.default for p in command.commands[name].params}  # type: ignore[attr-defined]
        for name in ("status", "query", "subscribe", "demo")
    }
    assert {d["location"] for d in defaults.values()} == {DEFAULT_LOCATION}


def test_snapshot_and_subscribe_below_since_name_the_readable_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    make_shard(tmp_path)
    hold = PersistClient(Location.embedded(tmp_path)).open_leased_reader("orders")
    hold.downgrade_since(2)
    for args in (
        ["shard", "snapshot", "orders", "--as-of", "1"],
        ["subscribe", "orders", "--from", "1", "--seconds", "0"],
    ):
        code, _, err = run_main([*args, "-l", str(tmp_path)], capsys, monkeypatch)
        assert code == 2 and err.count("\n") == 1, err
        assert "'orders'" in err and "readable at [2, 2]" in err, err
    hold.expire()


def test_subscribe_waits_on_an_empty_shard(tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    writer = client.open_writer("empty", SCHEMA)
    appended = threading.Timer(0.3, lambda: writer.append([(("a", 1), 0, 1)], 0, 1))
    appended.start()
    out = runner.invoke(app, ["subscribe", "empty", "--seconds", "1.5", "-l", str(tmp_path)])
    appended.join()
    assert out.exit_code == 0, (out.output, out.exception)
    lines = [json.loads(x) for x in out.output.splitlines()]
    assert lines[0]["k"] == "a" and lines[0]["_ts"] == 0


def test_subscribe_on_an_empty_shard_ends_quietly(tmp_path: Path) -> None:
    PersistClient(Location.embedded(tmp_path)).open_writer("empty", SCHEMA).expire()
    out = runner.invoke(app, ["subscribe", "empty", "--seconds", "0.2", "-l", str(tmp_path)])
    assert out.exit_code == 0 and out.output == "", (out.output, out.exception)


class FakeClock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def test_status_liveness_from_writer_heartbeats(tmp_path: Path) -> None:
    clock = FakeClock(1_000_000)
    location = Location.embedded(tmp_path)
    process = PersistClient(location, PersistConfig(clock=clock, heartbeat_interval_ms=0))
    writer = process.open_writer("orders", SCHEMA)
    health = Health(process, clock)
    health.report("orders", "running")
    health.close()
    viewer = PersistClient(location, PersistConfig(clock=clock))

    def orders_status() -> str:
        [row] = [r for r in status_rows(viewer) if r["object"] == "orders"]
        return str(row["status"])

    clock.now += 29_000
    assert orders_status() == "running"
    clock.now += 2_000  # 31 s without a heartbeat: more than 3 intervals of 10 s
    assert orders_status() == "unresponsive (no heartbeat for 31 s)"
    writer.expire()
    assert orders_status() == "stopped"


def test_status_shows_retained_history(tmp_path: Path) -> None:
    make_shard(tmp_path)
    client = PersistClient(Location.embedded(tmp_path))
    client.open_critical_since("orders", "retain", str(3_600_000))
    [row] = json.loads(runner.invoke(app, ["status", "-l", str(tmp_path), "--json"]).output)
    assert row["retain_ms"] == 3_600_000
    out = runner.invoke(app, ["status", "-l", str(tmp_path)], env={"COLUMNS": "200"})
    assert out.exit_code == 0 and "retain" in out.output
    [line] = [x for x in out.output.splitlines() if "orders" in x]
    assert " 1h " in line


def test_user_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    make_shard(tmp_path)
    for args in (
        ["shard", "inspect", "nope"],
        ["shard", "snapshot", "orders", "--as-of", "99"],
        ["shard", "list", "--blob", "file:///tmp/x"],
    ):
        code, _, err = run_main([*args, "-l", str(tmp_path)], capsys, monkeypatch)
        assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, (args, err)


MARKUP_SCHEMA = pa.schema([("[/]", pa.string()), ("price[usd]", pa.int64())])


def test_column_names_are_printed_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A column name is text, not rich markup: ``[/]`` does not crash, ``[usd]`` shows."""
    import timeshard.cli.query
    import timeshard.spark

    writer = PersistClient(Location.embedded(tmp_path)).open_writer("prices", MARKUP_SCHEMA)
    writer.append([(("x", 1), 0, 1)], 0, 1)
    writer.expire()
    wide = {"COLUMNS": "200"}
    for args in (["shard", "inspect", "prices"], ["shard", "snapshot", "prices"]):
        out = runner.invoke(app, [*args, "-l", str(tmp_path)], env=wide)
        assert out.exit_code == 0, (args, out.output, out.exception)
        assert "[/]" in out.output and "price[usd]" in out.output, (args, out.output)
    monkeypatch.setattr(timeshard.spark, "spark_session", lambda **kwargs: None)
    ran: list[object] = []
    monkeypatch.setattr(
        timeshard.cli.query,
        "_run_sql",
        lambda *args: ran.append(args) or [{"[/]": "x", "price[usd]": 1}],
    )
    out = runner.invoke(app, ["query", "SELECT * FROM prices", "-l", str(tmp_path)], env=wide)
    assert out.exit_code == 0 and len(ran) == 1, (out.output, out.exception, ran)
    assert "[/]" in out.output and "price[usd]" in out.output, out.output


@pytest.mark.parametrize("limit", ["0", "-1"])
@pytest.mark.parametrize("command", [["shard", "snapshot", "orders"], ["query", "SELECT 1"]])
def test_a_limit_below_one_is_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
    limit: str,
    no_spark: None,
) -> None:
    """``--limit -1`` dropped the last row; ``--limit 0`` printed one row on a server."""
    make_shard(tmp_path)
    code, out, err = run_main(
        [*command, "--limit", limit, "-l", str(tmp_path)], capsys, monkeypatch
    )
    assert code == 2 and err.count("\n") == 1, (out, err)
    assert err == f"error: --limit must be at least 1, got {limit}\n", err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--read-only"], "does not exist"),
        (["--packages", "kafak"], "--packages takes kafka, avro, got kafak"),
        (["--host", "0.0.0.0"], "needs a password"),
    ],
)
def test_serve_checks_its_arguments_before_creating_a_location(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    message: str,
    no_spark: None,
) -> None:
    """A read-only server never creates a location; a writer, only once all is checked."""
    monkeypatch.delenv("TIMESHARD_SERVE_PASSWORD", raising=False)
    missing = tmp_path / "nowhere"
    code, _, err = run_main(["serve", *args, "-l", str(missing)], capsys, monkeypatch)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert message in err, err
    assert not missing.exists()
