"""``timeshard serve`` end to end: a real server process, real clients.

* ``psql`` (PostgreSQL's own client, from Debian's packages) runs
  ``sql/serve_session.sql``: it creates a source and two views, reads AS OF,
  SUBSCRIBEs for a bounded time, meets errors and drops everything; its
  output, times masked, must equal ``sql/serve_session.out`` and its errors
  ``sql/serve_session.err``;
* psycopg runs statements with parameters (the extended protocol), a Delta
  sink, a COPY SUBSCRIBE whose updates must add up to the collection, and a
  failed transaction;
* ``kill -9`` of the server mid-SUBSCRIBE: the client gets an error (not a
  hang), a restarted server restores the objects from the catalog and
  resumes them, and ``verify`` finds no difference;
* the server's Spark JVM killed under it: the server stops (exit 3) and
  says why, instead of answering while every object stalls.

Each test starts its own server (``--port 0``); a start is waited for as long
as the process lives, so a slow machine makes it slow, never failed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from timeshard.location import Location
from timeshard.persist import PersistClient

pytestmark = [pytest.mark.spark]

SQL = Path(__file__).parent / "sql"
_LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def stop(self) -> int:
        """SIGTERM, and the exit code once the server has closed every object."""
        self.terminate()
        return self.exit_code()

    def terminate(self) -> None:
        """SIGTERM: the server closes every object, then exits."""
        self.proc.send_signal(signal.SIGTERM)

    def exit_code(self) -> int:
        """The exit code, once the server has exited (closing its objects takes a while)."""
        return self.proc.wait(timeout=300)

    def kill(self) -> None:
        self.proc.kill()  # SIGKILL: nothing is closed
        self.proc.wait(timeout=60)


def start_serve(location: Path, log: Path, *args: str) -> Served:
    """A ``timeshard serve`` on ``location`` (``args``: more options), once it listens."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    start = log.stat().st_size if log.exists() else 0  # an earlier server's lines come before
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from timeshard.cli.main import main; main()",
                "serve",
                "--location",
                str(location),
                "--port",
                "0",
                "--dashboard-port",
                "0",
                "--tick",
                "0.5",
                *args,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    while True:  # as long as the process lives: slow is not stuck
        text = log.read_bytes()[start:].decode(errors="replace")
        found = _LISTENING.findall(text)
        if found and proc.poll() is None:
            return Served(proc, int(found[-1]), log)
        if proc.poll() is not None:
            pytest.fail(f"timeshard serve exited with {proc.returncode}:\n{text}")
        time.sleep(0.2)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    server = start_serve(tmp_path / "loc", tmp_path / "serve.log")
    yield server
    if server.proc.poll() is None:
        server.kill()


def psql_binary() -> str:
    found = shutil.which("psql")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("psql is missing: scripts/bootstrap.sh installs postgresql")
        pytest.skip("psql is not installed (Debian's postgresql-client)")
    return found


def mask_times(text: str) -> str:
    """Wall-clock times (13 digits: epoch milliseconds) become ``<time>``."""
    return re.sub(r"\b\d{13}\b", "<time>", text)


# -- psql ---------------------------------------------------------------------------------------


def test_a_psql_session_creates_reads_subscribes_and_drops(served: Served) -> None:
    done = subprocess.run(
        [
            psql_binary(),
            "-X",
            "-a",
            "-h",
            "127.0.0.1",
            "-p",
            str(served.port),
            "-U",
            "timeshard",
            "-d",
            "timeshard",
            "-f",
            "serve_session.sql",
        ],
        cwd=SQL,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PGCONNECT_TIMEOUT": "60"},
    )
    assert done.returncode == 0, done.stderr
    assert mask_times(done.stdout) == (SQL / "serve_session.out").read_text()
    assert done.stderr == (SQL / "serve_session.err").read_text()
    assert served.stop() == 0, served.log.read_text()


# -- psycopg ------------------------------------------------------------------------------------


def connect(server: Served, **kwargs: Any) -> Any:
    import psycopg

    return psycopg.connect(
        host="127.0.0.1",
        port=server.port,
        user="timeshard",
        dbname="timeshard",
        connect_timeout=60,
        **kwargs,
    )


def test_psycopg_runs_statements_with_parameters(served: Served, tmp_path: Path) -> None:
    import psycopg
    from deltalake import DeltaTable
    from psycopg import errors

    with connect(served, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(
            "CREATE SOURCE kvp FROM LOAD GENERATOR KEY VALUE (KEYS %s, RATE %s, SEED %s) "
            "ENVELOPE UPSERT (KEY (key)) WITH (RETAIN HISTORY FOR %s)",
            (40, 20, 7, "1h"),  # 20 keys per partition: every key in the first tick
        )
        cur.execute(
            "CREATE MATERIALIZED VIEW kvp_long WITH (REFRESH EVERY %s) AS "
            "SELECT key, value FROM kvp WHERE length(value) >= %s",
            ("1s", 16),
        )
        cur.execute("SHOW CREATE MATERIALIZED VIEW kvp_long")
        assert cur.fetchone() == (  # 16 as the type psycopg declared it, int2
            "kvp_long",
            "CREATE MATERIALIZED VIEW kvp_long WITH (REFRESH EVERY '1s') AS "
            "SELECT key, value FROM kvp WHERE length(value) >= CAST(16 AS SMALLINT)",
        )
        # The view shows kvp as of its last refresh, a whole second: it shows the 40 keys
        # from the first refresh after kvp's first tick on.
        while True:
            cur.execute("SELECT count(*) FROM kvp_long")  # waits for a first readable time
            (count,) = cur.fetchone()  # type: ignore[misc]
            if count == 40:
                break
            assert count == 0, count
            assert served.proc.poll() is None, served.log.read_text()
            time.sleep(0.2)
        # A sink: the view, upserted by key into a Delta table.
        delta = tmp_path / "kvp_long.delta"
        cur.execute(
            "CREATE SINK kvp_out FROM kvp_long INTO DELTA (URI %s) KEY (key)", (str(delta),)
        )
        cur.execute("SHOW SINKS")
        assert cur.fetchall() == [("kvp_out", "DeltaExport", "kvp_long")]
        with pytest.raises(errors.DependentObjectsStillExist, match="kvp_out"):
            cur.execute("DROP MATERIALIZED VIEW kvp_long")
        while not delta.exists() or DeltaTable(str(delta)).to_pyarrow_table().num_rows < 40:
            assert served.proc.poll() is None, served.log.read_text()
            time.sleep(0.5)
        table = DeltaTable(str(delta)).to_pyarrow_table()
        cur.execute("SELECT key, value FROM kvp_long")
        written = {(r["key"], r["value"]) for r in table.select(["key", "value"]).to_pylist()}
        assert len(written) == table.num_rows == 40
        assert {k for k, _ in written} == set(range(40))

        cur.execute("SELECT key, value FROM kvp WHERE key = %s", (3,))
        rows = cur.fetchall()
        assert [r[0] for r in rows] == [3]
        assert isinstance(rows[0][1], str) and len(rows[0][1]) == 16
        # Arrays of a scalar type arrive as lists, structs and maps as JSON objects.
        cur.execute(
            "SELECT ARRAY[key, key + 1] AS a, named_struct('k', key, 'v', value) AS s, "
            "str_to_map('k:v') AS m FROM kvp WHERE key = %s",
            (3,),
        )
        array, struct, mapping = cur.fetchone()  # type: ignore[misc]
        # kvp moves on between the two SELECTs (each reads the latest time): key 3's value
        # may be another 16 characters now.
        assert (array, sorted(struct), struct["k"], mapping) == ([3, 4], ["k", "v"], 3, {"k": "v"})
        assert isinstance(struct["v"], str) and len(struct["v"]) == 16

        text = "it's; -- $1 \\ ünï"
        cur.execute("SELECT %s AS s, %s AS n, %s AS z", (text, -5, None))
        assert cur.fetchone() == (text, -5, None)

        cur.execute("SELECT upper - 1 FROM timeshard_objects WHERE name = %s", ("kvp",))
        (t0,) = cur.fetchone()  # type: ignore[misc]
        cur.execute("SELECT count(*) FROM kvp AS OF %s", (t0,))
        assert cur.fetchone() == (40,)

        # A bounded SUBSCRIBE from t0 up to a later time kvp has reached (a tick after t0:
        # its updates are there): the snapshot at t0, then those updates (UP TO is
        # exclusive: up to t1 + 1 takes those at t1).
        while True:
            cur.execute("SELECT upper - 1 FROM timeshard_objects WHERE name = %s", ("kvp",))
            (t1,) = cur.fetchone()  # type: ignore[misc]
            if t1 > t0:
                break
            assert served.proc.poll() is None, served.log.read_text()
            time.sleep(0.2)
        with cur.copy("COPY (SUBSCRIBE kvp AS OF %s UP TO %s) TO STDOUT", (t0, t1 + 1)) as copy:
            streamed = [tuple(row) for row in copy.rows()]
        times = [int(r[0]) for r in streamed]
        assert times == sorted(times) and times[0] == t0 and times[-1] <= t1, times
        assert sum(1 for t in times if t == t0) == 40  # the snapshot: one row per key
        content: Counter[tuple[str, str]] = Counter()
        for _, diff, key, value in streamed:
            content[(key, value)] += int(diff)
        cur.execute("SELECT key, value FROM kvp AS OF %s", (t1,))
        assert +content == Counter((str(k), v) for k, v in cur.fetchall())
        assert len(set(times)) > 1, "a tick of kvp after t0 changed nothing"

        with pytest.raises(errors.UndefinedTable, match="nowhere"):
            cur.execute("SELECT * FROM nowhere WHERE x = %s", (1,))
        with pytest.raises(errors.InvalidParameterValue, match="many"):
            cur.execute("CREATE SOURCE bad FROM LOAD GENERATOR KEY VALUE (KEYS %s)", ("many",))
        with pytest.raises(errors.FeatureNotSupported):
            cur.execute("CREATE TABLE t (a int)")
        cur.execute("SHOW OBJECTS")
        assert cur.fetchall() == [
            ("kvp", "source"),
            ("kvp_long", "materialized view"),
            ("kvp_out", "sink"),
        ]
        cur.execute("DROP SINK kvp_out")
        cur.execute("SHOW SINKS")
        assert cur.fetchall() == []

    with connect(served) as conn:  # not autocommit: psycopg sends BEGIN first
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM kvp_long")
            assert cur.fetchone() == (40,)
            with pytest.raises(psycopg.Error):
                cur.execute("SELECT 1 / 0")
            with pytest.raises(errors.InFailedSqlTransaction):
                cur.execute("SELECT 1")
        conn.rollback()
        with conn.cursor() as cur:
            cur.execute("SELECT %s", (2,))
            assert cur.fetchone() == (2,)
    assert served.stop() == 0, served.log.read_text()


# -- kill -9 ------------------------------------------------------------------------------------


def test_kill_9_mid_subscribe_then_restart_restores_and_resumes(tmp_path: Path, spark: Any) -> None:
    import psycopg

    from timeshard.verify import verify_location

    location, log = tmp_path / "loc", tmp_path / "serve.log"
    first = start_serve(location, log)
    try:
        with connect(first, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute(
                "CREATE SOURCE kvk FROM LOAD GENERATOR KEY VALUE (KEYS 30, RATE 15) "
                "ENVELOPE UPSERT (KEY (key))"
            )
            cur.execute(
                "CREATE MATERIALIZED VIEW kvk_groups AS "
                "SELECT key % 3 AS g, count(*) AS n FROM kvk GROUP BY key % 3"
            )
            cur.execute("SELECT sum(n) FROM kvk_groups")
            assert cur.fetchone() == (30,)

        streamed: list[tuple[str, ...]] = []
        outcome: list[BaseException | None] = []

        def subscribe() -> None:
            try:
                with (
                    connect(first, autocommit=True) as conn,
                    conn.cursor() as cur,
                    cur.copy("COPY (SUBSCRIBE kvk) TO STDOUT") as copy,
                ):
                    for row in copy.rows():
                        streamed.append(tuple(row))
                outcome.append(None)
            except BaseException as e:
                outcome.append(e)

        client = threading.Thread(target=subscribe, daemon=True)
        client.start()
        while len(streamed) <= 30 and client.is_alive():  # the snapshot, then updates
            time.sleep(0.1)
        assert len(streamed) > 30, outcome
        before = PersistClient(Location.embedded(location)).state("kvk_groups").upper.time
        assert before is not None
    finally:
        first.kill()
    client.join(timeout=120)
    assert not client.is_alive(), "the SUBSCRIBE client hangs after its server died"
    assert outcome and isinstance(outcome[0], psycopg.OperationalError), outcome

    second = start_serve(location, log)
    try:
        with connect(second, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("SHOW OBJECTS")
            assert cur.fetchall() == [("kvk", "source"), ("kvk_groups", "materialized view")]
            while True:  # resumed: the view moves past where it was killed
                cur.execute("SELECT upper FROM timeshard_objects WHERE name = 'kvk_groups'")
                (upper,) = cur.fetchone()  # type: ignore[misc]
                if upper > before:
                    break
                assert second.proc.poll() is None, log.read_text()
                time.sleep(0.5)
            cur.execute("SELECT sum(n) FROM kvk_groups")
            assert cur.fetchone() == (30,)
        # `timeshard query` on the location runs on the server (no Spark of its own).
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "from timeshard.cli.main import main; main()",
                "query",
                "SELECT sum(n) AS s FROM kvk_groups WHERE g % 3 >= 0",
                "--location",
                str(location),
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        assert f"ran on timeshard serve at 127.0.0.1:{second.port}" in done.stderr
        assert json.loads(done.stdout)["rows"] == [{"s": 30}]
    finally:
        assert second.stop() == 0, log.read_text()
    assert not (location / "serve.json").exists()  # a clean stop withdraws it
    report = verify_location(
        PersistClient(Location.embedded(location)), spark=lambda _packages: spark, seed=1
    )
    assert report.ok, report.to_json()


def test_a_server_whose_spark_jvm_is_killed_stops_and_says_why(served: Served) -> None:
    import psutil

    from timeshard.cli.serve import JVM_EXITED

    with connect(served, autocommit=True) as conn:  # a server with an object ticking
        conn.execute("CREATE SOURCE c FROM LOAD GENERATOR COUNTER (RATE 10)")
    (jvm,) = [p for p in psutil.Process(served.proc.pid).children() if p.name() == "java"]
    jvm.kill()
    assert served.exit_code() == JVM_EXITED, served.log.read_text()
    text = served.log.read_text()
    assert f"timeshard serve stops: the Spark JVM (pid {jvm.pid}) was killed by SIGKILL" in text


def test_the_readme_shows_the_session_the_test_runs() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    for name in ("serve_session.out", "serve_session.err"):
        assert f"```text\n{(SQL / name).read_text()}```" in readme, name
