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

import psycopg
import pytest
from psycopg import errors
from pyspark.sql import SparkSession
from tests.integration import test_serve_cancel_spark as cancel

from timeshard.server.pgwire import PgServer

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
