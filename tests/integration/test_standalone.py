"""The Spark checks again, on a standalone master and worker started with spark-class."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

pytestmark = [pytest.mark.spark, pytest.mark.standalone]

MAIN = Path(__file__).with_name("standalone_main.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_class(*args: str, log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    home = os.path.dirname(pyspark.__file__)
    cmd = [os.path.join(home, "bin", "spark-class"), *args]
    return subprocess.Popen(
        cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True
    )


def wait_for(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.25)
    raise TimeoutError(what)


@pytest.fixture(scope="module")
def standalone_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("standalone")
    env = {
        **os.environ,
        "SPARK_HOME": os.path.dirname(pyspark.__file__),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_WORKER_DIR": str(tmp / "work"),
    }
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    master_log, worker_log = tmp / "master.log", tmp / "worker.log"
    procs = [
        spark_class(
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(free_port()),
            log=master_log,
            env=env,
        )
    ]
    try:
        wait_for(
            lambda: (
                "Starting Spark master" in master_log.read_text()
                or "I have been elected leader" in master_log.read_text()
            ),
            90,
            "master start",
        )
        procs.append(
            spark_class(
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                "127.0.0.1",
                "--cores",
                "2",
                "--memory",
                "2g",
                "--webui-port",
                str(free_port()),
                log=worker_log,
                env=env,
            )
        )
        wait_for(
            lambda: "Successfully registered with master" in worker_log.read_text(),
            90,
            "worker registration",
        )
    except Exception as e:
        for p in procs:
            p.kill()
        reason = f"Spark standalone cannot start: {e!r}; logs in {tmp}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        print(reason, file=sys.stderr)
        pytest.skip(reason)
    yield url
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()


def test_checks_on_standalone_cluster(standalone_master: str, tmp_path: Path) -> None:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    result = subprocess.run(
        [sys.executable, str(MAIN), standalone_master, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert f"standalone checks passed on {standalone_master}" in result.stdout
