"""The shared Spark checks on a standalone master and worker started with spark-class.

The checks run in a child process (``standalone_main.py``): this process
already holds the tier's local SparkContext (see ``conftest.py``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests.integration.standalone_cluster import cluster_env

pytestmark = [pytest.mark.spark, pytest.mark.standalone]

MAIN = Path(__file__).with_name("standalone_main.py")


def test_write_and_snapshot_on_standalone_cluster(spark_standalone: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(MAIN), spark_standalone, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env=cluster_env(tmp_path),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    assert f"standalone checks passed on {spark_standalone}" in result.stdout
