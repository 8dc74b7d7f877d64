"""Critical since handles: since holds without a lease, fenced by an opaque token.

A critical reader holds back a shard's since for as long as it exists -- it
has no lease to run out -- and every change to it is a compare-and-set on an
opaque token. A deployment stores its generation there: a newer generation
swaps the token, after which the older generation's downgrades fail with
:class:`OpaqueMismatch`, and ``downgrade_since`` raises :class:`Fenced`.
"""

from __future__ import annotations

from timeshard.errors import Fenced, InvalidUsage
from timeshard.persist._internal import transitions as tr
from timeshard.persist._internal.machine import Machine
from timeshard.persist._internal.state import CriticalReaderState
from timeshard.persist._internal.transitions import OpaqueMismatch
from timeshard.progress import Frontier, Timestamp, frontier


def check_opaque(opaque: object) -> str:
    """``opaque`` if it is a string (a token is stored in the state), else InvalidUsage."""
    if not isinstance(opaque, str):
        raise InvalidUsage(f"the opaque {opaque!r} of a critical since handle is not a string")
    return opaque


class SinceHandle:
    """A critical since hold on one shard. Runs on the driver."""

    def __init__(self, machine: Machine, reader_id: str, opaque: str) -> None:
        self._machine = machine
        self.reader_id = reader_id
        self.opaque = opaque

    @property
    def shard_id(self) -> str:
        return self._machine.shard_id

    @property
    def since(self) -> Frontier:
        return self._reader().since

    def current_opaque(self) -> str:
        return self._reader().opaque

    def _reader(self) -> CriticalReaderState:
        """This reader's state; Fenced if it was dropped (a DROP by another server)."""
        reader = self._machine.fetch().critical_readers.get(self.reader_id)
        if reader is None:
            raise Fenced(f"critical reader {self.reader_id!r} of shard {self.shard_id!r} is gone")
        return reader

    def compare_and_downgrade_since(
        self, expected: str, new_opaque: str, new_since: Frontier | Timestamp | None
    ) -> Frontier | OpaqueMismatch:
        """If the token is ``expected``, set it to ``new_opaque`` and advance the since."""
        check_opaque(expected)
        check_opaque(new_opaque)
        target = frontier(new_since)
        result = self._machine.apply(
            lambda s: tr.compare_and_downgrade_since(
                s, self.reader_id, expected, new_opaque, target
            ),
            fetch_first=True,  # the shard's writers moved it on since this handle last looked
        )
        if isinstance(result, Frontier):
            self.opaque = new_opaque
            return result
        assert isinstance(result, OpaqueMismatch), result
        return result

    def downgrade_since(self, new_since: Frontier | Timestamp | None) -> Frontier:
        """Advance the since keeping this handle's token; raise Fenced if it was replaced."""
        result = self.compare_and_downgrade_since(self.opaque, self.opaque, new_since)
        if isinstance(result, OpaqueMismatch):
            raise Fenced(
                f"critical reader {self.reader_id!r} of shard {self.shard_id!r} was fenced: "
                f"token is {result.current!r}, this handle has {self.opaque!r}"
            )
        return result


__all__ = ["OpaqueMismatch", "SinceHandle", "check_opaque"]
