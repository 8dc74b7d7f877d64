"""Since holds that lag: a tick's since downgrades, batched into few compare-and-sets.

A holder (the upsert's reader of its own output, an ingestion's remap
reader, a retained history) reads its shard at or after some time ``t`` that
grows every tick; it lets the shard compact up to ``t`` by downgrading its
since, which is a compare-and-set of the shard's state. Doing that every tick
costs one compare-and-set per hold per tick. Here each hold records the time
it *may* move to (:meth:`LaggingHold.want`) and a :class:`SinceHolds` moves at
most one of them per :meth:`~SinceHolds.step`: the one waiting longest, once
it waited ``every`` steps. A hold that lags only keeps more history readable.

A downgrade that fails (a fault, a fenced critical reader) moves nothing: the
hold keeps the error in :attr:`LaggingHold.error` (for the holder's health)
and waits its turn again, and the next due hold moves in the same step. A
step never raises for a downgrade: the tick that called it already wrote its
data.

Invariants:

1. A hold never moves past the last time its holder asked for
   (:meth:`LaggingHold.want` is the only source of targets; it never regresses).
2. One :meth:`SinceHolds.step` makes at most one downgrade.
3. A hold that asked for a later time moves within ``every * len(holds)``
   steps, whatever the downgrades of the other holds do.

Runs on the driver; no Spark.
"""

from __future__ import annotations

from collections.abc import Callable


class LaggingHold:
    """One since hold, moved by its :class:`SinceHolds`."""

    def __init__(self, downgrade: Callable[[int], object]) -> None:
        self._downgrade = downgrade
        self.target: int | None = None
        self.held: int | None = None
        self.waited = 0
        #: The failure of the last downgrade tried, None once one succeeds.
        self.error: Exception | None = None

    def want(self, t: int) -> None:
        """The holder reads nothing before ``t`` any more: the hold may move up to it."""
        if self.target is None or t > self.target:
            self.target = t

    @property
    def behind(self) -> bool:
        return self.target is not None and (self.held is None or self.held < self.target)

    def move(self) -> None:
        """Downgrade to the target now; a failure is raised and kept in ``error``.

        Either way the hold waits its turn again.
        """
        assert self.target is not None, "nothing was asked for"
        self.waited = 0
        try:
            self._downgrade(self.target)
        except Exception as e:
            self.error = e
            raise
        self.held = self.target
        self.error = None


class SinceHolds:
    """The holds of one tick loop; ``step`` once per tick."""

    def __init__(self, every: int = 8) -> None:
        self.every = every
        self.holds: list[LaggingHold] = []

    def add(self, downgrade: Callable[[int], object]) -> LaggingHold:
        """A new hold that moves by calling ``downgrade(t)``."""
        hold = LaggingHold(downgrade)
        self.holds.append(hold)
        return hold

    def remove(self, hold: LaggingHold) -> None:
        """Forget ``hold`` (its holder closed); a no-op if it is gone already."""
        if hold in self.holds:
            self.holds.remove(hold)

    @property
    def errors(self) -> list[Exception]:
        """The failures of the holds whose last downgrade failed."""
        return [h.error for h in self.holds if h.error is not None]

    def step(self) -> None:
        """One tick passed: move the hold that waited longest, if it waited long enough.

        A hold whose downgrade fails keeps its error and waits again; the
        next due hold is moved instead.
        """
        due = []
        for hold in self.holds:
            if hold.behind:
                hold.waited += 1
                if hold.waited >= self.every:
                    due.append(hold)
        for hold in sorted(due, key=lambda h: h.waited, reverse=True):
            try:
                hold.move()
            except Exception:  # kept in hold.error, shown as its holder's health
                continue
            return

    def flush(self) -> None:
        """Move every hold that is behind now (closing, tests); raise the first failure
        once every other hold has moved."""
        failures = []
        for hold in self.holds:
            if hold.behind:
                try:
                    hold.move()
                except Exception as e:
                    failures.append(e)
        if failures:
            raise failures[0]


__all__ = ["LaggingHold", "SinceHolds"]
