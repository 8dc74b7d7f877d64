"""Cursors on a running ``timeshard serve``: DECLARE, FETCH and CLOSE, as Materialize has them.

One server serves the module. Through psycopg:

* a cursor on a SUBSCRIBE of a COUNTER source: ``FETCH ALL`` answers the
  snapshot, later ``FETCH ALL ... WITH (TIMEOUT = '10s')`` the ticks after
  it, and every row fetched adds up to the counter's values ``1..n``;
  ``CLOSE`` and COMMIT end cursors;
* a cursor on a SUBSCRIBE of a FILE source nobody appends to: ``TIMEOUT
  '0s'`` answers no rows, and a line appended later comes in a later FETCH;
* DECLARE outside a transaction block is refused (25P01); a query cursor
  answers its rows two, then the rest; psycopg's named cursors work;

and psql runs cursors of both kinds, in a transaction block and in one
message of several statements.

A wait polls with a generous deadline while the server lives, so a slow
machine is slow, never failed; a server that died fails at once, with its log.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg import errors
from tests.integration.test_serve import Served, connect, mask_times, psql_binary, start_serve

pytestmark = [pytest.mark.spark]

#: How long a change may take to show: a stuck server never shows it, a slow one does.
DEADLINE_S = 300.0
COUNTER = "ctr"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One server for the module, with a COUNTER source ``ctr`` three values a tick."""
    tmp = tmp_path_factory.mktemp("serve_cursor")
    server = start_serve(tmp / "loc", tmp / "serve.log")
    with connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE SOURCE {COUNTER} FROM LOAD GENERATOR COUNTER (RATE 3)")
    yield server
    if server.proc.poll() is None:
        assert server.stop() == 0, server.log.read_text()


def alive(served: Served, deadline: float, what: str) -> None:
    assert served.proc.poll() is None, served.log.read_text()[-4000:]
    assert time.monotonic() < deadline, f"after {DEADLINE_S}s: {what}"


def wait_for(served: Served, query: str, want: list[tuple[Any, ...]]) -> None:
    """Poll ``query`` until it answers ``want``."""
    deadline = time.monotonic() + DEADLINE_S
    with connect(served, autocommit=True) as conn:
        while (got := conn.execute(query).fetchall()) != want:
            alive(served, deadline, f"{query!r} gives {got!r}")
            time.sleep(0.5)


@pytest.fixture
def lines(served: Served, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A FILE source of text lines ``one`` and ``two``, and its file: nothing else appends."""
    name, root = f"lines_{uuid.uuid4().hex[:8]}", tmp_path / "lines"
    root.mkdir()
    (root / "a.txt").write_text("one\ntwo\n")
    with connect(served, autocommit=True) as conn:
        conn.execute(f"CREATE SOURCE {name} FROM FILE '{root}' (FORMAT text)")
    wait_for(served, f"SELECT text FROM {name} ORDER BY text", [("one",), ("two",)])
    yield name, root / "a.txt"
    with connect(served, autocommit=True) as conn:
        conn.execute(f"DROP SOURCE {name}")


def added_up(rows: list[tuple[Any, ...]]) -> Counter[int]:
    """The counter's values that ``rows`` (mz_timestamp, mz_diff, counter) leave."""
    content: Counter[int] = Counter()
    for _, diff, value in rows:
        content[value] += diff
    return +content


def test_a_subscribe_cursor_fetches_the_snapshot_then_each_tick(served: Served) -> None:
    with connect(served) as conn:  # not autocommit: psycopg sends BEGIN first
        cur = conn.execute(f"DECLARE c CURSOR FOR SUBSCRIBE {COUNTER}")
        assert cur.statusmessage == "DECLARE CURSOR"
        cur = conn.execute("FETCH ALL c")
        assert [d.name for d in cur.description or []] == ["mz_timestamp", "mz_diff", "counter"]
        fetched = cur.fetchall()
        assert fetched and cur.statusmessage == f"FETCH {len(fetched)}"
        times = [t for t, _, _ in fetched]
        assert times == sorted(times)
        # Whole times only: the rows so far are the counter at the last of them.
        assert added_up(fetched) == Counter(range(1, len(added_up(fetched)) + 1)), fetched
        last = times[-1]

        deadline = time.monotonic() + DEADLINE_S
        while True:  # the counter ticks: a later FETCH answers the values it adds
            more = conn.execute("FETCH ALL c WITH (TIMEOUT = '10s')").fetchall()
            assert all(t > last for t, _, _ in more), (last, more)
            fetched += more
            if more:
                break
            alive(served, deadline, "no tick of the counter came")
        assert added_up(fetched) == Counter(range(1, len(added_up(fetched)) + 1)), fetched
        assert len(added_up(fetched)) > len(added_up([r for r in fetched if r[0] <= last]))

        ready = conn.execute("FETCH ALL c WITH (TIMEOUT = '0s')").fetchall()
        fetched += ready
        assert added_up(fetched) == Counter(range(1, len(added_up(fetched)) + 1)), ready
        one = conn.execute("FETCH c").fetchall()  # waits for a row, takes one
        assert len(one) == 1 and one[0][0] >= fetched[-1][0], (fetched[-1], one)

        cur = conn.execute("CLOSE c")
        assert cur.statusmessage == "CLOSE CURSOR"
        with pytest.raises(errors.InvalidCursorName):
            conn.execute("FETCH ALL c")
        conn.rollback()

        conn.execute(f"DECLARE c CURSOR FOR SUBSCRIBE {COUNTER}")
        assert conn.execute("FETCH 2 c").fetchall()[0][1:] == (1, 1)  # the snapshot's first
        conn.commit()  # closes it
        with pytest.raises(errors.InvalidCursorName):
            conn.execute("FETCH ALL c")
        conn.rollback()
    assert served.proc.poll() is None, served.log.read_text()[-4000:]


def test_a_timeout_of_0s_answers_the_rows_ready_and_no_more(
    served: Served, lines: tuple[str, Path]
) -> None:
    name, file = lines
    with connect(served) as conn:
        conn.execute(f"DECLARE f CURSOR FOR SUBSCRIBE {name}")
        snapshot = conn.execute("FETCH ALL f").fetchall()
        assert [r[1:] for r in snapshot] == [(1, "one"), (1, "two")], snapshot
        # Nothing is appended: no row is ready, nor comes within a second.
        assert conn.execute("FETCH ALL f WITH (TIMEOUT = '0s')").fetchall() == []
        assert conn.execute("FETCH ALL f WITH (TIMEOUT = '1s')").fetchall() == []
        with file.open("a") as f:
            f.write("three\n")
        deadline = time.monotonic() + DEADLINE_S
        while not (more := conn.execute("FETCH ALL f WITH (TIMEOUT = '10s')").fetchall()):
            alive(served, deadline, "the appended line never came")
        assert [r[1:] for r in more] == [(1, "three")] and more[0][0] > snapshot[0][0], more
        conn.commit()


def test_declare_needs_a_transaction_and_a_query_cursor_answers_in_parts(
    served: Served,
) -> None:
    wait_for(served, f"SELECT count(*) >= 5 FROM {COUNTER}", [(True,)])
    query = f"SELECT counter FROM {COUNTER} WHERE counter <= 5 ORDER BY counter"
    with connect(served, autocommit=True) as conn:
        with pytest.raises(errors.NoActiveSqlTransaction, match="transaction blocks"):
            conn.execute(f"DECLARE c CURSOR FOR SUBSCRIBE {COUNTER}")
        with pytest.raises(errors.InvalidCursorName, match="nowhere"):
            conn.execute("FETCH ALL nowhere")
    with connect(served) as conn:
        conn.execute(f"DECLARE q CURSOR FOR {query}")
        assert conn.execute("FETCH 2 q").fetchall() == [(1,), (2,)]
        assert conn.execute("FETCH ALL q").fetchall() == [(3,), (4,), (5,)]
        cur = conn.execute("FETCH ALL q")
        assert cur.fetchall() == [] and cur.statusmessage == "FETCH 0"
        with pytest.raises(errors.DuplicateCursor, match="'q'"):
            conn.execute("DECLARE q CURSOR FOR SELECT 1")
        conn.rollback()
        with conn.cursor(name="named") as named:  # DECLARE, Describe of the portal, FETCH
            named.execute(query.replace("<= 5", "<= %s"), (4,))
            assert named.fetchmany(3) == [(1,), (2,), (3,)]
            assert named.fetchall() == [(4,)]
        conn.commit()
    assert served.proc.poll() is None, served.log.read_text()[-4000:]


def test_psql_fetches_from_cursors(served: Served, lines: tuple[str, Path]) -> None:
    name, _ = lines
    commands = [
        "BEGIN",
        f"DECLARE f CURSOR FOR SUBSCRIBE {name}",
        "FETCH ALL f",
        "FETCH ALL f WITH (TIMEOUT = '0s')",
        "CLOSE f",
        f"DECLARE q CURSOR FOR SELECT text FROM {name} ORDER BY text",
        "FETCH 1 q",
        "FETCH ALL q",
        "COMMIT",
        "FETCH ALL q",
        f"DECLARE i CURSOR FOR SELECT upper(text) AS t FROM {name} ORDER BY t; FETCH ALL i",
    ]
    done = subprocess.run(
        [psql_binary(), "-X", "-A", "-h", "127.0.0.1", "-p", str(served.port)]
        + ["-U", "timeshard", "-d", "timeshard"]
        + [arg for c in commands for arg in ("-c", c)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PGCONNECT_TIMEOUT": "60"},
    )
    assert mask_times(done.stdout).splitlines() == [
        "BEGIN",
        "DECLARE CURSOR",
        "mz_timestamp|mz_diff|text",
        "<time>|1|one",
        "<time>|1|two",
        "(2 rows)",
        "mz_timestamp|mz_diff|text",
        "(0 rows)",
        "CLOSE CURSOR",
        "DECLARE CURSOR",
        "text",
        "one",
        "(1 row)",
        "text",
        "two",
        "(1 row)",
        "COMMIT",
        "DECLARE CURSOR",
        "t",
        "ONE",
        "TWO",
        "(2 rows)",
    ], done.stdout
    assert done.stderr == "ERROR:  cursor 'q' does not exist\n", done.stderr
