"""A KAFKA source's commits to its consumer group, and its close (driver).

After each durable tick the source commits its resumption frontier to the
consumer group ``group_id``, so that Kafka's lag tools see how far it is. The
group is only a report: the source resumes from its remap shard, never from the
group. :class:`GroupCommits` asks each commit asynchronously (a tick never waits
on the group's coordinator), one at a time, reads its answer at the next
commit, and counts a commit unanswered past the source's timeout as the
coordinator's silence (a :class:`~timeshard.storage.kafka_silence.Silence` of
its own). Its ``close`` commits the offsets not committed yet, waits for the
answers within the source's timeout, then closes the clients. The semantics are
the KAFKA source's module doc (:mod:`timeshard.storage.kafka_source`, which
"module doc" means below).

Invariants:

1. At most one commit is in flight: every answer read is that of the one in
   flight (one unanswered for good is forgotten after
   :attr:`GroupCommits.COMMIT_LOST_AFTER_S` past the client's own bound).
2. Offsets stay to commit until a commit of them is answered without error.
3. Close raises nothing a commit meets: offsets left uncommitted are logged.
4. A closed source asks nothing more.

Everything here runs on the Spark driver: the consumer's ``on_commit`` runs in
its ``poll``, on the driver's thread.
"""

from __future__ import annotations

import logging
from time import monotonic
from typing import Any

from timeshard.errors import SourceUnavailable
from timeshard.storage.kafka_client import _no_answer
from timeshard.storage.kafka_offsets import TopicOffsets
from timeshard.storage.kafka_silence import Silence
from timeshard.storage.reclock import SourceFrontier

#: The KAFKA source's logger: the commits' warnings are the source's.
log = logging.getLogger("timeshard.storage.kafka_source")


class _CommitAnswers:
    """A KAFKA source's consumer's ``on_commit``: keeps the answer of each group commit
    for the source to read (:meth:`KafkaSource.commit`). Run by ``poll`` on the driver.

    It holds the answers only, not the source: a bound method of the source would make
    a cycle (source -> consumer -> callback -> source), and a source dropped without
    close, with its consumer's threads, would wait for the cycle collector.
    """

    __slots__ = ("_answers",)

    def __init__(self) -> None:
        self._answers: list[tuple[Any, list[Any]]] = []

    def __call__(self, error: Any, partitions: Any) -> None:
        self._answers.append((error, list(partitions or ())))

    def take(self) -> list[tuple[Any, list[Any]]]:
        """The answers kept since the last take, oldest first."""
        answers, self._answers = self._answers, []
        return answers


class GroupCommits(TopicOffsets):
    """The commits of a KAFKA source to its consumer group, and its close (the module doc
    of :mod:`timeshard.storage.kafka_commit`); a base of
    :class:`~timeshard.storage.kafka_source.KafkaSource`, which sets the attributes
    declared here."""

    _uncommitted: dict[str, int]
    _commit_silence: Silence
    _commits_asked: int
    _commits_answered: int
    _commit_awaited: bool
    _commit_asked_at: float
    _commit_answers: _CommitAnswers

    #: What the fault line of the group coordinator's silence says of the commits after it.
    COMMIT_THEN = (
        f"; the group's next commit is asked after a pause (the first at the next tick, "
        f"then {Silence.FIRST_PROBE_PAUSE_S:g} s apart, twice as far each time, up "
        f"to {Silence.MAX_PROBE_PAUSE_S:g} s), not before the one in flight is "
        f"answered, and waited for by no tick"
    )
    #: How many of the source's timeouts the client may take to answer a commit
    #: (librdkafka): it sends a commit three times at most (a request is retried twice),
    #: each send waiting its ``socket.timeout.ms``; a round of sends that ends for want of
    #: a coordinator (a transport error, ``NOT_COORDINATOR``) holds the commit for its
    #: ``session.timeout.ms`` once, then sends it three times more. Both are the source's
    #: timeout (:meth:`_consumer`): seven at most. Besides, it waits 1 s at most before
    #: each retry and finds a held commit's time up within 1 s: a few seconds.
    COMMIT_ANSWER_TIMEOUTS = 7
    #: How long (s) past :attr:`COMMIT_ANSWER_TIMEOUTS` timeouts a commit may stay
    #: unanswered before it is forgotten (never to be answered): the client's own 3 s ten
    #: times over. A commit forgotten while the client may still answer it lets a second
    #: one be asked beside it, whose answer is then taken for the first's.
    COMMIT_LOST_AFTER_S = 30.0

    def commit(self, frontier: SourceFrontier) -> None:
        """Commit ``frontier`` (the resumption frontier) to the consumer group, without
        waiting for the coordinator: the commit is asynchronous, and the next commit
        (the next tick's) reads its answer.

        The offsets stay to commit until a commit of them is answered: the next
        commit commits them with its own (the furthest of each partition). Each
        commit first serves the client's answers (``poll(0)``, which runs the
        consumer's ``on_commit``, :class:`_CommitAnswers`). One commit is in
        flight at a time: while it has no answer, a commit asks nothing, and it is
        judged silent only once unanswered past ``timeout_s`` (a slow coordinator
        is not a silent one, and ticks may come faster than its answers). The latest commit's
        answer decides: a success ends the group's silence; an error the
        coordinator answered with starts the pause anew and is raised, after the
        commit is asked again; a commit answered with the client's own timeout,
        or with no answer after ``timeout_s``, is the silence of the group's
        coordinator. That silence is a :class:`Silence` of its own (the
        coordinator may be the only silent broker: the source's reads answered).
        The commits after it raise its fault without asking until its pause has
        passed, then ask again: the commit itself is the probe, and waits for
        nothing; the fault stays raised while it is in flight, and only an answer
        ends the silence (a late success, of a commit already judged unanswered,
        too). No commit is asked while an earlier one is unanswered, even one
        judged silent (the client answers each within :attr:`COMMIT_ANSWER_TIMEOUTS`
        timeouts; one unanswered for :attr:`COMMIT_LOST_AFTER_S` more is
        forgotten), so every answer is that of the one in flight. An answer of
        ``_WAIT_COORD`` (the client held the commit for want of a coordinator) is
        no answer.

        While the source knows its cluster is silent (its own silence, or one
        another object of the cluster met: :meth:`BrokerSilence.known`), nothing
        is asked: it raises SourceUnavailable with the silence's line, as
        ``upper`` does, and keeps the offsets. InvalidUsage after :meth:`close`.
        """
        from confluent_kafka import KafkaException, TopicPartition

        self._refuse_if_closed("commit")
        wanted = dict(self._uncommitted)
        for p, o in frontier.items():
            wanted[p] = max(o, wanted.get(p, o))
        self._uncommitted = wanted
        if not wanted:
            return
        known = self._silence.known()
        if known is not None:
            raise SourceUnavailable(known)
        consumer, silence = self._consumer(), self._commit_silence
        failed = (
            f"Kafka at {self.bootstrap_servers}: committing offsets of group "
            f"{self.group_id!r} failed"
        )
        offsets = [TopicPartition(self.topic, int(p), o) for p, o in sorted(wanted.items())]
        refused = self._judge_commits(consumer, failed)
        if self._commits_asked > self._commits_answered:  # one in flight, maybe judged
            if silence.fault is not None:  # a silence lasts until a commit is answered
                raise SourceUnavailable(silence.fault)
            return  # these offsets go with the next commit
        paused = silence.paused()
        if paused is not None:
            raise SourceUnavailable(paused)
        try:
            consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException as e:  # the client refused the commit at once
            error = e.args[0] if e.args else e
            if _no_answer(error):
                raise SourceUnavailable(silence.silent(f"{failed}: {error}")) from None
            silence.answered()  # an answer, an error: the pause starts anew
            raise SourceUnavailable(f"{failed}: {error}") from None
        self._commit_asked_at = monotonic()
        self._commits_asked += 1
        self._commit_awaited = True
        if refused is not None:
            raise SourceUnavailable(refused)
        if silence.fault is not None:  # asked after a silence: it lasts until answered
            raise SourceUnavailable(silence.fault)

    def _judge_commits(self, consumer: Any, failed: str) -> str | None:
        """Read the answers of the commits asked so far (:meth:`commit`): the fault of an
        error the coordinator answered the latest commit with (the commit is asked
        again, then it is raised); raises SourceUnavailable if the latest commit got no
        answer within ``timeout_s``, which is the group's silence (one younger stays in
        flight: ``_commit_awaited``). Offsets a success committed are dropped from
        those to commit."""
        silence = self._commit_silence
        if self._commits_asked > self._commits_answered:
            consumer.poll(0)  # runs on_commit for the answers come so far
        answers = self._commit_answers.take()
        refused = unanswered = None
        for error, partitions in answers:
            # The one commit in flight's (the latest's, unless already judged silent).
            latest, self._commit_awaited = self._commit_awaited, False
            error = self._answer(error, partitions)
            if error is None or not latest:
                continue  # committed, or a commit already judged (its silence counted then)
            if _no_answer(error) or _waits_for_coordinator(error):
                unanswered = f"{failed}: {error}"  # the client's own timeout
            else:
                silence.answered()  # an answer, an error: the pause starts anew
                refused = f"{failed}: {error}"
        waited = monotonic() - self._commit_asked_at
        if self._commit_awaited and waited > self.timeout_s:
            self._commit_awaited = False
            unanswered = f"{failed}: the coordinator did not answer within {self.timeout_s} s"
        lost_after = self.COMMIT_ANSWER_TIMEOUTS * self.timeout_s + self.COMMIT_LOST_AFTER_S
        if self._commits_asked > self._commits_answered and waited > lost_after:
            self._commits_answered = self._commits_asked  # never to be answered: forgotten
        if unanswered is not None:
            raise SourceUnavailable(silence.silent(unanswered))
        return refused

    def _committed(self, partitions: Any) -> None:
        """Drop from the offsets to commit those a commit answered without error committed
        (a newer offset of a partition stays to commit)."""
        for tp in partitions:
            p = str(tp.partition)
            if p in self._uncommitted and self._uncommitted[p] <= tp.offset:
                del self._uncommitted[p]

    #: How long (s) each poll for the answer of the commit at close waits at most.
    CLOSE_POLL_S = 0.1
    #: The least time (s) left of close's bound for which its own commit is asked (half
    #: the source's timeout, if that is less: a timeout that short says the broker answers
    #: faster). The coordinator answers a commit once its in-sync replicas hold the
    #: offsets, a round trip of ms to tens of ms on a healthy cluster, and close reads the
    #: answer in polls of :attr:`CLOSE_POLL_S`: with less left, the answer mostly does
    #: not come in time, and the consumer's close then waits for the commit (the client
    #: holds it), up to a whole timeout more, for offsets that are only a report.
    CLOSE_COMMIT_MIN_S = 0.1

    def close(self) -> None:
        """Commit the offsets not committed yet (:meth:`_commit_at_close`), then close the
        clients. Raises nothing the commit meets: the group is only a report.

        A second close does nothing (a drop may be retried): its consumer closed, it
        would make a new one and wait its whole timeout for a commit's answer. Once
        closed, the source asks nothing more (:meth:`_refuse_if_closed`).
        """
        if self._closed:
            return
        try:
            self._commit_at_close()
        finally:
            self._closed = True  # after the close's own commit, which asks the consumer
            self._admin = None  # an AdminClient has no close: dropped, it ends its threads
            del self._silence  # forgotten once no open object holds it
            if self._client is not None:
                self._client.close()
                self._client = None

    def _commit_at_close(self) -> None:
        """Commit to the group the offsets of the last ticks that no answered commit
        committed (the latest of each partition), and wait for the answer, for
        ``timeout_s`` at most; log the offsets left uncommitted, never raise.

        The consumer's close, after it, waits for a commit the client still holds
        for want of a coordinator (the coordinator stopped answering after the
        last tick, and the source does not know yet), at most its
        ``session.timeout.ms`` after the commit was asked: the source's timeout
        (:meth:`_consumer`), not librdkafka's 45 s. So the whole close takes about
        ``timeout_s``, and twice that at most (a close commit asked at the end of
        its wait, then held).

        A commit is asynchronous (:meth:`commit`): at close, the last tick's
        offsets are often not asked yet (one commit was in flight), or asked and
        not answered; a consumer closed then leaves the group behind the source,
        and lag tools report offsets already read. The commit in flight is
        awaited first: one asked beside it may land before it, and leave the group
        at the older offsets. The close's own commit is asked only if time is left
        to wait for its answer (:attr:`CLOSE_COMMIT_MIN_S` at least; one not asked
        for want of it is logged) and the one in flight got an answer (an error or
        not), not the client's no-answer (``_TIMED_OUT``, ``_WAIT_COORD``): with
        the coordinator silent it would be held too. A synchronous commit would
        wait for its answer with no bound (the client holds a commit for want of
        a coordinator past the timeout), so the commit is asynchronous here too,
        and the answers are polled for in polls of :attr:`CLOSE_POLL_S` at most, until ``timeout_s``
        has passed. While the source knows its cluster is silent, nothing is
        asked (the commit would wait the whole bound for nothing); so while the
        group's coordinator is, once the answers come already are read (a late
        success ends its silence). Nor is anything asked once the topic was found
        with another id than the one the offsets were read from (:meth:`upper`
        raised): they would put the group of the topic made again ahead of what
        was read from it. A failure is a report's, never the source's data: it
        is logged.
        """
        if not self._uncommitted:
            return
        known = self._silence.known()
        if known is not None:
            self._log_uncommitted(known)
            return
        if self._other_topic_id is not None:
            self._log_uncommitted(
                f"topic {self.topic!r} has id {self._other_topic_id}, not {self._topic_id}, "
                "the id of the topic the offsets were read from"
            )
            return
        from confluent_kafka import KafkaException, TopicPartition

        deadline = monotonic() + self.timeout_s
        error: Any = None
        try:
            consumer = self._consumer()
            error = self._read_answers(consumer, 0)  # a late success ends the group's silence
            if self._commit_silence.fault is not None:
                self._log_uncommitted(self._commit_silence.fault)
                return
            error = self._await_commits(consumer, deadline) or error
            if (
                self._uncommitted
                and self._commits_answered >= self._commits_asked
                and not (_no_answer(error) or _waits_for_coordinator(error))
            ):
                least = min(self.CLOSE_COMMIT_MIN_S, self.timeout_s / 2)
                left = deadline - monotonic()
                if left < least:
                    self._log_uncommitted(
                        f"not asked: {max(left, 0):.3f} s of the close's {self.timeout_s} s "
                        f"were left, less than the {least} s an answer needs"
                    )
                    return
                offsets = [
                    TopicPartition(self.topic, int(p), o)
                    for p, o in sorted(self._uncommitted.items())
                ]
                consumer.commit(offsets=offsets, asynchronous=True)
                self._commits_asked += 1
                error = self._await_commits(consumer, deadline)
        except Exception as e:  # the client's refusal, or a closed consumer: only a report
            error = e.args[0] if isinstance(e, KafkaException) and e.args else e
        if self._uncommitted:
            self._log_uncommitted(str(error or f"no answer within {self.timeout_s} s"))

    def _await_commits(self, consumer: Any, deadline: float) -> Any:
        """Poll for the answers of the commits asked while any is unanswered, until
        ``deadline`` (monotonic), reading them (:meth:`_commit_at_close`): the error of
        the last one answered with one (None: none)."""
        error = None
        while self._commits_answered < self._commits_asked:
            left = deadline - monotonic()
            if left <= 0:
                break
            error = self._read_answers(consumer, min(left, self.CLOSE_POLL_S)) or error
        return error

    def _read_answers(self, consumer: Any, timeout: float) -> Any:
        """Poll for the answers of the commits asked, waiting ``timeout`` at most, and read
        the answers come (:meth:`_commit_at_close`): a success drops the offsets it
        committed and ends the group's silence. The error of the last one answered with
        one (None: none)."""
        error = None
        consumer.poll(timeout)
        for answer, partitions in self._commit_answers.take():
            error = self._answer(answer, partitions) or error
        return error

    def _answer(self, error: Any, partitions: Any) -> Any:
        """Count one commit's answer (never past the commits asked: a forgotten commit's
        answer may come after all) and return its error: the request's, else the first
        partition's; None for a success, which drops the offsets it committed and ends
        the group's silence."""
        self._commits_answered = min(self._commits_answered + 1, self._commits_asked)
        if error is None:
            error = next((tp.error for tp in partitions if tp.error is not None), None)
        if error is None:
            self._committed(partitions)
            self._commit_silence.answered()
        return error

    def _log_uncommitted(self, why: str) -> None:
        """Log, as a warning, the offsets close left uncommitted to the group and ``why``
        (:meth:`_commit_at_close`): the group is only a report, so close raises nothing."""
        log.warning(
            "KAFKA source %r: offsets %s not committed to group %r at close: %s",
            self.name,
            dict(sorted(self._uncommitted.items())),
            self.group_id,
            why,
        )


def _waits_for_coordinator(error: Any) -> bool:
    """Whether a commit's ``error`` says the client held it for want of a coordinator
    (none known, or it moved or went away) until ``session.timeout.ms``: no answer."""
    from confluent_kafka import KafkaError

    return isinstance(error, KafkaError) and error.code() == KafkaError._WAIT_COORD


__all__ = ["GroupCommits"]
