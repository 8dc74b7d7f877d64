"""A broker's silence, as the KAFKA sources and exports that ask it know it (driver).

A broker that does not answer makes every ask wait the asker's whole timeout,
and the pipeline ticks its objects one after another: asked on every tick, one
down broker would hold up the freshness of all of them. So an object that met a
silence raises its fault again without asking until a pause has passed (none at
first, then 1 s, doubling up to 30 s), then probes the broker briefly; only a
broker that answers the probe is asked in full (:class:`BrokerSilence`). The
objects of one cluster share the last silence any of them met, so an outage's
first tick waits the whole timeout once per cluster, not once per object. A
consumer group's coordinator, asked without waiting (a source's commits), has a
:class:`Silence` of its own. The whole rule, as a user meets it, is in the
module docs of :mod:`timeshard.storage.kafka_source` (which "module doc" means
below) and :mod:`timeshard.storage.kafka_export`.

Invariants:

1. An answer that is an error (a topic that does not exist, a refusal) is no
   silence: it ends the pause (:meth:`Silence.answered`).
2. Each object's own silence stays its own: another object's answers end the
   cluster's shared record, never an object's own pauses.
3. The shared records are changed under one lock: serve ticks each object on a
   thread of its own.

Everything here runs on the Spark driver; tasks keep no silence (an export's
task that gets no answer reports status ``silent``, and its driver raises
:class:`BrokerSilent`).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from time import monotonic
from typing import Any, ClassVar, overload

from timeshard.errors import TimeshardError
from timeshard.storage.kafka_client import _no_answer

#: Guards the clusters' shared records (:class:`BrokerSilence`): serve ticks each of its
#: objects on a thread of its own.
_CLUSTERS_LOCK = threading.Lock()


class _ClusterSilence:
    """What the objects of one Kafka cluster know of its silence together: the fault of
    the last full ask of any of them that got no answer (None once any ask is answered),
    and when an object without a silence of its own may probe the cluster again
    (:class:`BrokerSilence`)."""

    def __init__(self, servers: str) -> None:
        self.servers = servers
        self.fault: str | None = None
        self.probe_at = 0.0  # monotonic
        self.pause_s = 0.0

    def pause(self) -> None:
        self.probe_at = monotonic() + self.pause_s
        self.pause_s = _doubled(self.pause_s)

    def clear(self) -> None:
        self.fault, self.pause_s = None, 0.0


def _not_asked(servers: str, heard: str) -> str:
    """The fault line of an object not asking its cluster because another object's ask of
    it got no answer (``heard``: that ask's fault)."""
    return (
        f"Kafka at {servers} is not asked in full until a probe finds it answering: "
        f"another object's ask of it got no answer ({heard})"
    )


def _doubled(pause_s: float) -> float:
    """The pause after ``pause_s`` (:class:`Silence`)."""
    return min(max(pause_s * 2, Silence.FIRST_PROBE_PAUSE_S), Silence.MAX_PROBE_PAUSE_S)


class Silence:
    """What an object knows of its own silence (driver): the fault of its last ask that
    got no answer, and the pause before it asks again.

    After a silence (:meth:`silent`) the pause is none at first, then
    :attr:`FIRST_PROBE_PAUSE_S`, doubling up to :attr:`MAX_PROBE_PAUSE_S`; it
    starts again from none once an ask is answered (:meth:`answered`). Alone, it
    is the silence of an ask that waits for nothing (a consumer group's
    asynchronous commit, whose own answer ends it: :meth:`paused`); a
    :class:`BrokerSilence` adds the probes and the record its cluster's objects
    share.
    """

    FIRST_PROBE_PAUSE_S = 1.0
    MAX_PROBE_PAUSE_S = 30.0

    def __init__(self, then: str) -> None:
        """``then``: what the fault line says of the asks after a silence."""
        #: What this object's fault line says of the asks after a silence.
        self.then = then
        #: The fault of this object's last ask that got no answer (None: answered last).
        self.fault: str | None = None
        self._probe_at = 0.0  # monotonic
        self._pause_s = 0.0

    def silent(self, fault: str) -> str:
        """Remember ``fault``, of an ask that got no answer in time, and return it with
        :attr:`then` (the line of the whole silence, which a health report keeps, says
        how the object asks meanwhile); the next pause doubles."""
        return f"{self._own_silence(fault)}{self.then}"

    def _own_silence(self, fault: str) -> str:
        """:meth:`silent` for this object alone: ``fault`` without :attr:`then`."""
        asked = fault.removesuffix(self.then)
        self.fault = f"{asked}{self.then}"
        self._probe_at = monotonic() + self._pause_s
        self._pause_s = _doubled(self._pause_s)
        return asked

    def paused(self) -> str | None:
        """The fault of this object's own silence while its pause lasts; None once it may
        ask again (or it met no silence). For an ask that waits for nothing (a group's
        asynchronous commit), whose own answer ends the silence (:meth:`answered`)."""
        if self.fault is not None and monotonic() < self._probe_at:
            return self.fault
        return None

    def answered(self) -> None:
        """An ask of this object was answered (an error or not): no silence, and its next
        starts from no pause."""
        self.fault, self._pause_s = None, 0.0


class BrokerSilence(Silence):
    """What an object knows of its Kafka broker's silence, and what the objects of its
    cluster know together (driver).

    A broker that does not answer makes every ask wait the asker's whole
    timeout, and the pipeline ticks its objects one after another on one
    thread: asked on every tick, one down broker would hold up the freshness of
    all of them. So after a silence (:meth:`silent`) the object raises the
    remembered fault again without asking until a pause has passed (none at
    first, then :attr:`FIRST_PROBE_PAUSE_S`, doubling up to
    :attr:`MAX_PROBE_PAUSE_S`), then probes the broker for at most
    :attr:`PROBE_TIMEOUT_S` (:meth:`probe`); only a broker that answers the
    probe is asked in full. At the cap, every :attr:`FULL_PROBE_EVERY`-th probe
    waits the asker's whole timeout, so a broker that answers, but slower than
    a probe waits, is read again too. The pause starts again from none once the
    broker answers a full ask of this object (:meth:`answered`). An answer that
    is an error (a topic that does not exist) is no silence.

    The objects of one cluster (their ``bootstrap_servers``, in any order,
    case or spacing) share a second, coarser record: the last silence any of
    them met, until any ask of theirs is answered. An object whose own asks
    were answered, but whose cluster another found silent, probes it first
    (at most once per the shared pause, for all of them) instead of asking in
    full: an outage's first tick waits the whole timeout once, not once per
    object. Its fault line then says it was not asked, and why; a probe that
    gets no answer makes the silence its own (its own pauses and full
    probes). Each object's own silence stays its own: in a partial outage (one
    partition's leader down) another object's answers end the shared record
    but not the silence of the object whose leader is down, which keeps its
    own pauses. Serve ticks its objects on threads of their own: the shared
    records are changed under a lock.
    """

    PROBE_TIMEOUT_S = 1.0
    FULL_PROBE_EVERY = 10
    #: What a silence's fault line says of the asks after the one that got no answer.
    THEN = (
        f"; asked again in full once a probe of at most {PROBE_TIMEOUT_S:g} s finds it "
        f"answering (the first at the next tick, then {Silence.FIRST_PROBE_PAUSE_S:g} s "
        f"apart, twice as far each time, up to {Silence.MAX_PROBE_PAUSE_S:g} s)"
    )

    #: The shared record of each cluster an open object asks.
    _clusters: ClassVar[weakref.WeakValueDictionary[str, _ClusterSilence]] = (
        weakref.WeakValueDictionary()
    )

    def __init__(self, bootstrap_servers: str = "") -> None:
        super().__init__(self.THEN)
        servers = ",".join(sorted({s.strip().lower() for s in bootstrap_servers.split(",")} - {""}))
        with _CLUSTERS_LOCK:
            cluster = self._clusters.get(servers)
            if cluster is None:
                cluster = _ClusterSilence(servers)
                self._clusters[servers] = cluster
        #: The cluster's shared record (held: it is forgotten once no object holds it).
        self.cluster = cluster
        self._probes_at_cap = 0
        #: Since when (monotonic) the cluster's record has kept this object from asking.
        self._not_asked_since: float | None = None

    def probe(self, ask: Callable[[float], object], timeout_s: float) -> str | None:
        """None if the broker may be asked in full; else the fault to raise. After this
        object's pause (or the cluster's, if only another object met the silence),
        calls ``ask(timeout)`` (a metadata request, which raises KafkaException if the
        broker does not answer within ``timeout``): an answer ends the silence (and the
        cluster's record), none starts the next, doubled, pause."""
        from confluent_kafka import KafkaException

        if self.fault is None:
            return self._probe_cluster(ask, timeout_s)
        if monotonic() < self._probe_at:
            return self.fault
        timeout = min(timeout_s, self.PROBE_TIMEOUT_S)
        if self._pause_s >= self.MAX_PROBE_PAUSE_S:
            self._probes_at_cap += 1
            if self._probes_at_cap % self.FULL_PROBE_EVERY == 0:
                timeout = timeout_s
        try:
            ask(timeout)
        except KafkaException as e:
            if not _no_answer(e.args[0] if e.args else e):
                raise  # an answer, an error (a bad configuration): not a silence
            # This object's own: the cluster's record is left as it is (an object that
            # just read the cluster, slower than a probe waits, cleared it for the others).
            self._own_silence(self.fault)
            return self.fault
        self.fault = None
        with _CLUSTERS_LOCK:
            self.cluster.clear()
        return None

    def _probe_cluster(self, ask: Callable[[float], object], timeout_s: float) -> str | None:
        """:meth:`probe` of an object whose own asks were answered: a short probe if
        another object of the cluster met a silence since any ask was answered."""
        from confluent_kafka import KafkaException

        with _CLUSTERS_LOCK:
            cluster = self.cluster
            heard, due = cluster.fault, monotonic() >= cluster.probe_at
        if heard is None:
            self._not_asked_since = None
            return None
        line = _not_asked(cluster.servers, heard)
        now = monotonic()
        if self._not_asked_since is None:
            self._not_asked_since = now
        if not due and now - self._not_asked_since < self.MAX_PROBE_PAUSE_S:
            # Another object met the silence within the shared pause. Not for longer than
            # the longest pause: objects whose own asks keep getting no answer (a timeout
            # shorter than the cluster answers in) push the shared pause on for ever.
            return line
        self._not_asked_since = None
        try:
            ask(min(timeout_s, self.PROBE_TIMEOUT_S))
        except KafkaException as e:
            if not _no_answer(e.args[0] if e.args else e):
                raise  # an answer, an error (a bad configuration): not a silence
            # The silence is this object's own from now on: its own pauses, and its own
            # probes that wait the whole timeout at the cap (a cluster slower than a
            # short probe is read again).
            self._own_silence(line)
            with _CLUSTERS_LOCK:
                cluster.pause()  # the next object's probe waits the shared pause
            return self.fault
        with _CLUSTERS_LOCK:
            cluster.clear()
        return None

    def silent(self, fault: str) -> str:
        """Remember ``fault``, of an ask the broker did not answer in time, and return it
        with what follows (:attr:`then`: the line of the whole silence, which a health
        report keeps, says how the broker is asked meanwhile, not only how the first ask
        waited): this object does not ask again before its pause has passed, which
        doubles after each silence, and the cluster's other objects probe before they
        ask."""
        asked = self._own_silence(fault)
        with _CLUSTERS_LOCK:
            self.cluster.fault = asked
            self.cluster.pause()
        return f"{asked}{self.then}"

    def known(self) -> str | None:
        """The fault of a silence this object knows of, its own or its cluster's, without
        asking (None: none known). For an ask that may wait for an answer it can do
        without (a report), made only when no silence is known."""
        if self.fault is not None:
            return self.fault
        with _CLUSTERS_LOCK:
            heard = self.cluster.fault
        return None if heard is None else _not_asked(self.cluster.servers, heard)

    def answered(self) -> None:
        """The broker answered a full ask of this object (an error or not): no silence, its
        next starts from no pause, and the cluster answers (its shared record ends)."""
        super().answered()
        self._probes_at_cap = 0
        with _CLUSTERS_LOCK:
            self.cluster.clear()


class SharedSilence:
    """A KAFKA source's or export's :class:`BrokerSilence` (a descriptor): made for its
    ``bootstrap_servers`` at first use, so that building the object asks nothing of the
    cluster's records; ``del obj._silence`` forgets it when the object closes, and the
    cluster's shared record is forgotten once no open object holds it."""

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> SharedSilence: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> BrokerSilence: ...
    def __get__(self, obj: Any, owner: type | None = None) -> SharedSilence | BrokerSilence:
        if obj is None:  # looked up on the class
            return self
        silence: BrokerSilence | None = obj.__dict__.get("_shared_silence")
        if silence is None:
            silence = obj.__dict__["_shared_silence"] = BrokerSilence(obj.bootstrap_servers)
        return silence

    def __delete__(self, obj: Any) -> None:
        obj.__dict__.pop("_shared_silence", None)


class BrokerSilent(TimeshardError):
    """The broker did not answer the driver in time (a fault;
    :class:`~timeshard.storage.kafka_export.KafkaExport` does not ask it again before a
    probe finds it answering)."""


__all__ = ["BrokerSilence", "BrokerSilent", "SharedSilence", "Silence"]
