"""Background lease renewal: every leased handle of a client stays alive on its own.

A writer or leased reader that is not used for a while (a paused source, a
view whose inputs are idle) would otherwise lose its lease, and the next GC
would expire it: its staged batches and its since hold would be gone. The
:class:`Heartbeats` of a :class:`~timeshard.persist.PersistClient` is one
daemon thread that renews, every ``PersistConfig.heartbeat_interval_ms``, the
lease of each live handle the client opened whose last renewal is that old.

A handle renews without moving the state it holds against GC (a reader's held
seqno stays), so a background renewal never releases parts a read planned.

Invariants:

1. A renewal that fails on storage is retried at the next interval; it is
   never raised into the tick loop.
2. A handle whose lease already ran out (LeaseExpired) is marked
   ``lease_lost`` and dropped from the schedule; its operator sees it on its
   next use and opens new handles.
3. Handles are held weakly: an abandoned handle is not kept alive by its
   heartbeat (its lease then runs out, as a crashed process's does).
4. The thread stops before the interpreter finalizes (``atexit``): a
   renewal caught halfway through finalization could abort the process.

Runs on the driver, in one thread per client.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Protocol

from timeshard.errors import ExternalError, LeaseExpired
from timeshard.persist._internal.threads import stop_at_exit
from timeshard.persist.config import PersistConfig

log = logging.getLogger(__name__)


class Leased(Protocol):
    """A handle with a lease: writers, leased readers and listens."""

    lease_lost: bool

    def renew_lease(self) -> None:
        """Renew the lease (without moving held state); LeaseExpired if it ran out."""
        ...

    def last_renewal_ms(self) -> int: ...


class Heartbeats:
    """Renews the leases of registered handles in the background."""

    def __init__(self, config: PersistConfig) -> None:
        self._config = config
        self._handles: weakref.WeakSet[Leased] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.renewals = 0
        self.failures = 0
        stop_at_exit(self.stop)

    def register(self, handle: Leased) -> None:
        if self._config.heartbeat_interval_ms <= 0:
            return
        with self._lock:
            self._handles.add(handle)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="timeshard-heartbeats", daemon=True
                )
                self._thread.start()

    def unregister(self, handle: Leased) -> None:
        with self._lock:
            self._handles.discard(handle)

    def renew_due(self) -> None:
        """Renew every registered handle whose last renewal is an interval old."""
        interval = self._config.heartbeat_interval_ms
        with self._lock:
            handles = list(self._handles)
        for handle in handles:
            if self._config.now_ms() - handle.last_renewal_ms() < interval:
                continue
            try:
                handle.renew_lease()
                self.renewals += 1
            except LeaseExpired:
                handle.lease_lost = True
                self.unregister(handle)
            except ExternalError as e:  # storage is down: try again next round
                self.failures += 1
                log.info("lease renewal failed, will retry: %s", e)

    def stop(self) -> None:
        """Stop the thread (waiting for a renewal in flight); no more renewals."""
        self._stopped = True
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            self._wake.wait(self._config.heartbeat_interval_ms / 2000)
            if self._stopped:
                return
            try:
                self.renew_due()
            except Exception:  # a renewal must never kill the thread
                self.failures += 1
                log.exception("lease renewal failed unexpectedly")


__all__ = ["Heartbeats", "Leased"]
