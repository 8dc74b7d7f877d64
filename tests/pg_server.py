"""A throwaway PostgreSQL server for tests and benchmarks.

Uses Debian's ``postgresql`` package (``apt-get install -y postgresql``): runs
``initdb`` and ``pg_ctl`` from ``/usr/lib/postgresql/*/bin`` as the
``postgres`` user when running as root, with the data directory in a fresh
temporary directory, listening on 127.0.0.1 only, on a free port, with trust
authentication. ``restart()`` stops and starts it on the same port.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def find_bin(name: str) -> str:
    """The newest PostgreSQL binary ``name``; FileNotFoundError if none is installed."""
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    if candidates:
        return candidates[0]
    found = shutil.which(name)
    if found:
        return found
    raise FileNotFoundError(f"{name} not found: apt-get install -y postgresql")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One PostgreSQL cluster in a temporary directory."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="timeshard-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.as_root = os.geteuid() == 0

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
        if self.as_root:
            args = ["runuser", "-u", "postgres", "--", *args]
        return subprocess.run(args, check=True, capture_output=True, text=True, timeout=timeout)

    def start(self) -> str:
        """Create the cluster and start the server; return its DSN."""
        if self.as_root:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run(
            [
                find_bin("initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ]
        )
        self._pg_ctl_start()
        return self.dsn

    def _pg_ctl_start(self) -> None:
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} "
            f"-c unix_socket_directories={self.dir} -c fsync=off "
            "-c max_connections=200"
        )
        self._run(
            [
                find_bin("pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.dir / "log"),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                "start",
            ]
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"PostgreSQL did not listen on port {self.port}: {self.log()}")

    def stop(self, mode: str = "fast") -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run([find_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"])

    def restart(self) -> None:
        self.stop("immediate")
        self._pg_ctl_start()

    def cleanup(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self) -> str:
        try:
            return (self.dir / "log").read_text()[-2000:]
        except OSError:
            return "(no log)"
