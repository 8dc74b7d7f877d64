"""TPCH: a load generator of the eight TPC-H tables, whose orders keep changing.

The collection is a TPC-H database at ``scale_factor`` (``sf``): ``region``
(5 rows), ``nation`` (25), ``supplier`` (``10_000 sf``), ``part``
(``200_000 sf``), ``partsupp`` (``min(4, suppliers)`` per part), ``customer``
(``150_000 sf``), ``orders`` (``N = 1_500_000 sf``) and ``lineitem`` (1 to 7
per order). Each count is rounded and at least 1. Each table is a subsource
with its own output shard (``outputs()``).

After the initial snapshot the generator replaces orders, oldest first: the
number of live orders stays ``N`` while their keys move on. An order is
identified by its *generation* ``g`` (its key is ``g + 1``); generations
``0 .. N - 1`` are the initial orders.

Columns follow TPC-H without the comment columns. Every integer is int64,
dates are ``date32``. TPC-H decimals are exact int64s so that sums in views
are exact: money (``*_acctbal``, ``p_retailprice``, ``ps_supplycost``,
``l_extendedprice``, ``o_totalprice``) in cents, rates (``l_discount`` 0..10,
``l_tax`` 0..8) in percent, ``l_quantity`` in whole units. A line's charge is
``l_extendedprice * (100 + l_tax) * (100 - l_discount) DIV 10000`` cents, and
``o_totalprice`` is the sum of its lines' charges.

FromTime: one partition ``"0"``. Offset 0 carries the whole initial snapshot
of every table. Each ``tick()`` after the first adds ``tick_orders`` offsets;
offset ``o >= 1`` retracts generation ``o - 1`` and inserts generation
``N + o - 1``, each with its lineitems (``_diff`` -1 and +1). After ``k``
ticks the upper is ``0`` if ``k == 0``, else ``1 + (k - 1) tick_orders``.

Invariants:

1. Offset 0 is the only offset with rows of ``region``, ``nation``,
   ``supplier``, ``part``, ``partsupp`` and ``customer``; ``read`` of a range
   without it leaves those subsources out (no Spark job runs for them).
2. After offset ``o`` the live orders are exactly the generations
   ``[o, N + o)``. The generation retracted at ``o`` was inserted at offset
   ``max(0, o - N) < o``, so no multiplicity is ever negative, nothing is
   retracted that was not inserted, and the number of orders is always ``N``.
3. Every row is a pure function of ``(seed, scale_factor)`` and its
   generation and line number: a retraction carries exactly the row its
   insertion carried, and reading a range twice yields the same rows.
4. Referential integrity holds at every offset: each ``l_orderkey`` is a live
   order, each ``(l_partkey, l_suppkey)`` a ``partsupp`` row, each
   ``o_custkey`` a customer, each nation key a nation, each region key a
   region.
5. ``o_totalprice`` and ``o_orderstatus`` are computed from the same
   expressions as the order's lineitems, so they agree with them.

``upper``, ``tick``, ``resume`` and the SQL text of ``read`` run on the Spark
driver (no Spark job); the frames ``read`` returns are computed by Spark tasks
from ``range`` and ``xxhash64``. Only validated ints go into the SQL text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage
from timeshard.storage.reclock import SourceFrontier

MAX_SCALE_FACTOR = 100_000
"""The largest scale factor TPC-H defines."""

REGIONS = ("AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST")
NATIONS = (
    ("ALGERIA", 0), ("ARGENTINA", 1), ("BRAZIL", 1), ("CANADA", 1), ("EGYPT", 4),
    ("ETHIOPIA", 0), ("FRANCE", 3), ("GERMANY", 3), ("INDIA", 2), ("INDONESIA", 2),
    ("IRAN", 4), ("IRAQ", 4), ("JAPAN", 2), ("JORDAN", 4), ("KENYA", 0),
    ("MOROCCO", 0), ("MOZAMBIQUE", 0), ("PERU", 1), ("CHINA", 2), ("ROMANIA", 3),
    ("SAUDI ARABIA", 4), ("VIETNAM", 2), ("RUSSIA", 3), ("UNITED KINGDOM", 3),
    ("UNITED STATES", 1),
)  # fmt: skip
COLORS = (
    "almond", "antique", "azure", "beige", "black", "blue", "blush", "brown",
    "chartreuse", "coral", "cream", "cyan", "forest", "frosted", "ghost", "green",
    "honeydew", "ivory", "khaki", "lavender", "lemon", "linen", "navy", "orange",
)  # fmt: skip
TYPE_SIZES = ("STANDARD", "SMALL", "MEDIUM", "LARGE", "ECONOMY", "PROMO")
TYPE_FINISHES = ("ANODIZED", "BURNISHED", "PLATED", "POLISHED", "BRUSHED")
TYPE_METALS = ("TIN", "NICKEL", "BRASS", "STEEL", "COPPER")
CONTAINER_SIZES = ("SM", "LG", "MED", "JUMBO", "WRAP")
CONTAINER_KINDS = ("CASE", "BOX", "BAG", "JAR", "PKG", "PACK", "CAN", "DRUM")
SEGMENTS = ("AUTOMOBILE", "BUILDING", "FURNITURE", "MACHINERY", "HOUSEHOLD")
PRIORITIES = ("1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW")
INSTRUCTIONS = ("DELIVER IN PERSON", "COLLECT COD", "NONE", "TAKE BACK RETURN")
MODES = ("REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB")

START_DATE = "1992-01-01"
ORDER_DAYS = 2406  # order dates fall in [1992-01-01, 1998-08-02]
CURRENT_DATE = "1995-06-17"  # lines shipped after it are open ("O"), received before it returned


def _schema(columns: str) -> pa.Schema:
    """Columns ``name:type``, type ``i`` (int64), ``s`` (string) or ``d`` (date32)."""
    types = {"i": pa.int64(), "s": pa.string(), "d": pa.date32()}
    return pa.schema([(c[:-2], types[c[-1]]) for c in columns.split()])


SCHEMAS = {
    "region": _schema("r_regionkey:i r_name:s"),
    "nation": _schema("n_nationkey:i n_name:s n_regionkey:i"),
    "supplier": _schema("s_suppkey:i s_name:s s_address:s s_nationkey:i s_phone:s s_acctbal:i"),
    "part": _schema(
        "p_partkey:i p_name:s p_mfgr:s p_brand:s p_type:s p_size:i p_container:s p_retailprice:i"
    ),
    "partsupp": _schema("ps_partkey:i ps_suppkey:i ps_availqty:i ps_supplycost:i"),
    "customer": _schema(
        "c_custkey:i c_name:s c_address:s c_nationkey:i c_phone:s c_acctbal:i c_mktsegment:s"
    ),
    "orders": _schema(
        "o_orderkey:i o_custkey:i o_orderstatus:s o_totalprice:i o_orderdate:d "
        "o_orderpriority:s o_clerk:s o_shippriority:i"
    ),
    "lineitem": _schema(
        "l_orderkey:i l_partkey:i l_suppkey:i l_linenumber:i l_quantity:i l_extendedprice:i "
        "l_discount:i l_tax:i l_returnflag:s l_linestatus:s l_shipdate:d l_commitdate:d "
        "l_receiptdate:d l_shipinstruct:s l_shipmode:s"
    ),
}


def _array(words: tuple[str, ...]) -> str:
    assert all("'" not in w and "\\" not in w for w in words), words
    return f"array({', '.join(repr(w) for w in words)})"


class _Sql:
    """SQL expressions of the generated columns, in terms of column names."""

    def __init__(self, seed: int, suppliers: int, parts: int, customers: int, clerks: int):
        self.seed, self.suppliers, self.parts = seed, suppliers, parts
        self.customers, self.clerks = customers, clerks
        self.per_part = min(4, suppliers)  # suppliers of one part
        self.stride = max(suppliers // 4, 1)  # keeps the suppliers of a part distinct

    def hash(self, tag: str, *cols: str) -> str:
        return f"xxhash64({self.seed}, '{tag}', {', '.join(cols)})"

    def uniform(self, lo: int, hi: int, tag: str, *cols: str) -> str:
        """A seeded int in ``[lo, hi]``."""
        return f"({lo} + pmod({self.hash(tag, *cols)}, {hi - lo + 1}))"

    def pick(self, words: tuple[str, ...], tag: str, *cols: str) -> str:
        i = self.uniform(1, len(words), tag, *cols)
        return f"element_at({_array(words)}, CAST({i} AS INT))"

    def days(self, date: str, lo: int, hi: int, tag: str, *cols: str) -> str:
        return f"date_add({date}, CAST({self.uniform(lo, hi, tag, *cols)} AS INT))"

    def named(self, prefix: str, key: str) -> str:
        return f"concat('{prefix}#', lpad(CAST({key} AS STRING), 9, '0'))"

    def address(self, tag: str, key: str) -> str:
        text = f"sha2(CAST({self.hash(tag, key)} AS STRING), 256)"
        return f"substr({text}, 1, CAST({self.uniform(10, 40, tag + 'l', key)} AS INT))"

    def phone(self, nation: str, tag: str, key: str) -> str:
        parts = [self.uniform(100, 999, tag + "1", key), self.uniform(100, 999, tag + "2", key)]
        last = self.uniform(1000, 9999, tag + "3", key)
        return f"format_string('%d-%d-%d-%d', {nation} + 10, {parts[0]}, {parts[1]}, {last})"

    @staticmethod
    def retail_price(part: str) -> str:
        return f"(90000 + pmod({part} DIV 10, 20001) + 100 * pmod({part}, 1000))"

    def lines(self, g: str) -> str:
        return f"CAST({self.uniform(1, 7, 'n', g)} AS BIGINT)"

    def order_date(self, g: str) -> str:
        return self.days(f"DATE'{START_DATE}'", 0, ORDER_DAYS - 1, "od", g)

    def part_key(self, g: str, ln: str) -> str:
        return self.uniform(1, self.parts, "lp", g, ln)

    def supp_key(self, g: str, ln: str) -> str:
        which = f"pmod({self.hash('ls', g, ln)}, {self.per_part}) * {self.stride}"
        return f"(pmod({self.part_key(g, ln)} - 1 + {which}, {self.suppliers}) + 1)"

    def ext_price(self, g: str, ln: str) -> str:
        quantity = self.uniform(1, 50, "lq", g, ln)
        return f"({quantity} * {self.retail_price(self.part_key(g, ln))})"

    def charge(self, g: str, ln: str) -> str:
        tax, discount = self.uniform(0, 8, "lt", g, ln), self.uniform(0, 10, "ld", g, ln)
        return f"(({self.ext_price(g, ln)} * (100 + {tax}) * (100 - {discount})) DIV 10000)"

    def ship_date(self, g: str, ln: str) -> str:
        return self.days(self.order_date(g), 1, 121, "sd", g, ln)

    def receipt_date(self, g: str, ln: str) -> str:
        return self.days(self.ship_date(g, ln), 1, 30, "rd", g, ln)


@dataclass
class TpchGenerator:
    """The TPCH load generator: eight TPC-H tables, orders replaced every tick."""

    name: str = "tpch"
    scale_factor: float = 0.01
    tick_orders: int = 10
    seed: int = 0
    ticks: int = field(default=0)

    def __post_init__(self) -> None:
        sf = self.scale_factor
        if (
            isinstance(sf, bool)
            or not isinstance(sf, int | float)
            or not math.isfinite(sf)
            or not 0 < sf <= MAX_SCALE_FACTOR
        ):
            raise InvalidUsage(
                f"TPCH scale_factor must be a number in (0, {MAX_SCALE_FACTOR}], got {sf!r}"
            )
        t = self.tick_orders
        if isinstance(t, bool) or not isinstance(t, int) or t <= 0:
            raise InvalidUsage(f"TPCH tick_orders must be a positive int, got {t!r}")
        s = self.seed
        if isinstance(s, bool) or not isinstance(s, int) or not -(2**63) <= s < 2**63:
            raise InvalidUsage(f"TPCH seed must be an int in [-2**63, 2**63), got {s!r}")
        if not isinstance(self.name, str) or not self.name:
            raise InvalidUsage(f"TPCH name must be a non-empty str, got {self.name!r}")
        k = self.ticks
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise InvalidUsage(f"TPCH ticks must be a non-negative int, got {k!r}")

    def _count(self, base: int) -> int:
        return max(1, round(base * self.scale_factor))

    def cardinality(self, table: str) -> int:
        """The rows of ``table`` in the snapshot; ``orders`` keeps that count at every offset.

        ``lineitem`` has no fixed count (1 to 7 lines per order).
        """
        counts = {
            "region": len(REGIONS),
            "nation": len(NATIONS),
            "supplier": self._count(10_000),
            "part": self._count(200_000),
            "partsupp": self._count(200_000) * min(4, self._count(10_000)),
            "customer": self._count(150_000),
            "orders": self._count(1_500_000),
        }
        if table not in counts:
            raise InvalidUsage(f"TPCH has no fixed cardinality for {table!r}; use {list(counts)}")
        return counts[table]

    def outputs(self) -> dict[str, pa.Schema]:
        return dict(SCHEMAS)

    def payload_schema(self) -> pa.Schema:
        return SCHEMAS["lineitem"]

    def upper(self) -> SourceFrontier:
        return {"0": 0 if self.ticks == 0 else 1 + (self.ticks - 1) * self.tick_orders}

    def tick(self) -> None:
        self.ticks += 1

    def resume(self, bound: SourceFrontier) -> None:
        """Continue after the rounds the durable bindings already cover."""
        done = bound.get("0", 0)
        needed = 0 if done <= 0 else 1 - (-(done - 1) // self.tick_orders)
        self.ticks = max(self.ticks, needed)

    def _sql(self) -> _Sql:
        count = self._count
        return _Sql(int(self.seed), count(10_000), count(200_000), count(150_000), count(1_000))

    def read(self, spark: Any, start: SourceFrontier, end: SourceFrontier) -> dict[str, Any]:
        """Frames per subsource; the static ones only if the range holds offset 0."""
        lo, hi = start.get("0", 0), max(end.get("0", 0), start.get("0", 0))
        static = lo == 0 < hi
        a, b = max(lo, 1), max(hi, lo, 1)
        n = self.cardinality("orders")
        generations = (
            f"SELECT 0L AS _offset, id AS g, 1L AS _diff FROM range({n if static else 0}) "
            f"UNION ALL SELECT id, id - 1, -1L FROM range({a}, {b}) "
            f"UNION ALL SELECT id, id + {n - 1}, 1L FROM range({a}, {b})"
        )
        q = self._sql()
        out = {
            "orders": spark.sql(self._orders_sql(q, generations)),
            "lineitem": spark.sql(self._lineitem_sql(q, generations)),
        }
        if static:
            for table, sql in self._static_sql(q).items():
                out[table] = spark.sql(f"SELECT '0' AS _partition, 0L AS _offset, * FROM ({sql})")
        return out

    @staticmethod
    def _orders_sql(q: _Sql, generations: str) -> str:
        lines = "sequence(1L, n)"
        shipped = f"{q.ship_date('g', 'x')} <= DATE'{CURRENT_DATE}'"
        status = (
            f"CASE WHEN forall({lines}, x -> {shipped}) THEN 'F' "
            f"WHEN exists({lines}, x -> {shipped}) THEN 'P' ELSE 'O' END"
        )
        return (
            f"SELECT '0' AS _partition, _offset, _diff, g + 1 AS o_orderkey, "
            f"{q.uniform(1, q.customers, 'oc', 'g')} AS o_custkey, {status} AS o_orderstatus, "
            f"aggregate({lines}, 0L, (acc, x) -> acc + {q.charge('g', 'x')}) AS o_totalprice, "
            f"{q.order_date('g')} AS o_orderdate, "
            f"{q.pick(PRIORITIES, 'op', 'g')} AS o_orderpriority, "
            f"{q.named('Clerk', q.uniform(1, q.clerks, 'ok', 'g'))} AS o_clerk, "
            f"0L AS o_shippriority "
            f"FROM (SELECT *, {q.lines('g')} AS n FROM ({generations}))"
        )

    @staticmethod
    def _lineitem_sql(q: _Sql, generations: str) -> str:
        receipt, ship = q.receipt_date("g", "x"), q.ship_date("g", "x")
        returned = q.pick(("R", "A"), "lr", "g", "x")
        return (
            f"SELECT '0' AS _partition, _offset, _diff, g + 1 AS l_orderkey, "
            f"{q.part_key('g', 'x')} AS l_partkey, {q.supp_key('g', 'x')} AS l_suppkey, "
            f"x AS l_linenumber, {q.uniform(1, 50, 'lq', 'g', 'x')} AS l_quantity, "
            f"{q.ext_price('g', 'x')} AS l_extendedprice, "
            f"{q.uniform(0, 10, 'ld', 'g', 'x')} AS l_discount, "
            f"{q.uniform(0, 8, 'lt', 'g', 'x')} AS l_tax, "
            f"CASE WHEN {receipt} <= DATE'{CURRENT_DATE}' THEN {returned} ELSE 'N' END "
            f"AS l_returnflag, "
            f"CASE WHEN {ship} > DATE'{CURRENT_DATE}' THEN 'O' ELSE 'F' END AS l_linestatus, "
            f"{ship} AS l_shipdate, {q.days(q.order_date('g'), 30, 90, 'cd', 'g', 'x')} "
            f"AS l_commitdate, {receipt} AS l_receiptdate, "
            f"{q.pick(INSTRUCTIONS, 'li', 'g', 'x')} AS l_shipinstruct, "
            f"{q.pick(MODES, 'lm', 'g', 'x')} AS l_shipmode "
            f"FROM (SELECT *, {q.lines('g')} AS n FROM ({generations})) "
            f"LATERAL VIEW explode(sequence(1L, n)) AS x"
        )

    def _static_sql(self, q: _Sql) -> dict[str, str]:
        nations = len(NATIONS)
        regions = f"array({', '.join(f'{r}L' for _, r in NATIONS)})"
        color = [q.pick(COLORS, f"pc{i}", "k") for i in range(5)]
        mfgr = q.uniform(1, 5, "pm", "k")
        kind = [q.pick(w, f"pt{i}", "k") for i, w in enumerate((TYPE_SIZES, TYPE_FINISHES))]
        metal = q.pick(TYPE_METALS, "pt2", "k")
        boxes = (CONTAINER_SIZES, CONTAINER_KINDS)
        container = [q.pick(w, f"pk{i}", "k") for i, w in enumerate(boxes)]
        names = _array(tuple(n for n, _ in NATIONS))
        return {
            "region": f"SELECT id AS r_regionkey, element_at({_array(REGIONS)}, "
            f"CAST(id + 1 AS INT)) AS r_name FROM range({len(REGIONS)})",
            "nation": f"SELECT id AS n_nationkey, element_at({names}, "
            f"CAST(id + 1 AS INT)) AS n_name, element_at({regions}, CAST(id + 1 AS INT)) "
            f"AS n_regionkey FROM range({nations})",
            "supplier": f"SELECT k AS s_suppkey, {q.named('Supplier', 'k')} AS s_name, "
            f"{q.address('sa', 'k')} AS s_address, nk AS s_nationkey, "
            f"{q.phone('nk', 'sp', 'k')} AS s_phone, {q.uniform(-99999, 999999, 'sb', 'k')} "
            f"AS s_acctbal FROM (SELECT id + 1 AS k, {q.uniform(0, nations - 1, 'sn', 'id + 1')} "
            f"AS nk FROM range({q.suppliers}))",
            "part": f"SELECT k AS p_partkey, concat_ws(' ', {', '.join(color)}) AS p_name, "
            f"concat('Manufacturer#', {mfgr}) AS p_mfgr, "
            f"concat('Brand#', {mfgr}, {q.uniform(1, 5, 'pb', 'k')}) AS p_brand, "
            f"concat_ws(' ', {kind[0]}, {kind[1]}, {metal}) AS p_type, "
            f"{q.uniform(1, 50, 'ps', 'k')} AS p_size, "
            f"concat_ws(' ', {container[0]}, {container[1]}) AS p_container, "
            f"{q.retail_price('k')} AS p_retailprice FROM (SELECT id + 1 AS k FROM "
            f"range({q.parts}))",
            "partsupp": f"SELECT k AS ps_partkey, pmod(k - 1 + i * {q.stride}, {q.suppliers}) + 1 "
            f"AS ps_suppkey, {q.uniform(1, 9999, 'pa', 'k', 'i')} AS ps_availqty, "
            f"{q.uniform(100, 100000, 'pc', 'k', 'i')} AS ps_supplycost FROM (SELECT id + 1 AS "
            f"k FROM range({q.parts})) LATERAL VIEW explode(sequence(0L, {q.per_part - 1})) AS i",
            "customer": f"SELECT k AS c_custkey, {q.named('Customer', 'k')} AS c_name, "
            f"{q.address('ca', 'k')} AS c_address, nk AS c_nationkey, "
            f"{q.phone('nk', 'cp', 'k')} AS c_phone, {q.uniform(-99999, 999999, 'cb', 'k')} "
            f"AS c_acctbal, {q.pick(SEGMENTS, 'cs', 'k')} AS c_mktsegment FROM (SELECT id + 1 "
            f"AS k, {q.uniform(0, nations - 1, 'cn', 'id + 1')} AS nk FROM range({q.customers}))",
        }


__all__ = ["MAX_SCALE_FACTOR", "SCHEMAS", "TpchGenerator"]
