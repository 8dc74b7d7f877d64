"""How CLI commands find a ``timeshard serve`` running on their location.

A server on an embedded location (a directory) writes ``serve.json`` there:
its host, port and process id. :func:`running_server` reads it back and
answers only if that process is alive and the port accepts a connection, so
a file left by a killed server (``kill -9``) is ignored; the command then
works as it does without a server. The file is written atomically (a
temporary file renamed over it) and removed on a clean stop.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import socket
from pathlib import Path

SERVER_FILE = "serve.json"


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def announce(directory: Path, host: str, port: int) -> Path:
    """Say that this process serves ``directory`` on ``host:port``."""
    path = directory / SERVER_FILE
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"host": host, "port": port, "pid": os.getpid()}))
    tmp.replace(path)
    return path


def withdraw(directory: Path) -> None:
    """Remove this process's announcement (another process's stays)."""
    path = directory / SERVER_FILE
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()


def running_server(directory: Path) -> tuple[str, int] | None:
    """``(host, port)`` of the live server announced in ``directory``, or None."""
    try:
        found = json.loads((directory / SERVER_FILE).read_text())
        host, port, pid = str(found["host"]), int(found["port"]), int(found["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's
    connect = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    try:
        with socket.create_connection((connect, port), timeout=2):
            return connect, port
    except OSError:
        return None


__all__ = ["SERVER_FILE", "announce", "is_loopback", "running_server", "withdraw"]
