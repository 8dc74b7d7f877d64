"""Background threads of persist (compactors, lease renewal) stop before exit.

They are daemon threads, so that a forgotten handle never keeps a process
alive; but a daemon thread caught halfway through a pyarrow or SQLite call
while the interpreter finalizes can abort the whole process (``terminate
called without an active exception``). Every such thread registers its stop
method here, and an ``atexit`` hook calls them all, each waiting for the work
in flight, before finalization begins.

Methods are held weakly: a stopped, forgotten object is not kept alive.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import weakref
from collections.abc import Callable

_lock = threading.Lock()
_stoppers: list[weakref.WeakMethod[Callable[[], None]]] = []


def stop_at_exit(stop: Callable[[], None]) -> None:
    """Call the bound method ``stop`` at interpreter exit (if its object still lives)."""
    with _lock:
        if len(_stoppers) >= 64:
            _stoppers[:] = [ref for ref in _stoppers if ref() is not None]
        _stoppers.append(weakref.WeakMethod(stop))


@atexit.register
def _stop_all() -> None:
    with _lock:
        methods = [ref() for ref in _stoppers]
    for stop in methods:
        if stop is not None:
            with contextlib.suppress(Exception):
                stop()


__all__ = ["stop_at_exit"]
