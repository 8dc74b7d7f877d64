"""A read-only ``timeshard serve`` replica, and its promotion, with real server processes.

A writing server creates a source and a view; a ``--read-only`` server on
the same location lists them, answers a query and a SUBSCRIBE, refuses a
CREATE (25006), and follows a view the writer creates later. The writer is
killed (``kill -9``); ``ALTER SYSTEM PROMOTE`` on the replica restores every
object and ticks it (the view moves past where the writer left it), and
CREATE works there. The old writer then comes back: two writers run the same
objects, each runs the view the other creates and stops the one the other
drops, and ``verify`` finds no difference.

Starts are waited for as long as the process lives; every wait polls with a
deadline of minutes, so a loaded machine makes the test slow, never failed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.integration.test_serve import Served, connect, start_serve

from timeshard.location import Location
from timeshard.persist import PersistClient

pytestmark = [pytest.mark.spark]


def eventually(server: Served, check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 600
    while not check():
        assert server.proc.poll() is None, server.log.read_text()
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.5)


def stop_together(servers: list[Served]) -> None:
    """SIGTERM every server at once, then each must exit 0 once it has closed its objects
    (they close side by side, not one after the other)."""
    for server in servers:
        server.terminate()
    for server in servers:
        assert server.exit_code() == 0, server.log.read_text()


def runs(name: str, conn: Any) -> bool:
    return name in [row[0] for row in conn.execute("SHOW OBJECTS").fetchall()]


def test_a_read_only_replica_reads_follows_and_is_promoted(tmp_path: Path, spark: Any) -> None:
    import psycopg

    from timeshard.verify import verify_location

    location = tmp_path / "loc"
    writer = start_serve(location, tmp_path / "writer.log")
    replica: Served | None = None
    try:
        with connect(writer, autocommit=True) as w:
            w.execute(
                "CREATE SOURCE kvr FROM LOAD GENERATOR KEY VALUE (KEYS 20, RATE 10) "
                "ENVELOPE UPSERT (KEY (key))"
            )
            w.execute(
                "CREATE MATERIALIZED VIEW kvr_groups WITH (RETAIN HISTORY FOR '1h') AS "
                "SELECT key % 2 AS g, count(*) AS n FROM kvr GROUP BY key % 2"
            )
            assert w.execute("SELECT sum(n) FROM kvr_groups").fetchone() == (20,)
            replica = start_serve(location, tmp_path / "replica.log", "--read-only")
            assert "read-only" in replica.log.read_text()
            with connect(replica, autocommit=True) as r:
                assert r.execute("SHOW OBJECTS").fetchall() == [
                    ("kvr", "source"),
                    ("kvr_groups", "materialized view"),
                ]
                assert r.execute("SELECT sum(n) FROM kvr_groups").fetchone() == (20,)
                row = r.execute(
                    "SELECT upper - 1 FROM timeshard_objects WHERE name = 'kvr_groups'"
                ).fetchone()
                assert row is not None
                bounded = f"COPY (SUBSCRIBE kvr_groups AS OF {row[0]} UP TO {row[0] + 1}) TO STDOUT"
                with r.cursor().copy(bounded) as copy:
                    snapshot = list(copy.rows())  # mz_timestamp, mz_diff, g, n
                assert sum(int(d) * int(n) for _, d, _, n in snapshot) == 20, snapshot
                with pytest.raises(psycopg.Error) as refused:
                    r.execute("CREATE MATERIALIZED VIEW nope AS SELECT key FROM kvr")
                assert refused.value.sqlstate == "25006"
                # the writer creates a view: the replica lists it and reads it
                w.execute("CREATE MATERIALIZED VIEW kvr_keys AS SELECT count(*) AS c FROM kvr")

                def listed() -> bool:
                    rows = r.execute("SHOW MATERIALIZED VIEWS").fetchall()
                    return "kvr_keys" in [row[0] for row in rows]

                eventually(replica, listed, "the replica lists the writer's new view")

                def ticked() -> bool:  # the writer's first tick of it may take a while
                    assert writer.proc.poll() is None, writer.log.read_text()
                    row = r.execute(
                        "SELECT upper FROM timeshard_objects WHERE name = 'kvr_keys'"
                    ).fetchone()
                    return row is not None and row[0] is not None and row[0] > 0

                eventually(replica, ticked, "the writer ticks its new view")
                assert r.execute("SELECT c FROM kvr_keys").fetchone() == (20,)
        left = PersistClient(Location.embedded(location)).state("kvr_groups").upper.time
        assert left is not None
        writer.kill()  # kill -9: the replica is the only server left

        with connect(replica, autocommit=True) as r:
            r.execute("ALTER SYSTEM PROMOTE")

            def resumed() -> bool:
                row = r.execute(
                    "SELECT upper FROM timeshard_objects WHERE name = 'kvr_groups'"
                ).fetchone()
                return row is not None and row[0] is not None and row[0] > left

            eventually(replica, resumed, "the promoted replica ticks the view")
            assert r.execute("SELECT sum(n) FROM kvr_groups").fetchone() == (20,)
            r.execute("CREATE MATERIALIZED VIEW kvr_odd AS SELECT n FROM kvr_groups WHERE g = 1")
            assert r.execute("SELECT n FROM kvr_odd").fetchone() == (10,)
            statuses = dict(
                r.execute("SELECT name, status FROM timeshard_objects WHERE object IS NOT NULL")
            )
            assert statuses["kvr_groups"] != "standby", statuses

        # The old writer comes back: two writers, replicas of the same objects.
        writer = start_serve(location, tmp_path / "writer.log")
        with connect(writer, autocommit=True) as w, connect(replica, autocommit=True) as r:
            objects = [row[0] for row in w.execute("SHOW OBJECTS").fetchall()]
            assert objects == ["kvr", "kvr_groups", "kvr_keys", "kvr_odd"], objects
            # one creates a view: the other runs it too; one drops it: the other stops it
            r.execute("CREATE MATERIALIZED VIEW kvr_even AS SELECT n FROM kvr_groups WHERE g = 0")

            def runs_it() -> bool:
                rows = w.execute("SHOW MATERIALIZED VIEWS").fetchall()
                return "kvr_even" in [row[0] for row in rows]

            eventually(writer, runs_it, "the other writer runs the new view")
            assert w.execute("SELECT n FROM kvr_even").fetchone() == (10,)
            r.execute("DROP MATERIALIZED VIEW kvr_odd")
            eventually(writer, lambda: not runs("kvr_odd", w), "the other writer stops kvr_odd")
    finally:
        alive = [writer] if writer.proc.poll() is None else []  # not the one killed
        stop_together(alive + ([replica] if replica is not None else []))
    report = verify_location(  # 2 sampled times per object: this test is about replicas
        PersistClient(Location.embedded(location)), spark=lambda _packages: spark, samples=2, seed=1
    )
    assert report.ok, report.to_json()
