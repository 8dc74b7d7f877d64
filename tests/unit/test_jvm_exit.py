"""``jvm_exit``: how a Spark JVM ended, read from its process.

A stand-in process plays the JVM (PySpark keeps the JVM's ``Popen`` as
``SparkContext._gateway.proc``, which ``jvm_exit`` reads when given none): one
killed by a signal, one that exits with a code, one still running.
"""

from __future__ import annotations

import subprocess

from timeshard.spark.session import jvm_exit


def test_a_jvm_killed_by_a_signal_is_named_with_the_signal() -> None:
    proc = subprocess.Popen(["sh", "-c", "kill -9 $$"])
    proc.wait()
    assert jvm_exit(proc) == f"the Spark JVM (pid {proc.pid}) was killed by SIGKILL"


def test_a_jvm_that_exited_is_named_with_its_code() -> None:
    proc = subprocess.Popen(["sh", "-c", "exit 52"])  # Spark's exit code after an OOM
    proc.wait()
    assert jvm_exit(proc) == f"the Spark JVM (pid {proc.pid}) exited with code 52"


def test_a_running_jvm_has_no_exit() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert jvm_exit(proc) is None
    finally:
        proc.kill()
        proc.wait()
