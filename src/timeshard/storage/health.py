"""Health: the status of every source and export, kept as a collection.

Statuses are ``starting``, ``running``, ``stalled`` (with the error),
``paused`` and ``dropped``. They live in the shard ``timeshard_status`` as an
upsert collection keyed by object: one row per object at every time, its
latest status, written by the feedback upsert (so a status history can be read
``AS OF`` any time, like any shard).

Several reporters may report one object (replicas of a source, a process and
its successor). A report that repeats this reporter's last one writes nothing
only while the stored latest row of the object is still the one this reporter
wrote: the status shard's upper has not moved since, or the row read at the
new upper is still that one. So the status another reporter wrote meanwhile
(``stalled``, then it exited) is overwritten by this one's next report. This
reporter's own append moves the upper on without a read: landing right at the
upper it knew, it changed no other object's row.

A report is appended at the status shard's upper (a compare-and-set): one
that other reporters' appends overtook is tried again, after a random pause
that doubles up to 1 s, for up to ``RETRY_FOR_S``; then it is a
:class:`~timeshard.errors.Determinate` fault (nothing was written), as the
catalog's writes are.

Runs on the driver (pyarrow path, no Spark).
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from timeshard.errors import Determinate, InvalidUsage, LeaseExpired, SinceError
from timeshard.persist import Appended, PersistClient, UnleasedReader
from timeshard.storage.upsert import FeedbackUpsert, UpsertCommand

log = logging.getLogger(__name__)

#: How long a report goes on deciding again while other reporters' appends land first.
RETRY_FOR_S = 60.0

STATUS_SHARD = "timeshard_status"
STATUSES = ("starting", "running", "stalled", "paused", "dropped")
STATUS_SCHEMA = pa.schema(
    [
        ("object", pa.string()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("updated_ms", pa.int64()),
    ]
)


class Health:
    """Reports statuses of objects into the status collection."""

    def __init__(self, client: PersistClient, clock: Callable[[], int] | None = None) -> None:
        self._client = client
        self._upsert = FeedbackUpsert(client, STATUS_SHARD, STATUS_SCHEMA, ["object"])
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        #: Each object's row this reporter wrote last ``(status, error, updated_ms)``, and
        #: the status shard's upper at which it was last known to be the stored one.
        self._written: dict[str, tuple[tuple[str, str | None, int], int]] = {}
        self._reader: UnleasedReader | None = None

    def close(self) -> None:
        self._upsert.close()

    def report(self, obj: str, status: str, error: str | None = None) -> None:
        """Record ``status`` for ``obj`` (no write if it is the one stored, by this reporter)."""
        if status not in STATUSES:
            raise InvalidUsage(f"status must be one of {STATUSES}, got {status!r}")
        if self._stored(obj, status, error):
            return
        try:
            self._record(obj, status, error)
        except LeaseExpired:  # the process was paused past the leases: new handles, once
            with contextlib.suppress(Exception):
                self._upsert.close()
            self._upsert = FeedbackUpsert(self._client, STATUS_SHARD, STATUS_SCHEMA, ["object"])
            self._record(obj, status, error)

    def report_or_log(self, obj: str, status: str, error: str | None = None) -> None:
        """:meth:`report`, a failure logged and not raised: for a caller whose work is done
        whatever its health says (a step whose data is appended). The next report tries
        again."""
        try:
            self.report(obj, status, error)
        except InvalidUsage:
            raise
        except Exception as e:
            log.warning("%s: cannot record health %s: %s: %s", obj, status, type(e).__name__, e)

    def _stored(self, obj: str, status: str, error: str | None) -> bool:
        """Whether the latest row of ``obj`` is still the one this reporter wrote last,
        with ``status`` and ``error``.

        One consensus read while nobody wrote the status shard since; a read of
        its latest rows once someone did.
        """
        written = self._written.get(obj)
        if written is None or written[0][:2] != (status, error):
            return False
        row, known_at = written
        if self._reader is None:
            self._reader = self._client.open_unleased_reader(STATUS_SHARD)
        upper = self._reader.upper().time
        if upper == known_at:
            return True
        if not upper:
            return False
        try:
            rows = self._reader.snapshot(upper - 1)
        except SinceError:  # compacted past it meanwhile: the write decides
            return False
        stored = [
            (r["status"], r["error"], r["updated_ms"])
            for r in rows.to_pylist()
            if r["object"] == obj and r["_err"] is None
        ]
        if stored != [row]:
            return False
        self._written[obj] = (row, upper)
        return True

    def _record(self, obj: str, status: str, error: str | None) -> None:
        """Append the row at the status shard's upper, again until it lands there."""
        deadline = time.monotonic() + RETRY_FOR_S
        backoff = 0.01
        lost = 0
        while True:
            upper = self._upsert.upper.time
            assert upper is not None, "the status shard is closed"
            now = max(self._clock(), upper)
            cmd = UpsertCommand((obj,), (status, error, now), now, (now,))
            if isinstance(self._upsert.apply([cmd], now + 1, expected_lower=upper), Appended):
                # Only this row landed in [upper, now + 1): the rows this reporter knew
                # stored at upper still are (no read to tell on their next report).
                self._written = {
                    o: (row, now + 1 if known_at == upper else known_at)
                    for o, (row, known_at) in self._written.items()
                }
                self._written[obj] = ((status, error, now), now + 1)
                return
            lost += 1
            if time.monotonic() > deadline:
                raise Determinate(
                    f"could not record the status {status!r} of {obj!r}: other reporters' "
                    f"appends landed first {lost} times in {RETRY_FOR_S:.0f} s; nothing was "
                    "written"
                )
            time.sleep(random.uniform(0, backoff))  # apart from the reporters that won
            backoff = min(backoff * 2, 1.0)


def latest_health(client: PersistClient) -> dict[str, dict[str, Any]]:
    """The latest health row of every object, by object (empty while nothing is recorded).

    Raises what reading the status shard raises (a missing or corrupt part, storage down).
    """
    try:
        reader = client.open_unleased_reader(STATUS_SHARD)
    except InvalidUsage:  # (the id is valid: the shard does not exist yet)
        return {}
    upper = reader.upper().time
    if not upper:
        return {}
    return {row["object"]: row for row in reader.snapshot(upper - 1).to_pylist()}


__all__ = ["STATUSES", "STATUS_SCHEMA", "STATUS_SHARD", "Health", "latest_health"]
