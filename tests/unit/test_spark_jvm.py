"""The JVM options :mod:`tests.spark_jvm` gives the Spark drivers of test subprocesses."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from tests import spark_jvm


def test_c1_only_drivers_keep_the_tiered_code_cache() -> None:
    """C1 alone shrinks the code cache to 48 MB, which a ``timeshard serve`` filled in two
    minutes; the JVM then stops compiling and runs everything interpreted."""
    home = os.environ.get("JAVA_HOME")  # the java Spark starts, as spark-class finds it
    java = shutil.which("java", path=f"{home}/bin" if home else None)
    if java is None:
        pytest.fail("no java: scripts/bootstrap.sh installs one")
    flags = subprocess.run(
        [java, *spark_jvm.SUBPROCESS_ONLY.split(), "-XX:+PrintFlagsFinal", "-version"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.search(r"\bReservedCodeCacheSize\s+=\s+(\d+)", flags)
    assert found is not None, flags[-2000:]
    assert int(found.group(1)) >= 200 * 2**20, found.group(0)
    assert re.search(r"\bTieredStopAtLevel\s+=\s+1\b", flags), "the options no longer mean C1 alone"
