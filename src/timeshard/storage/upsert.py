"""The feedback UPSERT operator: keyed commands into a collection, state from its own output.

```
  commands (key, value | delete | error, time, FromTime order) ──> [upsert] ──> output shard
                                                                      ^              │
                                                                      └── feedback ──┘
```

An upsert source produces commands: a key with a new value, a delete (no
value), or a decode error for the key. The operator turns them into a
collection of one row per live key. It keeps no state store of its own: the
previous value of a key is read back from the output shard, at the time just
before the commands it applies. After a restart it is rehydrated by
construction -- the shard is the state.

Semantics, for commands reclocked to the same time ``t``:

1. per key, the command with the highest FromTime order wins. ``order`` is
   the command's position in its source, a tuple compared element by element;
   a source's records have distinct positions, and two different commands at
   one position, key and time (winning or not) are a caller's mistake
   (InvalidUsage, whatever the order of ``commands``), so the winner never
   depends on the order of ``commands``. So are orders of one key and time that
   are no tuples of one length and one type per column (an int and a str, an int
   and a float, a value and None, at any position, also one after the position
   that decides: InvalidUsage naming them). A source's record is
   at ``(partition, offset)``: for a FILE source ``(file name, byte offset)``,
   the order of :mod:`timeshard.storage.file_source` ("Order"; Python
   compares ``str`` by code point, which is the order of their UTF-8 bytes),
   the order the Spark operator (:mod:`timeshard.storage.upsert_spark`) uses;
2. the key's previous row (value or err row) is retracted at ``t``, and the
   new row inserted, unless they are equal;
3. a delete leaves the key absent; an error leaves an err row for the key
   (key columns set, value columns null, ``_err`` the message), which a later
   good value for the same key retracts. An *unkeyed* error (every key
   column null: a record that did not decode far enough to have a key) names
   no key: it is an err row of its own from its time on, never retracted,
   and takes no part in ranking the null key's commands -- as in the Spark
   upsert (its invariant 4) and the verifier (:mod:`timeshard.verify.replay`).
   A NULL key with a value or a delete is the null key's command;
4. keys, rows and commands are compared as Spark compares them (and as
   persist consolidates): every NaN is one value and -0.0 is 0.0, at any depth
   of structs and lists (:func:`canonical`). Python and Arrow keep them apart.

Eligibility (after seed 003): commands at times in ``[persist upper, input
upper)`` are applied in one batch with compare-and-append at the persist upper,
whose content just below is exactly the previous state. Commands below the
persist upper are already reflected in the shard (another instance, or this
one before a restart, wrote them) and are skipped; commands at or beyond the
input upper wait. Two instances applying the same commands converge: the
loser of a compare-and-append reads the winner's output as its new state.

Runs on the driver (pyarrow); :mod:`timeshard.storage.upsert_spark` is the
same operator with its state arranged in Spark.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from timeshard.errors import InvalidUsage, UpperMismatch
from timeshard.persist import Appended, PersistClient, expire_all
from timeshard.persist._internal.parts import DIFF, ERR, TS, _normalized_floats
from timeshard.progress import Frontier, Timestamp, check_timestamp


@dataclass(frozen=True, slots=True)
class UpsertCommand:
    """One upsert command, already reclocked to ``time``."""

    key: tuple[Any, ...]
    value: tuple[Any, ...] | None
    time: Timestamp
    order: tuple[Any, ...]
    error: str | None = None


class _NaN:
    """The one NaN of :func:`canonical`: equal to itself only (Python's ``nan != nan``)."""

    def __repr__(self) -> str:
        return "nan"


_NAN = _NaN()


def canonical(value: Any) -> Any:
    """``value`` (a Python value of an Arrow type, or a tuple or dict of them) as a hashable
    value equal to another exactly when Spark compares them equal: every NaN is one value
    and -0.0 is 0.0, at any depth; lists and structs become tuples."""
    if isinstance(value, float):
        if math.isnan(value):
            return _NAN
        return 0.0 if value == 0 else value
    if isinstance(value, dict):
        return tuple((k, canonical(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(canonical(v) for v in value)
    return value


def _unkeyed(c: UpsertCommand) -> bool:
    """Whether ``c`` is an unkeyed error: an error whose key columns are all null."""
    return c.error is not None and all(k is None for k in c.key)


def _same(a: UpsertCommand, b: UpsertCommand) -> bool:
    """Whether ``a`` and ``b`` are one command (their order and time aside)."""
    return bool(canonical((a.key, a.value, a.error)) == canonical((b.key, b.value, b.error)))


def _before(a: UpsertCommand, b: UpsertCommand) -> bool:
    """Whether ``a``'s order is below ``b``'s, for commands of one key and time; InvalidUsage
    if they differ in length or in the type of any element (a source's positions have one
    type per column), also one that the comparison would not reach."""
    try:
        if len(a.order) == len(b.order) and all(
            type(x) is type(y) for x, y in zip(a.order, b.order, strict=True)
        ):
            return bool(a.order < b.order)
    except TypeError:
        pass
    raise InvalidUsage(
        f"upsert commands of key {b.key!r} at time {b.time} have orders that do not "
        f"compare (one type per column): {a.order!r} and {b.order!r}"
    )


class FeedbackUpsert:
    """Applies upsert commands to an output shard whose content is its state."""

    def __init__(
        self, client: PersistClient, shard_id: str, schema: pa.Schema, key_columns: Sequence[str]
    ) -> None:
        missing = [k for k in key_columns if k not in schema.names]
        if not key_columns or missing:
            raise InvalidUsage(
                f"upsert key columns {list(key_columns)} must be non-empty columns of {schema}"
            )
        self.schema = schema
        self.key_columns = list(key_columns)
        self.value_columns = [n for n in schema.names if n not in key_columns]
        self._writer = client.open_writer(shard_id, schema, background_compaction=True)
        try:
            self._reader = client.open_leased_reader(shard_id, schema)
        except BaseException:
            with contextlib.suppress(Exception):  # the constructor's error is the one to see
                self._writer.expire()
            raise

    @property
    def upper(self) -> Frontier:
        return self._writer.fetch_recent_upper()

    def close(self) -> None:
        """Release the output shard: the writer and the since hold expire now."""
        expire_all([self._reader, self._writer])

    def apply(
        self,
        commands: Sequence[UpsertCommand],
        input_upper: Timestamp,
        expected_lower: Timestamp | None = None,
    ) -> Appended | UpperMismatch | None:
        """Apply the eligible commands; None if there is nothing to do yet.

        With ``expected_lower`` the append lands only if the output's upper is
        still that time: a caller that decided its commands on a read at
        ``expected_lower - 1`` gets UpperMismatch, and nothing is written, if
        anyone appended since (the append is compare-and-set on it).
        InvalidUsage, and nothing written, if a command is no UpsertCommand or a time
        is not a timestamp.
        """
        check_timestamp(input_upper, "upsert input_upper")
        if expected_lower is not None:
            check_timestamp(expected_lower, "upsert expected_lower")
        for c in commands:
            if not isinstance(c, UpsertCommand):
                raise InvalidUsage(f"upsert commands must be UpsertCommand, got {c!r}")
            check_timestamp(c.time, f"the time of upsert command {c!r}")
        current = self.upper
        if expected_lower is not None and current.time != expected_lower:
            return UpperMismatch(Frontier(expected_lower), current)
        lower = current.time
        if lower is None or input_upper <= lower:
            return None
        winners: dict[tuple[Timestamp, Any], UpsertCommand] = {}  # by (time, canonical key)
        placed: dict[tuple[Timestamp, Any, Any], UpsertCommand] = {}  # ... and position
        unkeyed: list[UpsertCommand] = []  # err rows of their own (semantics 3)
        for c in commands:
            if lower <= c.time < input_upper and _unkeyed(c):
                unkeyed.append(c)
            elif lower <= c.time < input_upper:
                slot = (c.time, canonical(c.key))
                first = placed.setdefault((*slot, canonical(c.order)), c)
                if not _same(first, c):
                    raise InvalidUsage(
                        f"two different upsert commands at one position {c.order!r}: "
                        f"{first!r} and {c!r}"
                    )
                best = winners.get(slot)
                if best is None or _before(best, c):
                    winners[slot] = c
        keys = {k: winners[(t, k)].key for t, k in winners}
        state = self._state(keys, lower - 1) if lower > 0 and keys else {}
        rows: list[dict[str, Any]] = []
        for t, key in sorted(winners, key=lambda s: s[0]):
            cmd = winners[(t, key)]
            new = self._row(cmd)
            old = state.get(key)
            if canonical(old) == canonical(new):
                continue
            if old is not None:
                rows.append({**old, TS: t, DIFF: -1})
            if new is not None:
                rows.append({**new, TS: t, DIFF: 1})
            state[key] = new
        for c in unkeyed:
            err = self._row(c)
            assert err is not None, c
            rows.append({**err, TS: c.time, DIFF: 1})
        result = self._writer.compare_and_append(self._table(rows), lower, input_upper)
        if isinstance(result, Appended):  # a lost race leaves the upper where the winner put it:
            # a hold past it would leave the shard no readable time once the others' go
            self._reader.downgrade_since(max(input_upper - 1, 0))
        return result

    def _row(self, cmd: UpsertCommand) -> dict[str, Any] | None:
        if len(cmd.key) != len(self.key_columns):
            raise InvalidUsage(
                f"upsert key {cmd.key!r} does not match key columns {self.key_columns}"
            )
        row: dict[str, Any] = dict(zip(self.key_columns, cmd.key, strict=True))
        if cmd.error is not None:
            row.update(dict.fromkeys(self.value_columns))
        elif cmd.value is None:
            return None
        elif len(cmd.value) != len(self.value_columns):
            raise InvalidUsage(
                f"upsert value {cmd.value!r} does not match value columns {self.value_columns}"
            )
        else:
            row.update(zip(self.value_columns, cmd.value, strict=True))
        # In schema order, as :meth:`_state` reads rows back: they compare as tuples.
        return {**{n: row[n] for n in self.schema.names}, ERR: cmd.error}

    def _state(self, keys: Mapping[Any, tuple[Any, ...]], as_of: Timestamp) -> dict[Any, Any]:
        """The current row at ``as_of`` of each key of ``keys`` (canonical key -> a key),
        read back from the output, by canonical key."""
        snap = self._reader.snapshot(as_of)
        key_type = snap.schema.field(self.key_columns[0]).type
        if len(self.key_columns) == 1 and not pa.types.is_nested(key_type):
            # Arrow compares floats by bits: a -0.0 or a NaN of another sign is found normalised.
            wanted = _normalized_floats(pa.array([k[0] for k in keys.values()], key_type))
            found = _normalized_floats(snap.column(self.key_columns[0]).combine_chunks())
            snap = snap.filter(pc.is_in(found, value_set=wanted))
        state: dict[Any, Any] = {}
        for r in snap.to_pylist():
            key = canonical(tuple(r[k] for k in self.key_columns))
            if r[ERR] is not None and all(r[k] is None for k in self.key_columns):
                continue  # an unkeyed err row is no key's state
            if key in keys:
                assert r[DIFF] == 1 and key not in state, (
                    f"upsert output holds key {key!r} with multiplicity {r[DIFF]}"
                )
                state[key] = {n: r[n] for n in [*self.schema.names, ERR]}
        return state

    def _table(self, rows: list[dict[str, Any]]) -> pa.Table:
        fields = [
            *self.schema,
            pa.field(TS, pa.int64()),
            pa.field(DIFF, pa.int64()),
            pa.field(ERR, pa.string()),
        ]
        return pa.Table.from_pylist(rows, schema=pa.schema(fields))


__all__ = ["FeedbackUpsert", "UpsertCommand"]
