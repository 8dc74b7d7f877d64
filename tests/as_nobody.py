"""Running a check as another user: root reads and searches every file and directory, so
only another user shows the permission a read needs."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

#: The uid and gid of ``nobody``.
NOBODY = 65534


def as_nobody(judge: Callable[[], Any]) -> str:
    """``repr`` of ``judge()`` (or of what it raised) in a forked child process that runs
    as uid and gid ``nobody`` (the caller must be root)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                answer = repr(judge())
            except BaseException as e:
                answer = repr(e)
            os.write(write, answer.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        answer = f.read().decode()
    os.waitpid(pid, 0)
    return answer
