"""One local SparkSession for the whole integration tier."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from timeshard.spark import register, spark_session

    session = spark_session(app_name="timeshard-tests")
    register(session)
    yield session
    session.stop()
