"""What the KAFKA sources and exports share of their confluent-kafka clients.

The checks of the options that name a cluster, its topics and the clients'
``timeout_s``; the logger that keeps librdkafka's connection retries out of
stderr; and how a client's error tells a broker that did not answer (a
*silence*, :mod:`timeshard.storage.kafka_silence`, which is not asked again on
every tick) from one that answered with an error (an answer: asked again at the
next tick).

What runs where: the option checks run on the Spark driver, when a source or an
export is declared; the logger and the reading of errors serve every client,
the driver's (a source's consumer and admin client, an export's progress reads)
and the tasks' (an export's transactional producer and its progress read).
"""

from __future__ import annotations

import re
from typing import Any

from timeshard.errors import InvalidUsage

_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


def check_kafka_names(bootstrap_servers: Any, **topics: Any) -> None:
    """InvalidUsage naming a bad broker list, or a bad topic name (by its option's name)."""
    if not isinstance(bootstrap_servers, str) or not bootstrap_servers.strip():
        raise InvalidUsage(f"bootstrap_servers must be host:port[,...], got {bootstrap_servers!r}")
    for what, value in topics.items():
        if not isinstance(value, str) or not _TOPIC.fullmatch(value) or value in (".", ".."):
            raise InvalidUsage(
                f"{what} must be 1-249 of [A-Za-z0-9._-] and not '.' or '..', got {value!r}"
            )


#: The bounds of ``timeout_s``: librdkafka takes a ``socket.timeout.ms`` of 10 to 300000.
MIN_TIMEOUT_S, MAX_TIMEOUT_S = 0.01, 300.0


def check_timeout(timeout_s: Any) -> None:
    """InvalidUsage naming ``timeout_s`` unless it is a number of seconds within the
    bounds librdkafka takes (a KAFKA source's or export's option)."""
    if (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, int | float)
        or not MIN_TIMEOUT_S <= timeout_s <= MAX_TIMEOUT_S
    ):
        raise InvalidUsage(
            f"timeout_s must be a number of seconds from {MIN_TIMEOUT_S} to "
            f"{MAX_TIMEOUT_S:.0f} (the client's socket.timeout.ms bounds), got {timeout_s!r}"
        )


def _no_answer(error: Any) -> bool:
    """Whether a client's ``error`` (a KafkaError, if it is one) says the broker did not
    answer in time or could not be reached, rather than answering with an error."""
    from confluent_kafka import KafkaError

    silent = (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN)
    return isinstance(error, KafkaError) and error.code() in silent


def _quiet_logger() -> Any:
    """A logger for librdkafka that keeps its connection retries out of stderr (one
    logger, given its one handler once: every client asks for it, on the driver and in
    each task of a reused executor process)."""
    import logging

    logger = logging.getLogger("timeshard.kafka")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger


__all__ = ["MAX_TIMEOUT_S", "MIN_TIMEOUT_S", "check_kafka_names", "check_timeout"]
