"""The Kafka topics of a KAFKA export, as its driver asks the cluster for them.

:func:`ensure_topic` makes the progress topic if it is missing (one partition,
compacted); :func:`topic_config` reads a topic's configuration, defaults
included, from which the export checks the progress topic's ``cleanup.policy``
and bounds each record by the target's ``max.message.bytes``
(:func:`topic_max_bytes`). The semantics are the KAFKA export's module doc
(:mod:`timeshard.storage.kafka_export`).

Invariants:

1. A broker that does not answer within ``timeout_s`` raises
   :class:`~timeshard.storage.kafka_silence.BrokerSilent` (a silence).
2. A refusal, or a topic that does not exist, is the broker's answer, never a
   silence.

Everything here runs on the Spark driver.
"""

from __future__ import annotations

import time
from typing import Any

from timeshard.errors import TimeshardError
from timeshard.storage.kafka_client import _no_answer, _quiet_logger
from timeshard.storage.kafka_silence import BrokerSilent


def ensure_topic(bootstrap: str, topic: str, timeout_s: float) -> None:
    """Create the progress topic (one partition, compacted) unless it exists.

    Raises BrokerSilent if the broker does not answer within ``timeout_s``: its
    metadata, or the creation (the cluster's controller). A refusal (authorization,
    a bad configuration) is the broker's answer: raised as it is.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _quiet_logger()})

    def metadata(named: str | None) -> Any:
        try:
            return admin.list_topics(named, timeout=timeout_s)
        except KafkaException as e:
            if _no_answer(e.args[0]):
                raise BrokerSilent(f"Kafka at {bootstrap} is unreachable: {e.args[0]}") from None
            raise

    meta = metadata(None)
    if topic in meta.topics and meta.topics[topic].error is None:
        return
    new = NewTopic(topic, num_partitions=1, config={"cleanup.policy": "compact"})
    try:
        admin.create_topics([new])[topic].result(timeout_s)
    except KafkaException as e:
        if _no_answer(e.args[0]):
            raise BrokerSilent(
                f"Kafka at {bootstrap}: creating topic {topic!r} got no answer: {e.args[0]}"
            ) from None
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise  # a refusal (authorization, configuration): the broker's answer
    except TimeoutError:  # the future's (concurrent.futures.TimeoutError is this one)
        raise BrokerSilent(
            f"Kafka at {bootstrap}: creating topic {topic!r} got no answer within {timeout_s} s"
        ) from None
    # Created is not yet known to every client: wait until the metadata has its partition.
    deadline = time.monotonic() + timeout_s
    while True:
        found = metadata(topic).topics.get(topic)
        if found is not None and found.error is None and found.partitions:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"topic {topic!r} was created but has no partition after {timeout_s} s"
            )
        time.sleep(0.1)


def topic_max_bytes(bootstrap: str, topic: str, timeout_s: float) -> int:
    """The largest record batch ``topic`` takes: its ``max.message.bytes`` (driver).

    Raises TimeshardError (a fault: the next tick asks again) if the topic does
    not exist or the broker does not answer.
    """
    value = topic_config(bootstrap, topic, timeout_s).get("max.message.bytes")
    if value is None:
        raise TimeshardError(f"Kafka topic {topic!r} reports no max.message.bytes")
    return int(value)


def topic_config(bootstrap: str, topic: str, timeout_s: float) -> dict[str, str]:
    """The configuration of ``topic``, defaults included (driver).

    Raises TimeshardError (a fault) if the topic does not exist, BrokerSilent
    if the broker does not answer within ``timeout_s``.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _quiet_logger()})
    resource = ConfigResource("topic", topic)
    try:
        futures = admin.describe_configs([resource], request_timeout=timeout_s)
        entries = futures[resource].result(timeout_s)
    except KafkaException as e:
        error = e.args[0] if e.args else e
        if getattr(error, "code", lambda: None)() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise TimeshardError(
                f"Kafka topic {topic!r} does not exist on {bootstrap}: create it (the export "
                "writes to it, and tries again at the next tick)"
            ) from None
        fault = f"Kafka at {bootstrap}: the configuration of topic {topic!r} cannot be read"
        fault = f"{fault}: {error}"
        raise (BrokerSilent if _no_answer(error) else TimeshardError)(fault) from None
    except Exception as e:  # a timeout of the future (no answer), or another failure
        raise (BrokerSilent if isinstance(e, TimeoutError) else TimeshardError)(
            f"Kafka at {bootstrap}: the configuration of topic {topic!r} cannot be read: "
            f"{type(e).__name__}: {e}"
        ) from None
    return {name: entry.value for name, entry in entries.items() if entry.value is not None}


__all__ = ["ensure_topic", "topic_config", "topic_max_bytes"]
