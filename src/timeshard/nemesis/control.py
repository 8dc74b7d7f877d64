"""How the nemesis steers a replica process: a control file, and a location that obeys it.

The runner writes one small JSON file per replica (:class:`Control`,
versioned, replaced atomically by rename); the replica reads it every
``CONTROL_POLL_S`` (on a thread of its own, so a long tick does not miss a
window) and applies it to its :class:`FaultyLocation`:

* ``unreliable_rate``: its blob and consensus calls fail or time out at this
  rate (half each; :mod:`timeshard.location.unreliable`), and so do its Spark
  tasks' part writes and reads (:func:`timeshard.spark.parts.inject_task_faults`,
  through :meth:`FaultyLocation.task_faults`), until the wall-clock time
  ``unreliable_until_ms`` (0: until the control changes); 0 for none;
* ``disk_full``: writes to its blob fail with ``ENOSPC``, as a full disk's
  would (used only where the runner could not mount a small tmpfs for the
  blob; then only writes made on the driver see it);
* ``clock_offset_ms``: added to the wall clock of its tick source;
* ``stop``: finish the current tick and exit.

Every fault the location injects is recorded where it is injected, in the
run's :class:`~timeshard.location.unreliable.FaultJournal` (``JOURNAL`` in
the run directory; kind
``unreliable`` for each failed call or task, ``disk_full`` for each refused
write, ``clock_jump`` the first time the tick source reads a new offset).

Invariants:

1. A missing or unreadable control file reads as the defaults (no faults),
   so a replica started before the runner wrote its file runs cleanly.
2. The fault streams are seeded per ``(seed, run, replica, incarnation)``;
   the tasks' faults are seeded per job from a stream seeded the same way.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from timeshard.errors import Determinate, InvalidUsage
from timeshard.location import Location, UnreliableBlob, UnreliableConsensus
from timeshard.location.blob import (
    Blob,
    BlobMetadata,
    Temporaries,
    check_blob_key,
    check_blob_prefix,
    check_blob_value,
)
from timeshard.location.file import check_temporary_key
from timeshard.location.unreliable import NEVER_MS, FaultJournal, KeyedFaults

CONTROL_VERSION = 2
CONTROL_POLL_S = 0.1
JOURNAL = "injected.jsonl"
"""The run's fault journal, in the run directory."""


@dataclass(frozen=True, slots=True)
class Control:
    """What the runner currently wants of one replica."""

    unreliable_rate: float = 0.0
    unreliable_until_ms: int = 0
    disk_full: bool = False
    clock_offset_ms: int = 0
    stop: bool = False

    def write(self, path: Path) -> None:
        """Replace ``path`` atomically with this control."""
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"version": CONTROL_VERSION, **asdict(self)}))
        os.replace(tmp, path)

    @staticmethod
    def read(path: Path) -> Control:
        """The control in ``path``; the defaults if there is none (see invariant 1)."""
        try:
            raw: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):
            return Control()
        if raw.pop("version", None) != CONTROL_VERSION:
            raise InvalidUsage(f"control file {str(path)!r} has an unknown version: {raw}")
        return Control(**raw)


class FullDiskBlob:
    """A blob whose writes fail with ENOSPC while ``full`` is set; reads and deletes (of
    keys and of the wrapped blob's temporaries) pass through. A key or prefix no blob
    takes is InvalidUsage first, as the wrapped blob would raise it."""

    def __init__(self, inner: Blob, journal: FaultJournal | None = None) -> None:
        self.inner = inner
        self.journal = journal
        self.full = False

    @property
    def root_uri(self) -> str | None:
        return self.inner.root_uri

    def get(self, key: str) -> bytes | None:
        return self.inner.get(key)

    def set(self, key: str, value: bytes) -> None:
        check_blob_key(key)  # a bad key or value is the caller's mistake, full disk or not
        check_blob_value(value)
        if self.full:
            if self.journal is not None:
                self.journal.record("disk_full", "blob.enospc")
            raise Determinate(
                f"writing blob {key!r}: [Errno {errno.ENOSPC}] No space left on device (injected)"
            )
        self.inner.set(key, value)

    def delete(self, key: str) -> int | None:
        return self.inner.delete(key)

    def list_keys(self, prefix: str = "") -> Any:
        metas: list[BlobMetadata] = list(self.inner.list_keys(prefix))
        return iter(metas)

    def list_temporaries(self, prefix: str = "") -> Iterator[BlobMetadata]:
        """The wrapped blob's temporaries (none if it has none), for GC."""
        check_blob_prefix(prefix)
        if not isinstance(self.inner, Temporaries):
            return iter(())
        return self.inner.list_temporaries(prefix)

    def delete_temporary(self, key: str) -> int | None:
        """Delete a temporary of the wrapped blob: a delete, so also when the disk is full."""
        check_temporary_key(key)
        if not isinstance(self.inner, Temporaries):
            return None
        return self.inner.delete_temporary(key)


class FaultyLocation:
    """A location whose blob and consensus misbehave as the control file says.

    ``journal``: where every injected fault is recorded (none if None).
    """

    def __init__(self, inner: Location, seed: str, journal: FaultJournal | None = None) -> None:
        self.journal = journal
        self.disk = FullDiskBlob(inner.blob, journal)
        self.blob = UnreliableBlob(self.disk, seed=_seed(seed, "blob"))
        self.consensus = UnreliableConsensus(inner.consensus, seed=_seed(seed, "consensus"))
        for what, faults in (("blob", self.blob), ("consensus", self.consensus)):
            faults.on_inject = self._recorder(what)
        self.location = Location(self.blob, self.consensus)
        self.clock_offset_ms = 0
        self.unreliable_rate = 0.0
        self.unreliable_until_ms = NEVER_MS
        self._task_seeds = random.Random(_seed(seed, "tasks"))
        self._recorded_offset = 0
        self._lock = threading.Lock()
        self.apply(Control())

    def _recorder(self, what: str) -> Callable[[str], None] | None:
        journal = self.journal
        if journal is None:
            return None
        return lambda kind: journal.record("unreliable", f"{what}.{kind}")

    def apply(self, control: Control) -> None:
        for faults in (self.blob, self.consensus):
            faults.fail_rate = faults.timeout_rate = control.unreliable_rate / 2
            faults.enabled = control.unreliable_rate > 0
        self.unreliable_rate = control.unreliable_rate
        self.unreliable_until_ms = control.unreliable_until_ms or NEVER_MS
        self.disk.full = control.disk_full
        self.clock_offset_ms = control.clock_offset_ms

    def clock(self) -> int:
        """The tick source's clock: wall-clock milliseconds plus the injected offset."""
        offset = self.clock_offset_ms
        with self._lock:
            recorded, self._recorded_offset = self._recorded_offset, offset
        if offset and offset != recorded and self.journal is not None:
            self.journal.record("clock_jump", f"{offset:+d} ms")
        return time.time_ns() // 1_000_000 + offset

    def task_faults(self) -> KeyedFaults | None:
        """The faults for the tasks of one Spark job, or None outside an unreliable window.

        Each call draws the job's seed from this location's seeded stream.
        """
        rate = self.unreliable_rate
        if not rate:
            return None
        with self._lock:
            seed = self._task_seeds.getrandbits(63)
        return KeyedFaults(seed, rate, self.unreliable_until_ms, self.journal)

    def injected(self) -> dict[str, int]:
        """The storage faults this process's wrappers injected, by ``<what>.<kind>``."""
        return {
            f"{what}.{kind}": n
            for what, faults in (("blob", self.blob), ("consensus", self.consensus))
            for kind, n in faults.injected.items()
        }


def _seed(seed: str, what: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{what}".encode()).digest()[:8], "big")


__all__ = [
    "CONTROL_POLL_S",
    "CONTROL_VERSION",
    "JOURNAL",
    "Control",
    "FaultyLocation",
    "FullDiskBlob",
]
