"""The dev servers' process handling, SeaweedFS as S3, and Spark's s3a settings.

``Daemon`` is checked with plain shell commands (no server): an exit is
reported at once, a silent process is stuck at the timeout, a process whose
log grows is given longer. The SeaweedFS tests start the real server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.fs as pafs
import pyspark
import pytest

from timeshard.dev.daemon import Daemon
from timeshard.dev.seaweedfs import S3Unavailable, SeaweedS3
from timeshard.errors import InvalidUsage
from timeshard.location import open_blob
from timeshard.spark.session import hadoop_aws_package, s3a_settings


class Unavailable(Exception):
    pass


def test_a_process_that_exits_is_reported_at_once(tmp_path: Path) -> None:
    daemon = Daemon("the thing", tmp_path / "log", Unavailable)
    daemon.spawn(["sh", "-c", "echo broken config; exit 3"])
    with pytest.raises(Unavailable, match=r"the thing exited with code 3: broken config"):
        daemon.wait_ready(lambda: False, "nowhere", timeout_s=600)


def test_a_silent_process_is_stuck_and_killed(tmp_path: Path) -> None:
    daemon = Daemon("the thing", tmp_path / "log", Unavailable, stuck_after_s=0.5)
    daemon.spawn(["sh", "-c", "echo starting; exec sleep 600"])
    with pytest.raises(Unavailable, match="stuck: its log stopped growing"):
        daemon.wait_ready(lambda: False, "port 1", timeout_s=1.0)
    assert not daemon.running


def test_a_slow_process_whose_log_grows_gets_more_time(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    script = f"for i in $(seq 25); do echo step $i; sleep 0.1; done; touch {ready}; exec sleep 600"
    daemon = Daemon("the thing", tmp_path / "log", Unavailable, stuck_after_s=1.5)
    daemon.spawn(["sh", "-c", script])
    try:
        daemon.wait_ready(ready.exists, "a file", timeout_s=2.0)  # ready after ~2.5 s
    finally:
        daemon.stop()
    assert not daemon.running


def test_s3a_settings_follow_the_aws_environment() -> None:
    version = pyspark.__version__
    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    hadoop = jars[-1].name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    assert hadoop_aws_package() == f"org.apache.hadoop:hadoop-aws:{hadoop}", version
    packages, conf = s3a_settings(
        {
            "AWS_ENDPOINT_URL": "http://127.0.0.1:8333",
            "AWS_REGION": "eu-west-1",
            "AWS_ACCESS_KEY_ID": "id",
            "AWS_SECRET_ACCESS_KEY": "secret",
        }
    )
    assert packages == [hadoop_aws_package()]
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:8333"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert conf["spark.executorEnv.AWS_SECRET_ACCESS_KEY"] == "secret"
    _, tls = s3a_settings({"AWS_ENDPOINT_URL_S3": "https://s3.example"})
    assert tls["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"
    _, aws = s3a_settings({})  # AWS itself: s3a's defaults, nothing to set
    assert aws == {}


def test_executors_get_the_endpoint_and_session_token_the_driver_uses() -> None:
    """pyarrow and the driver take ``AWS_ENDPOINT_URL_S3`` before ``AWS_ENDPOINT_URL``, and STS
    credentials carry a session token: a standalone worker's executors need both."""
    env = {
        "AWS_ENDPOINT_URL_S3": "http://s3.internal:9000",
        "AWS_ENDPOINT_URL": "http://other.internal:4566",
        "AWS_ACCESS_KEY_ID": "ASIAID",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_SESSION_TOKEN": "token",
    }
    _, conf = s3a_settings(env)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://s3.internal:9000"
    for name, value in env.items():
        assert conf[f"spark.executorEnv.{name}"] == value, name
    # s3a's default chain reads AWS_SESSION_TOKEN from the environment (no secret in its conf)
    assert not any("token" in key.lower() for key in conf if key.startswith("spark.hadoop."))


@pytest.mark.parametrize("bucket", ["b1", "Upper", "-dash", "a..b", "x" * 64, "a_b"])
def test_an_invalid_bucket_name_is_refused_before_anything_starts(
    tmp_path: Path, bucket: str
) -> None:
    with pytest.raises(InvalidUsage, match=f"invalid bucket name '{bucket}'"):
        SeaweedS3(tmp_path, bucket=bucket)
    assert not any(tmp_path.iterdir())


@pytest.mark.s3
def test_seaweedfs_restarts_with_its_data_and_keys(tmp_path: Path) -> None:
    server = SeaweedS3(tmp_path / "s3", bucket="kept-bucket")
    try:
        server.start()
    except S3Unavailable as e:
        pytest.fail(f"SeaweedFS must start here: {e}")
    try:
        env = server.env()
        fs = pafs.S3FileSystem(
            access_key=env["AWS_ACCESS_KEY_ID"],
            secret_key=env["AWS_SECRET_ACCESS_KEY"],
            endpoint_override=env["AWS_ENDPOINT_URL"],
            region=env["AWS_REGION"],
        )
        with fs.open_output_stream("kept-bucket/kept/x") as out:
            out.write(b"durable")
        wrong = pafs.S3FileSystem(
            access_key="nobody",
            secret_key="wrong",
            endpoint_override=env["AWS_ENDPOINT_URL"],
            region=env["AWS_REGION"],
        )
        with pytest.raises(OSError):
            wrong.get_file_info("kept-bucket/kept/x")
        server.kill()
        assert not server.running
        server.start()
        assert server.env() == env  # the same keys after a restart
        with fs.open_input_stream("kept-bucket/kept/x") as f:
            assert f.read() == b"durable"
        # stop() kills a server still stopping after STOP_GRACE_S: what it acknowledged stays
        with fs.open_output_stream("kept-bucket/kept/y") as out:
            out.write(b"also durable")
        logged = server.log_path.stat().st_size
        server.stop()
        assert not server.running
        with server.log_path.open("rb") as log:
            log.seek(logged)
            stopping = log.read()
        # it was stopped (killed) before the filer's 15 s wait ran out, which logs this
        assert b"graceful stop timed out" not in stopping, stopping[-2000:]
        server.start()
        for key, data in (("x", b"durable"), ("y", b"also durable")):
            with fs.open_input_stream(f"kept-bucket/kept/{key}") as f:
                assert f.read() == data
    finally:
        server.stop()


@pytest.mark.s3
def test_dev_s3_prints_a_working_environment_and_stops_on_sigterm(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "timeshard"), "dev", "s3", "--dir", str(tmp_path / "d")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("S3 (SeaweedFS) on http://127.0.0.1:"), first
        exports = proc.stdout.readline().split()
        assert exports[0] == "export"
        env = dict(item.split("=", 1) for item in exports[1:])
        uri = proc.stdout.readline().split("blob = ")[1].strip().strip("'")
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            blob = open_blob(uri)
            blob.set("k", b"v")
            assert blob.get("k") == b"v"
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k)
                else:
                    os.environ[k] = v
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    deadline = time.monotonic() + 30
    while (
        "weed"
        in subprocess.run(
            ["pgrep", "-a", "-f", str(tmp_path)], capture_output=True, text=True
        ).stdout
    ):
        assert time.monotonic() < deadline, "weed outlived `timeshard dev s3`"
        time.sleep(0.2)


@pytest.mark.s3
def test_seaweedfs_starts_on_new_internal_ports_when_one_it_chose_is_taken(
    tmp_path: Path,
) -> None:
    """Another process binds a port the server chose before the server does (a real race on a
    busy machine): the server exits, and start tries again on new internal ports."""
    import socket

    server = SeaweedS3(tmp_path / "s3")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server._ports["s3.port.grpc"] = taken.getsockname()[1]
        try:
            server.start()
        except S3Unavailable as e:
            pytest.fail(f"SeaweedFS must start here: {e}")
        try:
            assert server._ports["s3.port.grpc"] != taken.getsockname()[1]
            assert b"address already in use" in server.log_path.read_bytes()
        finally:
            server.stop()
