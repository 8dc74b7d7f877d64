"""What the JVM writes just before this process exits still reaches its stderr (no Spark:
the JVM's side of the pipes is written by the test).

The threads that forward the JVM's output are daemons: a process that exited right
after its session logged an error lost the line whenever they had not run yet, as on a
loaded machine (``test_quiet_spark.py``'s check of an error logged after start-up
failed so in a full run). At exit, :meth:`JvmOutput.flush` waits for them.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from timeshard.spark import quiet
from timeshard.spark.quiet import JvmOutput


def test_flush_waits_until_what_the_jvm_wrote_is_forwarded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    forwarded: list[tuple[int, bytes]] = []

    def slow_write(fd: int, data: bytes) -> Any:
        time.sleep(0.2)  # a forwarding thread that runs late
        forwarded.append((fd, data))

    monkeypatch.setattr(quiet, "_write", slow_write)
    output = JvmOutput()
    monkeypatch.setattr(quiet.atexit, "register", lambda f: f)  # not at this test's exit
    output.started()
    os.write(output.writers[2], b"an error logged by the running session\n")
    os.write(output.writers[1], b"a line on stdout\n")
    output.flush()
    assert sorted(forwarded) == [
        (1, b"a line on stdout\n"),
        (2, b"an error logged by the running session\n"),
    ]
    output.close_writers()
    output.join(5.0)
