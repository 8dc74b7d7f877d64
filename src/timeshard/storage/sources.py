"""Sources: readers of a FromTime range, deterministic, in Spark tasks.

A source has partitions; its progress is a :data:`SourceFrontier` (the next
offset of each partition). ``upper()`` says how far it can be read now;
``read(spark, start, end)`` returns, as a DataFrame computed by Spark tasks,
every record with ``start[p] <= offset < end[p]``, with columns
``_partition``, ``_offset`` and the source's payload columns. Reading the
same range twice yields the same records.

Load generators produce ``rate`` records per partition per tick; their
upper advances with the ticks the ingestion loop gives them, so a run is a
function of the seed and the number of ticks.

* :class:`KeyValueGenerator` (KEY VALUE): ``keys`` keys; the first records
  of each partition are a snapshot (every key once), then updates to keys
  drawn from a seeded hash, values of ``value_size`` hex characters. It is
  upsert-shaped: key column ``key``, value column ``value``. Every partition
  owns keys: ``keys`` is at least ``partitions``. With
  ``deletes`` (a fraction in ``[0, 1]``), that fraction of the records after
  the snapshot, chosen by another seeded hash, are deletes: value ``NULL``,
  which the UPSERT envelope reads as "remove the key".
* :class:`AuctionGenerator` (AUCTION): organizations, users, accounts,
  auctions and bids, each a subsource with its own output shard.
* :class:`~timeshard.storage.tpch.TpchGenerator` (TPCH, in ``tpch.py``): the
  eight TPC-H tables as subsources, then orders replaced oldest first.
* :class:`CounterGenerator` (COUNTER): one partition; record ``o`` inserts
  the value ``o + 1`` and, with ``max_cardinality``, retracts ``o + 1 -
  max_cardinality`` -- a ``_diff`` column says which.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

import pyarrow as pa

from timeshard.errors import InvalidUsage
from timeshard.storage.reclock import SourceFrontier


class Source(Protocol):
    """A partitioned, deterministic, resumable reader."""

    name: str

    def payload_schema(self) -> pa.Schema: ...

    def upper(self) -> SourceFrontier: ...

    def tick(self) -> None:
        """Let a load generator produce its next round (no-op for external sources)."""
        ...

    def read(self, spark: Any, start: SourceFrontier, end: SourceFrontier) -> Any: ...


def metadata_columns(source: object) -> tuple[str, ...]:
    """The columns ``source`` adds about a record, not from its value (a KAFKA source's
    ``metadata``): never null, so never part of what makes an UPSERT command a delete."""
    return tuple(getattr(source, "metadata", ()))


def _ranges_sql(
    partitions: list[str], start: SourceFrontier, end: SourceFrontier, select: str
) -> str:
    """UNION ALL of one ``range`` per partition, with ``p`` and ``id`` (= offset)."""
    parts = []
    for i, p in enumerate(partitions):
        lo, hi = start.get(p, 0), end.get(p, 0)
        if hi > lo:
            parts.append(f"SELECT {i} AS pidx, '{p}' AS p, id FROM range({lo}, {hi})")
    if not parts:
        parts = ["SELECT 0 AS pidx, '' AS p, id FROM range(0, 0)"]
    return f"SELECT {select} FROM ({' UNION ALL '.join(parts)})"


INT64_MAX = 2**63 - 1
MAX_RATE = 2**31 - 1
"""The most records a generator makes per partition and tick: with it, its offsets
(``rate * ticks``) stay in int64 for at least 2**30 ticks."""


def check_int_options(
    kind: str,
    source: object,
    positive: tuple[str, ...],
    any_int: tuple[str, ...] = ("seed",),
    at_most: Mapping[str, int] = MappingProxyType({}),
) -> None:
    """Refuse, naming the option and its value, a load generator option that is not an int
    (positive for those in ``positive``, in int64 for seeds) or a ``ticks`` below 0; a
    positive one above its bound in ``at_most`` (by default int64's largest, and
    :data:`MAX_RATE` for ``rate``); and ``ticks`` whose offsets, ``rate * ticks``, pass
    ``at_most["offset"]`` (by default int64's largest).

    The generators format their options into the SQL they hand Spark: an option that is
    not an int would be SQL text (or a late ``TypeError`` in a tick), and one the SQL
    cannot hold fails every read (an overflow under ANSI mode)."""
    bounds = {"rate": MAX_RATE, **at_most}
    values = {what: getattr(source, what) for what in (*positive, *any_int, "ticks")}
    for what, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidUsage(f"{kind} {what} must be an int, got {value!r}")
        if what in positive and value <= 0:
            raise InvalidUsage(f"{kind} {what} must be a positive int, got {value!r}")
        if what in positive and value > bounds.get(what, INT64_MAX):
            raise InvalidUsage(
                f"{kind} {what} must be at most {bounds.get(what, INT64_MAX)}, got {value!r}"
            )
        if what in any_int and not -(2**63) <= value < 2**63:
            raise InvalidUsage(f"{kind} {what} must be an int in [-2**63, 2**63), got {value!r}")
        if what == "ticks" and value < 0:
            raise InvalidUsage(f"{kind} ticks must be a non-negative int, got {value!r}")
    rate, ticks = values["rate"], values["ticks"]
    if rate * ticks > bounds.get("offset", INT64_MAX):
        raise InvalidUsage(
            f"{kind} ticks {ticks!r} at rate {rate!r} makes offsets beyond "
            f"{bounds.get('offset', INT64_MAX)}"
        )


MAX_VALUE_SIZE = 1 << 30
"""The largest KEY VALUE ``value_size``: a value is one Spark string, built from
repeated 64-character hashes, and a Spark string holds less than 2 GiB."""

DELETE_SCALE = 1 << 30
"""The resolution of :attr:`KeyValueGenerator.deletes`: a record is a delete when a
seeded hash of it, reduced modulo this, is below ``round(deletes * DELETE_SCALE)``."""


@dataclass
class KeyValueGenerator:
    """The KEY VALUE load generator."""

    name: str = "kv"
    keys: int = 1000
    value_size: int = 16
    partitions: int = 2
    rate: int = 500
    seed: int = 0
    ticks: int = field(default=0)
    deletes: float = 0.0

    def __post_init__(self) -> None:
        check_int_options(
            "KEY VALUE",
            self,
            ("keys", "value_size", "partitions", "rate"),
            at_most={"value_size": MAX_VALUE_SIZE},
        )
        if self.keys < self.partitions:
            raise InvalidUsage(
                f"KEY VALUE keys {self.keys!r} must be at least partitions {self.partitions!r}: "
                "every partition owns keys"
            )
        d = self.deletes
        if isinstance(d, bool) or not isinstance(d, int | float) or not 0.0 <= d <= 1.0:
            # ``not 0.0 <= d <= 1.0`` also rejects NaN.
            raise InvalidUsage(f"KEY VALUE deletes must be a fraction in [0, 1], got {d!r}")

    @property
    def partition_names(self) -> list[str]:
        return [str(i) for i in range(self.partitions)]

    def payload_schema(self) -> pa.Schema:
        return pa.schema([("key", pa.int64()), ("value", pa.string())])

    def upper(self) -> SourceFrontier:
        return {p: self.rate * self.ticks for p in self.partition_names}

    def tick(self) -> None:
        self.ticks += 1

    def resume(self, bound: SourceFrontier) -> None:
        """Continue after the rounds the durable bindings already cover."""
        done = max(bound.values(), default=0)
        self.ticks = max(self.ticks, -(-done // self.rate))

    def read(self, spark: Any, start: SourceFrontier, end: SourceFrontier) -> Any:
        # Partition i owns the keys k with k % partitions == i: ceil((keys - i) /
        # partitions) of them, at least one as keys >= partitions (written so that
        # nothing overflows up to keys = 2**63 - 1). Its first `owned` records cover
        # them once (the snapshot); later ones pick owned keys by a seeded hash.
        n, parts, seed = self.keys, self.partitions, int(self.seed)
        owned = f"(({n} - pidx - 1) DIV {parts} + 1)"
        key = (
            f"CASE WHEN id < {owned} THEN id * {parts} + pidx ELSE "
            f"pmod(xxhash64({seed}, pidx, id), {owned}) * {parts} + pidx END"
        )
        chars = self.value_size
        value = (
            f"substr(repeat(sha2(concat_ws(':', {seed}, pidx, id), 256), "
            f"{chars // 64 + 1}), 1, {chars})"
        )
        if self.deletes > 0.0:
            # A record after the snapshot is a delete when its hash, in [0, DELETE_SCALE),
            # falls below deletes * DELETE_SCALE.
            below = round(float(self.deletes) * DELETE_SCALE)
            value = (
                f"CASE WHEN id >= {owned} AND pmod(xxhash64({seed}, 'delete', pidx, id), "
                f"{DELETE_SCALE}) < {below} THEN CAST(NULL AS STRING) ELSE {value} END"
            )
        select = f"p AS _partition, id AS _offset, CAST({key} AS BIGINT) AS key, {value} AS value"
        return spark.sql(_ranges_sql(self.partition_names, start, end, select))


@dataclass
class CounterGenerator:
    """The COUNTER load generator."""

    name: str = "counter"
    rate: int = 10
    max_cardinality: int | None = None
    ticks: int = field(default=0)

    def __post_init__(self) -> None:
        check_int_options("COUNTER", self, ("rate",), any_int=())
        m = self.max_cardinality
        if m is not None and (
            isinstance(m, bool) or not isinstance(m, int) or not 0 < m <= INT64_MAX
        ):
            raise InvalidUsage(
                f"COUNTER max_cardinality must be a positive int, at most {INT64_MAX}, got {m!r}"
            )

    def payload_schema(self) -> pa.Schema:
        return pa.schema([("counter", pa.int64())])

    def upper(self) -> SourceFrontier:
        return {"0": self.rate * self.ticks}

    def tick(self) -> None:
        self.ticks += 1

    def resume(self, bound: SourceFrontier) -> None:
        """Continue after the rounds the durable bindings already cover."""
        self.ticks = max(self.ticks, -(-bound.get("0", 0) // self.rate))

    def read(self, spark: Any, start: SourceFrontier, end: SourceFrontier) -> Any:
        lo, hi = start.get("0", 0), max(end.get("0", 0), start.get("0", 0))
        sql = (
            f"SELECT '0' AS _partition, id AS _offset, id + 1 AS counter, 1L AS _diff "
            f"FROM range({lo}, {hi})"
        )
        m = self.max_cardinality
        if m is not None:
            # Record o also retracts o + 1 - m once the counter passes m.
            sql += (
                f" UNION ALL SELECT '0', id, id + 1 - {m}, -1L "
                f"FROM range({max(lo, m)}, {max(hi, m)})"
            )
        return spark.sql(sql)


AUCTION_ITEMS = (
    "Signed Memorabilia",
    "City Bar Crawl",
    "Best Pizza in Town",
    "Gift Basket",
    "Custom Art",
)


@dataclass
class AuctionGenerator:
    """The AUCTION load generator: organizations, users, accounts, auctions and bids.

    One partition. Offset 0 also carries the static subsources
    (``organizations``, ``users``, ``accounts``). Offset ``o`` opens auction
    ``o`` (it takes bids until offset ``o + 5``: ``end_offset``) and places
    three bids on auctions still open, amounts and buyers from a seeded hash.
    """

    name: str = "auction"
    rate: int = 20
    users: int = 50
    organizations: int = 5
    seed: int = 0
    ticks: int = field(default=0)

    def __post_init__(self) -> None:
        # Bid ids are offset * 3 + j: offsets stay below a third of int64.
        check_int_options(
            "AUCTION", self, ("rate", "users", "organizations"), at_most={"offset": INT64_MAX // 3}
        )

    def outputs(self) -> dict[str, pa.Schema]:
        return {
            "organizations": pa.schema([("id", pa.int64()), ("name", pa.string())]),
            "users": pa.schema([("id", pa.int64()), ("org_id", pa.int64()), ("name", pa.string())]),
            "accounts": pa.schema(
                [("id", pa.int64()), ("org_id", pa.int64()), ("balance", pa.int64())]
            ),
            "auctions": pa.schema(
                [
                    ("id", pa.int64()),
                    ("seller", pa.int64()),
                    ("item", pa.string()),
                    ("end_offset", pa.int64()),
                ]
            ),
            "bids": pa.schema(
                [
                    ("id", pa.int64()),
                    ("buyer", pa.int64()),
                    ("auction_id", pa.int64()),
                    ("amount", pa.int64()),
                ]
            ),
        }

    def payload_schema(self) -> pa.Schema:
        return self.outputs()["bids"]

    def upper(self) -> SourceFrontier:
        return {"0": self.rate * self.ticks}

    def tick(self) -> None:
        self.ticks += 1

    def resume(self, bound: SourceFrontier) -> None:
        self.ticks = max(self.ticks, -(-bound.get("0", 0) // self.rate))

    def read(self, spark: Any, start: SourceFrontier, end: SourceFrontier) -> dict[str, Any]:
        """Frames per subsource; a subsource with nothing in the range is left out."""
        lo, hi = start.get("0", 0), max(end.get("0", 0), start.get("0", 0))
        s, users, orgs = int(self.seed), self.users, self.organizations
        static = lo == 0 < hi
        at0 = "'0' AS _partition, 0L AS _offset"
        items = ", ".join(f"'{i}'" for i in AUCTION_ITEMS)
        out = {
            "organizations": spark.sql(
                f"SELECT {at0}, id, concat('org-', id) AS name FROM range({orgs if static else 0})"
            ),
            "users": spark.sql(
                f"SELECT {at0}, id, pmod(xxhash64({s}, 'u', id), {orgs}) AS org_id, "
                f"concat('user-', id) AS name FROM range({users if static else 0})"
            ),
            "accounts": spark.sql(
                f"SELECT {at0}, id, id AS org_id, 1000L + pmod(xxhash64({s}, 'a', id), 9000) "
                f"AS balance FROM range({orgs if static else 0})"
            ),
            "auctions": spark.sql(
                f"SELECT '0' AS _partition, id AS _offset, id, "
                f"pmod(xxhash64({s}, 's', id), {users}) AS seller, "
                f"element_at(array({items}), CAST(pmod(xxhash64({s}, 'i', id), "
                f"{len(AUCTION_ITEMS)}) + 1 AS INT)) AS item, id + 5 AS end_offset "
                f"FROM range({lo}, {hi})"
            ),
            "bids": spark.sql(
                f"SELECT '0' AS _partition, o AS _offset, o * 3 + j AS id, "
                f"pmod(xxhash64({s}, 'b', o, j), {users}) AS buyer, "
                f"greatest(o - pmod(xxhash64({s}, 'w', o, j), 5), 0) AS auction_id, "
                f"1 + pmod(xxhash64({s}, 'm', o, j), 100) AS amount "
                f"FROM (SELECT id AS o FROM range({lo}, {hi})) "
                f"LATERAL VIEW explode(array(0L, 1L, 2L)) AS j"
            ),
        }
        if not static:  # nothing new in the static subsources: no Spark job for them
            for sub in ("organizations", "users", "accounts"):
                del out[sub]
        return out


__all__ = [
    "AUCTION_ITEMS",
    "AuctionGenerator",
    "CounterGenerator",
    "KeyValueGenerator",
    "Source",
    "metadata_columns",
]
