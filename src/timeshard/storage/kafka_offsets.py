"""What a KAFKA source asks its broker of its topic: partitions, offsets and id (driver).

:class:`TopicOffsets` is the part of
:class:`~timeshard.storage.kafka_source.KafkaSource` that reads the topic's
metadata and offsets with confluent-kafka: ``upper`` (each partition's *last
stable offset*, ``read_committed``), the offsets retention still holds (a read's
range must start at or after them), and the topic's id (Kafka's topic UUID),
which holds the source to the topic whose offsets it binds (``pin_recorded``,
``find_topic_id``). It owns the source's clients: the consumer and the admin
client are made at the first ask, and a closed source asks nothing more. The
semantics are the KAFKA source's module doc (:mod:`timeshard.storage.kafka_source`,
which "module doc" means below).

Invariants:

1. Offsets of another topic id are never bound: once the topic has another id
   than the one recorded (or found first), ``upper`` raises SourceUnavailable,
   definite.
2. Offsets that retention deleted before they were read are never skipped: the
   read raises SourceUnavailable, definite.
3. A broker that did not answer is asked again only once a probe finds it
   answering (:class:`~timeshard.storage.kafka_silence.BrokerSilence`).

Everything here runs on the Spark driver: the tasks fetch the records with
Spark's own Kafka reader, never with these clients.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from timeshard.errors import InvalidUsage, SourceUnavailable
from timeshard.storage.kafka_client import _no_answer, _quiet_logger
from timeshard.storage.kafka_silence import SharedSilence
from timeshard.storage.reclock import SourceFrontier


class TopicOffsets:
    """The topic's partitions, offsets and id, as a KAFKA source asks its broker for them
    (the module doc of :mod:`timeshard.storage.kafka_offsets`); a base of
    :class:`~timeshard.storage.kafka_source.KafkaSource`, which sets the attributes
    declared here."""

    name: str
    bootstrap_servers: str
    topic: str
    group_id: str
    timeout_s: float
    _client: Any
    _admin: Any
    _topic_id: str | None
    _other_topic_id: str | None
    #: The consumer's ``on_commit`` (:class:`~timeshard.storage.kafka_commit.GroupCommits`).
    _commit_answers: Callable[[Any, Any], None]
    _closed: bool

    def upper(self) -> SourceFrontier:
        """Each partition's last stable offset (read_committed), from the broker.

        Raises SourceUnavailable (definite) if the topic is not the one whose
        offsets this source binds (:meth:`_check_same_topic`). After the broker
        did not answer, raises its fault again without asking it until a short
        probe finds it answering (:meth:`_probe`). An ask the broker answered
        with an error (a topic that does not exist, a refusal) starts the pause
        anew, as a whole answer does: a later silence's first probe comes at once.
        InvalidUsage after :meth:`close`.
        """
        self._refuse_if_closed("upper")
        self._probe()
        try:
            partitions = self._partitions()
            self._check_same_topic()
            upper = {str(p): hi for p, (_, hi) in self._watermarks(partitions).items()}
        except SourceUnavailable:
            # Every ask that got no answer made it this source's silence (_silent); any other
            # fault here is an error the broker answered with.
            if self._silence.fault is None:
                self._silence.answered()
            raise
        # It answered in full (metadata alone is not enough: a partition's leader may be
        # the silent one): a silence starts anew.
        self._silence.answered()
        return upper

    @property
    def topic_id(self) -> str | None:
        """The id of the topic whose offsets this source binds (module doc): the one the
        catalog recorded (:meth:`pin_recorded`), else the first one found; None while none
        is known, and with a broker that has no topic ids."""
        return self._topic_id

    def find_topic_id(self) -> str | None:
        """:attr:`topic_id`, asking the broker first if none is known yet (driver).

        For the catalog, which records it when the ingestion is built, before the
        source binds any offset. None if the broker cannot tell now (unreachable,
        the topic not created yet: then ``upper`` stalls) or has no topic ids.
        InvalidUsage after :meth:`close`.
        """
        self._refuse_if_closed("find_topic_id")
        if self._topic_id is None:
            with contextlib.suppress(SourceUnavailable):
                self._topic_id = self._current_topic_id()
        return self._topic_id

    def pin_recorded(self, options: Mapping[str, Any]) -> None:
        """Hold the source to the topic id the catalog recorded (``options["topic_id"]``),
        not the one its topic has now.

        Built again after the topic was deleted and made again under its name
        while no process ran, the source would otherwise take the new topic's id
        for its own and read it on from the old topic's offsets. Pinned, its
        ``upper`` raises SourceUnavailable (definite), as it does when the id
        changes while it runs. A record without an id (made before ids were
        recorded, or when the broker could not tell) pins nothing: the source
        takes the id it finds, which the catalog records then.
        """
        recorded = options.get("topic_id")
        if options.get("topic") != self.topic:  # redeclared on another topic before it bound
            return  # any offset (see check_redeclared): the recorded id is the old topic's
        if isinstance(recorded, str) and recorded:
            self._topic_id = recorded

    def _refuse_if_closed(self, what: str) -> None:
        """InvalidUsage naming ``what`` if the source is closed: an ask after :meth:`close`
        would make a client again (the closed ones are dropped), which nothing closes."""
        if self._closed:
            raise InvalidUsage(
                f"KAFKA source {self.name!r} is closed: {what} asks its broker, and a closed "
                "source asks nothing (build the source again to read it)"
            )

    # -- the broker, on the driver ---------------------------------------------------------

    def _consumer(self) -> Any:
        """The source's consumer, made at the first ask (driver).

        It never subscribes to its group (it only asks metadata, offsets and
        commits), so it joins no group and the broker's bounds on a member's
        session do not apply: its ``session.timeout.ms`` only bounds how long the
        client holds a commit for want of a coordinator before it answers
        ``_WAIT_COORD``, which its close waits for. It is the source's timeout, the
        wait after which a commit is judged unanswered (:meth:`commit`), so a
        close takes no longer than the source's timeout allows
        (:meth:`_commit_at_close`); librdkafka's default is 45 s.
        """
        from confluent_kafka import Consumer

        if self._client is None:
            assert not self._closed, f"KAFKA source {self.name!r}: a consumer made after close"
            self._client = Consumer(
                {
                    "bootstrap.servers": self.bootstrap_servers,
                    "group.id": self.group_id,
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "socket.timeout.ms": int(self.timeout_s * 1000),
                    "session.timeout.ms": int(self.timeout_s * 1000),
                    "logger": _quiet_logger(),
                    "on_commit": self._commit_answers,
                }
            )
        return self._client

    #: What the source knows of its broker's silence, and its cluster's (:meth:`_probe`).
    _silence = SharedSilence()

    def _probe(self) -> None:
        """Return at once if the broker answered last; else raise its fault again (the
        same message: the health does not change) until a probe of the topic's metadata
        finds it answering (:meth:`BrokerSilence.probe`), and the caller asks in full.

        A broker that is down would otherwise hold every tick up for the source's
        whole timeout (each ask waits for it), and with it the pipeline's other
        objects, which tick after the source on the same thread.
        """
        fault = self._silence.probe(
            lambda timeout: self._consumer().list_topics(self.topic, timeout=timeout),
            self.timeout_s,
        )
        if fault is not None:
            raise SourceUnavailable(fault)

    def _silent(self, fault: str) -> SourceUnavailable:
        """The fault of a broker that did not answer in time, remembered so that it is not
        asked again before its probe (:meth:`BrokerSilence.silent`)."""
        return SourceUnavailable(self._silence.silent(fault))

    def _partitions(self) -> list[int]:
        from confluent_kafka import KafkaError, KafkaException

        try:
            meta = self._consumer().list_topics(self.topic, timeout=self.timeout_s)
        except KafkaException as e:
            error = e.args[0] if e.args else e
            if not _no_answer(error):  # an answer, or the client's refusal of its settings
                raise SourceUnavailable(
                    f"Kafka at {self.bootstrap_servers}: the metadata of topic {self.topic!r} "
                    f"cannot be read: {error}"
                ) from None
            raise self._silent(
                f"Kafka at {self.bootstrap_servers} is unreachable: {error}"
            ) from None
        topic = meta.topics.get(self.topic)
        if topic is None or topic.error is not None:
            code = topic.error.code() if topic is not None and topic.error is not None else None
            if code == KafkaError.UNKNOWN_TOPIC_OR_PART or topic is None:
                raise SourceUnavailable(
                    f"Kafka topic {self.topic!r} does not exist on {self.bootstrap_servers} "
                    "(deleted, or not created yet)"
                )
            raise SourceUnavailable(f"Kafka topic {self.topic!r}: {topic.error}")
        return sorted(topic.partitions)

    def _check_same_topic(self) -> None:
        """Raise (definite) if the topic now has another id than :attr:`topic_id` (the
        one recorded, else the one found first).

        A topic deleted and made again under its name starts its offsets at
        0 again: the offsets bound are the old topic's, and reading on from
        them would skip the new topic's first records (or read them as the
        old ones, once it holds as many). So does a topic of the same name on
        another cluster (``bootstrap_servers`` changed to its brokers): its
        offsets are its own. The message names both causes, both ids, and
        what to do: a source of another name binds the topic's offsets anew.
        Its first clause (up to ``;``) is what ``timeshard verify`` notes. A
        broker that has no topic ids (an all-zero id) is not checked.
        """
        found = self._current_topic_id()
        if found is None:
            return
        if self._topic_id is None:
            self._topic_id = found
        self._other_topic_id = found if found != self._topic_id else None
        if self._other_topic_id is not None:
            raise SourceUnavailable(
                f"Kafka topic {self.topic!r} at {self.bootstrap_servers} has id {found}, not "
                f"{self._topic_id}, the id of the topic whose offsets the source bound: "
                "bootstrap_servers name another cluster (a topic of one name has an id on "
                "each cluster), or the topic was deleted and made again, and the offsets "
                "bound mean other records in this one, so nothing is read; to read this "
                "topic, declare it as a source of another name (it binds offsets anew), or "
                "set bootstrap_servers back to brokers of the cluster of the bound topic",
                definite=True,
            )

    def _current_topic_id(self) -> str | None:
        """The topic's id (base64), None if the broker has none for it (driver)."""
        from concurrent.futures import TimeoutError as FutureTimeout

        from confluent_kafka import KafkaError, KafkaException, TopicCollection
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            assert not self._closed, f"KAFKA source {self.name!r}: an admin made after close"
            self._admin = AdminClient(
                {
                    "bootstrap.servers": self.bootstrap_servers,
                    "socket.timeout.ms": int(self.timeout_s * 1000),
                    "logger": _quiet_logger(),
                }
            )
        try:
            futures = self._admin.describe_topics(
                TopicCollection([self.topic]), request_timeout=self.timeout_s
            )
            described = futures[self.topic].result(self.timeout_s)
        except KafkaException as e:
            error = e.args[0]
            if isinstance(error, KafkaError) and error.code() in (
                KafkaError.UNKNOWN_TOPIC_OR_PART,
                KafkaError.UNKNOWN_TOPIC_ID,
            ):
                raise SourceUnavailable(
                    f"Kafka topic {self.topic!r} does not exist on {self.bootstrap_servers} "
                    "(deleted, or not created yet)"
                ) from None
            fault = f"Kafka topic {self.topic!r}: its id is unavailable: {error}"
            if _no_answer(error):
                raise self._silent(fault) from None
            raise SourceUnavailable(fault) from None
        except FutureTimeout:
            raise self._silent(
                f"Kafka topic {self.topic!r}: no answer from {self.bootstrap_servers} "
                f"within {self.timeout_s} s"
            ) from None
        topic_id = described.topic_id
        if topic_id is None or (
            topic_id.get_most_significant_bits() == 0 and topic_id.get_least_significant_bits() == 0
        ):
            return None
        return str(topic_id)

    def _watermarks(self, partitions: Sequence[int]) -> dict[int, tuple[int, int]]:
        """``(low, last stable offset)`` of each partition."""
        from confluent_kafka import KafkaException, TopicPartition

        out = {}
        for p in partitions:
            try:
                out[p] = self._consumer().get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=self.timeout_s, cached=False
                )
            except KafkaException as e:
                fault = (
                    f"Kafka topic {self.topic!r} partition {p}: offsets unavailable: {e.args[0]}"
                )
                if _no_answer(e.args[0]):
                    raise self._silent(fault) from None
                raise SourceUnavailable(fault) from None
            if out[p] is None:
                raise self._silent(
                    f"Kafka topic {self.topic!r} partition {p}: no answer from "
                    f"{self.bootstrap_servers} within {self.timeout_s} s"
                )
        return out

    def _check_retained(self, ranges: dict[int, tuple[int, int]]) -> None:
        """Raise (definite) if the log no longer holds the start of a range."""
        marks = self._watermarks(sorted(ranges))
        lost = {p: (lo, marks[p][0]) for p, (lo, _) in ranges.items() if marks[p][0] > lo}
        if lost:
            detail = ", ".join(
                f"partition {p} [{lo}, {low})" for p, (lo, low) in sorted(lost.items())
            )
            raise SourceUnavailable(
                f"Kafka topic {self.topic!r}: retention deleted offsets before they were read "
                f"({detail}); data is lost, the source cannot go on without it",
                definite=True,
            )


__all__ = ["TopicOffsets"]
