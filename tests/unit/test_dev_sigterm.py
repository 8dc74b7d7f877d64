"""``timeshard dev s3|kafka|mysql`` take SIGTERM as "stop" from before the server starts.

The handler was installed after the server's address was printed: a SIGTERM
sent as soon as the address was read (as a supervisor or a test does) could
come first, end the process by the default action and leave the server
running. Seen under load: ``test_dev_s3``'s process exited -15.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from timeshard.cli import dev


class FakeServer:
    """A server whose start records the SIGTERM handler then in force."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.handler_at_start: Any = None
        self.stopped = False
        FakeServer.last = self

    last: FakeServer

    def start(self) -> None:
        self.handler_at_start = signal.getsignal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)  # as soon as it is up

    running = True
    bootstrap = endpoint = "127.0.0.1:1"
    port = 1
    url = "mysql://x"

    def env(self) -> dict[str, str]:
        return {}

    def uri(self, name: str) -> str:
        return name

    def stop(self) -> None:
        self.stopped = True


@pytest.mark.parametrize(
    "command,cls",
    [("s3", "SeaweedS3"), ("kafka", "KafkaBroker"), ("mysql", "MariaDBServer")],
)
def test_a_sigterm_as_soon_as_the_server_is_up_stops_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: str, cls: str
) -> None:
    monkeypatch.setattr(dev, cls, FakeServer)
    before = signal.getsignal(signal.SIGTERM)
    try:
        kwargs: dict[str, Any] = {"directory": tmp_path, "port": None}
        if command == "s3":
            kwargs["bucket"] = "b"
        if command == "kafka":
            kwargs["version"] = "4.0.0"
        getattr(dev, command)(**kwargs)
    finally:
        signal.signal(signal.SIGTERM, before)
    assert FakeServer.last.handler_at_start not in (signal.SIG_DFL, None)
    assert FakeServer.last.stopped
