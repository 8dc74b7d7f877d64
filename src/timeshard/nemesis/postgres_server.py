"""A throwaway PostgreSQL server for tests, benchmarks and the nemesis.

Uses the binaries of Debian's ``postgresql`` package (``apt-get install -y
postgresql``) in ``/usr/lib/postgresql/<version>/bin`` (the newest version
wins), else ``initdb``/``pg_ctl`` on ``PATH``. ``start()`` runs ``initdb`` and
``pg_ctl`` -- as the ``postgres`` user when running as root, through
``runuser`` (or ``su``) -- with the cluster in a fresh temporary directory
owned by that user, listening on 127.0.0.1 only, on a free port, with its unix
socket in the same directory, trust authentication and ``fsync=off`` (a test
server needs no durability). ``restart()`` stops it abruptly and starts it on
the same port, as a crash would; ``stop()`` kills it; ``cleanup()`` also
removes the directory.

Usage::

    server = PostgresServer()
    dsn = server.start()          # postgresql://postgres@127.0.0.1:<port>/postgres
    dsn2 = server.isolated_dsn()  # same database, a fresh schema first on search_path
    server.cleanup()
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import quote


def find_bin(name: str) -> str:
    """The PostgreSQL binary ``name`` of the newest installed version."""

    def version(path: str) -> tuple[int, ...]:
        match = re.search(r"/postgresql/([0-9.]+)/bin/", path)
        return tuple(int(x) for x in match.group(1).split(".")) if match else ()

    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=version)
    if candidates:
        return candidates[-1]
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

    def start(self) -> str:
        """Create the cluster and start the server; return its DSN.

        Raises RuntimeError with the tool's output if it cannot start.
        """
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

    def restart(self) -> None:
        """Stop the server abruptly (``-m immediate``) and start it again on the same port."""
        self.stop()
        self._pg_ctl_start()

    def stop(self) -> None:
        """Kill the server; every connection to it breaks."""
        if not (self.data / "postmaster.pid").exists():
            return
        try:
            self._run([find_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"])
        except RuntimeError:
            self._kill_postmaster()

    def cleanup(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def isolated_dsn(self, prefix: str = "t") -> str:
        """The DSN of a new, empty schema that comes first on ``search_path``."""
        import psycopg
        from psycopg import sql

        schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        return f"{self.dsn}?options={quote(f'-c search_path={schema}')}"

    def log(self) -> str:
        """The end of the server log."""
        try:
            return (self.dir / "log").read_text()[-2000:]
        except OSError:
            return "(no log)"

    def _run(self, args: list[str], timeout: float = 120) -> None:
        if self.as_root:
            if shutil.which("runuser"):
                args = ["runuser", "-u", "postgres", "--", *args]
            else:
                args = ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(map(_sh_quote, args))]
        try:
            subprocess.run(args, check=True, capture_output=True, text=True, timeout=timeout)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
            output = (_text(e.stdout) + _text(e.stderr)).strip()
            raise RuntimeError(f"{' '.join(args)} failed: {output}\n{self.log()}") from e

    def _pg_ctl_start(self) -> None:
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} "
            f"-c unix_socket_directories={self.dir} -c fsync=off "
            "-c max_connections=300 -c wal_level=logical -c max_replication_slots=40 "
            "-c max_wal_senders=40"
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

    def _kill_postmaster(self) -> None:
        """SIGKILL the postmaster its pid file names -- if that process is still a postgres
        (a stale file's pid may be another process's by now)."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
            if Path(f"/proc/{pid}/comm").read_text().strip() == "postgres":
                os.kill(pid, signal.SIGKILL)


def _sh_quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def _text(output: str | bytes | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""
