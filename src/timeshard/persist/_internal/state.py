"""The versioned state document of one shard, and its encoding.

A shard's state is small: its schema, ``since`` and ``upper``, the hollow
batches (descriptions plus part keys, no data) that cover ``[0, upper)``, and
the registered writers and readers. Each version is stored in consensus at
sequence number :attr:`ShardState.seqno` as UTF-8 JSON with an explicit
``version`` field. Stored state is never pickled.

Invariants:

1. ``since`` and ``upper`` never regress, and the shard stays readable at
   ``upper - 1``: the since is never raised past ``upper - 1`` (past ``0`` for
   an empty shard), even where every reader lets go of more -- a reader may
   hold its own since beyond that, it just does not move the shard's. (The one
   exception is an explicit ``since_floor`` of ``compare_and_append``, which
   declares the times before it unreadable in the same step that writes them.)
2. The batches are contiguous: the first starts at ``[0]``, each ``lower``
   equals the previous ``upper``, and the last ``upper`` equals the shard upper.
3. ``since`` is the meet of every reader's since, and never regresses when a
   reader goes away.

Decoding (:func:`decode_state`) trusts nothing it reads: bytes that are not
UTF-8 JSON, a document of another version, shard or seqno, a field of the
wrong type, a schema that does not decode, a part key that is not a safe blob
key or not under ``<shard_id>/``, an open shard's since past ``max(upper - 1,
0)`` (invariant 1), or batches that break invariant 2 raise
:class:`CorruptState` naming the shard and the seqno. Nothing past decoding
ever sees such a state, so a corrupt version is never built upon or
garbage-collected against.
"""

from __future__ import annotations

import base64
import collections
import json
import threading
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import pyarrow as pa

from timeshard.errors import CorruptState
from timeshard.persist._internal.parts import PartMeta, check_data_schema
from timeshard.progress import Description, Frontier

STATE_VERSION = 1


@dataclass(frozen=True, slots=True)
class HollowBatch:
    """A batch as the state references it: its description and its parts."""

    desc: Description
    parts: tuple[PartMeta, ...] = ()

    @property
    def num_rows(self) -> int:
        return sum(p.num_rows for p in self.parts)

    @property
    def size_in_bytes(self) -> int:
        return sum(p.size_in_bytes for p in self.parts)

    def keys(self) -> list[str]:
        return [p.key for p in self.parts]

    def to_json(self) -> dict[str, Any]:
        return {"desc": self.desc.to_json(), "parts": [p.to_json() for p in self.parts]}

    @staticmethod
    def from_json(value: Any) -> HollowBatch:
        return HollowBatch(
            Description.from_json(value["desc"]),
            tuple(PartMeta.from_json(p) for p in value["parts"]),
        )


@dataclass(frozen=True, slots=True)
class WriterState:
    """A registered writer: its lease and its most recent append (idempotency)."""

    last_heartbeat_ms: int
    lease_duration_ms: int
    most_recent_token: str | None = None
    most_recent_upper: Frontier = field(default_factory=Frontier.minimum)

    def expired(self, now_ms: int) -> bool:
        return self.last_heartbeat_ms + self.lease_duration_ms < now_ms

    def to_json(self) -> dict[str, Any]:
        return {
            "heartbeat": self.last_heartbeat_ms,
            "lease": self.lease_duration_ms,
            "token": self.most_recent_token,
            "upper": self.most_recent_upper.to_json(),
        }

    @staticmethod
    def from_json(value: Any) -> WriterState:
        token = value["token"]
        if token is not None and not isinstance(token, str):
            raise TypeError(f"writer token must be a string or null, got {token!r}")
        return WriterState(
            _int(value["heartbeat"], "heartbeat"),
            _int(value["lease"], "lease"),
            token,
            Frontier.from_json(value["upper"]),
        )


@dataclass(frozen=True, slots=True)
class LeasedReaderState:
    """A leased reader: its since, the seqno whose parts it may still read, its lease."""

    since: Frontier
    seqno: int
    last_heartbeat_ms: int
    lease_duration_ms: int

    def expired(self, now_ms: int) -> bool:
        return self.last_heartbeat_ms + self.lease_duration_ms < now_ms

    def to_json(self) -> dict[str, Any]:
        return {
            "since": self.since.to_json(),
            "seqno": self.seqno,
            "heartbeat": self.last_heartbeat_ms,
            "lease": self.lease_duration_ms,
        }

    @staticmethod
    def from_json(value: Any) -> LeasedReaderState:
        return LeasedReaderState(
            Frontier.from_json(value["since"]),
            _int(value["seqno"], "seqno"),
            _int(value["heartbeat"], "heartbeat"),
            _int(value["lease"], "lease"),
        )


@dataclass(frozen=True, slots=True)
class CriticalReaderState:
    """A critical reader: a since hold without lease, fenced by an opaque token."""

    since: Frontier
    opaque: str

    def to_json(self) -> dict[str, Any]:
        return {"since": self.since.to_json(), "opaque": self.opaque}

    @staticmethod
    def from_json(value: Any) -> CriticalReaderState:
        opaque = value["opaque"]
        if not isinstance(opaque, str):
            raise TypeError(f"critical reader opaque must be a string, got {opaque!r}")
        return CriticalReaderState(Frontier.from_json(value["since"]), opaque)


def _int(value: Any, what: str) -> int:
    """``value`` if it is an integer (not a bool), else TypeError naming ``what``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an integer, got {value!r}")
    return value


def _dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{what} must be an object, got {type(value).__name__}")
    return value


def encode_schema(schema: pa.Schema) -> str:
    """Arrow IPC bytes of ``schema``, base64: a stable, non-pickle encoding."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


@lru_cache(maxsize=256)
def decode_schema(text: str) -> pa.Schema:
    """The schema :func:`encode_schema` encoded (schemas are immutable: cached)."""
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text, validate=True)))


@dataclass(frozen=True, slots=True)
class ShardState:
    """One version of a shard's state."""

    shard_id: str
    schema: str
    seqno: int = 0
    since: Frontier = field(default_factory=Frontier.minimum)
    upper: Frontier = field(default_factory=Frontier.minimum)
    batches: tuple[HollowBatch, ...] = ()
    writers: dict[str, WriterState] = field(default_factory=dict)
    leased_readers: dict[str, LeasedReaderState] = field(default_factory=dict)
    critical_readers: dict[str, CriticalReaderState] = field(default_factory=dict)
    walltime_ms: int = 0

    @property
    def data_schema(self) -> pa.Schema:
        return decode_schema(self.schema)

    def referenced_keys(self) -> set[str]:
        return {p.key for b in self.batches for p in b.parts}

    def num_rows(self) -> int:
        return sum(b.num_rows for b in self.batches)

    def size_in_bytes(self) -> int:
        return sum(b.size_in_bytes for b in self.batches)

    def with_since_recomputed(self) -> ShardState:
        """Set ``since`` to the meet of all reader sinces, never regressing it.

        The result is at most ``upper - 1`` (invariant 1), and for a closed
        shard (an empty upper) at most its last time: whoever holds what, the
        last written time stays readable.
        """
        holds = [r.since for r in self.leased_readers.values()]
        holds += [r.since for r in self.critical_readers.values()]
        if not holds:
            return self
        meet = holds[0]
        for h in holds[1:]:
            meet = meet.meet(h)
        if self.upper.time is not None:
            meet = meet.meet(Frontier(max(self.upper.time - 1, 0)))
        elif self.batches:  # closed: the time of its last update stays readable
            meet = meet.meet(Frontier(self._last_time()))
        return replace(self, since=self.since.join(meet))

    def _last_time(self) -> int:
        """A closed shard's last time: its last batch's lower - 1, or its last update's."""
        last = self.batches[-1]
        times = [p.ts_max for p in last.parts if p.ts_max is not None]
        return max([(last.desc.lower.time or 0) - 1, *times, 0])

    def closed_at(self) -> Frontier | None:
        """For a closed shard (an empty upper), its upper when it was closed, or an earlier
        frontier after compaction merged its last batches (never a later one); None for
        an open shard."""
        if not self.upper.is_empty():
            return None
        return Frontier(self._last_time() + 1) if self.batches else Frontier.minimum()

    def check_contiguous(self) -> None:
        """Raise CorruptState unless the batches cover ``[0, upper)`` contiguously."""
        lower = Frontier.minimum()
        for i, b in enumerate(self.batches):
            if b.desc.lower != lower:
                raise CorruptState(
                    f"batch {i} starts at {b.desc.lower}, not at the previous upper {lower}"
                )
            lower = b.desc.upper
        if lower != self.upper:
            raise CorruptState(f"the batches end at {lower}, not at the shard upper {self.upper}")

    def check_since(self) -> None:
        """Raise CorruptState unless an open shard is readable at ``upper - 1``
        (invariant 1): its since is at most ``max(upper - 1, 0)``."""
        if self.upper.time is None:
            return
        last = max(self.upper.time - 1, 0)
        if not self.since.less_equal(last):
            raise CorruptState(
                f"since {self.since} is beyond {last}, the last time of upper {self.upper}: "
                "the shard would not be readable at upper - 1"
            )

    def check_part_keys(self) -> None:
        """Raise CorruptState unless every part key is under ``<shard_id>/``."""
        prefix = f"{self.shard_id}/"
        for b in self.batches:
            for p in b.parts:
                if not p.key.startswith(prefix):
                    raise CorruptState(f"part {p.key!r} is not under {prefix!r}")

    def check_invariants(self) -> None:
        """Assert the structural invariants (used by tests and ``verify``)."""
        lower = Frontier.minimum()
        for b in self.batches:
            assert b.desc.lower == lower, (self.shard_id, self.seqno, b.desc, lower)
            lower = b.desc.upper
        assert lower == self.upper, (self.shard_id, self.seqno, lower, self.upper)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "shard_id": self.shard_id,
            "schema": self.schema,
            "seqno": self.seqno,
            "since": self.since.to_json(),
            "upper": self.upper.to_json(),
            "batches": [b.to_json() for b in self.batches],
            "writers": {k: v.to_json() for k, v in sorted(self.writers.items())},
            "leased_readers": {k: v.to_json() for k, v in sorted(self.leased_readers.items())},
            "critical_readers": {k: v.to_json() for k, v in sorted(self.critical_readers.items())},
            "walltime_ms": self.walltime_ms,
        }

    @staticmethod
    def from_json(
        value: Any, *, contiguous: bool = True, known: _KnownBatches | None = None
    ) -> ShardState:
        """Decode a stored document; CorruptState, or a ValueError, KeyError or
        TypeError naming the field, if it is malformed (see the module doc).

        ``contiguous=False`` skips invariant 2 (for :func:`check_decodes`, which
        decodes a document holding only some of the batches). ``known``: batches
        decoded before, by their stored form; a batch stored exactly so is taken from
        it, not decoded again, and ``known`` is filled with this document's batches."""
        value = _dict(value, "a state")
        if value.get("version") != STATE_VERSION:
            raise CorruptState(f"unknown state version {value.get('version')!r}")
        shard_id, schema = value["shard_id"], value["schema"]
        if not isinstance(shard_id, str) or not isinstance(schema, str):
            raise TypeError(f"shard_id and schema must be strings, got {shard_id!r}, {schema!r}")
        batches = value["batches"]
        if not isinstance(batches, list):
            raise TypeError(f"batches must be a list, got {type(batches).__name__}")
        state = ShardState(
            shard_id=shard_id,
            schema=schema,
            seqno=_int(value["seqno"], "seqno"),
            since=Frontier.from_json(value["since"]),
            upper=Frontier.from_json(value["upper"]),
            batches=_batches_of(batches, known),
            writers={
                k: WriterState.from_json(v) for k, v in _dict(value["writers"], "writers").items()
            },
            leased_readers={
                k: LeasedReaderState.from_json(v)
                for k, v in _dict(value["leased_readers"], "leased_readers").items()
            },
            critical_readers={
                k: CriticalReaderState.from_json(v)
                for k, v in _dict(value["critical_readers"], "critical_readers").items()
            },
            walltime_ms=_int(value["walltime_ms"], "walltime_ms"),
        )
        try:
            check_data_schema(state.data_schema)
        except Exception as e:
            raise ValueError(f"the schema is not a shard schema: {type(e).__name__}: {e}") from e
        state.check_since()
        state.check_part_keys()
        if contiguous:
            state.check_contiguous()
        return state


def encode_state(state: ShardState) -> bytes:
    return json.dumps(state.to_json(), sort_keys=True, separators=(",", ":")).encode("utf-8")


def check_decodes(new: ShardState, previous: ShardState | None) -> None:
    """Raise CorruptState, naming the problem, if ``new`` once encoded would not decode.

    The decoder runs on a document of ``new``'s own fields and of the batches,
    writers and readers it does not share (as objects) with ``previous``, a
    state that decoded: a transition rebuilds only what it changes, so this
    costs in proportion to the change, not to the state (a full decode of a
    2000-batch state takes about 45 ms, three times its encoding). Invariant 2
    is checked on all of ``new``.
    """
    if previous is None or previous.schema != new.schema:
        delta = new
    else:
        old_batches = {id(b) for b in previous.batches}

        def changed(items: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
            return {k: v for k, v in items.items() if before.get(k) is not v}

        delta = replace(
            new,
            batches=tuple(b for b in new.batches if id(b) not in old_batches),
            writers=changed(new.writers, previous.writers),
            leased_readers=changed(new.leased_readers, previous.leased_readers),
            critical_readers=changed(new.critical_readers, previous.critical_readers),
        )
    try:
        ShardState.from_json(json.loads(encode_state(delta)), contiguous=False)
    except CorruptState:
        raise
    except Exception as e:
        raise CorruptState(f"{type(e).__name__}: {str(e)[:300]}") from e
    new.check_contiguous()


def decode_state(shard_id: str, seqno: int, data: bytes) -> ShardState:
    """Decode a stored version; garbage raises CorruptState naming shard and seqno.

    The message names the first problem found (at most 300 characters of it),
    never the stored bytes themselves. A state is a function of its bytes and
    immutable, so the states decoded last are kept and returned again for the
    same shard, seqno and bytes: a tick fetches the head of a shard several
    times (a view's input through each of its handles), and it has mostly not
    moved in between. Errors are not kept.
    """
    return _decoded(shard_id, seqno, bytes(data))


#: Batches decoded before, by the ``repr`` of their stored form (JSON values as loaded:
#: it tells ``1`` from ``true`` and ``1.0``, as equality of the values would not; keys
#: in another order only miss).
_KnownBatches = dict[str, HollowBatch]
#: Per shard, the batches of the version decoded last (:func:`_decoded`), for the few
#: shards decoded last: a shard's next version keeps most of its batches as they were
#: stored, and decoding each part's metadata again was most of a decode's cost.
_KNOWN: collections.OrderedDict[str, _KnownBatches] = collections.OrderedDict()
_KNOWN_SHARDS = 32
_known_lock = threading.Lock()


def _batches_of(stored: list[Any], known: _KnownBatches | None) -> tuple[HollowBatch, ...]:
    """The batches of ``stored``, each taken from ``known`` if it was stored exactly so
    (a batch is a function of its stored form), else decoded; ``known`` then holds
    these."""
    if known is None:
        return tuple(HollowBatch.from_json(b) for b in stored)
    out, seen = [], {}
    for b in stored:
        text = repr(b)
        batch = known.get(text)
        if batch is None:
            batch = HollowBatch.from_json(b)
        seen[text] = batch
        out.append(batch)
    known.clear()
    known.update(seen)
    return tuple(out)


@lru_cache(maxsize=32)  # a few shards' heads: a view's inputs and output, a tick's sources
def _decoded(shard_id: str, seqno: int, data: bytes) -> ShardState:
    with _known_lock:
        known = dict(_KNOWN.get(shard_id, {}))
    try:
        state = ShardState.from_json(json.loads(data.decode("utf-8")), known=known)
    except CorruptState as e:
        raise CorruptState(f"state of shard {shard_id!r} at seqno {seqno}: {e}") from e
    except Exception as e:
        raise CorruptState(
            f"state of shard {shard_id!r} at seqno {seqno} cannot be decoded: "
            f"{type(e).__name__}: {str(e)[:300]}"
        ) from e
    if state.shard_id != shard_id or state.seqno != seqno:
        raise CorruptState(
            f"state stored for shard {shard_id!r} at seqno {seqno} claims to be "
            f"shard {state.shard_id!r} at seqno {state.seqno}"
        )
    with _known_lock:
        _KNOWN[shard_id] = known
        _KNOWN.move_to_end(shard_id)
        while len(_KNOWN) > _KNOWN_SHARDS:
            _KNOWN.popitem(last=False)
    return state


__all__ = [
    "STATE_VERSION",
    "CriticalReaderState",
    "HollowBatch",
    "LeasedReaderState",
    "ShardState",
    "WriterState",
    "check_decodes",
    "decode_schema",
    "decode_state",
    "encode_schema",
    "encode_state",
]
