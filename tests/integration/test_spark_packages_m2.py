"""Spark's connectors load whatever the user's local Maven repository holds.

Maven leaves in ``~/.m2/repository`` the pom alone of a version it mediated
away (slf4j-api 2.0.17, which Kafka's connector asks for, is one of many
builds'). Spark's default Ivy chain looks there first, took that pom for the
module and failed on its jar: no session loading the Kafka connector could
start (``download failed: org.slf4j#slf4j-api;2.0.17!slf4j-api.jar``), and
Ivy's cache kept the module as that resolver's, so neither could a later one.
timeshard resolves packages through a chain without that repository
(:func:`timeshard.spark.jars.ivy_settings`).

In a child process (a process holds one SparkContext) whose JVM's home is a
directory of the test's, with such a pom in its ``.m2``, and a fresh Ivy home
(the old chain took a module its cache held from Maven Central from there, and
passed). The package is slf4j-simple 2.0.17, which needs that slf4j-api and nothing
else (a few kB from Maven Central).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

CHILD = textwrap.dedent(
    """
    import sys
    from timeshard.spark.session import spark_session

    home, ivy = sys.argv[1], sys.argv[2]
    spark = spark_session(
        master="local[1]",
        packages=["org.slf4j:slf4j-simple:2.0.17"],
        extra_conf={
            "spark.driver.extraJavaOptions": f"-Duser.home={home}",
            "spark.jars.ivy": ivy,
        },
    )
    assert spark.range(3).count() == 3
    print("started")
    spark.stop()
    """
)


def test_a_pom_without_its_jar_in_the_local_maven_repository_does_not_stop_the_session(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    module = home / ".m2" / "repository" / "org" / "slf4j" / "slf4j-api" / "2.0.17"
    module.mkdir(parents=True)
    (module / "slf4j-api-2.0.17.pom").write_text(
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId>"
        "<version>2.0.17</version></project>"
    )
    ivy = tmp_path / "ivy"
    # Nothing remembered there; a space in its path (Spark reads the settings as a URI).
    env = {**os.environ, "TIMESHARD_CACHE": str(tmp_path / "my cache")}
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(home), str(ivy)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0 and "started" in result.stdout, result.stderr[-3000:]
