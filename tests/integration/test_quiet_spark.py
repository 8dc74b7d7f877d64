"""A session starts without Spark's start-up noise (JVM warnings, log4j banner, Ivy), its
errors still reach stderr after start-up, ``TIMESHARD_SPARK_LOG_LEVEL`` brings Spark's
logging back, and a JVM that cannot start shows why. Each case is its own process: a
process starts one JVM."""

from __future__ import annotations

import os
import subprocess
import sys

#: Lines a JVM started by PySpark 4.1 prints before the first job.
NOISE = (
    "WARNING: Using incubator modules",
    "Using Spark's default log4j profile",
    "Setting default log level",
    "NativeCodeLoader",
)
SCRIPT = """
from timeshard.spark import spark_session
spark = spark_session()
print(spark.range(3).count())
try:
    spark.sql("SELECT 1 / 0").collect()
except Exception as e:
    print(type(e).__name__)
"""


def _python(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "TIMESHARD_SPARK_LOG_LEVEL"}
    return subprocess.run(
        [sys.executable, "-c", script],
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_session_starts_quiet() -> None:
    done = _python(SCRIPT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["3", "ArithmeticException"]
    for line in NOISE:
        assert line not in done.stderr, done.stderr[-3000:]
    # PySpark's JSON log of the query error it raised is off too: timeshard reports errors.
    assert "DIVIDE_BY_ZERO" not in done.stderr, done.stderr[-3000:]


def test_a_log_level_brings_sparks_logging_back() -> None:
    done = _python(SCRIPT, TIMESHARD_SPARK_LOG_LEVEL="warn")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WARNING: Using incubator modules" in done.stderr, done.stderr[-3000:]


def test_errors_after_start_up_still_reach_stderr() -> None:
    script = """
from timeshard.spark import spark_session
spark = spark_session()
log = spark.sparkContext._jvm.org.apache.logging.log4j.LogManager.getLogger("timeshard.test")
log.error("an error logged by the running session")
print("done", flush=True)
"""
    done = _python(script)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "an error logged by the running session" in done.stderr, done.stderr[-3000:]


def test_a_jvm_that_cannot_start_shows_why() -> None:
    done = _python(SCRIPT, JAVA_HOME="/nonexistent-java-home")
    assert done.returncode != 0
    assert "/nonexistent-java-home/bin/java" in done.stderr, done.stderr[-3000:]
