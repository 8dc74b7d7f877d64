"""A server process on loopback for the tests and ``timeshard dev``: start, wait, stop, kill.

:class:`Daemon` runs one command as the leader of its own process group, its
output appended to a log file, and waits until a probe says the server
answers. Waiting tells *stuck* from *slow*: a process that exited fails at
once; one whose log still grows is given up to three times the timeout; one
whose log has not grown for ``stuck_after_s`` fails at the timeout. Failures
raise the ``unavailable`` exception the caller names, with the end of the log.
``stop`` is SIGTERM to the group, then SIGKILL; ``kill`` is SIGKILL, as a crash.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Self

#: A log line that reports a failure (MariaDB, PostgreSQL, Java and Go servers alike).
_ERROR_LINE = re.compile(r"ERROR|FATAL|PANIC|Assertion|assertion|[Ee]xception|got signal|panic:")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon:
    """One server process and its log (module doc)."""

    def __init__(
        self,
        what: str,
        log_path: Path,
        unavailable: type[Exception],
        stuck_after_s: float = 30.0,
    ) -> None:
        self.what = what
        self.log_path = log_path
        self.unavailable = unavailable
        self.stuck_after_s = stuck_after_s
        self._proc: subprocess.Popen[bytes] | None = None

    def spawn(self, command: list[str], env: Mapping[str, str] | None = None) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=None if env is None else dict(env),
            )

    def wait_ready(self, answers: Callable[[], bool], where: str, timeout_s: float) -> None:
        """Return once ``answers()``; raise ``unavailable`` if the server exits or sticks."""
        assert self._proc is not None, "spawn first"
        started = time.monotonic()
        last_growth, last_size = started, -1
        while True:
            if self._proc.poll() is not None:
                raise self.unavailable(
                    f"{self.what} exited with code {self._proc.returncode}: {self.log_tail()}"
                )
            try:
                if answers():
                    return
            except Exception:  # not listening yet
                pass
            now = time.monotonic()
            size = self.log_path.stat().st_size if self.log_path.exists() else 0
            if size != last_size:
                last_growth, last_size = now, size
            stuck = now - last_growth > self.stuck_after_s
            if now - started > (timeout_s if stuck else 3 * timeout_s):
                self.kill()
                raise self.unavailable(
                    f"{self.what} did not answer on {where} within {now - started:.0f} s "
                    f"({'stuck: its log stopped growing' if stuck else 'still starting'}): "
                    f"{self.log_tail()}"
                )
            time.sleep(0.3)

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM the process group; SIGKILL it if it does not stop in ``timeout_s``."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def kill(self) -> None:
        """SIGKILL the process group, as a crash would."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = 6) -> str:
        """The log's last ``lines`` lines, after the errors logged in the last 200 lines (a
        crash report ends with pages of limits and versions, far below its cause)."""
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        recent = text[-200:-lines] if len(text) > lines else []
        errors = [line for line in recent if _ERROR_LINE.search(line)][-lines:]
        shown = [*errors, *(["..."] if errors else []), *text[-lines:]]
        return " | ".join(line[:200] for line in shown)


class DevServer:
    """What every dev server does with its :class:`Daemon`: stop, kill, restart, ``with``.

    Subclasses set ``self._daemon`` and implement ``start`` (returning where
    the server answers).
    """

    _daemon: Daemon

    def start(self) -> str:
        raise NotImplementedError

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the server cleanly (SIGTERM), or kill it if it does not stop."""
        self._daemon.stop(timeout_s)

    def kill(self) -> None:
        """SIGKILL the server, as a crash would."""
        self._daemon.kill()

    def restart(self) -> str:
        """Stop (if running) and start again on the same ports, with the same data."""
        self.stop()
        return self.start()

    @property
    def running(self) -> bool:
        return self._daemon.running

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


__all__ = ["Daemon", "DevServer", "free_port"]
