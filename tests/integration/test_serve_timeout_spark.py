"""``SET statement_timeout`` cancels a SELECT that runs past it, on a real engine.

The query is the cancel test's (:data:`tests.integration.test_serve_cancel_spark.SLOW`):
it does not end by itself within the test, so it can end only by the timeout,
and its tasks honour the kill (a four-way cross join of the shard itself would
hold both cores for minutes after its cancel: that test's doc). The server
accepted the SET and ignored it: the query ran on for ever. Now it ends with
57014 ``canceling statement due to statement timeout``, its Spark tasks stop,
and the connection goes on.
"""

from __future__ import annotations

import threading

import psycopg
import pytest
from psycopg import errors
from pyspark.sql import SparkSession
from tests.integration import test_serve_cancel_spark as cancel

from timeshard.server.pgwire import PgServer
from timeshard.server.rows import QueryRows
from timeshard.server.sql_tokens import SqlError
from timeshard.server.statements import parse

pytestmark = pytest.mark.spark

served = cancel.served


def test_a_select_past_its_statement_timeout_ends_with_57014(
    spark: SparkSession, served: PgServer
) -> None:
    tracker = spark.sparkContext.statusTracker()
    with psycopg.connect(
        host="127.0.0.1", port=served.port, user="me", dbname="x", autocommit=True
    ) as conn:
        conn.execute("SET statement_timeout = '1s'")
        assert conn.execute("SHOW statement_timeout").fetchall() == [("1s",)]
        with pytest.raises(
            errors.QueryCanceled, match="canceling statement due to statement timeout"
        ):
            conn.execute(cancel.SLOW)
        cancel.until(lambda: tracker.getActiveJobsIds() == [], "the timed-out query's jobs ran on")
        cancel.until(lambda: cancel.running_tasks(spark) == 0, "its tasks ran on")
        conn.execute("RESET statement_timeout")  # a loaded machine may take 1 s for any query
        assert conn.execute("SELECT count(*) FROM kv").fetchall() == [(1000,)]


def test_a_cancel_that_came_before_the_statement_s_first_job_stops_the_jobs_after_it(
    spark: SparkSession, served: PgServer
) -> None:
    """A cancel (a CancelRequest, or the statement_timeout) that came after the statement
    began but before its next Spark job started canceled no job: Spark cancels the jobs
    of a tag that run, not those that start later, so the job ran on for ever."""
    engine = served.engine
    tag = "timeshard-test-early-cancel"
    out: dict[str, BaseException | None] = {}
    done = threading.Event()

    def run() -> None:
        try:
            with engine.cancellable(tag):
                rows = engine.execute(parse(cancel.SLOW))
                assert isinstance(rows, QueryRows)
                try:
                    engine.cancel(tag)  # planned, and no job of its rows started yet
                    list(rows)
                finally:
                    rows.close()
            out["error"] = None
        except BaseException as e:
            out["error"] = e
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    cancel.until(done.is_set, "the canceled statement's job ran on")
    assert isinstance(out["error"], SqlError), out["error"]
    cancel.until(lambda: cancel.running_tasks(spark) == 0, "its tasks ran on")
