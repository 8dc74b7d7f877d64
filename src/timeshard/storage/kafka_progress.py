"""A KAFKA export's progress, read back from its progress topic.

The progress topic (one partition, compacted) holds one record per tick of each
export, keyed by the export's id: the frontier below which every change of the
shard is in the target topic, the version that wrote it, the target and the
form of its records. :func:`read_progress` finds the newest committed record of
an export, scanning back from the end of partition 0 in growing windows with a
``read_committed`` consumer. The semantics are the KAFKA export's module doc
(:mod:`timeshard.storage.kafka_export`, which "module doc" means below).

Invariants:

1. Only committed records are read: a progress record is visible with the
   changes of its transaction, or not at all.
2. A transaction still open hides what was committed after it: the read waits
   until every transaction open then has ended (after ending the export's own,
   ``end_own``), so an older progress is never taken for the newest.
3. A newer version's transaction in flight is never ended by a stale instance.
4. A partition's leader that answers no fetch for ``timeout_s`` is a silence
   (:class:`~timeshard.storage.kafka_silence.BrokerSilent`); a slow read that
   moves on is none.

What runs where: the driver reads the progress before it plans a tick (and, at
close, looks for a newer version's); the tick's task reads it again in its
transaction, after ``init_transactions``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from timeshard.errors import TimeshardError
from timeshard.storage.export import Progress
from timeshard.storage.kafka_client import _no_answer, _quiet_logger
from timeshard.storage.kafka_silence import BrokerSilent


def _consumer_conf(bootstrap: str, timeout_s: float) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": "timeshard-progress-reader",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "socket.timeout.ms": int(timeout_s * 1000),
        "logger": _quiet_logger(),
    }


def read_progress(
    conf: dict[str, Any],
    progress_topic: str,
    export_id: str,
    timeout_s: float,
    *,
    end_own: Callable[[], None] | None = None,
    version: int | None = None,
) -> Progress | None:
    """The newest committed progress record of ``export_id`` (scanning back from the end).

    A ``read_committed`` reader sees nothing past the first offset of a
    transaction still open (the *last stable offset*), and the topic is shared:
    another export's transaction left open (its process died between its
    progress record and its commit) would hide this export's progress committed
    after it, and the export would go on from an older one and write its
    changes again. So a read that finds the last stable offset below the high
    watermark (which the scan's fetches report) waits until every transaction
    open then has ended (the last stable offset reaches that high watermark),
    and raises TimeoutError (a fault, retried) after ``timeout_s``. ``end_own``
    is called before that wait: it ends a transaction the export itself left
    open (the driver's, before its task's ``init_transactions`` would), which
    nothing else ends before its ``transaction.timeout.ms`` -- unless the
    progress read so far is of a version newer than ``version`` (the caller's):
    the open transaction may be that newer version's, in flight, which a stale
    instance must not abort; it waits, and then learns it is fenced.

    Offsets or records the broker does not answer within ``timeout_s`` raise
    BrokerSilent (the export's silence; a transaction that stays open is no silence).
    """
    from confluent_kafka import Consumer

    consumer = Consumer(conf)
    try:
        low, stable = _watermarks(consumer, progress_topic, timeout_s)
        found = _scan(consumer, progress_topic, export_id, low, stable, timeout_s)
        high = _high_watermark(consumer, conf, progress_topic, timeout_s)
        if stable < high:
            newer = found is not None and _version_of(found[1]) > (version or 0)
            if end_own is not None and not newer:
                end_own()
            low, stable = _settled(consumer, progress_topic, high, timeout_s)
            found = _scan(consumer, progress_topic, export_id, low, stable, timeout_s)
        return None if found is None else _progress_of(progress_topic, export_id, *found)
    finally:
        consumer.close()


def _scan(
    consumer: Any,
    topic: str,
    export_id: str,
    low: int,
    end: int,
    timeout_s: float,
    *,
    until: float | None = None,
) -> tuple[int, bytes | None] | None:
    """The offset and value of ``export_id``'s last record in partition 0 below ``end``
    (None: it has none), read back from ``end`` in growing windows.

    Raises BrokerSilent if the position does not move for ``timeout_s``: the partition's
    leader answers none of the fetches. A slow read that moves on is no silence, however
    long its windows take; with ``until`` (monotonic), one still reading then raises
    TimeoutError (a close's scan, which its own bound ends).
    """
    from confluent_kafka import TopicPartition

    key = export_id.encode()
    window = 64
    while end > low:
        start = max(low, end - window)
        found: tuple[int, bytes | None] | None = None
        consumer.assign([TopicPartition(topic, 0, start)])
        position = start
        deadline = time.monotonic() + timeout_s
        while position < end:
            if until is not None and time.monotonic() > until:
                raise TimeoutError(
                    f"progress topic {topic!r}: the scan back for the last record of "
                    f"{export_id!r} was at offset {position} when its time was up"
                )
            # A short poll: the window ends with a transaction's commit marker, which is
            # never returned (a long poll waited its whole timeout there, every read).
            msg = consumer.poll(0.01)
            unanswered = msg is not None and msg.error() is not None and _no_answer(msg.error())
            if msg is None or unanswered:  # no record: the position and the deadline decide
                # Transaction markers hold offsets but are never returned: the
                # position moves past them.
                [tp] = consumer.position([TopicPartition(topic, 0)])
                if tp.offset > position:
                    position, deadline = tp.offset, time.monotonic() + timeout_s
                if position < end and time.monotonic() > deadline:
                    raise BrokerSilent(
                        f"progress topic {topic!r}: offset {position} not read, no fetch "
                        f"answered within {timeout_s} s"
                    )
                continue
            if msg.error() is not None:
                raise RuntimeError(f"progress topic {topic!r}: {msg.error()}")
            offset = msg.offset() or 0
            position, deadline = offset + 1, time.monotonic() + timeout_s
            if msg.key() == key and offset < end:
                found = (offset, msg.value())
        if found is not None:
            return found
        end, window = start, window * 4
    return None


def _version_of(value: bytes | None) -> int:
    """The version a progress record names (0 for a tombstone or a record it cannot read:
    :func:`_progress_of` reports that one)."""
    try:
        version = json.loads(value or b"{}").get("version", 0)
    except (ValueError, AttributeError):
        return 0
    return version if isinstance(version, int) else 0


def _progress_of(topic: str, export_id: str, offset: int, value: bytes | None) -> Progress | None:
    """The progress a record holds; None for a tombstone (the progress was deleted).

    Raises TimeshardError naming the record if it is no progress record.
    """
    if value is None:
        return None
    try:
        fields = json.loads(value)
        frontier, version = fields["frontier"], fields["version"]
        target, declared = fields.get("target"), fields.get("declared")
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in (frontier, version)):
            raise ValueError(f"frontier {frontier!r} and version {version!r} are no integers")
        if not isinstance(target, str | None) or not isinstance(declared, str | None):
            raise ValueError(f"target {target!r} or declared {declared!r} has the wrong type")
    except (ValueError, TypeError, KeyError) as e:  # JSONDecodeError is a ValueError
        raise TimeshardError(
            f"progress topic {topic!r}: the record of export {export_id!r} at offset {offset} "
            f"is not a progress record ({type(e).__name__}: {e}): {value[:200]!r}. To start "
            "over from the shard's since: stop the export, drop it (`timeshard drop "
            f"{export_id}`, or DROP SINK in timeshard serve: it releases the hold), delete that "
            "record with a tombstone (a null value) of its key in partition 0, and declare it "
            "again"
        ) from None
    return Progress(frontier, version, target, declared)


def _high_watermark(consumer: Any, conf: dict[str, Any], topic: str, timeout_s: float) -> int:
    """Partition 0's high watermark, open transactions included: as the last fetch of
    ``consumer`` (a scan's, after its last stable offset was read) reported it, else (it
    fetched nothing) as a ``read_uncommitted`` reader reads it."""
    from confluent_kafka import Consumer, TopicPartition

    _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), cached=True)
    if high >= 0:
        return int(high)
    uncommitted = Consumer({**conf, "isolation.level": "read_uncommitted"})
    try:
        return _watermarks(uncommitted, topic, timeout_s)[1]
    finally:
        uncommitted.close()


def _settled(consumer: Any, topic: str, high: int, timeout_s: float) -> tuple[int, int]:
    """Partition 0's low offset and last stable offset, once the latter is at least
    ``high`` (module doc of :func:`read_progress`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        low, stable = _watermarks(consumer, topic, timeout_s)
        if stable >= high:
            return low, stable
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"progress topic {topic!r}: a transaction open from offset {stable} (another "
                f"export's, whose process may have died before its commit) hides the progress "
                f"committed after it, up to offset {high}; it did not end within {timeout_s} s "
                "(it ends when its producer starts again, or after its transaction.timeout.ms)"
            )
        time.sleep(0.1)


def _watermarks(consumer: Any, topic: str, timeout_s: float) -> tuple[int, int]:
    """Partition 0's offsets; a topic just created may be unknown to the client briefly.

    Raises BrokerSilent if the broker does not answer within ``timeout_s``.
    """
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            marks = consumer.get_watermark_offsets(
                TopicPartition(topic, 0), timeout=timeout_s, cached=False
            )
        except KafkaException as e:
            if _no_answer(e.args[0]):
                raise BrokerSilent(
                    f"Kafka topic {topic!r} partition 0: offsets unavailable: {e.args[0]}"
                ) from None
            if e.args[0].code() != KafkaError._UNKNOWN_PARTITION or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
            continue
        if marks is None:
            raise BrokerSilent(f"Kafka topic {topic!r} partition 0: no answer within {timeout_s} s")
        return int(marks[0]), int(marks[1])


__all__ = ["read_progress"]
