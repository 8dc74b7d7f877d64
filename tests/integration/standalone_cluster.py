"""A Spark standalone master and one worker on 127.0.0.1, started with spark-class.

Both daemons are JVMs from the pyspark package (``SPARK_HOME`` is the pyspark
directory), each the leader of its own process group so that stopping one
also stops what it spawned (the worker's executors).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyspark

SPARK_HOME = os.path.dirname(pyspark.__file__)
START_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_env(scratch: Path) -> dict[str, str]:
    """The environment of the daemons and of the processes that use the cluster."""
    return {
        **os.environ,
        "SPARK_HOME": SPARK_HOME,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_WORKER_DIR": str(scratch / "work"),
        "SPARK_LOG_DIR": str(scratch / "logs"),
    }


class StandaloneCluster:
    """One master and one worker (``cores`` cores, ``memory`` for executors)."""

    def __init__(self, scratch: Path, cores: int = 1, memory: str = "1g") -> None:
        self.scratch = scratch
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.master_log = scratch / "master.log"
        self.worker_log = scratch / "worker.log"
        self._procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        """Start both daemons; return once the worker registered with the master."""
        try:
            self._spawn(
                "org.apache.spark.deploy.master.Master",
                ["--host", "127.0.0.1", "--port", str(self.port)],
                self.master_log,
            )
            self._wait_for(self.master_log, "I have been elected leader")
            resources = ["--cores", str(self.cores), "--memory", self.memory]
            self._spawn(
                "org.apache.spark.deploy.worker.Worker",
                [self.url, "--host", "127.0.0.1", *resources],
                self.worker_log,
            )
            self._wait_for(self.worker_log, "Successfully registered with master")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the daemons this object started, by their process group ids."""
        for p in self._procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self._procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        self._procs.clear()

    def _spawn(self, main_class: str, args: list[str], log: Path) -> None:
        command = [os.path.join(SPARK_HOME, "bin", "spark-class"), main_class, *args]
        command += ["--webui-port", str(free_port())]
        with log.open("wb") as out:
            self._procs.append(
                subprocess.Popen(
                    command,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=cluster_env(self.scratch),
                    start_new_session=True,
                )
            )

    def _wait_for(self, log: Path, line: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        found: Callable[[], bool] = lambda: line in log.read_text(errors="replace")  # noqa: E731
        while not found():
            dead = [p.args[1] for p in self._procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{dead[0]} exited before logging {line!r}; see {log}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {line!r} in {log} within {START_TIMEOUT_S:.0f} s")
            time.sleep(0.25)
