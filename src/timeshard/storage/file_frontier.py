"""What a FILE source's frontier holds: per file an offset and a fingerprint (driver).

Per file, ``upper`` finds the offset just past its last complete line
(:func:`_complete_prefix`) and a :class:`Fingerprint` of the bytes before it
(:func:`_digest`: its first 4 KiB and the 4 KiB before the offset); the
frontier holds the offset under the file's name and the fingerprint's entry
(:func:`fingerprint_entry`) under ``/fingerprint/<file>``. :func:`fingerprints`
reads them back (``resume``), :func:`file_offsets` gives the offsets alone
(what a reader of the bindings reads files up to). Why and what it catches:
:mod:`timeshard.storage.file_source`. Runs on the driver (the source's
``upper`` and ``resume``, ``timeshard verify``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import BinaryIO

from timeshard.storage.reclock import SourceFrontier

#: How many bytes at the start of a file, and before an offset, a fingerprint covers.
_TAIL = 4096

#: The first entry name of a fingerprint in a frontier; no file's (relative) name has it.
FINGERPRINT = "/fingerprint/"

#: How many bits of a fingerprint's digest a binding holds (the offset takes the others).
_BOUND_BITS = 24

#: Files at least this long bind no new fingerprint (its entry would pass int64).
_FINGERPRINTED_BELOW = 1 << (63 - _BOUND_BITS)


def _complete_prefix(f: BinaryIO, size: int) -> int:
    """Bytes up to and including the last newline of the ``size`` first bytes of ``f``."""
    block = 1 << 16
    pos = size
    while pos > 0:
        step = min(block, pos)
        f.seek(pos - step)
        chunk = f.read(step)
        i = chunk.rfind(b"\n")
        if i >= 0:
            return pos - step + i + 1
        pos -= step
    return 0


#: How many bits :func:`_digest` has.
_DIGEST_BITS = 64


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What was read of a file up to ``offset``: the first ``bits`` bits of the
    :func:`_digest` of its bytes there (all of them, or those a binding holds)."""

    offset: int
    digest: int
    bits: int

    def holds(self, f: BinaryIO) -> bool:
        """Whether ``f``, at least ``offset`` bytes long, still has those bytes."""
        return _digest(f, self.offset) >> (_DIGEST_BITS - self.bits) == self.digest


def _digest(f: BinaryIO, offset: int) -> int:
    """A 64-bit digest of the first :data:`_TAIL` bytes of ``f`` and the :data:`_TAIL`
    bytes before ``offset`` (both cut at ``offset``)."""
    h = hashlib.blake2b(digest_size=_DIGEST_BITS // 8)
    f.seek(0)
    h.update(f.read(min(offset, _TAIL)))
    start = max(0, offset - _TAIL)
    f.seek(start)
    h.update(f.read(offset - start))
    return int.from_bytes(h.digest(), "big")


def fingerprint_entry(fingerprint: Fingerprint) -> int | None:
    """The value a frontier holds for ``fingerprint``: ``offset << 24`` plus the first
    24 bits of its digest. It grows with the offset, as bindings must. None at offset 0
    (nothing read) or at 2**39 and beyond (it would pass int64)."""
    if not 0 < fingerprint.offset < _FINGERPRINTED_BELOW:
        return None
    assert fingerprint.bits >= _BOUND_BITS, fingerprint
    digest = fingerprint.digest >> (fingerprint.bits - _BOUND_BITS)
    return fingerprint.offset << _BOUND_BITS | digest


def fingerprints(frontier: SourceFrontier) -> dict[str, Fingerprint]:
    """The fingerprints ``frontier`` binds, per file."""
    return {
        p.removeprefix(FINGERPRINT): Fingerprint(
            value >> _BOUND_BITS, value & ((1 << _BOUND_BITS) - 1), _BOUND_BITS
        )
        for p, value in frontier.items()
        if p.startswith(FINGERPRINT) and value > 0
    }


def file_offsets(frontier: SourceFrontier) -> SourceFrontier:
    """``frontier`` without its fingerprints: the offset of each file.

    What a reader of a FILE source's bindings reads files up to (the
    fingerprints are not files).
    """
    return {p: o for p, o in frontier.items() if not p.startswith(FINGERPRINT)}


__all__ = ["FINGERPRINT", "Fingerprint", "file_offsets", "fingerprint_entry", "fingerprints"]
