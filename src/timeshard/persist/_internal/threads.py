"""Background threads of persist (compactors, lease renewal) stop before exit, and yield
the CPU to the foreground.

They are daemon threads, so that a forgotten handle never keeps a process
alive; but a daemon thread caught halfway through a pyarrow or SQLite call
while the interpreter finalizes can abort the whole process (``terminate
called without an active exception``). Every such thread registers its stop
method here, and an ``atexit`` hook calls them all, each waiting for the work
in flight, before finalization begins.

Methods are held weakly: a stopped, forgotten object is not kept alive.

A thread whose work is CPU-heavy and never urgent (a compactor) calls
:func:`lower_priority` first: the OS then runs it only when the CPU has time
left over from the process's other threads, a Spark tick's tasks above all
(in local mode they are threads of the driver's JVM, on the same cores).
At its normal priority, compaction took a core from nearly every UPSERT
tick at 20k commands/s on a ``local[2]`` machine: merges of 0.2-3 s of the
output shard, as often as every tick, while the tick's tasks ran. A lower
priority does not starve it: the scheduler still gives it a share of a busy
CPU (about a tenth at niceness 10), and all of an idle one.
"""

from __future__ import annotations

import atexit
import contextlib
import os
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


#: How much :func:`lower_priority` raises a thread's nice value (19 is the lowest priority).
BACKGROUND_NICENESS = 10


def lower_priority(niceness: int = BACKGROUND_NICENESS) -> bool:
    """Raise the calling thread's nice value by ``niceness`` (Linux, where a thread has its
    own; capped at 19). False where the OS has no per-thread priority or refuses."""
    setpriority = getattr(os, "setpriority", None)
    tid = threading.get_native_id()
    if setpriority is None or not os.path.isdir(f"/proc/self/task/{tid}"):
        return False  # no per-thread nice value: renicing would lower the whole process
    try:
        setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + niceness))
    except OSError:
        return False
    return True


__all__ = ["BACKGROUND_NICENESS", "lower_priority", "stop_at_exit"]
