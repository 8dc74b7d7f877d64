"""A server that exits while starting is reported with its log's errors, not only its tail."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from timeshard.dev.daemon import Daemon


class Unavailable(Exception):
    pass


def test_a_crash_report_is_shown_with_the_error_far_above_its_end(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    daemon = Daemon("the test server", log, Unavailable)
    report = [
        "starting",
        "[ERROR] InnoDB: Failing assertion: lsn >= checkpoint",
        "mariadbd got signal 6 ;",
        *[f"Max limit {i}  819200  819200  bytes" for i in range(30)],
    ]
    script = f"import sys; print({chr(10).join(report)!r}); sys.exit(134)"
    daemon.spawn([sys.executable, "-c", script])
    with pytest.raises(Unavailable) as e:
        daemon.wait_ready(lambda: False, "nowhere", timeout_s=60)
    message = str(e.value)
    assert "exited with code 134" in message
    assert "Failing assertion: lsn >= checkpoint" in message and "got signal 6" in message
    assert "Max limit 29" in message  # and the tail, after them
    assert message.index("Failing assertion") < message.index("Max limit 29")
    assert "starting" not in message


def test_a_log_without_errors_shows_its_tail(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("".join(f"line {i}\n" for i in range(20)))
    daemon = Daemon("the test server", log, Unavailable)
    assert daemon.log_tail() == " | ".join(f"line {i}" for i in range(14, 20))
