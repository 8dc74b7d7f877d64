"""A MariaDB server on 127.0.0.1 with a row-based, GTID binlog: for the tests and ``timeshard dev``.

Uses Debian's ``mariadb-server`` package (``mariadbd`` and
``mariadb-install-db``). :class:`MariaDBServer` initialises a data directory
of its own (the first start only), then runs ``mariadbd`` on a free port of
loopback with its socket, pid file and log beside the data, and the binlog a
MySQL source needs: ``binlog_format=ROW``, ``binlog_row_image=FULL``,
``binlog_row_metadata=FULL``, ``gtid_strict_mode`` and ``server_id=1`` in
replication domain 0. Grant tables are on (replication needs them): every
start ensures the user :attr:`MariaDBServer.user` with the privileges
a MySQL source needs (``SELECT``, ``RELOAD``, ``REPLICATION SLAVE``,
``REPLICATION CLIENT``, ``BINLOG MONITOR``) plus ``ALL`` for the tests that
write (``ALL`` includes them), and the database :attr:`MariaDBServer.database`.

``start`` waits until the user can log in (:class:`~timeshard.dev.daemon.Daemon`
tells a stuck server from a slow one); a server that cannot start raises
:class:`MariaDBUnavailable` with the end of its log.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from timeshard.dev.daemon import Daemon, DevServer, free_port

START_TIMEOUT_S = 60.0


class MariaDBUnavailable(Exception):
    """The MariaDB server cannot be started; the message says why."""


def find_binary(*names: str) -> str:
    """The first of ``names`` on PATH or in /usr/sbin, /usr/bin (Debian's locations)."""
    for name in names:
        for found in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"):
            if found and os.access(found, os.X_OK):
                return found
    raise MariaDBUnavailable(
        f"none of {list(names)} is installed (apt-get install mariadb-server, "
        "or scripts/bootstrap.sh with TIMESHARD_NEED_MARIADB=1)"
    )


class MariaDBServer(DevServer):
    """One ``mariadbd`` on 127.0.0.1 with its own data directory (module doc)."""

    user = "timeshard"
    password = "timeshard"
    database = "timeshard"

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.datadir = self.workdir / "data"
        self.socket = self.workdir / "mariadb.sock"
        self.log_path = self.workdir / "mariadbd.log"
        self._daemon = Daemon("the MariaDB server", self.log_path, MariaDBUnavailable)

    @property
    def url(self) -> str:
        """``mysql://user:password@127.0.0.1:port/database``, what a MySQL source takes."""
        return f"mysql://{self.user}:{self.password}@127.0.0.1:{self.port}/{self.database}"

    def start(self) -> str:
        if not (self.datadir / "mysql").exists():
            self._install_db()
        self._daemon.spawn(self._command())
        self._daemon.wait_ready(self._answers_root, f"127.0.0.1:{self.port}", START_TIMEOUT_S)
        self._create_user()  # idempotent: a start that died before it is made good
        return self.url

    def _install_db(self) -> None:
        self.datadir.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [
                find_binary("mariadb-install-db", "mysql_install_db"),
                f"--datadir={self.datadir}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
        if done.returncode != 0:
            raise MariaDBUnavailable(
                f"mariadb-install-db failed ({done.returncode}): {done.stderr.strip()[-600:]}"
            )

    def _command(self) -> list[str]:
        return [
            find_binary("mariadbd", "mysqld"),
            "--no-defaults",
            f"--datadir={self.datadir}",
            f"--socket={self.socket}",
            f"--pid-file={self.workdir / 'mariadbd.pid'}",
            "--bind-address=127.0.0.1",
            f"--port={self.port}",
            "--user=root",
            "--log-bin=binlog",
            "--binlog-format=ROW",
            "--binlog-row-image=FULL",
            "--binlog-row-metadata=FULL",
            "--server-id=1",
            "--gtid-domain-id=0",
            "--gtid-strict-mode=1",
            "--log-slave-updates",
            "--innodb-buffer-pool-size=32M",
            "--innodb-log-file-size=16M",
            "--performance-schema=OFF",
            "--skip-name-resolve",
        ]

    def _root(self) -> object:
        import pymysql

        return pymysql.connect(
            unix_socket=str(self.socket), user="root", password="", connect_timeout=2
        )

    def _answers_root(self) -> bool:
        conn = self._root()
        conn.close()  # type: ignore[attr-defined]
        return True

    def _create_user(self) -> None:
        conn = self._root()
        try:
            with conn.cursor() as cur:  # type: ignore[attr-defined]
                cur.execute(f"CREATE DATABASE IF NOT EXISTS `{self.database}`")
                for host in ("127.0.0.1", "localhost"):
                    cur.execute(
                        "CREATE USER IF NOT EXISTS %s@%s IDENTIFIED BY %s",
                        (self.user, host, self.password),
                    )
                    cur.execute(
                        "GRANT ALL PRIVILEGES ON *.* TO %s@%s",
                        (self.user, host),
                    )
        finally:
            conn.close()  # type: ignore[attr-defined]

    def cleanup(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


__all__ = ["MariaDBServer", "MariaDBUnavailable", "find_binary"]
