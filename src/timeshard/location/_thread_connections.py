"""Per-thread database connections that end with their thread.

A consensus backend (SQLite, PostgreSQL) gives each thread its own
connection. Servers start a thread per client (the pgwire server's
``ThreadingTCPServer``), so a connection must not outlive its thread: each is
held by one :class:`_Held` in a ``threading.local``, and when the thread ends
Python drops that thread's locals and the holder closes its connection.
:meth:`ThreadConnections.close_all` closes those of threads still alive.

Invariants:

1. A connection is only ever used and closed in the process that opened it.
   One a forked child inherited is never closed there (closing it could
   disturb the parent's session or locks); it is kept referenced in
   ``_INHERITED`` so that garbage collection does not close it either.
2. A connection is closed at most once: by its thread ending, by
   :meth:`ThreadConnections.put` replacing it, by
   :meth:`ThreadConnections.drop`, or by :meth:`ThreadConnections.close_all`,
   whichever comes first.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

C = TypeVar("C")

_INHERITED: list[object] = []
"""Connections a forked child inherited: kept alive so that they are never closed there."""


class _Held(Generic[C]):
    """One thread's connection; closes it when released or garbage collected."""

    __slots__ = ("__weakref__", "_close", "conn", "pid")

    def __init__(self, conn: C, close: Callable[[C], None]) -> None:
        self.conn: C | None = conn
        self.pid = os.getpid()
        self._close = close

    def release(self) -> None:
        conn, self.conn = self.conn, None
        if conn is None:
            return
        if self.pid != os.getpid():
            _INHERITED.append(conn)
            return
        with contextlib.suppress(Exception):  # a connection already broken is closed enough
            self._close(conn)

    def __del__(self) -> None:
        self.release()


class ThreadConnections(Generic[C]):
    """The connections of one backend: at most one per thread, closed with its thread."""

    def __init__(self, close: Callable[[C], None]) -> None:
        self._close = close
        self._local = threading.local()
        self._lock = threading.Lock()
        self._live: weakref.WeakSet[_Held[C]] = weakref.WeakSet()

    def get(self) -> C | None:
        """This thread's connection in this process, or None if it has none."""
        held: _Held[C] | None = getattr(self._local, "held", None)
        if held is None or held.pid != os.getpid():
            return None
        return held.conn

    def put(self, conn: C) -> None:
        """Make ``conn`` this thread's connection, closing the one it replaces."""
        held = _Held(conn, self._close)
        old: _Held[C] | None = getattr(self._local, "held", None)
        self._local.held = held
        with self._lock:
            self._live.add(held)
        if old is not None:
            old.release()

    def drop(self) -> None:
        """Close this thread's connection; :meth:`get` returns None until the next put."""
        held: _Held[C] | None = getattr(self._local, "held", None)
        self._local.held = None
        if held is not None:
            held.release()

    def close_all(self) -> None:
        """Close the connection of every thread; call when no thread uses them."""
        with self._lock:
            live = list(self._live)
        for held in live:
            held.release()


__all__ = ["ThreadConnections"]
