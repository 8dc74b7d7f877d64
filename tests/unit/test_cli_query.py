"""``timeshard query`` decides what to read before Spark starts: the shards the
SQL names, and a time every one of them can be read at."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from timeshard.cli.main import main, shards_named_in
from timeshard.cli.serve import PASSWORD_ENV
from timeshard.location import Location
from timeshard.persist import PersistClient, ReadHandle
from timeshard.server.discovery import announce, withdraw
from timeshard.server.engine import Result
from timeshard.server.pgwire import PgServer

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])
KNOWN = ["auction.bids", "auction.auctions", "kv", "kvx", "orders"]


@pytest.mark.parametrize(
    ("sql", "named"),
    [
        ("SELECT * FROM `auction.bids` b JOIN kv ON b.k = kv.k", ["auction.bids", "kv"]),
        ("select count(*) from orders where k = 'kvx'", ["orders"]),
        ('SELECT "kv" AS s, * FROM auction.auctions', ["auction.auctions"]),
        ("SELECT 1", []),
        ("SELECT * FROM `a``b`", []),
    ],
)
def test_shards_named_in(sql: str, named: list[str]) -> None:
    assert shards_named_in(sql, KNOWN) == named


def two_shards(root: Path) -> ReadHandle:
    """``early`` readable at [0, 2]; ``late`` readable at [5, 7] (its since is held at 5)."""
    client = PersistClient(Location.embedded(root))
    early = client.open_writer("early", SCHEMA)
    early.append([(("a", 1), 0, 1)], 0, 3)
    late = client.open_writer("late", SCHEMA)
    late.append([(("b", 2), 1, 1)], 0, 8)
    hold = client.open_leased_reader("late")
    hold.downgrade_since(5)
    client.open_writer("empty", SCHEMA).expire()
    return hold


def run_query(
    args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[object, str]:
    monkeypatch.setattr(sys, "argv", ["timeshard", "query", *args])
    with pytest.raises(SystemExit) as e:
        main()
    return e.value.code, capsys.readouterr().err


def test_no_common_readable_time_is_one_line(
    tmp_path: Path,
    no_spark: None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hold = two_shards(tmp_path)
    code, err = run_query(
        ["SELECT * FROM early JOIN late", "-l", str(tmp_path)], capsys, monkeypatch
    )
    assert code == 2 and err.count("\n") == 1, err
    assert "early" in err and "[0, 2]" in err and "late" in err and "[5, 7]" in err, err
    code, err = run_query(["SELECT * FROM `empty`", "-l", str(tmp_path)], capsys, monkeypatch)
    assert code == 2 and "empty" in err and "nothing is readable yet" in err, err
    hold.expire()


def test_as_of_outside_a_shards_range_is_one_line(
    tmp_path: Path,
    no_spark: None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hold = two_shards(tmp_path)
    for as_of in ("4", "8"):
        code, err = run_query(
            ["SELECT * FROM late", "--as-of", as_of, "-l", str(tmp_path)], capsys, monkeypatch
        )
        assert code == 2 and err.count("\n") == 1, err
        assert f"as_of {as_of}" in err and "'late'" in err and "readable at [5, 7]" in err, err
    hold.expire()


def test_shards_that_differ_only_in_case_are_refused(
    tmp_path: Path,
    no_spark: None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Spark's temp views fold case: ``KV`` and ``kv`` in one query read one shard for both."""
    client = PersistClient(Location.embedded(tmp_path))
    for shard, value in (("KV", 1), ("kv", 2)):
        writer = client.open_writer(shard, SCHEMA)
        writer.append([(("a", value), 0, 1)], 0, 1)
        writer.expire()
    code, err = run_query(
        ["SELECT * FROM KV JOIN kv USING (k)", "-l", str(tmp_path)], capsys, monkeypatch
    )
    assert code == 2 and err.count("\n") == 1, err
    assert "'KV' and 'kv'" in err and "differ only in case" in err, err


class OneRow:
    """A stand-in for a server's engine: any query answers one row."""

    def execute(self, statement: object) -> Result:
        return Result([("n", "long")], [(7,)], "SELECT 1")

    @contextlib.contextmanager
    def cancellable(self, tag: str) -> Iterator[None]:
        """Its queries answer at once: no job to tag."""
        yield

    def cancel(self, tag: str) -> None:
        """Nothing runs long enough to cancel."""


def test_a_query_on_a_server_with_a_password_sends_it(
    tmp_path: Path,
    no_spark: None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`timeshard query` on a location a `timeshard serve` with a password announces."""
    writer = PersistClient(Location.embedded(tmp_path)).open_writer("t", SCHEMA)
    writer.append([(("a", 1), 0, 1)], 0, 2)
    writer.expire()
    server = PgServer(OneRow(), "127.0.0.1", 0, "s3cret")  # type: ignore[arg-type]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    announce(tmp_path, "127.0.0.1", server.port)
    for name in (PASSWORD_ENV, "PGPASSWORD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))
    args = ["SELECT * FROM t", "-l", str(tmp_path), "--json"]
    try:
        code, err = run_query(args, capsys, monkeypatch)
        assert code == 2 and err.count("\n") == 1, err
        assert "needs a password: set TIMESHARD_SERVE_PASSWORD to the server" in err, err
        monkeypatch.setenv(PASSWORD_ENV, "wrong")
        code, err = run_query(args, capsys, monkeypatch)
        assert code == 2 and err.count("\n") == 1, err
        assert "refused the password given: set TIMESHARD_SERVE_PASSWORD" in err, err
        for name in (PASSWORD_ENV, "PGPASSWORD"):  # PGPASSWORD as libpq reads it
            monkeypatch.delenv(PASSWORD_ENV)
            monkeypatch.setenv(name, "s3cret")
            monkeypatch.setattr(sys, "argv", ["timeshard", "query", *args])
            with pytest.raises(SystemExit) as e:
                main()
            out = capsys.readouterr()
            assert e.value.code == 0, out.err
            assert json.loads(out.out)["rows"] == [{"n": 7}], out
    finally:
        withdraw(tmp_path)
        server.shutdown()
        server.server_close()
