"""Fixtures of the integration tier: one local SparkSession, one standalone cluster.

``spark`` is the one SparkSession (``local[2]``) every test of this tier
shares; it starts in 5-10 s, so it is session-scoped. It loads Spark's Kafka
connector (Ivy fetches it from Maven Central once); ``spark_kafka`` is that
session for the tests that read Kafka, skipped with the reason printed if the
connector could not be loaded -- except when ``CI`` is set: then they fail.

``spark_standalone`` starts a Spark standalone master and one worker (1 core,
1g) on 127.0.0.1 with ``spark-class`` (``standalone_cluster.py``) and yields
the master URL. A process holds one SparkContext, and this one holds the local
session, so tests never connect to the cluster from this process: they run
their checks in a child Python process (``standalone_main.py``) that builds
its own session on the master URL. That leaves the local session untouched (no
stop and restart in the middle of the tier), and a failed cluster run cannot
leave this process with a broken SparkContext.

If the cluster cannot start, the tests that need it are skipped with the
reason printed -- except when ``CI`` is set: then they fail.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession
from tests.integration.standalone_cluster import StandaloneCluster

#: Why the tier's session has no Kafka connector (None: it has it).
_NO_KAFKA_CONNECTOR: list[str] = []


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from timeshard.spark import register, spark_session
    from timeshard.spark.session import spark_kafka_package

    package = spark_kafka_package()
    try:
        session = spark_session(master="local[2]", app_name="timeshard-tests", packages=[package])
    except Exception as e:  # Ivy could not fetch it (no Maven Central): the rest still runs
        _NO_KAFKA_CONNECTOR.append(f"the SparkSession cannot load {package}: {e}")
        session = spark_session(master="local[2]", app_name="timeshard-tests")
    register(session)
    yield session
    session.stop()


@pytest.fixture
def spark_kafka(spark: SparkSession) -> SparkSession:
    """The tier's session, which has Spark's Kafka connector (skip, or fail in CI, if not)."""
    if _NO_KAFKA_CONNECTOR:
        reason = _NO_KAFKA_CONNECTOR[0]
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI must run the Kafka tests)")
        print(reason, file=sys.stderr)
        pytest.skip(reason)
    return spark


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a running standalone master with one registered worker."""
    cluster = StandaloneCluster(tmp_path_factory.mktemp("standalone"), cores=1, memory="1g")
    try:
        cluster.start()
    except Exception as e:
        reason = f"Spark standalone cluster cannot start: {e}"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI must run the standalone tests)")
        print(reason, file=sys.stderr)
        pytest.skip(reason)
    yield cluster.url
    cluster.stop()
