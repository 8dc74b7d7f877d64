"""How CLI commands find a running ``timeshard serve``: live, stale and foreign files."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from timeshard.server.discovery import SERVER_FILE, announce, running_server, withdraw


def test_a_live_announced_server_is_found_and_withdrawn(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        announce(tmp_path, "127.0.0.1", port)
        assert running_server(tmp_path) == ("127.0.0.1", port)
        withdraw(tmp_path)
        assert not (tmp_path / SERVER_FILE).exists()
        assert running_server(tmp_path) is None


def test_a_dead_process_or_a_closed_port_is_ignored(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        dead = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"],
            capture_output=True,
            text=True,
            check=True,
        )
        (tmp_path / SERVER_FILE).write_text(
            json.dumps({"host": "127.0.0.1", "port": port, "pid": int(dead.stdout)})
        )
        assert running_server(tmp_path) is None  # the process that wrote it is gone
    announce(tmp_path, "127.0.0.1", port)  # alive, but nothing listens any more
    assert running_server(tmp_path) is None


def test_another_process_file_is_not_withdrawn_and_garbage_is_ignored(tmp_path: Path) -> None:
    (tmp_path / SERVER_FILE).write_text(json.dumps({"host": "h", "port": 1, "pid": 1}))
    withdraw(tmp_path)
    assert (tmp_path / SERVER_FILE).exists()
    (tmp_path / SERVER_FILE).write_text("{not json")
    assert running_server(tmp_path) is None
    assert running_server(tmp_path / "missing") is None
