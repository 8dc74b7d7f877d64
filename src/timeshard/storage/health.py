"""Health: the status of every source and export, kept as a collection.

Statuses are ``starting``, ``running``, ``stalled`` (with the error),
``paused`` and ``dropped``. They live in the shard ``timeshard_status`` as an
upsert collection keyed by object: one row per object at every time, its
latest status, written by the feedback upsert (so a status history can be read
``AS OF`` any time, like any shard).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage, LeaseExpired
from timeshard.persist import Appended, PersistClient
from timeshard.storage.upsert import FeedbackUpsert, UpsertCommand

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
        self._last: dict[str, tuple[str, str | None]] = {}

    def close(self) -> None:
        self._upsert.close()

    def report(self, obj: str, status: str, error: str | None = None) -> None:
        """Record ``status`` for ``obj`` (no write if it is unchanged)."""
        if status not in STATUSES:
            raise InvalidUsage(f"status must be one of {STATUSES}, got {status!r}")
        if self._last.get(obj) == (status, error):
            return
        try:
            self._record(obj, status, error)
        except LeaseExpired:  # the process was paused past the leases: new handles, once
            with contextlib.suppress(Exception):
                self._upsert.close()
            self._upsert = FeedbackUpsert(self._client, STATUS_SHARD, STATUS_SCHEMA, ["object"])
            self._record(obj, status, error)

    def _record(self, obj: str, status: str, error: str | None) -> None:
        for _ in range(10):
            upper = self._upsert.upper.time
            assert upper is not None
            now = max(self._clock(), upper)
            cmd = UpsertCommand((obj,), (status, error, now), now, (now,))
            if isinstance(self._upsert.apply([cmd], now + 1), Appended):
                self._last[obj] = (status, error)
                return
        raise AssertionError(f"could not record the status of {obj!r}")


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
