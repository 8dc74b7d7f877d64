"""Per-group aggregate arrangements: GROUP BY views kept as state (count, sum, avg, min, max).

A GROUP BY view, over one input or inner joins of several, whose aggregates
are all ``count(*)``, ``count(x)``, ``sum(x)`` and ``avg(x)`` of integral ``x``
is a function of a few numbers per group, each a sum over the group's rows
(the rows its FROM, joins and WHERE give) weighted by ``_diff``:

* ``__n``: the group's row count;
* ``__c<j>``: how many of its rows have a non-null ``j``-th argument;
* ``__s<j>``: the sum of the ``j``-th argument over those rows (kept only for
  arguments of sum and avg), in DECIMAL(38, 0).

Because these are sums, a group's state at time ``t`` is its state at
``lower - 1`` plus the sums of the *contributions* of the updates up to
``t``: the FROM, joins and WHERE are a linear query, so their updates are
its delta terms (:mod:`timeshard.compute.incremental`), run on the inputs'
updates in the interval (and, for a join, the other inputs). The states are
an arrangement of the UPSERT's type (:class:`~timeshard.storage.upsert_state.ArrangedState`:
layers of key states cached in Spark, hash-partitioned by the group key,
newest layer wins), so a tick costs in proportion to the groups it touches,
not to the input::

  delta terms over [lower, upper) ─> weights ─> per (group, _ts) ─┐ (shuffle by group)
  arrangement: group -> state at lower - 1 ──────── (join) ────────┤ (no shuffle)
                                                                   v
        running state per (group, _ts), and the state before it   (a lazy local checkpoint)
          │                                        │
          └─> the group's last state: a new layer  └─> the view's rows of both states:
              pushed to the arrangement, pending      +1 at _ts for the new, -1 for the old
              until the write has filled it           (the sink's write: the tick's one job)

The view's rows come from the rewritten query (``output``): the SELECT list
and HAVING with each aggregate replaced by a function of the state (``sum(x)``
by ``CASE WHEN __c > 0 THEN CAST(__s AS BIGINT) END``, ``avg(x)`` by ``__s / __c``
in double)
and each GROUP BY expression by its key column, over the states with
``__n > 0``; a state with ``__n < 0`` is an err row of null data, from the
same query. Identical old and new rows cancel when the sink consolidates.

Exactness. Integral sums in decimal arithmetic are exact, so a retraction undoes
its insertion and the state equals a from-scratch sum. Floating-point and
decimal arguments are not taken here (a float sum depends on the order of
its terms; decimal sums change precision): such views recompute their touched
groups instead (:mod:`timeshard.compute.delta`). Spark sums ``avg``'s
argument in double: the state's exact sum gives the same average only while
every partial sum is below 2**53, so ``avg`` is kept only of TINYINT,
SMALLINT and INT (a group of fewer than 2**22 rows cannot reach it). A
BIGINT reaches it with a few epoch-microsecond values, and Spark's double sum
then depends on the order of its terms: such views take the full path
(:func:`timeshard.compute.incremental.order_dependent`).

Overflow. The sums are kept in DECIMAL(38, 0), exact far past BIGINT (a group
would need 2**64 rows of 2**63 to reach its bound), so a group's state stays
exact while its sum does not fit a BIGINT, and a retraction brings it back.
The view's ``sum(x)`` is a BIGINT: under ANSI the row errors' rewrite made it
``try_sum(x)`` (:mod:`timeshard.compute.row_errors`), which the output query
reads as ``TRY_CAST(__s AS BIGINT)``, null where the sum does not fit, and
the rewrite's flag (that null while ``count(x) > 0``) makes that group's
output row an err row, "arithmetic overflow in SUM(x)", at the times its sum
does not fit: every other group keeps its row, and the view its deltas. A
``sum(x)`` not rewritten reads ``CAST(__s AS BIGINT)``: without ANSI it wraps
as Spark's long sum does; with ANSI it fails the query (the view's coarse err
row of the time). One difference with the full path stays: Spark adds a
group's rows in its order and fails (try_sum: is null) when a *partial* sum
passes BIGINT, even if the total fits (``2**63 - 1``, ``1``, ``-5``); the
state sums exactly, and the group's row is then its total. The sink's full
check may then find that group differing from the query at such times.

Extremes. Over one input, ``min(x)`` and ``max(x)`` of an exactly ordered
type (not floating point, whose -0.0 and 0.0 tie) are kept too, as state
columns ``__lo<j>`` and ``__hi<j>``. Insertions move them like sums do: the
min at ``t`` is the least of the state's and of the values inserted up to
``t``. A retraction moves them only if it removes the extreme, which the
state cannot tell from the value alone; so a group is *unsafe* in a tick if
some retraction at ``t`` has a value not strictly inside the running extreme
at ``t`` (``x <= min``), or its row count goes negative, or its state counts
a row of negative multiplicity (``__neg``: that row's value is not known to
be absent). A retracted value strictly above the running min at its time is
never the min, at that time or after (the running min only falls), so a safe
group's extremes are exact. The unsafe groups are recomputed in the same
write by the view's touched-groups term (:mod:`timeshard.compute.delta`),
from the input arranged by the group key: their rows of the view at each
change time, and their extremes and ``__neg`` at the tick's last time, which
replace the state's in the new layer. The running states are computed first,
in a job of their own that also counts the unsafe groups; a tick with none
-- most of them, when groups hold many rows -- writes from the state alone
and reads no stored row (two jobs a tick, both short)::

  running state per (group, _ts), __unsafe ──> unsafe groups' keys ──> touched-groups term
        │                                                              │            │
        │ <──── extremes at the last time (left join on the key) ──────┘            │
        v                                                                           │
  corrected state (a lazy local checkpoint) ──> safe groups' rows ──┐               │
        └─> last state per group: the new layer                     ├─ the write <──┘
                                                      unsafe groups' rows

Frontiers: the arrangement holds the states at ``time - 1``. A delta over
``[lower, upper)`` needs ``time == lower`` and leaves ``time == upper``; at any
other ``lower`` (a restart, another replica's append, a failed batch) the
arrangement is rebuilt from the contributions over the inputs' snapshots at
``lower - 1`` (one job).

Invariants:

1. The arrangement's content at ``time - 1`` is, per group with any non-zero
   state, the sums above over the contributions of the inputs' ok rows at
   ``time - 1``.
2. A tick's checkpoint is lazy: the sink's write, which reads every
   partition of it, fills it in the same job. The layer pushed from it is
   *pending* (it merges with nothing) and the layers it was computed from stay
   pinned until it is settled: by the sink once the write is done (merges then
   run between ticks), else by the next tick, skip or close (which fills it,
   one more job, if the write did not).
3. A group whose row count is negative (an input row with a negative
   multiplicity, which no timeshard writer produces) is an err row of the
   view, not a row.

Runs on the driver (planning, the arrangement's bookkeeping); the write is
the tick's one Spark job (with extremes, two; a rebuild is one more).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from timeshard.persist._internal.parts import DIFF, ERR, TS

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from timeshard.compute.incremental import AggregatePlan

#: Input name -> the Spark schema of its data columns.
SchemaOf = Callable[[str], Any]

#: The state table's alias in the rewritten output query.
_STATE = "__state"
_ROWS = "__n"
#: Column of the state rows the output query reads: the err message of a group whose row
#: count is negative (its input names are user text: a literal, never SQL text).
_MESSAGE = "__message"
#: Column of the checkpoint: whether the row is its group's last time in the tick.
_LAST = "__last"
#: State column of a plan with extremes: how many of the group's rows have a negative
#: multiplicity (BIGINT; their values are not known to be absent, so the group is recomputed).
NEGATIVE = "__neg"
#: Column of the checkpoint: whether the group's extremes are recomputed in this tick.
_UNSAFE = "__unsafe"
#: Recomputes the unsafe groups (a DataFrame of their ``_key``): their rows of the view in
#: the interval (data columns, ``_ts``, ``_diff``, ``_err``), and the contributions query's
#: rows of those groups at the interval's last change time (its columns, ``_ts``, ``_diff``).
#: Given None (no group is unsafe): rows the write must read all the same (none), and None.
Recompute = Callable[[Any | None], tuple[Any, Any | None]]
#: The SQL type of a state's sums (``__s<j>``): exact far past BIGINT (module doc, "Overflow").
_SUM = "DECIMAL(38, 0)"
_INTEGRAL = ("byte", "short", "int", "long", "tinyint", "smallint", "bigint")
#: The argument types of avg whose double sum in Spark is exact (below 2**22 rows a group).
_AVERAGED = ("byte", "short", "int", "tinyint", "smallint")


@dataclass(frozen=True)
class StateQueries:
    """The two queries of a GROUP BY kept by state (planning; see the module doc).

    ``contributions`` is the view's SELECT with its FROM, joins and WHERE, and
    with the group keys ``__g<i>`` and the aggregates' arguments ``__a<j>`` as
    its columns (a linear query: :mod:`timeshard.compute.incremental` makes it
    delta terms). ``output`` reads state rows (placeholder ``state``:
    ``__g<i>``, the state columns, ``_ts``, ``_diff``) and gives the view's
    columns, ``_ts`` and ``_diff``. ``summed[j]``: whether argument ``j`` has a
    sum in the state; ``averaged[j]``: whether that sum gives an avg;
    ``lows[j]``, ``highs[j]``: a min, a max.
    """

    contributions: Any
    output: str
    keys: int
    summed: tuple[bool, ...]
    lows: tuple[bool, ...] = ()
    highs: tuple[bool, ...] = ()
    averaged: tuple[bool, ...] = ()


def state_sums(summed: tuple[bool, ...]) -> list[str]:
    """The state columns that are sums (counts BIGINT, sums DECIMAL(38, 0)), in the
    arrangement's order."""
    counts = [f"__c{j}" for j in range(len(summed))]
    sums = [f"__s{j}" for j, s in enumerate(summed) if s]
    return [_ROWS, *counts, *sums]


def state_extremes(lows: tuple[bool, ...], highs: tuple[bool, ...]) -> list[str]:
    """The state columns that are extremes (typed as their argument), after the sums."""
    return [f"__lo{j}" for j, x in enumerate(lows) if x] + [
        f"__hi{j}" for j, x in enumerate(highs) if x
    ]


def state_values(
    summed: tuple[bool, ...], lows: tuple[bool, ...] = (), highs: tuple[bool, ...] = ()
) -> list[str]:
    """The state columns, in the arrangement's order: the sums, then with extremes the
    count of rows of negative multiplicity, then the extremes."""
    extremes = state_extremes(lows, highs)
    return [*state_sums(summed), *([NEGATIVE] if extremes else []), *extremes]


class _NotTaken(Exception):
    """Why a GROUP BY query is not kept by per-group state."""


def state_queries(select: Any, state: str, *, extremes: bool = False) -> StateQueries | str:
    """The state queries of a qualified GROUP BY ``select``, or why it keeps no state.

    ``state`` names the placeholder of the state rows. ``extremes``: whether
    min and max are kept too (over one input, whose touched groups can be
    recomputed: see "Extremes" in the module doc). Types are not known here:
    :func:`type_problem` checks them against Spark's analysis.
    """
    from sqlglot import exp

    group = select.args["group"].expressions
    keys = {g.sql(dialect="spark"): i for i, g in enumerate(group)}
    arguments: dict[str, int] = {}
    argument_nodes: list[Any] = []
    summed: list[bool] = []
    averaged: list[bool] = []
    lows: list[bool] = []
    highs: list[bool] = []

    def state_column(name: str) -> Any:
        return exp.column(name, table=_STATE, quoted=True)

    def argument(node: Any, *, summed_: bool) -> int:
        if isinstance(node, exp.Distinct):
            raise _NotTaken("DISTINCT aggregates keep no per-group state")
        text = node.sql(dialect="spark")
        if text not in arguments:
            arguments[text] = len(argument_nodes)
            argument_nodes.append(node)
            summed.append(False)
            averaged.append(False)
            lows.append(False)
            highs.append(False)
        j = arguments[text]
        summed[j] = summed[j] or summed_
        return j

    def aggregate(node: Any) -> Any:
        if isinstance(node, exp.Count) and not node.expressions:
            if isinstance(node.this, exp.Star):
                return state_column(_ROWS)
            return state_column(f"__c{argument(node.this, summed_=False)}")
        checked = _is_try_sum(node)
        if checked or (isinstance(node, exp.Sum | exp.Avg) and not node.expressions):
            j = argument(node.expressions[0] if checked else node.this, summed_=True)
            averaged[j] = averaged[j] or isinstance(node, exp.Avg)
            count, total = state_column(f"__c{j}"), state_column(f"__s{j}")
            # The state's exact sum as Spark's BIGINT: try_sum() is null where it does not
            # fit; sum() fails there under ANSI, else wraps (as Spark's long sum does).
            bigint = exp.DataType.build("bigint")
            value = (
                exp.Div(this=exp.cast(total, "double"), expression=count)
                if isinstance(node, exp.Avg)
                else exp.TryCast(this=total, to=bigint, safe=True)
                if checked
                else exp.Cast(this=total, to=bigint)
            )
            positive = exp.GT(this=count.copy(), expression=exp.Literal.number(0))
            return exp.Case(ifs=[exp.If(this=positive, true=value)])
        if extremes and isinstance(node, exp.Min | exp.Max) and not node.expressions:
            j = argument(node.this, summed_=False)
            if isinstance(node, exp.Min):
                lows[j] = True
                return state_column(f"__lo{j}")
            highs[j] = True
            return state_column(f"__hi{j}")
        name = node.sql(dialect="spark").split("(")[0].lower()  # as Spark spells it
        raise _NotTaken(f"{name}() keeps no per-group state")

    def replace(node: Any) -> Any:
        if not isinstance(node, exp.Alias | exp.Identifier):
            text = node.sql(dialect="spark")
            if text in keys:
                return state_column(f"__g{keys[text]}")
        if isinstance(node, exp.AggFunc) or _is_try_sum(node):
            return aggregate(node)
        return node

    if select.args.get("distinct"):
        return "DISTINCT over GROUP BY keeps no per-group state"
    if any(isinstance(n, exp.Filter) for n in select.walk()):
        return "aggregates with FILTER keep no per-group state"
    try:
        outputs = [e.copy().transform(replace) for e in select.expressions]
        having = select.args.get("having")
        condition = having.this.copy().transform(replace) if having is not None else None
    except _NotTaken as e:
        return str(e)
    for node in [*outputs, *([condition] if condition is not None else [])]:
        for column in node.find_all(exp.Column):
            if column.table != _STATE:
                return f"{column.sql(dialect='spark')} is neither grouped nor aggregated"

    contributions = select.copy()
    contributions.set(
        "expressions",
        [
            *[exp.alias_(g.copy(), f"__g{i}", quoted=True) for i, g in enumerate(group)],
            *[exp.alias_(a.copy(), f"__a{j}", quoted=True) for j, a in enumerate(argument_nodes)],
        ],
    )
    for clause in ("group", "having", "distinct"):
        contributions.set(clause, None)
    # A group of negative row count is an err row (its data null, its message the state's
    # __message column): one read of the states gives both. The CASEs keep the SELECT list
    # and HAVING from such a group's values (a division by them could fail).
    negative = exp.LT(this=state_column(_ROWS), expression=exp.Literal.number(0))
    present = exp.GT(this=state_column(_ROWS), expression=exp.Literal.number(0))
    kept = present if condition is None else exp.and_(present, condition)
    unless_negative = [
        exp.alias_(
            exp.Case(
                ifs=[exp.If(this=negative.copy(), true=exp.Null())],
                default=o.this if isinstance(o, exp.Alias) else o,
            ),
            o.alias_or_name,
            quoted=True,
        )
        for o in outputs
    ]
    message = exp.Case(ifs=[exp.If(this=negative.copy(), true=state_column(_MESSAGE))])
    output = exp.select(
        *unless_negative,
        exp.alias_(state_column(TS), TS, quoted=True),
        exp.alias_(state_column(DIFF), DIFF, quoted=True),
        exp.alias_(message, ERR, quoted=True),
    ).from_(
        exp.Table(
            this=exp.to_identifier(state, quoted=True),
            alias=exp.TableAlias(this=exp.to_identifier(_STATE, quoted=True)),
        )
    )
    output = output.where(
        exp.Case(ifs=[exp.If(this=negative.copy(), true=exp.true())], default=kept)
    )
    return StateQueries(
        contributions,
        output.sql(dialect="spark"),
        len(group),
        tuple(summed),
        tuple(lows),
        tuple(highs),
        tuple(averaged),
    )


def empty_contributions(spark: Any, plan: AggregatePlan, schema_of: SchemaOf) -> Any:
    """The contributions query over empty inputs: its columns and types (analysis, no job).

    ``schema_of(input)``: the Spark schema of an input's data columns.
    """
    from pyspark.sql import functions as F

    from timeshard.spark.sqltext import empty_frame

    for name, (alias, _mode) in plan.snapshot.tables.items():
        empty = empty_frame(spark, schema_of(alias))
        weights = [F.lit(0).cast("long").alias(TS), F.lit(0).cast("long").alias(DIFF)]
        empty.select("*", *weights).createOrReplaceTempView(name)
    return spark.sql(plan.snapshot.sql)


def type_problem(
    spark: Any, plan: AggregatePlan, schema_of: SchemaOf, want: list[Any]
) -> str | None:
    """Why ``plan`` does not fit the view's types (``want``: its Spark data types), or None.

    Analysis only, no job: the arguments of sum and avg must be integral (of
    avg, no BIGINT: see "Exactness" in the module doc), and the output query
    must give the view's column types.
    """
    from pyspark.errors import PySparkException

    try:
        contributions = empty_contributions(spark, plan, schema_of)
        for name in plan.summed_arguments:
            kind = contributions.schema[name].dataType.simpleString()
            if kind not in _INTEGRAL:
                return f"sum/avg of {kind} keeps no state (integral sums only)"
        for name in plan.averaged_arguments:
            kind = contributions.schema[name].dataType.simpleString()
            if kind not in _AVERAGED:
                return f"avg of {kind} keeps no state (Spark sums it in double)"
        for name in plan.extreme_arguments:
            kind = contributions.schema[name].dataType
            if not _exactly_ordered(kind):
                return f"min/max of {kind.simpleString()} keeps no state"
        state = _state_schema(plan, contributions.schema)
        from timeshard.spark.sqltext import empty_frame

        empty_frame(spark, state).createOrReplaceTempView(plan.state)
        got = spark.sql(plan.output).schema.fields
    except PySparkException as e:
        return f"the state query did not analyse ({str(e).splitlines()[0][:200]})"
    if [f.dataType for f in got[: len(want)]] != want:
        return "the state query changes the view's column types"
    return None


def _exactly_ordered(data_type: Any) -> bool:
    """Whether min and max of ``data_type`` are one value whatever the order of the rows.

    Not so for floating point (-0.0 and 0.0 compare equal, and which one a
    min returns depends on the order) nor for a string of a collation that
    makes distinct values equal; nor for types Spark does not order.
    """
    from pyspark.sql import types as T

    exact = (
        T.ByteType,
        T.ShortType,
        T.IntegerType,
        T.LongType,
        T.DecimalType,
        T.BooleanType,
        T.DateType,
        T.TimestampType,
        T.TimestampNTZType,
        T.BinaryType,
    )
    if isinstance(data_type, T.StringType):
        return bool(data_type.collation == "UTF8_BINARY")
    return isinstance(data_type, exact)


def _state_types(plan: AggregatePlan, contributions: Any) -> dict[str, Any]:
    """The Spark type of each state column: counts are BIGINT, sums DECIMAL(38, 0) (exact
    past BIGINT: see "Overflow" in the module doc), an extreme its argument's type."""
    from pyspark.sql.types import DecimalType, LongType

    types: dict[str, Any] = {
        v: LongType() for v in [*plan.sums, *([NEGATIVE] if plan.extremes else [])]
    }
    types.update({v: DecimalType(38, 0) for v in plan.sums if v.startswith("__s")})
    for v in plan.extremes:
        types[v] = contributions[f"__a{v[4:]}"].dataType  # __lo<j>, __hi<j>: argument j
    return types


def _state_schema(plan: AggregatePlan, contributions: Any) -> Any:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    keys = [contributions[f"__g{i}"] for i in range(plan.keys)]
    types = _state_types(plan, contributions)
    values = [StructField(v, types[v]) for v in plan.values]
    times = [StructField(v, LongType()) for v in (TS, DIFF)]
    return StructType([*keys, *values, *times, StructField(_MESSAGE, StringType())])


class SparkAggregates:
    """A GROUP BY view's per-group states, arranged in Spark, and its deltas from them."""

    def __init__(self, spark: Any, plan: AggregatePlan, contributions: Any) -> None:
        """``contributions``: the Spark schema of the contributions query."""
        from timeshard.storage.upsert_state import ArrangedState

        self.spark = spark
        self.plan = plan
        types = {f"__g{i}": contributions[f"__g{i}"].dataType for i in range(plan.keys)}
        types.update(_state_types(plan, contributions))
        self.keys = [f"__g{i}" for i in range(plan.keys)]
        self.state = ArrangedState(spark, self.keys, plan.values, types)
        self._held = contextlib.ExitStack()
        self._negative_message: Any = None

    def delta(
        self,
        changes: Any,
        old: Callable[[], Any],
        lower: int,
        upper: int,
        recompute: Recompute | None = None,
    ) -> Any:
        """The view's ok updates in ``[lower, upper)`` from the contributions' ``changes``.

        ``changes``: the contributions query's updates in the interval
        (``__g<i>``, ``__a<j>``, ``_ts``, ``_diff``); ``old()``: its rows at
        ``lower - 1``, read only if the arrangement is not at ``lower``.
        ``recompute``: for a plan with extremes (required then), the groups
        whose extremes a retraction may move, recomputed (see "Extremes" in
        the module doc). Runs no Spark job (one for a rebuild) and returns the
        view's rows as a lazy DataFrame (data columns, ``_ts``, ``_diff``,
        ``_err``: null, or the message of a negative count) whose write fills
        the new layer.
        """
        self.prepare(lower, old)
        # Pinned before the tick reads the layers: a merge that retires them from now on
        # frees them only after the lazy checkpoint that reads them is filled (settle).
        self._held.enter_context(self.state.pinned())
        ticked = self._tick(changes)
        if not self.plan.extremes:
            self.state.push(self._layer(ticked), upper)
            return self._rows(ticked)
        assert recompute is not None, "a plan with extremes recomputes the groups they leave"
        from timeshard.spark.sqltext import renamed, select_exprs
        from timeshard.storage.upsert_state import KEY, Layer

        unsafe = select_exprs(ticked.where(f"{_UNSAFE} AND {_LAST}"), [KEY])
        # A job of its own: it fills the tick's checkpoint and counts the unsafe groups. A
        # tick without any (most, when groups hold many rows) then writes from the state
        # alone, and its write plans none of the recomputation's stages.
        if unsafe.count() == 0:
            filled, _ = recompute(None)
            self.state.push(self._layer(ticked), upper)
            ok = self._rows(ticked)
            return ok.union(renamed(filled, ok.columns))
        recomputed, last = recompute(unsafe)
        assert last is not None
        corrected = self._corrected(ticked, self._extremes_of(last))
        self._held.callback(Layer(ticked, 0).release)  # once the layer is filled (settle)
        self.state.push(self._layer(corrected), upper)
        ok = self._rows(corrected.where(f"NOT {_UNSAFE}"))
        return ok.union(renamed(recomputed, ok.columns))

    def settle(self) -> None:
        """The last tick's write is done: settle its layer, then unpin what it read.

        A layer that cannot be filled (the write failed, and filling it fails
        too: an overflow in the data, a lost block) is dropped with the whole
        arrangement, which the next :meth:`prepare` rebuilds from the inputs
        (where a data error fails the delta's planning, as it should).
        """
        try:
            self.state.settle()
        except Exception:
            log.info("a GROUP BY state's new layer could not be filled: rebuilding", exc_info=True)
            self.state.clear()
        self._held.close()

    def prepare(self, lower: int, old: Callable[[], Any]) -> None:
        """Make the arrangement hold the states at ``lower - 1`` (a rebuild if it does not)."""
        self.settle()
        if self.state.time == lower:
            return
        from timeshard.spark.sqltext import sql_over
        from timeshard.storage.upsert_state import GONE, KEY, Layer, checkpointed

        layers: list[Layer] = []
        if lower > 0:
            weighted = self._weighted(old())
            sums = ", ".join(
                [*(f"sum({v}) AS {v}" for v in self.plan.sums), *self._extreme_folds()]
            )
            values = ", ".join(self._named_values())
            flags = f"CAST(NULL AS STRING) AS {ERR}, false AS {GONE}"
            empty = self._all_zero()

            def query(v: Mapping[str, str]) -> str:
                rows = f"SELECT {KEY}, {sums} FROM {v['w']} GROUP BY {KEY}"
                return f"SELECT {KEY}, {values}, {flags} FROM ({rows}) WHERE NOT ({empty})"

            base = sql_over({"w": weighted}, query)
            layers = [checkpointed(self.state.partitioned(self.state.hashed(base)))]
        self.state.reset(layers, lower)

    def skip(self, lower: int, upper: int) -> None:
        """The input did not change in ``[lower, upper)``."""
        self.settle()
        if self.state.time == lower:
            self.state.advance(upper)

    def close(self) -> None:
        """Free the cached states."""
        self._held.close()  # a pending layer need not be filled: it is freed with the rest
        self.state.wait_for_merges()
        self.state.clear()

    # -- a tick ------------------------------------------------------------------------------

    def _weighted(self, contributions: Any) -> Any:
        """Per contributing row: ``_key``, ``_ts`` and its weight in every state column."""
        from timeshard.spark.sqltext import select_exprs

        counts, sums = [], []
        for j, summed in enumerate(self.plan.summed):
            present = f"__a{j} IS NOT NULL"
            counts.append(f"CASE WHEN {present} THEN {DIFF} ELSE 0L END AS __c{j}")
            if summed:
                weight = f"CAST(CAST(__a{j} AS {_SUM}) * {DIFF} AS {_SUM})"
                zero = f"CAST(0 AS {_SUM})"
                sums.append(f"CASE WHEN {present} THEN {weight} ELSE {zero} END AS __s{j}")
        columns = [f"{DIFF} AS {_ROWS}", *counts, *sums]  # the order of plan.sums
        for v in self.plan.extremes:  # an extreme's argument, inserted and retracted
            argument = f"__a{v[4:]}"
            columns.append(f"CASE WHEN {DIFF} > 0 THEN {argument} END AS {_inserted(v)}")
            columns.append(f"CASE WHEN {DIFF} < 0 THEN {argument} END AS {_retracted(v)}")
        keyed = select_exprs(contributions, [self.state.key_sql(), TS, *columns])
        return self.state.hashed(keyed)

    def _tick(self, changes: Any) -> Any:
        """Per touched group and change time: the running state and the one before (lazy).

        With extremes, also whether the group is *unsafe* (``__unsafe``, on
        every row of the group): a retraction at some time may have removed
        an extreme, or its row count went negative.
        """
        from timeshard.spark.checkpoint import local_checkpoint
        from timeshard.spark.sqltext import grouped, select_exprs
        from timeshard.storage.upsert_state import GONE, HASH, KEY, LAYER, value_columns

        values, extremes = self.plan.values, self.plan.extremes
        weighted = self.state.partitioned(self._weighted(changes))
        folds = [f"sum({v}) AS {v}" for v in self.plan.sums]
        for v in extremes:
            fold = _extreme(v)[0]
            folds += [f"{fold}({c}) AS {c}" for c in (_inserted(v), _retracted(v))]
        per_time = grouped(weighted, [HASH, KEY, TS], folds)
        named = dict(zip(values, value_columns(len(values)), strict=True))
        with self.state.pinned() as layers:
            # One row per group and time: the newest layer's (its sort serves the windows below).
            newest = f"PARTITION BY {HASH}, {KEY}, {TS} ORDER BY {LAYER} DESC"
            ranked = self.state.with_layer_rows(per_time, layers, "_state").selectExpr(
                "*", f"row_number() OVER ({newest}) AS __newest"
            )
            joined = ranked.where("__newest = 1")
            live = f"_state IS NOT NULL AND NOT _state.{GONE}"
            group = f"PARTITION BY {HASH}, {KEY} ORDER BY {TS}"
            # The window frames, written out in each expression (a select list has no WINDOW).
            running = f"OVER ({group} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"
            before = f"OVER ({group} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"
            columns, bad = [], []
            for v in self.plan.sums:
                kept = f"CASE WHEN {live} THEN _state.{named[v]} ELSE 0L END"
                total = f"({kept} + sum({v}) {running})"
                columns += [f"{total} AS {v}", f"{total} - {v} AS __p{v}"]
                if v == _ROWS:
                    bad.append(f"{total} < 0")
            if extremes:  # a group with a row of negative multiplicity is recomputed
                negative = f"CASE WHEN {live} THEN _state.{named[NEGATIVE]} ELSE 0L END"
                columns += [f"{negative} AS {NEGATIVE}", f"{negative} AS __p{NEGATIVE}"]
                bad.append(f"{negative} > 0")
            for v in extremes:
                fold, pick, beyond = _extreme(v)
                kept = f"CASE WHEN {live} THEN _state.{named[v]} END"
                now = f"{pick}({kept}, {fold}({_inserted(v)}) {running})"
                was = f"{pick}({kept}, {fold}({_inserted(v)}) {before})"
                columns += [f"{now} AS {v}", f"{was} AS __p{v}"]
                gone = _retracted(v)  # a retraction not strictly inside the extreme may move it
                bad.append(f"({gone} IS NOT NULL AND NOT coalesce({gone} {beyond} {now}, false))")
            last = f"lead({TS}) OVER ({group}) IS NULL AS {_LAST}"
            if extremes:
                columns.append(f"{' OR '.join(bad)} AS __bad")
            rows = select_exprs(joined, [HASH, KEY, TS, *columns, last])
            if extremes:
                every = [HASH, KEY, TS, *values, *(f"__p{x}" for x in values), _LAST]
                unsafe = f"max(CAST(__bad AS INT)) OVER (PARTITION BY {HASH}, {KEY}) = 1"
                rows = select_exprs(rows, [*every, f"{unsafe} AS {_UNSAFE}"])
            return local_checkpoint(rows, eager=False)

    def _extremes_of(self, contributions: Any) -> Any:
        """Per group of ``contributions`` (its rows at one time): its extremes, keyed and
        partitioned like the layers (``_h``, ``_key``, the extreme columns)."""
        from timeshard.spark.sqltext import grouped
        from timeshard.storage.upsert_state import HASH, KEY

        weighted = self.state.partitioned(self._weighted(contributions))
        return grouped(weighted, [HASH, KEY], self._extreme_folds())

    def _extreme_folds(self) -> list[str]:
        """SQL: per group of weighted rows at one time (each row consolidated), the count of
        rows of negative multiplicity and each extreme over the rows present."""
        negative = f"sum(CASE WHEN {_ROWS} < 0 THEN 1L ELSE 0L END) AS {NEGATIVE}"
        extremes = (f"{_extreme(v)[0]}({_inserted(v)}) AS {v}" for v in self.plan.extremes)
        return [negative, *extremes] if self.plan.extremes else []

    def _corrected(self, ticked: Any, extremes: Any) -> Any:
        """``ticked`` with each unsafe group's extremes from ``extremes`` (recomputed at its
        last time): a lazy local checkpoint, partitioned like the layers, which the write
        fills (it reads the safe groups' rows from it)."""
        from timeshard.spark.checkpoint import local_checkpoint
        from timeshard.spark.sqltext import select_exprs
        from timeshard.storage.upsert_state import HASH, KEY, same_key

        recomputed = [NEGATIVE, *self.plan.extremes]
        theirs = select_exprs(
            extremes, [f"{HASH} AS _rh", f"{KEY} AS _rk", *(f"{v} AS _r{v}" for v in recomputed)]
        )
        joined = ticked.join(theirs, same_key("_rh", "_rk"), "left")
        fixed = {
            v: f"CASE WHEN {_UNSAFE} THEN _r{v} ELSE {v} END AS {v}" for v in self.plan.extremes
        }
        fixed[NEGATIVE] = (
            f"CASE WHEN {_UNSAFE} THEN coalesce(_r{NEGATIVE}, 0L) ELSE {NEGATIVE} END AS {NEGATIVE}"
        )
        values = self.plan.values
        columns = [
            HASH,
            KEY,
            TS,
            *(fixed.get(v, v) for v in values),
            *(f"__p{v}" for v in values),
            _LAST,
            _UNSAFE,
        ]
        return local_checkpoint(select_exprs(joined, columns), eager=False)

    def _layer(self, ticked: Any) -> Any:
        """Each touched group's last state, as a layer of the arrangement."""
        from timeshard.spark.sqltext import select_exprs
        from timeshard.storage.upsert_state import GONE, HASH, KEY, Layer

        df = select_exprs(
            ticked.where(_LAST),
            [
                HASH,
                KEY,
                *self._named_values(),
                f"CAST(NULL AS STRING) AS {ERR}",
                f"{self._all_zero()} AS {GONE}",
            ],
        )
        return Layer(df, 0, blocks=ticked, pending=True)

    def _rows(self, ticked: Any) -> Any:
        """The view's rows of each new state (+1) and of the state before it (-1), and an err
        row for each such state of negative row count.

        One read of ``ticked``: a lazy checkpoint read by several branches of the write
        is computed by the task of the first to reach each partition, and the write's
        coalesce gives a task consecutive partitions of one branch (four branches:
        one task computed the whole checkpoint while the others waited for it).
        """
        from timeshard.spark.sqltext import select_exprs
        from timeshard.storage.upsert_state import KEY, key_fields

        fields = zip(key_fields(self.plan.keys), self.keys, strict=True)
        keys = [f"{KEY}.{f} AS {k}" for f, k in fields]
        values = self.plan.values
        new = ", ".join([*values, TS, "1L"])
        old = ", ".join([*(f"__p{v}" for v in values), TS, "-1L"])
        both = f"stack(2, {new}, {old}) AS ({', '.join([*values, TS, DIFF])})"
        states = select_exprs(ticked, [*keys, both]).where(f"{_ROWS} != 0")
        message = self._message()
        states.withColumn(_MESSAGE, message).createOrReplaceTempView(self.plan.state)
        return self.spark.sql(self.plan.output)

    def _message(self) -> Any:
        """The err message of a group of negative row count (a Column, built once: the
        input names are user text, so a literal, never SQL text)."""
        if self._negative_message is None:
            from pyspark.sql import functions as F

            inputs = ", ".join(repr(i) for i in self.plan.inputs)
            self._negative_message = F.concat(
                F.lit(f"input {inputs} has a negative multiplicity in the group "),
                F.expr(f"to_json(struct({', '.join(self.keys)}))"),
            )
        return self._negative_message

    def _named_values(self) -> list[str]:
        """The state columns as the arrangement's value columns (SQL text)."""
        from timeshard.storage.upsert_state import value_columns

        names = value_columns(len(self.plan.values))
        return [f"{v} AS {n}" for v, n in zip(self.plan.values, names, strict=True)]

    def _all_zero(self) -> str:
        """Whether every sum of the state is 0 (and no row has a negative multiplicity): the
        group has no rows (SQL text)."""
        counts = [*self.plan.sums, *([NEGATIVE] if self.plan.extremes else [])]
        return " AND ".join(f"{v} = 0" for v in counts)


def _is_try_sum(node: Any) -> bool:
    """Whether ``node`` is ``try_sum(x)`` (sqlglot leaves it anonymous): the row errors'
    rewrite of a group's ``sum(x)`` (:mod:`timeshard.compute.row_errors`), or the view's."""
    from sqlglot import exp

    return (
        isinstance(node, exp.Anonymous)
        and node.name.lower() == "try_sum"
        and len(node.expressions) == 1
        and not isinstance(node.expressions[0], exp.Distinct)
    )


def _extreme(column: str) -> tuple[str, str, str]:
    """An extreme state column's aggregate, its two-value pick (which skips nulls) and the
    comparison a retracted value must pass to leave it: ``min, least, >`` for ``__lo<j>``."""
    return ("min", "least", ">") if column.startswith("__lo") else ("max", "greatest", "<")


def _inserted(column: str) -> str:
    """The column of an extreme's argument in rows inserted (``_diff > 0``), else null."""
    return f"__i{column[2:]}"


def _retracted(column: str) -> str:
    """The column of an extreme's argument in rows retracted (``_diff < 0``), else null."""
    return f"__r{column[2:]}"


__all__ = [
    "SparkAggregates",
    "StateQueries",
    "empty_contributions",
    "state_queries",
    "state_values",
    "type_problem",
]
